// Sub-modules of a layer with a RoPE of their own (kernels/hf; internal to it): the DSA lightning
// indexer of DeepSeek-V3.2 and GLM-5, one row per architecture in submodules.cc's table, each
// naming the transformers (or vLLM) code its pairing and layers come from.
//
// Thread-safety: pure functions; the table is immutable.
#ifndef POSENC_KERNELS_HF_SUBMODULES_H_
#define POSENC_KERNELS_HF_SUBMODULES_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/hf/config.h"
#include "kernels/hf/text_model.h"
#include "kernels/rope/config.h"

namespace posenc::hf {

// The sub-module name of the DSA indexer (RopeConfig.submodule, DescribeRope's submodules).
inline constexpr absl::string_view kIndexerSubmodule = "indexer";

// The sub-modules of the text model `m` (num_layers layers, 0 when the file does not say), each a
// copy of `layer` (the selected layer's RoPE) with its own head, rotary width and pairing; empty
// when the model has none. INVALID_ARGUMENT naming the key for a malformed index_head_dim,
// qk_rope_head_dim, indexer_types or index_topk_pattern.
absl::StatusOr<std::vector<SubmoduleRope>> Submodules(const TextModel& m,
                                                      const kernels::RopeConfig& layer,
                                                      int64_t num_layers);

// The sub-module `name` of `model`; a layer selected by index must be one of its layers.
// INVALID_ARGUMENT "config.submodule: ..." naming the model_type, or the layers that run it.
absl::StatusOr<const SubmoduleRope*> SelectSubmodule(const ModelRope& model, absl::string_view name,
                                                     std::optional<int64_t> layer_index);

}  // namespace posenc::hf

#endif  // POSENC_KERNELS_HF_SUBMODULES_H_
