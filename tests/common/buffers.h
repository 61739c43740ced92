// Tensors owned by a test: the bytes and a view of them, sized from a plan's OutputSpec.
//
// Copies own (and view) their own bytes; moves keep the bytes where they are. Fill bytes other
// than 0 (e.g. 0xCD) make a kernel that leaves an element unwritten show up in a comparison.
#ifndef POSENC_TESTS_COMMON_BUFFERS_H_
#define POSENC_TESTS_COMMON_BUFFERS_H_

#include <cstdint>
#include <vector>

#include "kernels/common/types.h"

namespace posenc::testing {

struct Buffer {
  std::vector<unsigned char> bytes;
  kernels::TensorView view;

  Buffer() = default;
  // prod(shape) elements of `dtype`, every byte `fill`.
  Buffer(kernels::DType dtype, kernels::Shape shape, unsigned char fill = 0);
  // A planned output: spec.dtype and spec.shape.
  explicit Buffer(const kernels::OutputSpec& spec, unsigned char fill = 0);
  Buffer(const Buffer& other);
  Buffer& operator=(const Buffer& other);
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;

  // Element i widened to double / stored rounded to the dtype.
  double at(int64_t i) const { return kernels::LoadAsDouble(view.data, view.dtype, i); }
  void set(int64_t i, double v) { kernels::StoreFromDouble(view.data, view.dtype, i, v); }
  int64_t size() const { return view.NumElements(); }
};

// A buffer of uniform values in [lo, hi) drawn from std::mt19937(seed), element by element.
Buffer RandomBuffer(kernels::DType dtype, kernels::Shape shape, uint32_t seed, double lo,
                    double hi);

}  // namespace posenc::testing

#endif  // POSENC_TESTS_COMMON_BUFFERS_H_
