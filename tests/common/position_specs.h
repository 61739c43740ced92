// PositionSpecs for kernel tests: a range, or explicit INT64 ids viewed in place (the vector must
// outlive the spec).
#ifndef POSENC_TESTS_COMMON_POSITION_SPECS_H_
#define POSENC_TESTS_COMMON_POSITION_SPECS_H_

#include <cstdint>
#include <vector>

#include "kernels/common/positions.h"
#include "kernels/common/types.h"

namespace posenc::testing {

inline kernels::PositionSpec RangeSpec(int64_t start, int64_t count) {
  kernels::PositionSpec s;
  s.kind = kernels::PositionSpec::Kind::kRange;
  s.start = start;
  s.count = count;
  return s;
}

// `shape` defaults to the ids' own length ([n]).
inline kernels::PositionSpec IdsSpec(const std::vector<int64_t>& ids, kernels::Shape shape = {}) {
  kernels::PositionSpec s;
  s.kind = kernels::PositionSpec::Kind::kIds;
  if (shape.empty()) shape = {static_cast<int64_t>(ids.size())};
  s.ids = {kernels::DType::kInt64, shape, ids.data()};
  return s;
}

}  // namespace posenc::testing

#endif  // POSENC_TESTS_COMMON_POSITION_SPECS_H_
