// VisionPositions: the plan (every check) and the run (vision_positions.h).
#include "kernels/multimodal/vision_positions.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/common/positions.h"
#include "kernels/common/status.h"

namespace posenc::kernels {
namespace {

absl::string_view TowerName(VisionTower tower) {
  switch (tower) {
    case VisionTower::kQwen: return "QWEN";
    case VisionTower::kPixtral: return "PIXTRAL";
    case VisionTower::kLlama4: return "LLAMA4";
  }
  return "";
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The grid's rows as (t, h, w) (PIXTRAL: t = 1), each value checked.
absl::Status ReadGrid(const VisionPositionsArgs& args, VisionPositionsPlan* plan) {
  const int64_t cols = args.tower == VisionTower::kQwen ? 3 : 2;
  const ConstTensorView& g = args.grid;
  if (g.data == nullptr) {
    return Invalid("grid", absl::StrCat("required for tower ", TowerName(args.tower), " ([N, ",
                                        cols, "] patches per image)"));
  }
  if (!IsIntDType(g.dtype)) {
    return Invalid("grid", absl::StrCat("expected dtype INT32 or INT64, got ", DTypeName(g.dtype)));
  }
  if (g.shape.size() != 2 || g.shape[1] != cols || g.shape[0] < 1) {
    return Invalid("grid",
                   absl::StrCat("expected shape [N, ", cols, "] (", cols == 3 ? "t, h, w" : "h, w",
                                " in patches, N >= 1), got ", ShapeString(g.shape)));
  }
  int64_t total = 0;
  for (int64_t i = 0; i < g.shape[0]; ++i) {
    int64_t thw[3] = {1, 0, 0};
    for (int64_t c = 0; c < cols; ++c)
      thw[3 - cols + c] = LoadAsInt64(g.data, g.dtype, i * cols + c);
    const std::string row = absl::StrCat("grid[", i, "]");
    for (int64_t v : thw) {
      if (v < 1 || v > kMaxPosition) {
        return Invalid(row, absl::StrCat("expected patch counts in [1, 2^31), got [", thw[0], ", ",
                                         thw[1], ", ", thw[2], "]"));
      }
    }
    if (thw[1] % plan->merge != 0 || thw[2] % plan->merge != 0) {
      return Invalid(row, absl::StrCat("expected h and w multiples of spatial_merge_size ",
                                       plan->merge, ", got h ", thw[1], ", w ", thw[2]));
    }
    int64_t n = 0;
    if (!CheckedMul(thw[0], thw[1], &n) || !CheckedMul(n, thw[2], &n) ||
        !CheckedAdd(total, n, &total) || total > kMaxPosition) {
      return Invalid("grid", "expected fewer than 2^31 patches in all");
    }
    plan->grid.insert(plan->grid.end(), thw, thw + 3);
  }
  plan->patches = total;
  return absl::OkStatus();
}

absl::Status PlanQwenWindows(const VisionPositionsArgs& args, VisionPositionsPlan* plan) {
  if (args.window_size == 0) return absl::OkStatus();
  if (args.window_size < 0 || args.patch_size < 1) {
    return Invalid(args.window_size < 0 ? "window_size" : "patch_size",
                   absl::StrCat("windows need window_size > 0 and patch_size > 0, got ",
                                args.window_size, " and ", args.patch_size));
  }
  plan->window_units = args.window_size / plan->merge / args.patch_size;
  if (plan->window_units < 1) {
    return Invalid("window_size",
                   absl::StrCat("expected at least spatial_merge_size * patch_size = ",
                                plan->merge * args.patch_size, " pixels, got ", args.window_size));
  }
  int64_t windows = 0;
  for (size_t i = 0; i < plan->grid.size(); i += 3) {
    const int64_t h = plan->grid[i + 1] / plan->merge, w = plan->grid[i + 2] / plan->merge;
    windows += plan->grid[i] * CeilDiv(h, plan->window_units) * CeilDiv(w, plan->window_units);
  }
  plan->window_index = {
      "window_index", DType::kInt64, {plan->patches / (plan->merge * plan->merge)}};
  plan->cu_window_seqlens = {"cu_window_seqlens", DType::kInt64, {windows + 1}};
  return absl::OkStatus();
}

// QWEN: the (row, col) of every patch in spatial-merge order, frames repeated.
void QwenPositions(const VisionPositionsPlan& plan, int64_t* rows, int64_t* cols) {
  const int64_t m = plan.merge;
  int64_t k = 0;
  for (size_t i = 0; i < plan.grid.size(); i += 3) {
    const int64_t t = plan.grid[i], h = plan.grid[i + 1], w = plan.grid[i + 2];
    for (int64_t f = 0; f < t; ++f) {
      for (int64_t bi = 0; bi < h / m; ++bi) {
        for (int64_t bj = 0; bj < w / m; ++bj) {
          for (int64_t r = 0; r < m; ++r) {
            for (int64_t c = 0; c < m; ++c, ++k) {
              rows[k] = bi * m + r;
              cols[k] = bj * m + c;
            }
          }
        }
      }
    }
  }
}

// QWEN windows: the merge units in window order, and the windows' cumulative patch counts.
void QwenWindows(const VisionPositionsPlan& plan, int64_t* index, int64_t* cu) {
  const int64_t v = plan.window_units, unit = plan.merge * plan.merge;
  int64_t k = 0, base = 0, n = 0;
  cu[n++] = 0;
  for (size_t i = 0; i < plan.grid.size(); i += 3) {
    const int64_t t = plan.grid[i], h = plan.grid[i + 1] / plan.merge,
                  w = plan.grid[i + 2] / plan.merge;
    for (int64_t f = 0; f < t; ++f) {
      for (int64_t wi = 0; wi < CeilDiv(h, v); ++wi) {
        for (int64_t wj = 0; wj < CeilDiv(w, v); ++wj) {
          for (int64_t r = wi * v; r < std::min(h, (wi + 1) * v); ++r) {
            for (int64_t c = wj * v; c < std::min(w, (wj + 1) * v); ++c) {
              index[k++] = base + (f * h + r) * w + c;
            }
          }
          cu[n] = k * unit;
          ++n;
        }
      }
    }
    base += t * h * w;
  }
}

}  // namespace

absl::StatusOr<VisionPositionsPlan> PlanVisionPositions(const VisionPositionsArgs& args) {
  VisionPositionsPlan plan;
  plan.tower = args.tower;
  // The outputs a tower does not have: empty.
  plan.flat_ids = {"flat_ids", DType::kInt64, {0}};
  plan.window_index = {"window_index", DType::kInt64, {0}};
  plan.cu_window_seqlens = {"cu_window_seqlens", DType::kInt64, {0}};
  switch (args.tower) {
    case VisionTower::kQwen:
      if (args.spatial_merge_size < 1 || args.spatial_merge_size > 64) {
        return Invalid("spatial_merge_size",
                       absl::StrCat("expected 1 .. 64, got ", args.spatial_merge_size));
      }
      plan.merge = args.spatial_merge_size;
      POSENC_RETURN_IF_ERROR(ReadGrid(args, &plan));
      POSENC_RETURN_IF_ERROR(PlanQwenWindows(args, &plan));
      break;
    case VisionTower::kPixtral:
    case VisionTower::kLlama4: {
      if (args.patch_size < 1 || args.image_size < args.patch_size) {
        return Invalid(args.patch_size < 1 ? "patch_size" : "image_size",
                       absl::StrCat("expected patch_size >= 1 and image_size >= patch_size, got ",
                                    args.patch_size, " and ", args.image_size));
      }
      plan.max_width = args.image_size / args.patch_size;
      if (args.tower == VisionTower::kPixtral) {
        POSENC_RETURN_IF_ERROR(ReadGrid(args, &plan));
        for (size_t i = 0; i < plan.grid.size(); i += 3) {
          if (plan.grid[i + 1] > plan.max_width || plan.grid[i + 2] > plan.max_width) {
            return Invalid(absl::StrCat("grid[", i / 3, "]"),
                           absl::StrCat("expected at most image_size / patch_size = ",
                                        plan.max_width, " patches a side, got h ", plan.grid[i + 1],
                                        ", w ", plan.grid[i + 2]));
          }
        }
        plan.flat_ids = {"flat_ids", DType::kInt64, {plan.patches}};
      } else {
        if (args.grid.data != nullptr) {
          return Invalid("grid",
                         "LLAMA4 takes no grid: one image of image_size / patch_size "
                         "patches a side");
        }
        if (plan.max_width > 46340) {  // n*n + 1 < 2^31
          return Invalid(
              "image_size",
              absl::StrCat("expected image_size / patch_size <= 46340, got ", plan.max_width));
        }
        plan.grid = {1, plan.max_width, plan.max_width};
        plan.patches = plan.max_width * plan.max_width + 1;
      }
      break;
    }
  }
  plan.position_ids = {"position_ids", DType::kInt64, {2, plan.patches}};
  return plan;
}

absl::Status RunVisionPositions(const VisionPositionsPlan& plan, const TensorView& position_ids,
                                const TensorView& flat_ids, const TensorView& window_index,
                                const TensorView& cu_window_seqlens) {
  auto* rows = static_cast<int64_t*>(position_ids.data);
  int64_t* cols = rows + plan.patches;
  switch (plan.tower) {
    case VisionTower::kQwen: {
      QwenPositions(plan, rows, cols);
      if (!plan.has_windows()) break;
      auto* index = static_cast<int64_t*>(window_index.data);
      QwenWindows(plan, index, static_cast<int64_t*>(cu_window_seqlens.data));
      // The positions in window order: merge unit k takes unit index[k].
      const int64_t unit = plan.merge * plan.merge;
      const std::vector<int64_t> r(rows, rows + plan.patches), c(cols, cols + plan.patches);
      for (int64_t k = 0; k < plan.patches / unit; ++k) {
        std::copy_n(r.begin() + index[k] * unit, unit, rows + k * unit);
        std::copy_n(c.begin() + index[k] * unit, unit, cols + k * unit);
      }
      break;
    }
    case VisionTower::kPixtral: {
      int64_t k = 0;
      auto* flat = static_cast<int64_t*>(flat_ids.data);
      for (size_t i = 0; i < plan.grid.size(); i += 3) {
        for (int64_t r = 0; r < plan.grid[i + 1]; ++r) {
          for (int64_t c = 0; c < plan.grid[i + 2]; ++c, ++k) {
            rows[k] = r;
            cols[k] = c;
            flat[k] = r * plan.max_width + c;
          }
        }
      }
      break;
    }
    case VisionTower::kLlama4: {
      const int64_t n = plan.max_width;
      for (int64_t k = 0; k < n * n; ++k) {
        rows[k] = k % n + 1;  // axis 0 (the first row of position_ids): the column (x) + 1
        cols[k] = k / n + 1;  // axis 1: the row (y) + 1
      }
      rows[n * n] = cols[n * n] = 0;  // CLS: angle 0
      break;
    }
  }
  return absl::OkStatus();
}

}  // namespace posenc::kernels
