// The RoPE dict of a config.json (rope_scaling / rope_parameters) as kernels::RopeScaling
// (kernels/hf; internal to it): transformers' rope types ("rope_type": "yarn" is Hugging Face's
// vocabulary, with its aliases "su" and "mrope"), the keys each type reads
// (modeling_rope_utils.py), and warnings for the keys it does not read.
//
// Thread-safety: pure functions.
#ifndef POSENC_KERNELS_HF_SCALING_H_
#define POSENC_KERNELS_HF_SCALING_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/hf/architectures.h"
#include "kernels/hf/config.h"
#include "kernels/hf/json.h"
#include "kernels/rope/config.h"

namespace posenc::hf {

// Fills `scaling` from the RoPE dict `dict` (named `path` in messages): the keys its type reads;
// keys it does not read become warnings. `sources` gets the rope type and every key read.
absl::Status ParseScaling(const Json& dict, const std::string& path, const Family& family,
                          kernels::RopeScaling* scaling, std::vector<std::string>* warnings,
                          std::vector<ValueSource>* sources);

}  // namespace posenc::hf

#endif  // POSENC_KERNELS_HF_SCALING_H_
