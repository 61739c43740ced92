// Table files: parses .npy and .safetensors files into named float tables for the
// TableRegistry (posenc-server --tables DIR, ServerOptions::tables_dir).
//
// Naming:
//   - DIR/NAME.npy holds one table, called NAME (the file stem): wpe.npy -> "wpe".
//   - DIR/NAME.safetensors holds one table per tensor, called NAME/TENSOR:
//     t5.safetensors with tensor "relative_attention_bias" -> "t5/relative_attention_bias".
//   Other files in DIR are ignored (logged at debug); subdirectories are not searched.
//
// Accepted contents (anything else is INVALID_ARGUMENT naming the file and the problem):
//   - .npy (read by the one codec, kernels/common/npy.h: format 1.0, 2.0 or 3.0, C order,
//     exactly prod(shape) * itemsize data bytes after the header) holding a float array, descr
//     'f2', 'f4' or 'f8' in either byte order (big-endian data is byte-swapped; bfloat16 has no
//     .npy dtype code, use .safetensors), of rank 2 with every dimension >= 1.
//   - .safetensors: an 8-byte little-endian header length N (at most 100 MiB and at most the
//     file size - 8), N bytes of a JSON object {"TENSOR": {"dtype": "F32" | "F16" | "BF16" |
//     "F64", "shape": [rows, cols], "data_offsets": [begin, end]}, ..., "__metadata__": {...}}
//     (metadata optional and ignored), then the data section. Offsets are relative to the data
//     section and end - begin must be prod(shape) * itemsize. A tensor name may appear only
//     once; a file may hold no tensors at all.
// Sizes are checked with overflow-safe arithmetic against the bytes actually present before
// anything is allocated from them. Each table's bytes are copied out of the file, so loading
// a file briefly holds it twice.
//
// Thread-safety: pure functions, except that LoadTableDirectory fills `registry`, which must
// not be in use by other threads yet.
#ifndef POSENC_SERVER_TABLE_LOADER_H_
#define POSENC_SERVER_TABLE_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/common/types.h"
#include "server/tables.h"

namespace posenc::server {

// One table parsed from a file; `bytes` holds prod(shape) * DTypeSize(dtype) little-endian,
// row-major bytes.
struct LoadedTable {
  std::string name;
  kernels::DType dtype = kernels::DType::kFloat32;
  kernels::Shape shape;
  std::string bytes;
};

// The table in the contents of a .npy file, named `stem`. Errors do not name a file.
absl::StatusOr<LoadedTable> ParseNpy(absl::string_view contents, absl::string_view stem);

// The tables in the contents of a .safetensors file, named "stem/TENSOR", ordered by name.
// Errors do not name a file.
absl::StatusOr<std::vector<LoadedTable>> ParseSafetensors(absl::string_view contents,
                                                          absl::string_view stem);

// Reads and parses one .npy or .safetensors file (chosen by extension). Errors start with
// the path: "/tables/wpe.npy: shape (4,): expected rank 2, got rank 1".
absl::StatusOr<std::vector<LoadedTable>> LoadTableFile(const std::string& path);

// Loads every *.npy and *.safetensors file directly in `dir` (in file-name order) into
// `registry`. A missing `dir` is NOT_FOUND; an empty one loads nothing. The first bad file,
// or a name that is already taken, stops the load with an error naming the file.
absl::Status LoadTableDirectory(const std::string& dir, TableRegistry* registry);

}  // namespace posenc::server

#endif  // POSENC_SERVER_TABLE_LOADER_H_
