#include "tests/common/buffers.h"

#include <random>
#include <utility>

namespace posenc::testing {

Buffer::Buffer(kernels::DType dtype, kernels::Shape shape, unsigned char fill) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  bytes.assign(static_cast<size_t>(n * kernels::DTypeSize(dtype)), fill);
  view = {dtype, std::move(shape), bytes.data()};
}

Buffer::Buffer(const kernels::OutputSpec& spec, unsigned char fill)
    : Buffer(spec.dtype, spec.shape, fill) {}

Buffer::Buffer(const Buffer& other) : bytes(other.bytes), view(other.view) {
  view.data = bytes.data();
}

Buffer& Buffer::operator=(const Buffer& other) {
  bytes = other.bytes;
  view = other.view;
  view.data = bytes.data();
  return *this;
}

Buffer RandomBuffer(kernels::DType dtype, kernels::Shape shape, uint32_t seed, double lo,
                    double hi) {
  Buffer b(dtype, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < b.size(); ++i) b.set(i, dist(gen));
  return b;
}

}  // namespace posenc::testing
