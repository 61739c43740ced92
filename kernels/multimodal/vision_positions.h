// VisionPositions: the 2-D patch positions of a vision tower, in the order its attention sees
// the patches, for RopeCache / ApplyRope with the tower's 2-D layout (rope/config.h: VISION_2D,
// VISION_2D_EVEN_ODD). Integer bookkeeping only: the same on every backend.
//
//   QWEN (Qwen2-VL / Qwen2.5-VL / Qwen3-VL / GLM-4V towers; transformers' rot_pos_emb):
//     grid_thw [N, 3] (t, h, w in patches, h and w multiples of m = spatial_merge_size). Each
//     image's patches in spatial-merge order: merge blocks (m x m) in raster order, the patches of
//     a block contiguous (row-major), every frame again (t times). position_ids [2, L] = (row,
//     col), L = sum t*h*w; layout VISION_2D.
//     With window_size > 0 (Qwen2.5-VL get_window_index): v = window_size / m / patch_size merge
//     units per window side; the merge units (m*m consecutive patches) of each frame are taken
//     window by window (windows in raster order, units in raster order within a window; every
//     frame padded to whole windows plus one more where the merged side is a multiple of v, as
//     transformers pads). window_index [L / m^2] lists the unit each place takes; position_ids are
//     permuted by it; cu_window_seqlens [W + 1] are the windows' cumulative patch counts, empty
//     windows dropped (torch.unique_consecutive).
//   PIXTRAL (transformers' position_ids_in_meshgrid): grid_hw [N, 2] (h, w in patches); each
//     image's patches row-major; position_ids [2, L] = (row, col), flat_ids [L] = row * max_width
//     + col (vLLM's and transformers 4.x's one-id form; max_width = image_size / patch_size);
//     layout VISION_2D_EVEN_ODD.
//   LLAMA4 (Llama4VisionRotaryEmbedding): one n x n image (n = image_size / patch_size), then the
//     CLS token: position_ids [2, n*n + 1] = (col + 1, row + 1), CLS (0, 0) (angle 0); layout
//     VISION_2D, pairing GPTJ.
//
// Use: PlanVisionPositions -> allocate the plan's outputs -> RunVisionPositions.
#ifndef POSENC_KERNELS_MULTIMODAL_VISION_POSITIONS_H_
#define POSENC_KERNELS_MULTIMODAL_VISION_POSITIONS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common/types.h"

namespace posenc::kernels {

enum class VisionTower { kQwen, kPixtral, kLlama4 };

struct VisionPositionsArgs {
  VisionTower tower = VisionTower::kQwen;
  ConstTensorView grid;            // INT32/INT64: QWEN [N, 3] (t, h, w); PIXTRAL [N, 2] (h, w)
  int64_t spatial_merge_size = 2;  // QWEN: m (>= 1)
  int64_t window_size = 0;         // QWEN: pixels per attention window side; 0: no windows
  int64_t patch_size = 0;          // QWEN with windows; PIXTRAL and LLAMA4 with image_size
  int64_t image_size = 0;          // PIXTRAL: max_width = image_size / patch_size; LLAMA4: n
};

struct VisionPositionsPlan {
  VisionTower tower = VisionTower::kQwen;
  std::vector<int64_t> grid;     // N rows of 3 (QWEN; PIXTRAL t = 1) or one (LLAMA4)
  int64_t merge = 1;             // QWEN's m
  int64_t window_units = 0;      // QWEN: v merge units per window side; 0: no windows
  int64_t max_width = 0;         // PIXTRAL; LLAMA4's n
  int64_t patches = 0;           // L
  OutputSpec position_ids;       // INT64 [2, L]
  OutputSpec flat_ids;           // PIXTRAL: INT64 [L]
  OutputSpec window_index;       // QWEN with windows: INT64 [L / m^2]
  OutputSpec cu_window_seqlens;  // QWEN with windows: INT64 [W + 1]

  bool has_flat_ids() const { return tower == VisionTower::kPixtral; }
  bool has_windows() const { return window_units > 0; }
};

// Every check: grid shapes and values (> 0; QWEN h, w multiples of m), window and image sizes,
// L below 2^31 (sizes bounded before anything is allocated).
absl::StatusOr<VisionPositionsPlan> PlanVisionPositions(const VisionPositionsArgs& args);

// Fills the plan's outputs (INT64 views of the planned shapes; the optional ones only when the
// plan has them, else empty views).
absl::Status RunVisionPositions(const VisionPositionsPlan& plan, const TensorView& position_ids,
                                const TensorView& flat_ids, const TensorView& window_index,
                                const TensorView& cu_window_seqlens);

}  // namespace posenc::kernels

#endif  // POSENC_KERNELS_MULTIMODAL_VISION_POSITIONS_H_
