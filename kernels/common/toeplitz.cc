// The Toeplitz expander: one copy per output row.
#include "kernels/common/toeplitz.h"

#include <algorithm>
#include <cstring>

namespace posenc::kernels {

namespace {

void MemCopy(void* dst, const void* src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

}  // namespace

void ExpandToeplitzRows(const void* generator, int64_t heads, int64_t q_len, int64_t k_len,
                        int64_t element_size, int64_t row_begin, int64_t row_end, void* out) {
  ExpandToeplitzRows(generator, heads, q_len, k_len, element_size, row_begin, row_end, out,
                     MemCopy);
}

void ExpandToeplitzRows(const void* generator, int64_t heads, int64_t q_len, int64_t k_len,
                        int64_t element_size, int64_t row_begin, int64_t row_end, void* out,
                        void (*copy)(void* dst, const void* src, int64_t bytes)) {
  const auto* gen = static_cast<const unsigned char*>(generator);
  auto* dst = static_cast<unsigned char*>(out);
  const int64_t gen_len = q_len + k_len - 1;
  const int64_t row_bytes = k_len * element_size;
  row_end = std::min(row_end, heads * q_len);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t h = r / q_len;
    const int64_t i = r % q_len;
    copy(dst + r * row_bytes, gen + (h * gen_len + (q_len - 1 - i)) * element_size, row_bytes);
  }
}

}  // namespace posenc::kernels
