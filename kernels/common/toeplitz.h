// The Toeplitz expander: full bias matrices from their compact generator (posenc.proto,
// BiasForm), the one implementation behind the CPU backend's full-form ALiBi/T5 outputs and the
// client's local expansion of the compact form.
//
// A Toeplitz matrix per head depends only on j - i, so head h is one generator row
// gen[h, 0 .. q_len + k_len - 1) and
//
//   out[h, i, j] = gen[h, j - i + q_len - 1]     0 <= i < q_len, 0 <= j < k_len
//
// i.e. row i of head h is the contiguous slice gen[h, q_len-1-i .. q_len-1-i+k_len): one copy
// per row, at memory speed, for any element type (elements are `element_size` opaque bytes).
//
//   gen[h]:  [ t=0 | t=1 | ... | t=q_len-1 | ... | t=q_len+k_len-2 ]
//   out[h,q_len-1] starts at t=0;  ...;  out[h,0] starts at t=q_len-1
//
// Thread-safety: pure; calls on disjoint row ranges of one output may run concurrently.
#ifndef POSENC_KERNELS_COMMON_TOEPLITZ_H_
#define POSENC_KERNELS_COMMON_TOEPLITZ_H_

#include <cstdint>

namespace posenc::kernels {

// Writes rows [row_begin, row_end) of the flattened (head, query) index r = h * q_len + i of
// `out`, which is [heads, q_len, k_len] (row r at out + r * k_len * element_size; the other rows
// are not touched), from `generator`, which is [heads, q_len + k_len - 1]. Both are row-major
// arrays of `element_size`-byte elements and must not overlap. Requires q_len >= 1, k_len >= 1,
// element_size >= 1 and 0 <= row_begin <= row_end; rows at or past heads * q_len are not written.
// No other checks: callers validate shapes once (a thread pool calls this per chunk of rows).
void ExpandToeplitzRows(const void* generator, int64_t heads, int64_t q_len, int64_t k_len,
                        int64_t element_size, int64_t row_begin, int64_t row_end, void* out);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_COMMON_TOEPLITZ_H_
