// The vision side of a vision-language config.json (kernels/hf): the vision tower's RoPE and patch
// geometry (vision_config), and the multimodal position rule's parameters (model_type, special
// token ids, spatial_merge_size, tokens_per_second). One row per tower in vision.cc's table, each
// naming the transformers file its defaults and conventions come from.
//
// Thread-safety: pure functions.
#ifndef POSENC_KERNELS_HF_VISION_H_
#define POSENC_KERNELS_HF_VISION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/hf/config.h"
#include "kernels/hf/json.h"
#include "kernels/multimodal/multimodal_positions.h"
#include "kernels/multimodal/vision_positions.h"

namespace posenc::hf {

// The layer_type that selects the vision tower's RoPE (RopeConfig.layer_type, DescribeRope).
inline constexpr absl::string_view kVisionLayerType = "vision";

struct VisionTowerConfig {
  kernels::VisionTower tower = kernels::VisionTower::kQwen;
  std::string model_type;  // the row's
  int64_t spatial_merge_size = 2;
  int64_t window_size = 0;  // Qwen2.5-VL's attention windows, pixels (0: none)
  int64_t patch_size = 0;
  int64_t image_size = 0;
  // layer_type "vision": head_dim, base, mrope_layout (VISION_2D / VISION_2D_EVEN_ODD), style,
  // the sources of each value.
  LayerRope rope;
};

// The vision tower of `root` (a parsed config.json); nullopt when its model_type has no tower
// in the table.
absl::StatusOr<std::optional<VisionTowerConfig>> VisionTowerOf(const Json& root);
absl::StatusOr<std::optional<VisionTowerConfig>> ParseVisionTower(absl::string_view json_text);

struct MultimodalConfig {
  const kernels::MultimodalRule* rule = nullptr;  // null: model_type has no rule
  std::string model_type;
  kernels::MultimodalTokenIds token_ids;  // -1 where the file does not give one
  std::optional<int64_t> spatial_merge_size;
  std::optional<double> tokens_per_second;
  std::optional<int64_t> temporal_merge_size;  // ERNIE-4.5-VL
};

absl::StatusOr<MultimodalConfig> ParseMultimodalConfig(absl::string_view json_text);

}  // namespace posenc::hf

#endif  // POSENC_KERNELS_HF_VISION_H_
