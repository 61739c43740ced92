// The parity harness: every backend x op x dtype x layout x style x scaling x position mode
// against the reference backend (ggml's test-backend-ops is the model), plus the golden cases
// through each backend. ISA levels this processor lacks are reported as skipped.
//
// Tolerances (README "Accuracy"; relative to the largest input magnitude times the
// attention factor where inputs are rotated):
//   FLOAT64 1e-12, FLOAT32 apply 2e-6, FLOAT32 tables 1e-6, FLOAT16/BFLOAT16 1 output ulp of the
//   reference value; biases, buckets and table lookups exactly equal.
#include <string>

#define POSENC_PARITY_SUITE ParityTest
#include "tests/kernels/parity_suite.inc"

namespace posenc::kernels {
namespace {

// Every CPU ISA level this machine supports, single- and multi-threaded.
std::vector<ParityBackend> CpuBackends() {
  std::vector<ParityBackend> out;
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    for (int threads : {1, 2}) {
      out.push_back({std::string(isa) + "_t" + std::to_string(threads), [isa, threads] {
                       return MakeCpuBackend(CpuBackendOptions{threads, isa});
                     }});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cpu, ParityTest, ::testing::ValuesIn(CpuBackends()), ParityName);

}  // namespace
}  // namespace posenc::kernels
