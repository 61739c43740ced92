// Every operation of posenc, one header each (grouped by family), for callers that use several.
//
//   absolute/sinusoidal.h             Sinusoidal
//   absolute/add_position_encoding.h  AddPositionEncoding
//   rope/config.h                     RoPE config, scaling types, frequencies
//   rope/rope_cache.h                 RopeCache
//   rope/apply_rope.h                 ApplyRope
//   rope/rerotate_keys.h              RerotateKeys
//   multimodal/vision_positions.h     VisionPositions
//   multimodal/multimodal_positions.h MultimodalPositions (and its decode steps)
//   bias/alibi.h                      AlibiSlopes, AlibiBias
//   bias/relative.h                   RelativeBias (T5), RelativeEmbedding (Shaw)
//
// Each op is used the same way: Plan<Op>(args) validates everything once and lists the outputs
// ({name, dtype, shape}); the caller checks its limits and allocates them; Run<Op>(backend, plan,
// outputs...) resolves positions, fetches frequencies and calls the backend. Errors are
// absl::Status: INVALID_ARGUMENT names the request field (as on the wire, e.g.
// "config.rotary_dim"), the expected and the received value; OUT_OF_RANGE for a position past a
// learned table. Nothing here throws.
#ifndef POSENC_KERNELS_OPS_H_
#define POSENC_KERNELS_OPS_H_

#include "kernels/absolute/add_position_encoding.h"
#include "kernels/absolute/sinusoidal.h"
#include "kernels/bias/alibi.h"
#include "kernels/bias/relative.h"
#include "kernels/multimodal/multimodal_positions.h"
#include "kernels/multimodal/vision_positions.h"
#include "kernels/rope/apply_rope.h"
#include "kernels/rope/config.h"
#include "kernels/rope/rerotate_keys.h"
#include "kernels/rope/rope_cache.h"

#endif  // POSENC_KERNELS_OPS_H_
