// libFuzzer target: the table loader's parsers (server/table_loader.h: ParseNpy,
// ParseSafetensors) and the one .npy codec (kernels/common/npy.h: ParseNpy), on the same bytes.
//
// Oracles besides the sanitizers: every table or array that parses holds exactly
// prod(shape) * sizeof(dtype) bytes, and a parsed .npy array written back by SerializeNpy parses
// to the same array. An allocation the size checks should have refused shows up as one over
// -malloc_limit_mb.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/common/npy.h"
#include "kernels/common/types.h"
#include "server/table_loader.h"

namespace {

// Aborts unless `bytes` holds prod(shape) * DTypeSize(dtype) bytes.
void CheckBytes(posenc::kernels::DType dtype, absl::Span<const int64_t> shape, size_t bytes) {
  int64_t expected = posenc::kernels::DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(expected, d, &expected)) std::abort();
  }
  if (static_cast<size_t>(expected) != bytes) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace kernels = posenc::kernels;
  namespace server = posenc::server;
  const absl::string_view contents(reinterpret_cast<const char*>(data), size);

  if (absl::StatusOr<kernels::NpyArray> array = kernels::ParseNpy(contents); array.ok()) {
    CheckBytes(array->dtype, array->shape, array->bytes.size());
    if (array->dtype != kernels::DType::kBFloat16) {
      absl::StatusOr<std::string> written =
          kernels::SerializeNpy(array->dtype, array->shape, array->bytes);
      if (!written.ok()) std::abort();
      absl::StatusOr<kernels::NpyArray> again = kernels::ParseNpy(*written);
      if (!again.ok() || again->dtype != array->dtype || again->shape != array->shape ||
          again->bytes != array->bytes) {
        std::abort();
      }
    }
  }
  if (absl::StatusOr<server::LoadedTable> table = server::ParseNpy(contents, "fuzz"); table.ok()) {
    CheckBytes(table->dtype, table->shape, table->bytes.size());
  }
  if (absl::StatusOr<std::vector<server::LoadedTable>> tables =
          server::ParseSafetensors(contents, "fuzz");
      tables.ok()) {
    for (const server::LoadedTable& table : *tables) {
      CheckBytes(table.dtype, table.shape, table.bytes.size());
    }
  }
  return 0;
}
