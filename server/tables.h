// TableRegistry: named, read-only tensors the server holds for requests that refer to a table
// by name (learned position tables, T5 bias tables, relative embedding tables).
//
// Filled before the server starts serving (tests call Add directly) and read-only afterwards.
//
// Thread-safety: Add is not thread-safe; every const method may be called concurrently once
// filling is done.
#ifndef POSENC_SERVER_TABLES_H_
#define POSENC_SERVER_TABLES_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/common/types.h"

namespace posenc::server {

class TableRegistry {
 public:
  struct Entry {
    std::string name;
    kernels::DType dtype;
    kernels::Shape shape;
    std::string bytes;  // little-endian, row-major; exactly prod(shape) * sizeof(dtype)

    kernels::ConstTensorView view() const { return {dtype, shape, bytes.data()}; }
  };

  // Registers a float table. INVALID_ARGUMENT for an empty or duplicate name, an integer
  // dtype, a dimension < 1 or a byte count that does not match the shape.
  absl::Status Add(std::string name, kernels::DType dtype, kernels::Shape shape, std::string bytes);

  // The table called `name`. Unknown names are INVALID_ARGUMENT naming `field` and listing the
  // loaded tables: `table_name: no table named "x" (loaded: none)`.
  absl::StatusOr<kernels::ConstTensorView> Find(absl::string_view name,
                                                absl::string_view field) const;

  // All tables, ordered by name.
  std::vector<const Entry*> List() const;

 private:
  std::map<std::string, Entry, std::less<>> tables_;
};

}  // namespace posenc::server

#endif  // POSENC_SERVER_TABLES_H_
