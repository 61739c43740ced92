// The factories of posenc::client::Positions.
#include <cstring>
#include <utility>

#include "posenc/client.h"

namespace posenc::client {
namespace {

// An INT64 tensor holding `values` with `shape` as given. A mismatch between the two is not
// checked here: the call that sends it reports INVALID_ARGUMENT naming the positions field.
Tensor Int64Tensor(const std::vector<int64_t>& values, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = DType::kInt64;
  t.shape = std::move(shape);
  t.data.resize(values.size() * sizeof(int64_t));
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

}  // namespace

Positions Positions::Default() { return Positions(); }

Positions Positions::Range(int64_t start, int64_t count) {
  Positions p;
  p.kind = Kind::kRange;
  p.start = start;
  p.count = count;
  return p;
}

Positions Positions::Offsets(std::vector<int64_t> offsets) {
  Positions p;
  p.kind = Kind::kOffsets;
  p.offsets = std::move(offsets);
  return p;
}

Positions Positions::Ids(const std::vector<int64_t>& ids, std::vector<int64_t> shape) {
  if (shape.empty()) shape = {static_cast<int64_t>(ids.size())};
  return Ids(Int64Tensor(ids, std::move(shape)));
}

Positions Positions::Ids(Tensor ids) {
  Positions p;
  p.kind = Kind::kIds;
  p.tensor = std::move(ids);
  return p;
}

Positions Positions::CuSeqlens(std::vector<int64_t> cu_seqlens, std::vector<int64_t> offsets) {
  Positions p;
  p.kind = Kind::kCuSeqlens;
  p.cu_seqlens = std::move(cu_seqlens);
  p.offsets = std::move(offsets);
  return p;
}

Positions Positions::AttentionMask(const std::vector<int64_t>& mask, std::vector<int64_t> shape) {
  if (shape.empty()) shape = {1, static_cast<int64_t>(mask.size())};
  Positions p;
  p.kind = Kind::kAttentionMask;
  p.tensor = Int64Tensor(mask, std::move(shape));
  return p;
}

}  // namespace posenc::client
