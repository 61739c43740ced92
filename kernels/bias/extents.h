// Checks shared by the bias plans (alibi.cc, relative.cc): lengths, offsets and tables, each error
// naming the request field.
#ifndef POSENC_KERNELS_BIAS_EXTENTS_H_
#define POSENC_KERNELS_BIAS_EXTENTS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"

namespace posenc::kernels {

// Offsets and lengths stay within +-2^53 so differences are exact in int64 and in double.
inline constexpr int64_t kMaxExtent = int64_t{1} << 53;

// 1 .. 2^53.
absl::Status CheckLength(absl::string_view field, int64_t v);
// |v| <= 2^53.
absl::Status CheckOffset(absl::string_view field, int64_t v);
// The query/key window of a bias: both lengths, the query offset when given, the key offset.
absl::Status CheckWindow(int64_t q_len, int64_t k_len, std::optional<int64_t> query_offset,
                         int64_t key_offset = 0);
// A float table of shape [rows, N >= 1] (INVALID_ARGUMENT when absent).
absl::Status CheckTable(absl::string_view field, const ConstTensorView& t, int64_t rows,
                        absl::string_view rows_name);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_BIAS_EXTENTS_H_
