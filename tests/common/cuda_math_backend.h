// The CUDA kernels' per-element math on the CPU: a Backend whose ops run the same host-device
// functions the .cu kernels run (kernels/common/half_codec.h, kernels/rope/rope_math.h,
// kernels/bias/bias_math.h), in the kernels' order of operations (angles per token, rotation of
// every head from them; generators then Toeplitz windows), with plain host loops instead of
// thread blocks. Every build tests it against the reference backend (the parity suite in
// cuda_math_test.cc, the golden suite in golden_test.cc), so the kernels' arithmetic is checked
// where no GPU is present. Not a serving backend: single-threaded, for tests.
#ifndef POSENC_TESTS_COMMON_CUDA_MATH_BACKEND_H_
#define POSENC_TESTS_COMMON_CUDA_MATH_BACKEND_H_

#include <memory>
#include <vector>

#include "kernels/backend.h"

namespace posenc::testing {

// name() "cuda-math-host".
std::unique_ptr<kernels::Backend> MakeCudaMathHostBackend();

// Every backend this machine runs, for the golden suites: the reference, each CPU instruction-set
// level, the CUDA kernels' math on the host (every build) and the CUDA backend where a device is
// present.
std::vector<std::unique_ptr<kernels::Backend>> EveryTestBackend();

}  // namespace posenc::testing

#endif  // POSENC_TESTS_COMMON_CUDA_MATH_BACKEND_H_
