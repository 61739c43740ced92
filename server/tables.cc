#include "server/tables.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace posenc::server {

absl::Status TableRegistry::Add(std::string name, kernels::DType dtype, kernels::Shape shape,
                                std::string bytes) {
  if (name.empty()) return absl::InvalidArgumentError("table name: expected a non-empty name");
  if (tables_.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat("table \"", name, "\": already loaded"));
  }
  if (!kernels::IsFloatDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table \"", name, "\": expected a float dtype, got ", kernels::DTypeName(dtype)));
  }
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 1 || !kernels::CheckedMul(elements, d, &elements)) {
      return absl::InvalidArgumentError(
          absl::StrCat("table \"", name, "\": invalid shape ", kernels::ShapeString(shape)));
    }
  }
  int64_t expected = 0;
  if (!kernels::CheckedMul(elements, kernels::DTypeSize(dtype), &expected) ||
      static_cast<int64_t>(bytes.size()) != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("table \"", name, "\": data has ", bytes.size(), " bytes, expected ", expected,
                     " (", kernels::DTypeName(dtype), " ", kernels::ShapeString(shape), ")"));
  }
  Entry entry{name, dtype, std::move(shape), std::move(bytes)};
  tables_.emplace(std::move(name), std::move(entry));
  return absl::OkStatus();
}

absl::StatusOr<kernels::ConstTensorView> TableRegistry::Find(absl::string_view name,
                                                             absl::string_view field) const {
  auto it = tables_.find(name);
  if (it != tables_.end()) return it->second.view();
  std::vector<absl::string_view> names;
  for (const auto& [n, entry] : tables_) names.push_back(n);
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": no table named \"", kernels::Abbreviate(name),
                   "\" (loaded: ", names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
}

std::vector<const TableRegistry::Entry*> TableRegistry::List() const {
  std::vector<const Entry*> out;
  out.reserve(tables_.size());
  for (const auto& [name, entry] : tables_) out.push_back(&entry);
  return out;
}

}  // namespace posenc::server
