// posenc::client::Client: the C++ client of the posenc position-encoding service.
//
// One method per RPC of `posenc.v1.PositionEncoding` (proto/posenc/v1/posenc.proto is the
// reference for every field; the kernels' op headers state every formula), plus the standard
// gRPC health check.
// The types here mirror the wire messages in plain C++ (no generated protobuf types): an
// `std::optional` field is a proto3 `optional` field (nullopt = the documented default), and
// enum value kUnspecified selects the documented default as on the wire.
//
// Every RPC has a synchronous method and an asynchronous one (`...Async`, a std::future). A call
// applies its deadline (CallOptions::timeout, else ClientOptions::timeout) and returns the
// server's status unchanged: the absl::StatusCode equals the gRPC code, the message is the
// server's (INVALID_ARGUMENT names the field, expected and received) and GetErrorDetails
// (posenc/errors.h) reads its structured details (reason, field, retry delay). A failure to reach
// the server is UNAVAILABLE; a passed deadline DEADLINE_EXCEEDED. Local checks that fail before
// anything is sent (e.g. an inconsistent Tensor) are INVALID_ARGUMENT.
//
// Large requests are split transparently (ClientOptions::split_requests): ApplyRope along heads,
// biases and relative embeddings along query rows, each piece within the message limit (the
// smaller of ClientOptions::max_message_bytes and the server's, learned once from
// GetServerInfo), sent as calls in flight together and joined; the result is byte-identical to
// one call. Biases come in their compact form and are expanded here when the caller leaves the
// form unspecified (ClientOptions::compact_biases): a q x k matrix per head never crosses the
// network.
//
//   auto client = posenc::client::Client::Connect("localhost:50051", {});
//   if (!client.ok()) return client.status();
//   posenc::client::RopeCacheOptions options;
//   options.positions = posenc::client::Positions::Range(0, 4096);
//   options.config.head_dim = 128;
//   absl::StatusOr<posenc::client::RopeCacheResult> cache = (*client)->RopeCache(options);
//
// Shared memory (co-located callers; the server runs with --allow_shared_memory): any input Tensor
// may refer to a range of a registered POSIX shared-memory region instead of carrying bytes
// (Tensor::shared_memory), and every options struct's `output_shared_memory` places outputs by
// name into such ranges; the result's Tensor then carries the reference and no bytes (ApplyRope
// rotates q and k in place in theirs). posenc::client::SharedMemoryRegion (posenc/shared_memory.h)
// creates, maps and registers a region and hands out those references. A request that uses
// shared memory is a small message: it is never split and never fetched in a compact form.
//
// Thread-safety: a Client is thread-safe; one instance may be shared by any number of threads
// (all calls share one gRPC channel, which multiplexes them).
#ifndef POSENC_CLIENT_CLIENT_H_
#define POSENC_CLIENT_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "posenc/errors.h"
#include "posenc/tensor.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace posenc::client {

// Outputs written into registered shared memory instead of the result, by output name (the
// result's field: "table", "y", "cos", "sin", "q", "k", "slopes", "bias", "embeddings"). Each
// range must hold its output exactly and overlap no other tensor of the call, but an ApplyRope
// input placed on itself (rotated in place, as it is anyway when q or k is a reference).
using OutputPlacements = std::map<std::string, SharedMemoryRef>;

// ---------------------------------------------------------------------------------------------
// Positions (posenc.v1.Positions): where each token sits. Build one with the factories.
// ---------------------------------------------------------------------------------------------
struct Positions {
  enum class Kind { kDefault, kRange, kOffsets, kIds, kCuSeqlens, kAttentionMask };
  Kind kind = Kind::kDefault;
  int64_t start = 0;                // kRange
  int64_t count = 0;                // kRange
  std::vector<int64_t> offsets;     // kOffsets; kCuSeqlens (per-sequence start, may be empty)
  std::vector<int64_t> cu_seqlens;  // kCuSeqlens
  Tensor tensor;                    // kIds (INT32/INT64 ids), kAttentionMask (INT32/INT64 1/0)

  // Absent on the wire: ops with a sequence axis use 0 .. seq_len-1 for every sequence.
  static Positions Default();
  // start, start+1, ..., start+count-1. In [batch, seq] ops count must be the sequence length
  // or 0 (= the sequence length).
  static Positions Range(int64_t start, int64_t count);
  // Token t of sequence b sits at offsets[b] + t.
  static Positions Offsets(std::vector<int64_t> offsets);
  // Explicit INT64 ids of the given shape ([S], [B,S], [T], any shape for tables, [3, ...] for
  // M-RoPE). An empty shape means [ids.size()].
  static Positions Ids(const std::vector<int64_t>& ids, std::vector<int64_t> shape = {});
  // Explicit ids already in a Tensor (INT32 or INT64).
  static Positions Ids(Tensor ids);
  // Packed sequences: sequence i holds tokens cu_seqlens[i] .. cu_seqlens[i+1]-1 and its
  // positions restart at offsets[i] (0 when `offsets` is empty).
  static Positions CuSeqlens(std::vector<int64_t> cu_seqlens, std::vector<int64_t> offsets = {});
  // INT64 [B,S] mask, 1 = real token, 0 = padding; a real token's position is the number of real
  // tokens before it in its row. An empty shape means [1, mask.size()].
  static Positions AttentionMask(const std::vector<int64_t>& mask, std::vector<int64_t> shape = {});
};

// ---------------------------------------------------------------------------------------------
// Sinusoidal and learned absolute encodings.
// ---------------------------------------------------------------------------------------------
enum class SinusoidalLayout { kUnspecified, kInterleaved, kConcat };  // default INTERLEAVED
enum class FreqScheme { kUnspecified, kVaswani, kT2t };  // default VASWANI/INTERLEAVED, T2T/CONCAT

struct SinusoidalParams {
  int64_t dim = 0;             // D; 0 in AddPositionEncoding (ADD) means the width of x
  std::optional<double> base;  // default 10000
  SinusoidalLayout layout = SinusoidalLayout::kUnspecified;
  FreqScheme freq_scheme = FreqScheme::kUnspecified;
};

// Sinusoidal: the table PE[positions, D] (SinusoidalRequest).
struct SinusoidalOptions {
  Positions positions;  // range, ids, cu_seqlens or attention_mask
  SinusoidalParams params;
  std::optional<DType> output_dtype;      // a float dtype; default FLOAT32
  OutputPlacements output_shared_memory;  // outputs into shared memory, by name
};

// A learned table E[max_pos, D]: inline (`table_inline`) or by name (`table_name`, a table the
// server loaded at start-up); exactly one of the two.
struct LearnedTable {
  std::optional<Tensor> table_inline;
  std::string table_name;
  int64_t table_offset = 0;  // position p reads row p + table_offset
};

enum class Combine { kUnspecified, kAdd, kConcat };  // default ADD

// AddPositionEncoding: y = x*scale + PE (ADD) or [x*scale ; PE] (CONCAT). Exactly one of
// `sinusoidal` and `learned` must be set.
struct AddPositionEncodingOptions {
  Tensor x;             // float [B, T, D] or [T, D]
  Positions positions;  // default 0 .. T-1 in every row
  std::optional<SinusoidalParams> sinusoidal;
  std::optional<LearnedTable> learned;
  Combine combine = Combine::kUnspecified;
  std::optional<double> scale;            // default 1
  std::optional<int64_t> padding_idx;     // fairseq, sinusoidal sources only
  OutputPlacements output_shared_memory;  // outputs into shared memory, by name
};

// ---------------------------------------------------------------------------------------------
// Rotary position embedding.
// ---------------------------------------------------------------------------------------------
enum class RopeStyle { kUnspecified, kNeox, kGptj, kDeepseek };  // default NEOX
enum class RopeScalingType {
  kUnspecified,  // DEFAULT
  kDefault,
  kLinear,
  kNtk,
  kDynamic,
  kYarn,
  kLlama3,
  kLongrope,
  kProportional,
};

// Scaling parameters; each type reads only its own fields (posenc.proto, RopeScaling).
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kUnspecified;
  std::optional<double> factor;
  std::optional<int64_t> original_max_position_embeddings;
  std::optional<double> beta_fast;
  std::optional<double> beta_slow;
  std::optional<bool> truncate;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  std::optional<double> attention_factor;
  std::optional<double> low_freq_factor;
  std::optional<double> high_freq_factor;
  std::vector<double> long_factor;
  std::vector<double> short_factor;
  std::optional<double> partial_rotary_factor;  // proportional
  std::optional<double> alpha;                  // dynamic (Hunyuan): fixed b' = b * alpha^(d/(d-2))
};

// Which position axis each frequency reads (posenc.proto MropeLayout); default CONTIGUOUS.
enum class MropeLayout {
  kUnspecified,
  kContiguous,
  kInterleaved,
  kAlternating,
  kVision2d,
  kVision2dEvenOdd,
};

// A rotary configuration: the explicit fields, or the text of a Hugging Face config.json in
// `hf_config_json` (then head_dim, rotary_dim, base, scaling, max_position_embeddings and
// mrope_section stay unset).
struct RopeConfig {
  int64_t head_dim = 0;  // ApplyRope: 0 = last dim of q; RopeCache: required without hf config
  std::optional<int64_t> rotary_dim;  // d, even, <= head_dim; default head_dim
  std::optional<double> base;         // default 10000
  RopeStyle style = RopeStyle::kUnspecified;
  RopeScaling scaling;
  std::optional<int64_t> max_position_embeddings;
  std::vector<int64_t> mrope_section;  // [s_t, s_h, s_w], sum d/2; positions then ids [3, ...]
  MropeLayout mrope_layout = MropeLayout::kUnspecified;
  std::vector<int64_t> frequency_axes;  // d/2 axes (< 4), one per frequency; overrides the layout
  bool inverse = false;                 // rotate by -theta and divide by m
  std::optional<bool> apply_attention_factor;  // default true
  std::optional<int64_t> seq_len;              // dynamic/longrope; default: largest position + 1
  std::vector<double> freq_factors;  // d/2 divisors of omega_j, after the scaling (GGUF rope_freqs)
  std::string hf_config_json;
  std::string layer_type;
  // hf_config_json: "indexer" (DeepSeek-V3.2 / GLM-5's DSA indexer) selects that part of the
  // layer layer_type picks; "" the attention itself.
  std::string submodule;
};

// The values the server derived from a RopeConfig.
struct RopeDerived {
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;
  RopeStyle style = RopeStyle::kUnspecified;
  RopeScalingType scaling_type = RopeScalingType::kUnspecified;
  double effective_base = 0;
  double attention_factor = 1;
  bool attention_factor_applied = true;
  std::vector<double> inv_freq;  // omega_j, j = 0 .. d/2-1
  int64_t seq_len = 0;
  double yarn_low = 0;
  double yarn_high = 0;
  bool longrope_long_factors = false;
  double factor = 1;
  std::vector<std::string> warnings;  // hf_config_json: what transformers only warns about
  bool nope = false;                  // a layer without RoPE: q/k pass through
  std::string layer_type;             // hf_config_json: the layer type used
  std::string model_type;             // hf_config_json: whose defaults applied
  std::string submodule;              // hf_config_json: the sub-module used ("" : the attention)
};

// A value read from a config.json and where it came from (posenc.proto RopeValueSource).
struct RopeValueSource {
  std::string name;    // "head_dim", "base", "rotary_dim", "pairing", "scaling.factor", ...
  std::string key;     // the key path read ("text_config.rope_theta"), or the derivation
  std::string origin;  // "file", "nested config (text_config)", "architecture default (...)"
  std::string value;   // the value used, as text
};

// A per-position q scale besides the rotation: q at position p times
// log(floor((p + position_offset) / floor_scale) + 1) * attn_scale + 1 (posenc.proto
// AttentionTemperatureTuning: Llama 4's attention temperature tuning, offset 1, or Ministral 3 /
// Mistral 4's llama_4_scaling_beta, offset 0); the caller applies it.
struct AttentionTemperatureTuning {
  double floor_scale = 0;
  double attn_scale = 0;
  double position_offset = 0;
  std::string key;  // "attn_temperature_tuning" or "llama_4_scaling_beta"
};

// DescribeRope: the layers that share one RoPE (posenc.proto RopeLayerGroup).
struct RopeLayerGroup {
  std::vector<int64_t> layers;          // layer indices; empty when the file does not give them
  std::string layer_type;               // "" when the model does not name its layer types
  RopeDerived derived;                  // head_dim, rotary_dim, style, scaling, inv_freq, nope, ...
  double base = 0;                      // b as read (rope_theta or the architecture's default)
  int64_t max_position_embeddings = 0;  // 0: not given
  int64_t original_max_position_embeddings = 0;  // the context the scaling extends; 0: unknown
  int64_t longrope_switch_seq_len = 0;  // LongRoPE: long_factor when seq_len > this; else 0
  // The multiplier of the softmax scale the model applies besides the rotation (DeepSeek YaRN:
  // mscale(factor, mscale_all_dim)^2); empty where posenc knows of none.
  std::optional<double> softmax_scale_multiplier;
  std::vector<int64_t> mrope_section;
  std::vector<std::string> warnings;
  std::optional<AttentionTemperatureTuning> attn_temperature_tuning;  // where the model scales q
  std::vector<RopeValueSource> sources;  // hf config: every value used and where it came from
};

// DescribeRope: a part of a layer with a RoPE of its own (posenc.proto RopeSubmodule; the DSA
// indexer of DeepSeek-V3.2 / GLM-5): the layer's frequencies, its own head, rotary width, pairing.
struct RopeSubmodule {
  std::string name;             // "indexer"
  std::vector<int64_t> layers;  // the layers that run it
  RopeDerived derived;          // head_dim, rotary_dim, style, inv_freq, ...
  int64_t rotary_offset = 0;    // its first rotary channel in its head
  std::vector<std::string> warnings;
  std::vector<RopeValueSource> sources;
};

struct DescribeRopeResult {
  std::string model_type;
  std::vector<RopeLayerGroup> groups;  // in order of first layer, a VL config's vision tower last
  std::vector<std::string> warnings;   // every group's, without duplicates
  int64_t num_layers = 0;              // 0: the file does not give it
  std::vector<RopeSubmodule> submodules;  // parts of the layers with a RoPE of their own
};

// Default COMPACT; FUSED_COS_SIN ([n, d] = cat(cos, sin), vLLM's cos_sin_cache) and COMPLEX
// ([n, d/2, 2] = (cos, sin) pairs, the real view of freqs_cis) come back in one table.
enum class RopeCacheLayout { kUnspecified, kCompact, kNeox, kGptj, kFusedCosSin, kComplex };

// RopeCache: cos(p*omega_j)*m and sin(p*omega_j)*m.
struct RopeCacheOptions {
  Positions positions;  // range, ids, cu_seqlens or attention_mask
  RopeConfig config;
  std::optional<DType> output_dtype;  // default FLOAT32
  RopeCacheLayout layout = RopeCacheLayout::kUnspecified;
  OutputPlacements output_shared_memory;  // outputs into shared memory, by name
};

// The one-table layouts come in their own field and leave cos and sin empty (no shape, no
// bytes), as the Python client's RopeCacheResult (cos_sin / freqs_cis, cos and sin None).
// freqs_cis is real (cos, sin) pairs in every output dtype: torch.view_as_complex of it, or
// numpy's .view(complex64) of a FLOAT32 one, is the complex table.
struct RopeCacheResult {
  Tensor cos;  // positions' shape + [d/2] (COMPACT) or + [d] (NEOX/GPTJ); empty for one table
  Tensor sin;
  RopeDerived derived;
  std::optional<Tensor> cos_sin;    // FUSED_COS_SIN: positions' shape + [d] = cat(cos, sin)
  std::optional<Tensor> freqs_cis;  // COMPLEX: positions' shape + [d/2, 2] = (cos, sin) pairs
};

enum class TensorLayout { kUnspecified, kBSHD, kBHSD, kTHD };  // default BSHD

// ApplyRope: rotates q (and k) by their positions; results in the input dtype.
struct ApplyRopeOptions {
  Tensor q;                 // rank 4 (BSHD, BHSD) or 3 (THD)
  std::optional<Tensor> k;  // same layout/batch/seq/head_dim/dtype as q; heads may differ
  Positions positions;
  RopeConfig config;
  TensorLayout layout = TensorLayout::kUnspecified;
  OutputPlacements output_shared_memory;  // outputs into shared memory, by name
};

struct ApplyRopeResult {
  Tensor q;
  std::optional<Tensor> k;  // set when the request had a k
  RopeDerived derived;
};

// RerotateKeys: keys rotated at `positions` moved to positions + delta by one exact rotation.
struct RerotateKeysOptions {
  Tensor k;             // rank 4 (BSHD, BHSD) or 3 (THD)
  Positions positions;  // where the keys are now
  // INT32/INT64: [] for all, [B] per sequence, [B, S] / [T] per token; M-RoPE: a leading [A].
  Tensor delta;
  RopeConfig config;
  TensorLayout layout = TensorLayout::kUnspecified;
};

struct RerotateKeysResult {
  Tensor k;
  RopeDerived derived;
};

// ---------------------------------------------------------------------------------------------
// Multimodal and vision positions.
// ---------------------------------------------------------------------------------------------
// posenc.proto MultimodalFamily; unspecified: from hf_config_json's model_type.
enum class MultimodalFamily { kUnspecified, kQwen2Vl, kQwen25Vl, kQwen3Vl, kGlm4v, kErnie45Vl };

// The special token ids (unset: the config.json's, else the family's published ones).
struct MultimodalTokenIds {
  std::optional<int64_t> image_token_id;
  std::optional<int64_t> video_token_id;
  std::optional<int64_t> vision_start_token_id;
  std::optional<int64_t> video_start_token_id;  // GLM-4V, ERNIE-4.5-VL
  std::optional<int64_t> video_end_token_id;    // GLM-4V, ERNIE-4.5-VL
};

// One span of a sequence given as spans: a text run, or an image / video with its grid in patches
// before merging (and, for a Qwen2.5-VL video, the seconds per temporal patch).
struct MultimodalSpan {
  enum class Kind { kText, kImage, kVideo };
  Kind kind = Kind::kText;
  int64_t text_tokens = 0;
  int64_t t = 0, h = 0, w = 0;
  std::optional<double> second_per_grid;

  static MultimodalSpan Text(int64_t n) { return {.kind = Kind::kText, .text_tokens = n}; }
  static MultimodalSpan Image(int64_t t, int64_t h, int64_t w) {
    return {.kind = Kind::kImage, .t = t, .h = h, .w = w};
  }
  static MultimodalSpan Video(int64_t t, int64_t h, int64_t w,
                              std::optional<double> second_per_grid = std::nullopt) {
    return {.kind = Kind::kVideo, .t = t, .h = h, .w = w, .second_per_grid = second_per_grid};
  }
};

// Decode steps: position_ids [3, B, K] = prompt_length + k + deltas[b].
struct MultimodalDecode {
  Tensor deltas;  // INT32/INT64 [B] or [B, 1]
  int64_t prompt_length = 0;
  int64_t num_steps = 1;
};

// MultimodalPositions: a prompt as token ids (+ grids) or as spans, or decode steps.
struct MultimodalPositionsOptions {
  std::string hf_config_json;  // model_type, vision_config, the token ids
  MultimodalFamily family = MultimodalFamily::kUnspecified;
  MultimodalTokenIds token_ids;
  std::optional<int64_t> spatial_merge_size;
  std::optional<double> tokens_per_second;
  std::optional<int64_t> temporal_merge_size;          // ERNIE-4.5-VL (default 2)
  std::optional<Tensor> input_ids;                     // INT32/INT64 [B, S]
  std::optional<Tensor> attention_mask;                // [B, S]
  std::optional<Tensor> image_grid_thw;                // [N, 3]
  std::optional<Tensor> video_grid_thw;                // [M, 3]
  std::optional<Tensor> second_per_grid_ts;            // FLOAT32/FLOAT64 [M] (Qwen2.5-VL)
  std::vector<std::vector<MultimodalSpan>> sequences;  // instead of input_ids
  std::optional<MultimodalDecode> decode;              // instead of a prompt
};

struct MultimodalPositionsResult {
  Tensor position_ids;                          // INT64 [3, B, S] (decode: [3, B, K])
  std::optional<Tensor> mrope_position_deltas;  // INT64 [B, 1]; absent for decode
  MultimodalFamily family = MultimodalFamily::kUnspecified;
  std::string source;  // the transformers function the rule repeats
};

enum class VisionTower { kUnspecified, kQwen, kPixtral, kLlama4 };

// VisionPositions: a vision tower's 2-D patch positions (ids [2, L] for RopeCache/ApplyRope with
// RopeConfig{hf_config_json, layer_type "vision"}).
struct VisionPositionsOptions {
  std::string hf_config_json;
  VisionTower tower = VisionTower::kUnspecified;
  std::optional<Tensor> grid;  // QWEN [N, 3] (t, h, w); PIXTRAL [N, 2]; none for LLAMA4
  std::optional<int64_t> spatial_merge_size;
  std::optional<int64_t> window_size;  // QWEN: 0 = no window order
  std::optional<int64_t> patch_size;
  std::optional<int64_t> image_size;
};

struct VisionPositionsResult {
  Tensor position_ids;                      // INT64 [2, L]
  std::optional<Tensor> flat_ids;           // PIXTRAL: [L]
  std::optional<Tensor> window_index;       // QWEN windows: [L / m^2]
  std::optional<Tensor> cu_window_seqlens;  // QWEN windows: [W + 1]
  VisionTower tower = VisionTower::kUnspecified;
};

// ---------------------------------------------------------------------------------------------
// Attention biases and relative embeddings.
// ---------------------------------------------------------------------------------------------
struct AlibiSlopesOptions {
  int64_t num_heads = 0;
  std::optional<double> max_bias;         // default 8
  std::optional<DType> output_dtype;      // default FLOAT32
  OutputPlacements output_shared_memory;  // outputs into shared memory, by name
};

enum class AlibiMode { kUnspecified, kCausal, kSymmetric, kBloom };  // default CAUSAL
enum class BiasForm { kUnspecified, kFull, kCompact, kBuckets };     // default FULL

// AlibiBias: query i at query_offset + i, key j at j.
struct AlibiBiasOptions {
  int64_t num_heads = 0;
  int64_t q_len = 0;
  int64_t k_len = 0;
  std::optional<int64_t> query_offset;  // default k_len - q_len
  AlibiMode mode = AlibiMode::kUnspecified;
  FutureMode future = FutureMode::kUnspecified;
  std::optional<double> max_bias;          // default 8
  BiasForm form = BiasForm::kUnspecified;  // FULL or COMPACT (see ExpandToeplitz)
  std::optional<Tensor> attention_mask;    // BLOOM only: INT32/INT64 [B, k_len]
  std::optional<DType> output_dtype;       // default FLOAT32
  OutputPlacements output_shared_memory;   // outputs into shared memory, by name
};

struct AlibiBiasResult {
  Tensor bias;    // [H,q,k], [B,H,q,k], or a compact form
  Tensor slopes;  // [H], FLOAT64
};

// RelativeBias (T5): query i at query_offset + i, key j at key_offset + j.
struct RelativeBiasOptions {
  int64_t q_len = 0;
  int64_t k_len = 0;
  std::optional<int64_t> query_offset;  // default k_len - q_len
  std::optional<int64_t> key_offset;    // default 0
  std::optional<bool> bidirectional;    // default true
  std::optional<int64_t> num_buckets;   // default 32
  std::optional<int64_t> max_distance;  // default 128
  std::optional<Tensor> table_inline;   // [num_buckets, H]; or table_name; none for BUCKETS
  std::string table_name;
  BiasForm form = BiasForm::kUnspecified;  // FULL, COMPACT or BUCKETS (INT32 [q, k])
  std::optional<DType> output_dtype;       // default FLOAT32 (BUCKETS: INT32, the only choice)
  OutputPlacements output_shared_memory;   // outputs into shared memory, by name
};

// RelativeEmbedding (Shaw et al.): entry (i, j) = table[clip(kpos - qpos, -K, K) + K].
struct RelativeEmbeddingOptions {
  int64_t q_len = 0;
  int64_t k_len = 0;
  int64_t max_relative = 0;            // K >= 0
  std::optional<Tensor> table_inline;  // [2K+1, D]; or table_name
  std::string table_name;
  std::optional<int64_t> query_offset;    // default k_len - q_len
  std::optional<int64_t> key_offset;      // default 0
  std::optional<DType> output_dtype;      // default FLOAT32
  OutputPlacements output_shared_memory;  // outputs into shared memory, by name
};

// ---------------------------------------------------------------------------------------------
// Server information and health.
// ---------------------------------------------------------------------------------------------
struct ServerInfo {
  struct Backend {
    std::string name;    // "reference", "cpu", "cuda"
    std::string detail;  // ISA in use, device names
    bool is_default = false;
    // cuda: calls whose outputs total fewer bytes run on the cpu backend (0 otherwise).
    int64_t small_call_bytes = 0;
  };
  // A CUDA device the server sees.
  struct Device {
    int index = 0;
    std::string name;  // "NVIDIA H100 80GB HBM3"
    int64_t total_memory_bytes = 0;
    std::string compute_capability;  // "9.0"
    std::string driver_version;      // CUDA version the driver supports
    std::string runtime_version;     // CUDA runtime the server was built with
    bool in_use = false;             // the cuda backend runs on it
  };
  struct Table {
    std::string name;
    DType dtype = DType::kFloat32;
    std::vector<int64_t> shape;
  };
  std::string version;
  std::string build;
  std::vector<Backend> backends;
  int64_t max_message_bytes = 0;
  int64_t max_output_elements = 0;
  int64_t max_inflight_bytes = 0;  // admission bounds; 0: unbounded
  int64_t max_heavy_calls = 0;
  std::vector<Table> tables;
  bool cuda_built_in = false;   // the server was built with the CUDA backend
  std::vector<Device> devices;  // empty: no CUDA in the build, or no device
  // Shared memory: registrations accepted (--allow_shared_memory) and their bounds.
  bool shared_memory_allowed = false;
  int64_t max_shared_memory_regions = 0;
  int64_t max_shared_memory_bytes = 0;
};

// ---------------------------------------------------------------------------------------------
// Shared memory (posenc.proto "Shared memory"; SharedMemoryRegion does all of this for you).
// ---------------------------------------------------------------------------------------------
// A range [offset, offset + byte_size) of POSIX shared-memory object `key` ("/name", as
// shm_open takes it), registered under `name`. Registrations are per server process: each
// replica has its own, and references name a region of the replica that serves the call.
struct SharedMemoryRegistration {
  std::string name;
  std::string key;
  int64_t offset = 0;
  int64_t byte_size = 0;
};

// GPU callers: [0, byte_size) of device memory another process of this machine allocated and
// exported (cudaIpcGetMemHandle: `raw_handle` is its 64 bytes) on CUDA device `device_id`,
// registered under `name`. The server must run --backend=cuda on that device and with
// --allow_shared_memory; references (SharedMemoryRef) name it as they name a system region, for
// the tensors the device computes on (q, k, x and the outputs the backend writes). The exporting
// process keeps the allocation alive until it unregisters the region.
struct CudaSharedMemoryRegistration {
  std::string name;
  std::string raw_handle;
  int64_t device_id = 0;
  int64_t byte_size = 0;
};

enum class SharedMemoryKind { kSystem, kCuda };

// SharedMemoryStatus: one registered region.
struct SharedMemoryRegionStatus {
  std::string name;
  std::string key;  // "" for a CUDA region
  int64_t offset = 0;
  int64_t byte_size = 0;
  bool broken = false;  // truncated by its owner while in use: unregister it
  SharedMemoryKind kind = SharedMemoryKind::kSystem;
  int64_t device_id = -1;  // a CUDA region's device
};

// grpc.health.v1.HealthCheckResponse.ServingStatus.
enum class HealthStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };
std::string_view HealthStatusName(HealthStatus status);  // "SERVING", ...

// ---------------------------------------------------------------------------------------------
// AnalyzeEncoding: the properties of an encoding over a position range (posenc.proto).
// ---------------------------------------------------------------------------------------------
enum class AnalysisProperty {
  kUnspecified,
  kUniqueness,
  kBounds,
  kRelative,
  kDecay,
  kExtrapolation,
  kSimilarity,
};

// ALiBi analysed: the bias of a key p tokens before the query, per head.
struct AlibiAnalysis {
  int64_t num_heads = 0;
  std::optional<double> max_bias;  // default 8
  AlibiMode mode = AlibiMode::kUnspecified;
  FutureMode future = FutureMode::kUnspecified;
};

// T5 analysed: relative position -p per head (without a table: the bucket id).
struct T5Analysis {
  std::optional<bool> bidirectional;    // default true
  std::optional<int64_t> num_buckets;   // default 32
  std::optional<int64_t> max_distance;  // default 128
  std::optional<Tensor> table_inline;   // [num_buckets, H]; or table_name; or neither
  std::string table_name;
};

// Exactly one of sinusoidal, learned, config, alibi and t5.
struct AnalyzeEncodingOptions {
  std::optional<SinusoidalParams> sinusoidal;
  std::optional<LearnedTable> learned;
  std::optional<RopeConfig> config;
  std::optional<AlibiAnalysis> alibi;
  std::optional<T5Analysis> t5;
  int64_t start = 0;  // positions start .. start + count - 1
  int64_t count = 0;
  std::vector<AnalysisProperty> properties;   // empty: all six
  std::optional<DType> collision_dtype;       // FLOAT16 or BFLOAT16: look for the first collision
  std::optional<int64_t> uniqueness_offsets;  // K past 4096 positions, default 64
  std::vector<int64_t> distances;             // RELATIVE/DECAY's k; empty: 1, 2, 4, ..
  std::optional<int64_t> samples;             // DECAY, default 256
  uint64_t seed = 0;
  std::optional<int64_t> window;      // SIMILARITY, default 256
  std::optional<int64_t> max_cells;   // SIMILARITY, default 256
  std::optional<Tensor> embeddings;   // [n, D] token embeddings (q/k rows); absent: random
  std::vector<RopeScaling> scalings;  // EXTRAPOLATION; empty: the config's and the default
  std::optional<Tensor> keys;         // DECAY: key rows, the shape of `embeddings`; absent: k = q
};

struct AnalysisSummary {
  double min = 0, max = 0, mean = 0;
  int64_t argmin = -1, argmax = -1;  // positions
};

struct UniquenessAnalysis {
  bool exact = false;
  std::string method;
  double min_distance = 0;
  int64_t min_p = -1, min_q = -1;
  bool collision_searched = false;
  std::optional<DType> collision_dtype;
  bool collision_found = false;
  int64_t collision_p = -1, collision_q = -1;
};

struct BoundsAnalysis {
  AnalysisSummary values;
  AnalysisSummary norms;
};

struct RotationFit {
  int64_t distance = 0;
  double residual = 0;
  double worst_pair_residual = 0;
  int64_t worst_pair = -1;
  double max_angle_error = 0;
};

struct BiasStructure {
  double max_shift_deviation = 0;
  double max_shift_deviation_row_centered = 0;
  bool depends_on_distance_only = false;
  int64_t window = 0;
  std::vector<int64_t> bucket_edges;
  std::string note;
};

struct RelativeAnalysis {
  bool applicable = true;
  std::string note;
  int64_t pairs = 0;
  std::vector<RotationFit> rotations;
  std::optional<BiasStructure> bias;
};

struct AnalysisCurve {
  std::string label;
  std::vector<double> x, y;
};

struct DecayAnalysis {
  std::string method;
  std::vector<AnalysisCurve> curves;
  int64_t decay_stops_at = -1;
  int64_t samples = 0;
  uint64_t seed = 0;
  std::string note;
};

struct ExtrapolationSeries {
  std::string scaling;
  std::vector<AnalysisCurve> curves;
};

struct ExtrapolationAnalysis {
  int64_t original_context = 0;
  std::vector<ExtrapolationSeries> series;
  std::string note;
};

struct SimilarityAnalysis {
  int64_t window_start = 0, window = 0, rows = 0, cols = 0, cell = 1;
  std::vector<double> matrix;  // rows x cols
  double add_norm_change = 0, add_angle_degrees = 0;
  double concat_norm_change = 0, concat_angle_degrees = 0;
  bool random_embeddings = true;
  std::string note;
};

// One section per requested property.
struct AnalyzeEncodingResult {
  std::string family;  // "sinusoidal", "learned", "rope", "alibi", "t5"
  int64_t width = 0;
  std::optional<UniquenessAnalysis> uniqueness;
  std::optional<BoundsAnalysis> bounds;
  std::optional<RelativeAnalysis> relative;
  std::optional<DecayAnalysis> decay;
  std::optional<ExtrapolationAnalysis> extrapolation;
  std::optional<SimilarityAnalysis> similarity;
};

// ---------------------------------------------------------------------------------------------
// The client.
// ---------------------------------------------------------------------------------------------
struct ClientOptions {
  // Deadline of every call, measured from its start.
  std::chrono::milliseconds timeout{30'000};
  // Largest request and response message, bytes (gRPC's send/receive limits; the server's
  // limit is reported by GetServerInfo).
  int64_t max_message_bytes = int64_t{256} << 20;
  // Retry calls that fail with UNAVAILABLE (every RPC is idempotent), through the gRPC service
  // config: up to `max_attempts` attempts with exponential backoff. 1 disables retries.
  int max_attempts = 3;
  // gRPC load-balancing policy over the addresses the target resolves to ("round_robin" spreads
  // calls over the replicas behind a DNS name; "pick_first" is gRPC's default).
  std::string load_balancing_policy = "round_robin";
  // Client-side health checking (round_robin): the channel watches grpc.health.v1 on every
  // address and sends no new call to one that is not SERVING, e.g. a replica draining after
  // SIGTERM, so calls move to the others before the draining replica refuses them.
  bool health_check = true;
  // TLS: when `use_tls`, the channel uses SSL credentials with these PEM strings (empty root
  // certificates: the system's roots; a client key/cert pair enables mTLS).
  bool use_tls = false;
  std::string tls_root_certs;
  std::string tls_client_key;
  std::string tls_client_cert;
  // HTTP/2 keepalive pings every `keepalive_time` (0: off), also without calls in flight; a
  // connection whose ping is not answered within `keepalive_timeout` is closed (and calls move
  // to another address). Servers accept pings at most every 5 minutes unless configured.
  std::chrono::milliseconds keepalive_time{0};
  std::chrono::milliseconds keepalive_timeout{20'000};
  // Split requests whose tensors or outputs would exceed the message limit (see above).
  bool split_requests = true;
  // Fetch biases in the compact form and expand them here when the form is left unspecified.
  bool compact_biases = true;
};

// Per-call settings.
struct CallOptions {
  // This call's deadline, measured from its start; nullopt: ClientOptions::timeout.
  std::optional<std::chrono::milliseconds> timeout;
};

// Process-wide, for callers moving large tensors in a loop (issue #20): the allocator keeps freed
// memory for the next calls' buffers (the responses' tensors) instead of returning it to the
// system at once, so that they reuse pages already faulted in rather than pages the kernel must
// zero first (on glibc: one arena, no separate mappings for large blocks, up to `retain_bytes`
// free at the heap's top). The process's resident memory then stays at its peak until
// ReleaseFreedMemory. Call once at start-up, before other threads exist; false (nothing changed)
// for `retain_bytes` <= 0 or another allocator. posenc-server does the same by default
// (--retain_free_memory_bytes).
bool RetainFreedMemory(int64_t retain_bytes);
// Returns the process's free memory to the system now.
void ReleaseFreedMemory();

// The result of an asynchronous call.
template <typename T>
using Future = std::future<absl::StatusOr<T>>;

class Client {
 public:
  // Creates a channel to `target` ("host:port", "dns:///name:port", "unix:/path", ...). Does not
  // wait for the server: the first call connects (and fails UNAVAILABLE if it cannot).
  // INVALID_ARGUMENT for an empty target or invalid options.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& target,
                                                         const ClientOptions& options = {});
  // Uses an existing channel (e.g. PosencServer::InProcessChannel()); options other than
  // `timeout` are the channel's business and ignored.
  static std::unique_ptr<Client> FromChannel(std::shared_ptr<grpc::Channel> channel,
                                             const ClientOptions& options = {});

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  absl::StatusOr<Tensor> Sinusoidal(const SinusoidalOptions& options,
                                    const CallOptions& call = {}) const;
  absl::StatusOr<Tensor> AddPositionEncoding(const AddPositionEncodingOptions& options,
                                             const CallOptions& call = {}) const;
  absl::StatusOr<RopeCacheResult> RopeCache(const RopeCacheOptions& options,
                                            const CallOptions& call = {}) const;
  absl::StatusOr<ApplyRopeResult> ApplyRope(const ApplyRopeOptions& options,
                                            const CallOptions& call = {}) const;
  absl::StatusOr<Tensor> AlibiSlopes(const AlibiSlopesOptions& options,
                                     const CallOptions& call = {}) const;
  absl::StatusOr<AlibiBiasResult> AlibiBias(const AlibiBiasOptions& options,
                                            const CallOptions& call = {}) const;
  absl::StatusOr<Tensor> RelativeBias(const RelativeBiasOptions& options,
                                      const CallOptions& call = {}) const;
  absl::StatusOr<Tensor> RelativeEmbedding(const RelativeEmbeddingOptions& options,
                                           const CallOptions& call = {}) const;
  absl::StatusOr<ServerInfo> GetServerInfo(const CallOptions& call = {}) const;
  // Every layer's RoPE of a model: `config` is usually {.hf_config_json = text} (layer_type and
  // submodule empty); a VL config's vision tower is the last group, the layers' sub-modules
  // (DeepSeek-V3.2 / GLM-5's indexer) are in `submodules`; an explicit config gives one group.
  absl::StatusOr<DescribeRopeResult> DescribeRope(const RopeConfig& config,
                                                  const CallOptions& call = {}) const;
  absl::StatusOr<RerotateKeysResult> RerotateKeys(const RerotateKeysOptions& options,
                                                  const CallOptions& call = {}) const;
  absl::StatusOr<MultimodalPositionsResult> MultimodalPositions(
      const MultimodalPositionsOptions& options, const CallOptions& call = {}) const;
  absl::StatusOr<VisionPositionsResult> VisionPositions(const VisionPositionsOptions& options,
                                                        const CallOptions& call = {}) const;
  // The properties of an encoding over a position range.
  absl::StatusOr<AnalyzeEncodingResult> AnalyzeEncoding(const AnalyzeEncodingOptions& options,
                                                        const CallOptions& call = {}) const;

  // The same calls, asynchronous: the call is on its way when the method returns (a split
  // request's pieces are sent from a thread of its own). The Client must outlive the futures.
  Future<Tensor> SinusoidalAsync(SinusoidalOptions options, const CallOptions& call = {}) const;
  Future<Tensor> AddPositionEncodingAsync(AddPositionEncodingOptions options,
                                          const CallOptions& call = {}) const;
  Future<RopeCacheResult> RopeCacheAsync(RopeCacheOptions options,
                                         const CallOptions& call = {}) const;
  Future<ApplyRopeResult> ApplyRopeAsync(ApplyRopeOptions options,
                                         const CallOptions& call = {}) const;
  Future<Tensor> AlibiSlopesAsync(AlibiSlopesOptions options, const CallOptions& call = {}) const;
  Future<AlibiBiasResult> AlibiBiasAsync(AlibiBiasOptions options,
                                         const CallOptions& call = {}) const;
  Future<Tensor> RelativeBiasAsync(RelativeBiasOptions options, const CallOptions& call = {}) const;
  Future<Tensor> RelativeEmbeddingAsync(RelativeEmbeddingOptions options,
                                        const CallOptions& call = {}) const;
  Future<ServerInfo> GetServerInfoAsync(const CallOptions& call = {}) const;

  // Shared memory. RegisterSharedMemory: FAILED_PRECONDITION when the server runs without
  // --allow_shared_memory, ALREADY_EXISTS for a taken name, NOT_FOUND for a missing object,
  // INVALID_ARGUMENT for a range outside it, RESOURCE_EXHAUSTED over the server's bounds.
  // UnregisterSharedMemory: "" unregisters every region of the server (calls using one finish
  // first); NOT_FOUND for an unknown name. SharedMemoryStatus: "" lists every region (sorted by
  // name); NOT_FOUND for an unknown name.
  absl::Status RegisterSharedMemory(const SharedMemoryRegistration& region,
                                    const CallOptions& call = {}) const;
  absl::Status UnregisterSharedMemory(const std::string& name, const CallOptions& call = {}) const;
  // RegisterCudaSharedMemory: as RegisterSharedMemory, for device memory (CUDA IPC);
  // FAILED_PRECONDITION when the server does not compute on that device (--backend=cuda,
  // --cuda_device), INVALID_ARGUMENT naming raw_handle for a handle CUDA refuses.
  absl::Status RegisterCudaSharedMemory(const CudaSharedMemoryRegistration& region,
                                        const CallOptions& call = {}) const;
  std::future<absl::Status> RegisterCudaSharedMemoryAsync(
      const CudaSharedMemoryRegistration& region, const CallOptions& call = {}) const;
  absl::StatusOr<std::vector<SharedMemoryRegionStatus>> SharedMemoryStatus(
      const std::string& name = "", const CallOptions& call = {}) const;
  std::future<absl::Status> RegisterSharedMemoryAsync(const SharedMemoryRegistration& region,
                                                      const CallOptions& call = {}) const;
  std::future<absl::Status> UnregisterSharedMemoryAsync(const std::string& name,
                                                        const CallOptions& call = {}) const;
  Future<std::vector<SharedMemoryRegionStatus>> SharedMemoryStatusAsync(
      const std::string& name = "", const CallOptions& call = {}) const;

  // grpc.health.v1.Health/Check for `service` ("" = the server as a whole). The call itself
  // failing (e.g. UNAVAILABLE, or UNIMPLEMENTED without a health service) is an error status;
  // otherwise the serving status, whatever it is.
  absl::StatusOr<HealthStatus> Health(const std::string& service = "",
                                      const CallOptions& call = {}) const;

  // The channel every call uses.
  std::shared_ptr<grpc::Channel> channel() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace posenc::client

#endif  // POSENC_CLIENT_CLIENT_H_
