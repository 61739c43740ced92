// What the commands share to read their inputs and write their outputs: the flag groups of
// positions, generated tensors and output dtypes, and the readers of positions, tensors (.npy
// files or generated), tables and required flags; .npy output.
//
// Thread-safety: the flag groups are immutable; the functions hold no state.
#ifndef POSENC_CLIENT_CLI_INPUTS_H_
#define POSENC_CLIENT_CLI_INPUTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"

namespace posenc::cli {

// --positions, --offsets, --cu-seqlens, --mask.
const FlagGroup& PositionFlags();
// --dtype (of the output) and --npy.
const FlagGroup& OutputDTypeFlags();
// --shape, --fill, --seed: a generated input tensor.
const FlagGroup& TensorInputFlags();

// The positions of the request; `labels` gets the positions of a 1-D spec (row labels).
absl::StatusOr<Positions> PositionsFromFlags(const ParsedFlags& flags,
                                             std::vector<int64_t>* labels);

// An INT64 tensor from "a,b,c" ([1, n] for masks, [n] otherwise) or from an integer .npy file.
absl::StatusOr<Tensor> IntTensorFromText(std::string_view flag, const std::string& text,
                                         bool as_row);

// A generated tensor for demonstrations (--fill): ones, 0,1,2,... or uniform in [-1, 1]
// (--seed plus `seed_salt`).
absl::StatusOr<Tensor> GeneratedTensor(const ParsedFlags& flags, std::vector<int64_t> shape,
                                       DType dtype, uint64_t seed_salt);

// A float input tensor from the .npy file at `path` (converted to --dtype when given).
absl::StatusOr<Tensor> FloatTensorFromFile(const ParsedFlags& flags, const std::string& path);

// A table from --table FILE, --table-name NAME or --random-table SEED (shape `random_shape`).
absl::Status TableFromFlags(const ParsedFlags& flags, std::vector<int64_t> random_shape,
                            std::optional<Tensor>* table_inline, std::string* table_name);

// The value of integer flag `name`; a usage error when absent.
absl::StatusOr<int64_t> RequiredInt(const ParsedFlags& flags, std::string_view name);

// Writes `tensor` as .npy (BFLOAT16 widened to FLOAT32, exactly: NumPy has no bfloat16) and
// says so on stderr.
absl::Status WriteNpyFile(const std::string& path, const Tensor& tensor);
// WriteNpyFile to the path of flag `flag`, when given.
absl::Status MaybeWriteNpy(const ParsedFlags& flags, std::string_view flag, const Tensor& t);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_INPUTS_H_
