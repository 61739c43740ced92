// Malformed requests of every RPC: each must fail with the right code and a message naming the
// offending field, both through the handlers and through a real in-process server (which must
// keep serving afterwards).
#include <grpcpp/grpcpp.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/errors_internal.h"
#include "google/protobuf/text_format.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "posenc/errors.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/handlers.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

using testing::FloatTensor, testing::Int64Tensor, testing::MakeTensor, testing::Parse,
    testing::TestContext;

using AnyRequest =
    std::variant<v1::SinusoidalRequest, v1::AddPositionEncodingRequest, v1::RopeCacheRequest,
                 v1::ApplyRopeRequest, v1::AlibiSlopesRequest, v1::AlibiBiasRequest,
                 v1::RelativeBiasRequest, v1::RelativeEmbeddingRequest, v1::RerotateKeysRequest,
                 v1::MultimodalPositionsRequest, v1::VisionPositionsRequest,
                 v1::AnalyzeEncodingRequest>;

struct BadCase {
  std::string name;
  std::function<AnyRequest()> build;
  grpc::StatusCode code;
  std::string substr;  // the message must contain it (the offending field)
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

constexpr auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;

// ----- valid base requests, each broken in one place by a case ------------------------------

v1::ApplyRopeRequest ValidApplyRope() {
  v1::ApplyRopeRequest r;
  *r.mutable_q() = FloatTensor({1, 4, 2, 8});
  *r.mutable_k() = FloatTensor({1, 4, 1, 8}, 0.5f);
  return r;
}

v1::RopeCacheRequest ValidRopeCache() {
  return Parse<v1::RopeCacheRequest>("positions { range { count: 8 } } config { head_dim: 64 }");
}

v1::SinusoidalRequest ValidSinusoidal() {
  return Parse<v1::SinusoidalRequest>("positions { range { count: 16 } } params { dim: 32 }");
}

v1::AddPositionEncodingRequest ValidAddPe() {
  auto r = Parse<v1::AddPositionEncodingRequest>("sinusoidal {}");
  *r.mutable_x() = FloatTensor({2, 4, 8});
  return r;
}

v1::AlibiSlopesRequest ValidAlibiSlopes() { return Parse<v1::AlibiSlopesRequest>("num_heads: 8"); }

v1::AlibiBiasRequest ValidAlibiBias() {
  return Parse<v1::AlibiBiasRequest>("num_heads: 4 q_len: 3 k_len: 5");
}

v1::RelativeBiasRequest ValidRelativeBias() {
  auto r = Parse<v1::RelativeBiasRequest>("q_len: 4 k_len: 4");
  *r.mutable_table_inline() = FloatTensor({32, 2});
  return r;
}

v1::RelativeEmbeddingRequest ValidRelativeEmbedding() {
  auto r = Parse<v1::RelativeEmbeddingRequest>("q_len: 3 k_len: 3 max_relative: 2");
  *r.mutable_table_inline() = FloatTensor({5, 4});
  return r;
}

v1::RerotateKeysRequest ValidRerotateKeys() {
  auto r = Parse<v1::RerotateKeysRequest>("config { head_dim: 8 }");
  *r.mutable_k() = FloatTensor({1, 4, 1, 8});
  *r.mutable_delta() = Int64Tensor({}, {3});
  return r;
}

// Qwen2-VL: text, <vision_start>, an image of grid [1, 4, 4] (2x2 merged: 4 tokens), text.
v1::MultimodalPositionsRequest ValidMultimodalPositions() {
  auto r = Parse<v1::MultimodalPositionsRequest>("family: MULTIMODAL_FAMILY_QWEN2_VL");
  *r.mutable_input_ids() =
      Int64Tensor({1, 8}, {100, 151652, 151655, 151655, 151655, 151655, 200, 201});
  *r.mutable_image_grid_thw() = Int64Tensor({1, 3}, {1, 4, 4});
  return r;
}

// The same prompt without its input_ids (a case gives it as sequences).
void NoInputIds(v1::MultimodalPositionsRequest& r) {
  r.clear_input_ids();
  r.clear_image_grid_thw();
}

// ERNIE-4.5-VL: text, <video_start>, 4 video tokens, <video_end>, and a video grid [2, 4, 4]
// (t merged by 2: 1 frame of 2 x 2 tokens).
void Ernie(v1::MultimodalPositionsRequest& r) {
  r.set_family(v1::MULTIMODAL_FAMILY_ERNIE4_5_VL);
  *r.mutable_input_ids() =
      Int64Tensor({1, 7}, {100, 101306, 103367, 103367, 103367, 103367, 101307});
  r.clear_image_grid_thw();
  *r.mutable_video_grid_thw() = Int64Tensor({1, 3}, {2, 4, 4});
}

// The decode form of the same request: no prompt, decode steps after it.
void Decode(v1::MultimodalPositionsRequest& r) {
  r.clear_input_ids();
  r.clear_image_grid_thw();
  *r.mutable_decode()->mutable_deltas() = Int64Tensor({1}, {-2});
  r.mutable_decode()->set_prompt_length(8);
  r.mutable_decode()->set_num_steps(2);
}

v1::VisionPositionsRequest ValidVisionPositions() {
  auto r = Parse<v1::VisionPositionsRequest>("tower: VISION_TOWER_QWEN");
  *r.mutable_grid() = Int64Tensor({1, 3}, {1, 4, 4});
  return r;
}

v1::AnalyzeEncodingRequest ValidAnalyze() {
  return Parse<v1::AnalyzeEncodingRequest>(
      "sinusoidal { dim: 8 } count: 16 properties: [ANALYSIS_PROPERTY_UNIQUENESS, "
      "ANALYSIS_PROPERTY_BOUNDS, ANALYSIS_PROPERTY_RELATIVE] collision_dtype: DTYPE_BFLOAT16");
}

// How a case breaks its valid base request: `edit` first (only for what text format cannot say:
// a tensor's raw bytes, a changed element of a repeated field, a cleared field), then `text`,
// protobuf text format merged into the request. Merged, not parsed and MergeFrom'd: a merge of
// `head_dim: 0` sets the field to 0, where MergeFrom skips a proto3 field at its default.
template <typename Request>
struct Mutation {
  Mutation(const char* text) : text(text) {}             // NOLINT(google-explicit-constructor)
  Mutation(std::string text) : text(std::move(text)) {}  // NOLINT(google-explicit-constructor)
  template <typename Edit, typename = std::enable_if_t<std::is_invocable_v<Edit&, Request&>>>
  Mutation(Edit edit, std::string text = "")  // NOLINT(google-explicit-constructor)
      : edit(std::move(edit)), text(std::move(text)) {}

  std::function<void(Request&)> edit;
  std::string text;
};

// Makes the cases of one RPC from its valid base request: `Apply("name", "config { base: 0 }",
// "config.base")`.
template <typename Request>
struct CasesOn {
  Request (*base)();

  BadCase operator()(std::string name, Mutation<Request> mutation, std::string substr,
                     grpc::StatusCode code = kInvalid) const {
    return BadCase{std::move(name),
                   [base = base, mutation = std::move(mutation)]() -> AnyRequest {
                     Request r = base();
                     if (mutation.edit) mutation.edit(r);
                     EXPECT_TRUE(google::protobuf::TextFormat::MergeFromString(mutation.text, &r))
                         << mutation.text;
                     return r;
                   },
                   code, std::move(substr)};
  }
};

constexpr CasesOn<v1::ApplyRopeRequest> Apply{ValidApplyRope};
constexpr CasesOn<v1::RopeCacheRequest> Cache{ValidRopeCache};
constexpr CasesOn<v1::SinusoidalRequest> Sin{ValidSinusoidal};
constexpr CasesOn<v1::AddPositionEncodingRequest> AddPe{ValidAddPe};
constexpr CasesOn<v1::AlibiSlopesRequest> Slopes{ValidAlibiSlopes};
constexpr CasesOn<v1::AlibiBiasRequest> Alibi{ValidAlibiBias};
constexpr CasesOn<v1::RelativeBiasRequest> T5{ValidRelativeBias};
constexpr CasesOn<v1::RelativeEmbeddingRequest> RelEmb{ValidRelativeEmbedding};
constexpr CasesOn<v1::RerotateKeysRequest> Rerotate{ValidRerotateKeys};
constexpr CasesOn<v1::MultimodalPositionsRequest> Mm{ValidMultimodalPositions};
constexpr CasesOn<v1::VisionPositionsRequest> Vision{ValidVisionPositions};
constexpr CasesOn<v1::AnalyzeEncodingRequest> Analyze{ValidAnalyze};

constexpr char kLlamaJson[] =
    R"({"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
        "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})";

// The text of a RopeConfig given by a Hugging Face config.json, with `config` (the explicit
// fields beside it; by default head_dim 0, so that the JSON's is the only one).
std::string HfConfig(const std::string& json, const std::string& config = "head_dim: 0") {
  return absl::StrCat("config { ", config, " hf_config_json: \"", absl::CEscape(json), "\" }");
}

// ApplyRope on packed THD tokens: q [4 tokens, 2 heads, 8], no k (cu_seqlens left to the case).
void PackedThd(v1::ApplyRopeRequest& r) {
  *r.mutable_q() = FloatTensor({4, 2, 8});
  r.clear_k();
  r.set_layout(v1::TENSOR_LAYOUT_THD);
}

// An edit putting `tensor` at `path` ("positions.ids"), replacing what is there: a tensor is
// raw bytes, which text format would only spell as escapes (and merge, not replace).
std::function<void(google::protobuf::Message&)> Put(std::string path, v1::Tensor tensor) {
  return [path = std::move(path), tensor = std::move(tensor)](google::protobuf::Message& request) {
    google::protobuf::Message* at = &request;
    for (absl::string_view name : absl::StrSplit(path, '.')) {
      const google::protobuf::FieldDescriptor* field =
          at->GetDescriptor()->FindFieldByName(std::string(name));
      ASSERT_NE(field, nullptr) << path;
      at = at->GetReflection()->MutableMessage(at, field);
    }
    at->CopyFrom(tensor);
  };
}

std::vector<BadCase> AllCases() {
  using R = v1::ApplyRopeRequest;
  using A = v1::AddPositionEncodingRequest;
  using T = v1::RelativeBiasRequest;
  using E = v1::AnalyzeEncodingRequest;
  return {
      // ----- tensors on the wire -----
      Apply(
          "q_byte_length_mismatch", [](R& r) { r.mutable_q()->mutable_data()->resize(100); },
          "q: data has 100 bytes, expected 256 (FLOAT32 [1, 4, 2, 8])"),
      Apply("q_dtype_unspecified", "q { dtype: DTYPE_UNSPECIFIED }", "q.dtype"),
      Apply("q_dtype_int32", "q { dtype: DTYPE_INT32 }", "q.dtype"),
      Apply("q_dtype_unknown_number", "q { dtype: 99 }", "q.dtype"),
      Apply("q_rank_3_for_bshd", Put("q", FloatTensor({4, 2, 8})), "q"),
      Apply(
          "q_zero_dim", [](R& r) { r.mutable_q()->set_shape(1, 0); }, "q.shape[1]"),
      Apply(
          "q_negative_dim", [](R& r) { r.mutable_q()->set_shape(0, -1); }, "q.shape[0]"),
      Apply("q_shape_overflow",  // 2^20 x 4
            {[](R& r) { r.mutable_q()->clear_shape(); },
             "q { shape: [1048576, 1048576, 1048576, 1048576] }"},
            "q.shape"),
      Apply("k_dtype_mismatch",
            Put("k", MakeTensor(v1::DTYPE_FLOAT64, {1, 4, 1, 8}, std::vector<double>(32, 0.5))),
            "k"),
      Apply("k_batch_mismatch", Put("k", FloatTensor({2, 4, 1, 8})), "k"),
      Apply(
          "k_empty_message", [](R& r) { r.mutable_k()->Clear(); }, "k.dtype"),
      Apply("layout_unknown", "layout: 9", "layout"),
      // ----- rotary config -----
      Apply("odd_rotary_dim", "config { rotary_dim: 5 }", "config.rotary_dim"),
      Apply("rotary_dim_over_head_dim", "config { rotary_dim: 16 }", "config.rotary_dim"),
      Apply("head_dim_mismatch_with_q", "config { head_dim: 16 }", "config.head_dim"),
      Apply("head_dim_negative", "config { head_dim: -8 }", "config.head_dim"),
      Apply("base_zero", "config { base: 0 }", "config.base"),
      Apply("base_negative", "config { base: -10 }", "config.base"),
      Apply("base_one", "config { base: 1 }", "config.base"),
      Apply("base_nan", "config { base: nan }", "config.base"),
      Apply("base_inf", "config { base: inf }", "config.base"),
      Apply("style_unknown", "config { style: 7 }", "config.style"),
      Apply("scaling_type_unknown", "config { scaling { type: 42 } }", "config.scaling.type"),
      Apply("linear_factor_nan", "config { scaling { type: ROPE_SCALING_LINEAR factor: nan } }",
            "config.scaling.factor"),
      Apply("linear_factor_zero", "config { scaling { type: ROPE_SCALING_LINEAR factor: 0 } }",
            "config.scaling.factor"),
      Apply("linear_factor_negative", "config { scaling { type: ROPE_SCALING_LINEAR factor: -2 } }",
            "config.scaling.factor"),
      Apply("llama3_missing_low_freq_factor",
            "config { scaling { type: ROPE_SCALING_LLAMA3 factor: 8 high_freq_factor: 4"
            "                   original_max_position_embeddings: 8192 } }",
            "config.scaling.low_freq_factor"),
      Apply("llama3_high_below_low",
            "config { scaling { type: ROPE_SCALING_LLAMA3 factor: 8 low_freq_factor: 4"
            "                   high_freq_factor: 2 original_max_position_embeddings: 8192 } }",
            "config.scaling.high_freq_factor"),
      Apply("yarn_with_llama3_field",
            "config { scaling { type: ROPE_SCALING_YARN factor: 4"
            "                   original_max_position_embeddings: 4096 low_freq_factor: 1 } }",
            "config.scaling.low_freq_factor"),
      Apply("longrope_factor_lengths",
            "config { scaling { type: ROPE_SCALING_LONGROPE original_max_position_embeddings: 4096"
            "                   short_factor: [1, 1, 1, 1] long_factor: [2, 2, 2] } }",
            "config.scaling.long_factor"),
      Apply("longrope_factor_inf",
            "config { scaling { type: ROPE_SCALING_LONGROPE original_max_position_embeddings: 4096"
            "                   short_factor: [1, 1, 1, 1] long_factor: [2, 2, inf, 2] } }",
            "config.scaling.long_factor[2]"),
      Cache("mrope_section_sum_mismatch", "config { mrope_section: [1, 1, 1] }",
            "config.mrope_section"),
      Cache("ntk_rotary_dim_2",
            "config { head_dim: 2 scaling { type: ROPE_SCALING_NTK factor: 2 } }",
            "config.rotary_dim"),
      Cache("dynamic_without_max_position_embeddings",
            "config { scaling { type: ROPE_SCALING_DYNAMIC factor: 2 } }",
            "config.max_position_embeddings"),
      Cache("head_dim_missing", "config { head_dim: 0 }", "config.head_dim"),
      // Issue #8: 24 bytes that asked for 2^27 frequencies (1-1.5 GiB held per distinct base).
      Cache("head_dim_over_cap",
            "config { head_dim: 134217728 base: 12345.678 } output_dtype: DTYPE_FLOAT16",
            "config.head_dim"),
      Cache("layer_type_without_hf", "config { layer_type: 'full' }", "config.layer_type"),
      Cache("layout_unknown", "layout: 9", "layout"),
      Cache("output_dtype_int64", "output_dtype: DTYPE_INT64", "output_dtype"),
      // 2^20 x 64 = 2^26 elements per output (at the element limit), FLOAT64: 2 x 512 MiB.
      Cache("output_bytes_over_limit",
            "positions { range { count: 1048576 } } config { head_dim: 128 }"
            " output_dtype: DTYPE_FLOAT64",
            "--max_message_bytes", grpc::StatusCode::RESOURCE_EXHAUSTED),
      // ----- Hugging Face config.json -----
      Cache("hf_malformed_json", HfConfig("{\"rope_theta\": 10000,"), "config.hf_config_json"),
      Cache("hf_unknown_rope_type",
            HfConfig(R"({"head_dim": 64, "rope_scaling": {"rope_type": "banana", "factor": 2}})"),
            "rope_scaling.rope_type: unknown rope type 'banana'"),
      Cache("hf_value_of_wrong_type", HfConfig(R"({"head_dim": 64, "max_position_embeddings": 8192,
                      "rope_scaling": {"rope_type": "yarn", "factor": "four"}})"),
            "rope_scaling.factor must be a number, got string"),
      Cache("hf_conflicting_head_dim", HfConfig(kLlamaJson, ""), "config.head_dim"),
      Cache("hf_conflicting_base", HfConfig(kLlamaJson, "head_dim: 0 base: 10000"), "config.base"),
      Cache("hf_conflicting_scaling",
            HfConfig(kLlamaJson, "head_dim: 0 scaling { type: ROPE_SCALING_LINEAR }"),
            "config.scaling"),
      Cache("hf_wrong_value_type", HfConfig(R"({"head_dim": 64, "rope_theta": "big"})"),
            "rope_theta must be a number"),
      Cache("hf_missing_llama3_key",
            HfConfig(R"({"head_dim": 64, "rope_scaling": {"rope_type": "llama3", "factor": 8,
                      "high_freq_factor": 4, "original_max_position_embeddings": 8192}})"),
            "low_freq_factor"),
      Cache("hf_layer_keyed_without_layer_type", HfConfig(R"({"head_dim": 64, "rope_parameters": {
                        "full_attention": {"rope_type": "default", "rope_theta": 1000000},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000}}})"),
            "config.layer_type"),
      // The DSA indexer sub-module (DeepSeek-V3.2 / GLM-5) and its selector.
      Cache("submodule_without_hf", "config { submodule: 'indexer' }", "config.submodule"),
      Cache("hf_submodule_not_in_model",
            HfConfig(R"({"model_type": "llama", "head_dim": 64})",
                     "head_dim: 0 submodule: 'indexer'"),
            "config.submodule"),
      Cache(
          "hf_submodule_on_a_shared_layer",
          HfConfig(R"({"model_type": "glm_moe_dsa", "num_hidden_layers": 4, "index_topk_freq": 2})",
                   "head_dim: 0 submodule: 'indexer' layer_type: '2'"),
          "config.submodule"),
      Cache("hf_submodule_with_vision",
            HfConfig(R"({"model_type": "qwen2_vl", "vision_config": {}})",
                     "head_dim: 0 submodule: 'indexer' layer_type: 'vision'"),
            "config.submodule"),
      Cache("hf_indexer_types_bad_value",
            HfConfig(R"({"model_type": "glm_moe_dsa", "num_hidden_layers": 2,
                      "indexer_types": ["full", "sometimes"]})"),
            "indexer_types[1]: expected \"full\" or \"shared\""),
      Cache("hf_indexer_types_first_shared",
            HfConfig(R"({"model_type": "glm_moe_dsa", "num_hidden_layers": 2,
                      "indexer_types": ["shared", "full"]})"),
            "layer 0 must run the indexer"),
      Cache("hf_index_head_dim_odd",
            HfConfig(R"({"model_type": "deepseek_v32", "index_head_dim": 129})"),
            "index_head_dim: expected an even number"),
      // ----- positions -----
      Apply("position_negative", Put("positions.ids", Int64Tensor({4}, {0, 1, -1, 3})),
            "positions"),
      Apply("position_2_pow_31",
            Put("positions.ids", Int64Tensor({4}, {0, 1, int64_t{1} << 31, 3})), "positions"),
      Apply("ids_float_dtype", Put("positions.ids", FloatTensor({4})), "positions.ids.dtype"),
      Apply("ids_shape_mismatch", Put("positions.ids", Int64Tensor({3}, {0, 1, 2})),
            "positions.ids"),
      Apply("range_count_mismatch", "positions { range { count: 3 } }", "positions.range.count"),
      Cache("range_start_negative", "positions { range { start: -5 } }", "positions.range.start"),
      Cache("range_past_2_pow_31",  // start 2^31 - 4
            "positions { range { start: 2147483644 count: 8 } }", "positions.range.count"),
      Apply("offsets_length_mismatch", "positions { offsets { offsets: [0, 4] } }", "offsets"),
      Apply("cu_seqlens_decreasing",
            {PackedThd, "positions { cu_seqlens { cu_seqlens: [0, 3, 2, 4] } }"}, "cu_seqlens"),
      Apply("cu_seqlens_wrong_end",
            {PackedThd, "positions { cu_seqlens { cu_seqlens: [0, 2, 5] } }"}, "cu_seqlens"),
      Apply("attention_mask_shape_mismatch",
            Put("positions.attention_mask", Int64Tensor({1, 3}, {1, 1, 1})),
            "positions.attention_mask"),
      Sin(
          "no_positions", [](v1::SinusoidalRequest& r) { r.clear_positions(); }, "positions"),
      // ----- sinusoidal / AddPositionEncoding -----
      Sin("dim_zero", "params { dim: 0 }", "params.dim"),
      Sin("base_one", "params { base: 1 }", "params.base"),
      Sin("base_nan", "params { base: nan }", "params.base"),
      Sin("layout_unknown", "params { layout: 3 }", "params.layout"),
      Sin("output_dtype_int32", "output_dtype: DTYPE_INT32", "output_dtype"),
      Sin("output_elements_over_limit",  // 2^30 positions
          "positions { range { count: 1073741824 } } params { dim: 64 }", "--max_output_elements",
          grpc::StatusCode::RESOURCE_EXHAUSTED),
      AddPe("x_rank_1", Put("x", FloatTensor({8})), "x"),
      AddPe("combine_unknown", "combine: 11", "combine"),
      AddPe("scale_nan", "scale: nan", "scale"),
      AddPe("padding_idx_negative", "padding_idx: -1", "padding_idx"),
      AddPe("add_width_mismatch", "sinusoidal { dim: 6 }", "sinusoidal.dim"),
      AddPe(
          "no_source", [](A& r) { r.clear_source(); }, "source"),
      AddPe("learned_table_name_unknown", "learned { table_name: 'opt_125m' }",
            "learned.table_name: no table named \"opt_125m\""),
      // Positions 0..3 read rows 2..5 of 6: they fit; from start 1, row 6 is out of range.
      AddPe("learned_position_past_table",
            {Put("learned.table_inline", FloatTensor({6, 8})),
             "learned { table_offset: 2 } positions { range { start: 1 } }"},
            "positions", grpc::StatusCode::OUT_OF_RANGE),
      AddPe(
          "learned_table_byte_mismatch",
          [](A& r) {
            *r.mutable_learned()->mutable_table_inline() = FloatTensor({6, 8});
            r.mutable_learned()->mutable_table_inline()->mutable_data()->pop_back();
          },
          "learned.table_inline: data has 191 bytes, expected 192"),
      // ----- ALiBi -----
      Slopes("heads_zero", "num_heads: 0", "num_heads"),
      Slopes("max_bias_negative", "max_bias: -1", "max_bias"),
      Slopes("output_dtype_unknown", "output_dtype: 17", "output_dtype"),
      Slopes("heads_over_limit", "num_heads: 1099511627776",  // 2^40
             "--max_output_elements", grpc::StatusCode::RESOURCE_EXHAUSTED),
      Alibi("heads_zero", "num_heads: 0", "num_heads"),
      Alibi("q_len_zero", "q_len: 0", "q_len"),
      Alibi("k_len_negative", "k_len: -3", "k_len"),
      Alibi("max_bias_zero", "max_bias: 0", "max_bias"),
      Alibi("max_bias_nan", "max_bias: nan", "max_bias"),
      Alibi("mode_unknown", "mode: 8", "mode"),
      Alibi("future_unknown", "future: -1", "future"),
      Alibi("form_buckets", "form: BIAS_FORM_BUCKETS", "form"),
      Alibi("mask_without_bloom", Put("attention_mask", Int64Tensor({1, 5}, {1, 1, 1, 1, 1})),
            "attention_mask"),
      Alibi("mask_shape_mismatch",
            {Put("attention_mask", Int64Tensor({1, 4}, {1, 1, 1, 1})), "mode: ALIBI_MODE_BLOOM"},
            "attention_mask"),
      Alibi("output_over_limit_64x2^20x2^20", "num_heads: 64 q_len: 1048576 k_len: 1048576",
            "bias [64, 1048576, 1048576] has 7.0e+13 elements, over "
            "--max_output_elements=67108864",
            grpc::StatusCode::RESOURCE_EXHAUSTED),
      // ----- T5 relative bias -----
      T5("max_distance_at_exact_range", "max_distance: 8", "max_distance"),
      T5("unidirectional_max_distance_at_exact_range", "bidirectional: false max_distance: 16",
         "max_distance"),
      T5("table_shape_mismatch", Put("table_inline", FloatTensor({16, 2})), "table"),
      T5("table_name_unknown", "table_name: 't5_small'",
         "table_name: no table named \"t5_small\" (loaded: none)"),
      T5(
          "no_table_for_full", [](T& r) { r.clear_table(); }, "table"),
      T5("buckets_with_float_output", "form: BIAS_FORM_BUCKETS output_dtype: DTYPE_FLOAT32",
         "output_dtype"),
      T5("num_buckets_too_small", "num_buckets: 2", "num_buckets"),
      // ----- Shaw relative embeddings -----
      RelEmb("table_rows_not_2k_plus_1", Put("table_inline", FloatTensor({4, 4})), "table"),
      RelEmb("max_relative_negative", "max_relative: -1", "max_relative"),
      RelEmb("table_dtype_int64", Put("table_inline", Int64Tensor({5, 1}, {1, 2, 3, 4, 5})),
             "table_inline.dtype"),
      RelEmb("q_len_zero", "q_len: 0", "q_len"),
      // ----- RopeCache's one-table layouts -----
      Cache("fused_output_int64",
            "layout: ROPE_CACHE_LAYOUT_FUSED_COS_SIN output_dtype: DTYPE_INT64", "output_dtype"),
      Cache("complex_odd_rotary_dim", "layout: ROPE_CACHE_LAYOUT_COMPLEX config { rotary_dim: 7 }",
            "config.rotary_dim"),
      // ----- KV re-rotation -----
      Rerotate(
          "delta_missing", [](v1::RerotateKeysRequest& r) { r.clear_delta(); }, "delta"),
      Rerotate("delta_float", Put("delta", FloatTensor({1})), "delta.dtype"),
      Rerotate("delta_shape_not_batch_or_tokens", Put("delta", Int64Tensor({3}, {1, 2, 3})),
               "delta"),
      Rerotate("delta_before_position_0", Put("delta", Int64Tensor({}, {-5})),
               "delta: token 0 at position 0 moves by -5"),
      Rerotate("delta_past_2p31", Put("delta", Int64Tensor({}, {int64_t{1} << 31})), "delta"),
      Rerotate("inverse", "config { inverse: true }", "config.inverse"),
      Rerotate("k_int64", Put("k", Int64Tensor({1, 1, 1, 2}, {1, 2})), "k.dtype"),
      Rerotate("head_dim_mismatch_with_k", "config { head_dim: 16 }", "config.head_dim"),
      Rerotate("layout_unknown", "layout: 9", "layout"),
      // ----- multimodal position ids -----
      Mm("family_unknown", "family: 9", "family"),
      Mm("family_missing", "family: MULTIMODAL_FAMILY_UNSPECIFIED", "family"),
      Mm("hf_config_not_json", "hf_config_json: '{'", "hf_config_json"),
      Mm("hf_config_model_without_rule",
         "family: MULTIMODAL_FAMILY_UNSPECIFIED hf_config_json: '{\"model_type\": \"llama\"}'",
         "hf_config_json: model_type 'llama'"),
      Mm("grid_tokens_disagree", Put("image_grid_thw", Int64Tensor({1, 3}, {1, 4, 8})),
         "input_ids[0]: image span at token 2"),
      Mm(
          "grid_missing", [](v1::MultimodalPositionsRequest& r) { r.clear_image_grid_thw(); },
          "input_ids[0]"),
      Mm("grid_not_merge_multiple", Put("image_grid_thw", Int64Tensor({1, 3}, {1, 3, 4})),
         "image_grid_thw"),
      Mm("grid_shape", Put("image_grid_thw", Int64Tensor({1, 2}, {4, 4})), "image_grid_thw"),
      Mm("input_ids_float", Put("input_ids", FloatTensor({1, 8})), "input_ids.dtype"),
      Mm("attention_mask_shape", Put("attention_mask", Int64Tensor({1, 4}, {1, 1, 1, 1})),
         "attention_mask"),
      Mm("spatial_merge_size_zero", "spatial_merge_size: 0", "spatial_merge_size"),
      Mm("tokens_per_second_nan", "tokens_per_second: nan", "tokens_per_second"),
      Mm("second_per_grid_ts_for_qwen2_vl", Put("second_per_grid_ts", FloatTensor({1})),
         "second_per_grid_ts"),
      Mm("prompt_twice", "sequences { spans { text_tokens: 3 } }", "sequences"),
      Mm("temporal_merge_size_for_qwen2_vl", "temporal_merge_size: 2", "temporal_merge_size"),
      Mm("ernie_temporal_merge_size_zero", {Ernie, "temporal_merge_size: 0"},
         "temporal_merge_size"),
      Mm("ernie_video_tokens_disagree", {Ernie, "temporal_merge_size: 1"},
         "input_ids[0]: video span at token 2 (video_grid_thw[0] = [2, 4, 4], 2x2 merged): "
         "expected 8 video tokens"),
      Mm(
          "ernie_video_t_not_merge_multiple",
          [](v1::MultimodalPositionsRequest& r) {
            Ernie(r);
            *r.mutable_video_grid_thw() = Int64Tensor({1, 3}, {3, 4, 4});
          },
          "video_grid_thw[0]: expected t a multiple of temporal_merge_size 2"),
      Mm("span_empty", {NoInputIds, "sequences { spans { } }"}, "sequences[0].spans[0]"),
      Mm("span_text_zero", {NoInputIds, "sequences { spans { text_tokens: 0 } }"},
         "sequences[0].spans[0]"),
      Mm("prompt_and_decode", "decode { num_steps: 1 }", "decode"),
      Mm(
          "decode_no_deltas",
          [](v1::MultimodalPositionsRequest& r) {
            Decode(r);
            r.mutable_decode()->clear_deltas();
          },
          "decode.deltas"),
      Mm("decode_no_steps", {Decode, "decode { num_steps: 0 }"}, "decode.num_steps"),
      Mm("decode_prompt_length_negative", {Decode, "decode { prompt_length: -1 }"},
         "decode.prompt_length"),
      // ----- vision patch positions -----
      Vision("tower_unknown", "tower: 7", "tower"),
      Vision("tower_missing", "tower: VISION_TOWER_UNSPECIFIED", "tower"),
      Vision(
          "grid_missing", [](v1::VisionPositionsRequest& r) { r.clear_grid(); }, "grid"),
      Vision("grid_not_merge_multiple", Put("grid", Int64Tensor({1, 3}, {1, 3, 4})), "grid"),
      Vision("grid_shape", Put("grid", Int64Tensor({1, 2}, {4, 4})), "grid"),
      Vision("grid_float", Put("grid", FloatTensor({1, 3})), "grid.dtype"),
      Vision("window_size_negative", "window_size: -1", "window_size"),
      Vision("spatial_merge_size_zero", "spatial_merge_size: 0", "spatial_merge_size"),
      Vision("hf_config_not_object", "hf_config_json: '[1]'", "hf_config_json"),
      Vision("hf_config_no_tower",
             "tower: VISION_TOWER_UNSPECIFIED hf_config_json: '{\"model_type\": \"llama\"}'",
             "hf_config_json"),
      // ----- AnalyzeEncoding -----
      Analyze(
          "analyze_no_encoding", [](E& r) { r.clear_encoding(); }, "encoding"),
      Analyze("analyze_count_zero", "count: 0", "count: expected 1 .. 16777216, got 0"),
      Analyze("analyze_count_huge", "count: 16777217", "count"),
      Analyze("analyze_start_negative", "start: -1", "start"),
      Analyze("analyze_distance_beyond_range", "distances: [1, 16]",
              "distances[1]: expected 1 .. count - 1 = 15, got 16"),
      Analyze("analyze_distance_zero", "distances: [0]", "distances[0]"),
      Analyze("analyze_property_unspecified", "properties: [ANALYSIS_PROPERTY_UNSPECIFIED]",
              "properties[3]"),
      Analyze("analyze_property_twice", "properties: [ANALYSIS_PROPERTY_BOUNDS]", "properties[3]"),
      Analyze("analyze_collision_float32", "collision_dtype: DTYPE_FLOAT32", "collision_dtype"),
      Analyze("analyze_collision_unknown", "collision_dtype: 99", "collision_dtype"),
      Analyze("analyze_uniqueness_offsets_zero", "uniqueness_offsets: 0", "uniqueness_offsets"),
      Analyze("analyze_window_zero", "window: 0", "window"),
      Analyze("analyze_samples_zero", "samples: 0", "samples"),
      Analyze("analyze_sinusoidal_dim_zero", "sinusoidal { dim: 0 }", "sinusoidal.dim"),
      Analyze("analyze_rope_head_dim", "config { head_dim: 0 }", "config.head_dim"),
      Analyze("analyze_alibi_heads", "alibi { num_heads: 0 }", "alibi.num_heads"),
      Analyze("analyze_alibi_max_bias", "alibi { num_heads: 2 max_bias: nan }", "alibi.max_bias"),
      Analyze("analyze_t5_table_shape", Put("t5.table_inline", FloatTensor({3, 2})), "t5.table"),
      Analyze("analyze_learned_offset",
              {[](E& r) {
                 *r.mutable_learned()->mutable_table_inline() = FloatTensor({4, 2});
               },
               "learned { table_offset: 9 }"},
              "learned.table_offset"),
      Analyze(
          "analyze_learned_range",
          [](E& r) {
            *r.mutable_learned()->mutable_table_inline() = FloatTensor({4, 2});
          },
          "count"),
      Analyze("analyze_embeddings_int", Put("embeddings", Int64Tensor({2}, {1, 2})), "embeddings"),
      Analyze("analyze_keys_without_embeddings", Put("keys", FloatTensor({2, 8})), "keys"),
      Analyze(
          "analyze_keys_shape",
          [](E& r) {
            *r.mutable_embeddings() = FloatTensor({2, 8});
            *r.mutable_keys() = FloatTensor({3, 8});
          },
          "keys"),
      Analyze(
          "analyze_keys_int",
          [](E& r) {
            *r.mutable_embeddings() = FloatTensor({2, 2});
            *r.mutable_keys() = Int64Tensor({2, 2}, {1, 2, 3, 4});
          },
          "keys"),
      Analyze("analyze_scaling_factor_nan", "scalings { type: ROPE_SCALING_LINEAR factor: nan }",
              "scalings[0].factor"),
  };
}

// Each RPC through its handler and through the stub, chosen by the request's type.
#define POSENC_RUN_RPC_(Method)                                          \
  [[maybe_unused]] grpc::Status Handle(const HandlerContext& ctx,        \
                                       const v1::Method##Request& req) { \
    v1::Method##Response resp;                                           \
    return Handle##Method(ctx, req, &resp);                              \
  }                                                                      \
  [[maybe_unused]] grpc::Status Call(v1::PositionEncoding::Stub& stub,   \
                                     grpc::ClientContext* context,       \
                                     const v1::Method##Request& req) {   \
    v1::Method##Response resp;                                           \
    return stub.Method(context, req, &resp);                             \
  }
POSENC_FOR_EACH_RPC(POSENC_RUN_RPC_)
#undef POSENC_RUN_RPC_

grpc::Status RunHandler(const HandlerContext& ctx, const AnyRequest& request) {
  return std::visit([&ctx](const auto& req) { return Handle(ctx, req); }, request);
}

grpc::Status RunStub(v1::PositionEncoding::Stub& stub, const AnyRequest& request) {
  return std::visit(
      [&stub](const auto& req) {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        return Call(stub, &context, req);
      },
      request);
}

std::string CaseName(const ::testing::TestParamInfo<BadCase>& info) {
  std::string name = info.param.name;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return absl::StrCat(info.index, "_", name);
}

TEST(MalformedRequestsTableTest, HasEnoughCases) { EXPECT_GE(AllCases().size(), 45u); }

TEST(MalformedRequestsTableTest, BaseRequestsAreValid) {
  TestContext t;
  for (const AnyRequest& request :
       {AnyRequest(ValidApplyRope()), AnyRequest(ValidRopeCache()), AnyRequest(ValidSinusoidal()),
        AnyRequest(ValidAddPe()), AnyRequest(ValidAlibiSlopes()), AnyRequest(ValidAlibiBias()),
        AnyRequest(ValidRelativeBias()), AnyRequest(ValidRelativeEmbedding()),
        AnyRequest(ValidRerotateKeys()), AnyRequest(ValidMultimodalPositions()),
        AnyRequest(ValidVisionPositions()), AnyRequest(ValidAnalyze())}) {
    grpc::Status status = RunHandler(t.ctx, request);
    EXPECT_TRUE(status.ok()) << request.index() << ": " << status.error_message();
  }
}

class MalformedHandlerTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(MalformedHandlerTest, FailsNamingTheField) {
  TestContext t;
  const BadCase& c = GetParam();
  const auto start = std::chrono::steady_clock::now();
  grpc::Status status = RunHandler(t.ctx, c.build());
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(status.error_code(), c.code) << status.error_message();
  EXPECT_NE(status.error_message().find(c.substr), std::string::npos)
      << "message: " << status.error_message() << "\nexpected to contain: " << c.substr;
  // Rejections are cheap: nothing sized by the request is allocated first.
  EXPECT_LT(elapsed, std::chrono::seconds(2));
}

INSTANTIATE_TEST_SUITE_P(AllRpcs, MalformedHandlerTest, ::testing::ValuesIn(AllCases()), CaseName);

// The request field at `path` ("config.scaling.factor", "q.shape[1]") exists in `request`'s
// message type: a field violation names a real field of the request.
bool IsFieldOf(const google::protobuf::Descriptor* message, absl::string_view path) {
  for (absl::string_view name : absl::StrSplit(path, '.')) {
    if (message == nullptr) return false;
    name = name.substr(0, name.find('['));
    const google::protobuf::FieldDescriptor* field = message->FindFieldByName(std::string(name));
    if (field == nullptr) {
      // A oneof ("source", "table") names the choice between its fields.
      return message->FindOneofByName(std::string(name)) != nullptr;
    }
    message = field->message_type();
  }
  return true;
}

// The server's google.rpc.Status details of a malformed request (posenc.proto's contract), and
// the C++ client's reading of them (posenc/errors.h): ErrorInfo with the code's reason, and for
// INVALID_ARGUMENT / OUT_OF_RANGE a field violation naming a field of the request, which the
// message starts with.
void ExpectStructuredDetails(const grpc::Status& status, const AnyRequest& request) {
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(status.error_details())) << status.error_message();
  EXPECT_EQ(details.code(), static_cast<int>(status.error_code()));
  EXPECT_EQ(details.message(), status.error_message());
  const client::ErrorDetails read =
      client::GetErrorDetails(client::internal::FromGrpcStatus(status));
  EXPECT_EQ(read.domain, "posenc.v1");
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT: EXPECT_EQ(read.reason, "INVALID_FIELD"); break;
    case grpc::StatusCode::OUT_OF_RANGE: EXPECT_EQ(read.reason, "POSITION_OUT_OF_RANGE"); break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      EXPECT_EQ(read.reason, "LIMIT_EXCEEDED");
      EXPECT_FALSE(read.metadata.at("limit").empty());
      break;
    default: ADD_FAILURE() << "unexpected code " << status.error_code();
  }
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) return;
  const google::protobuf::Descriptor* type =
      std::visit([](const auto& r) { return r.GetDescriptor(); }, request);
  EXPECT_TRUE(IsFieldOf(type, read.field))
      << "field violation '" << read.field << "' is not a field of " << type->full_name()
      << "; message: " << status.error_message();
  EXPECT_EQ(status.error_message(), absl::StrCat(read.field, ": ", read.description));
}

// Every case through a real server: same code, same message, structured details, and the server
// keeps serving.
TEST(MalformedServerTest, EveryCaseThroughTheServerAndItKeepsServing) {
  ServerOptions options = testing::LocalServerOptions();
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::PositionEncoding::NewStub((*server)->InProcessChannel());
  TestContext t;
  for (const BadCase& c : AllCases()) {
    SCOPED_TRACE(c.name);
    const AnyRequest request = c.build();
    grpc::Status status = RunStub(*stub, request);
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_EQ(status.error_message(), RunHandler(t.ctx, request).error_message());
    ExpectStructuredDetails(status, request);
  }
  grpc::ClientContext context;
  v1::GetServerInfoResponse info;
  EXPECT_TRUE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.backends(0).name(), "cpu");
  (*server)->Shutdown(std::chrono::system_clock::now());
  (*server)->Wait();
}

// The rows for the other clients' tests (the Python client's test_errors): with
// POSENC_MALFORMED_ROWS_OUT set (tests/CMakeLists.txt runs this as a fixture), one JSON line per
// row: the method, the serialized request (base64), and the code, reason and field the server
// answers with, which each client must read back from its own error type.
TEST(MalformedRequestsTableTest, WritesTheRowsForOtherClients) {
  const char* path = std::getenv("POSENC_MALFORMED_ROWS_OUT");
  if (path == nullptr) GTEST_SKIP() << "POSENC_MALFORMED_ROWS_OUT is not set";
  ServerOptions options = testing::LocalServerOptions();
  auto server = PosencServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::PositionEncoding::NewStub((*server)->InProcessChannel());
  std::ofstream out(path);
  ASSERT_TRUE(out.good()) << path;
  for (const BadCase& c : AllCases()) {
    const AnyRequest request = c.build();
    const grpc::Status status = RunStub(*stub, request);
    const client::ErrorDetails details =
        client::GetErrorDetails(client::internal::FromGrpcStatus(status));
    const auto [method, bytes] = std::visit(
        [](const auto& r) {
          const std::string name = r.GetDescriptor()->name();
          return std::pair(name.substr(0, name.size() - std::string("Request").size()),
                           r.SerializeAsString());
        },
        request);
    const nlohmann::json row = {{"name", c.name},
                                {"method", method},
                                {"request", absl::Base64Escape(bytes)},
                                {"code", static_cast<int>(status.error_code())},
                                {"message", status.error_message()},
                                {"reason", details.reason},
                                {"field", details.field}};
    out << row.dump() << "\n";
  }
  (*server)->Shutdown(std::chrono::system_clock::now());
  (*server)->Wait();
}

}  // namespace
}  // namespace posenc::server
