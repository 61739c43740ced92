// Malformed requests of every RPC: each must fail with the right code and a message naming the
// offending field, both through the handlers and through a real in-process server (which must
// keep serving afterwards).
#include <grpcpp/grpcpp.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/handlers.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

using testing::FloatTensor, testing::Int64Tensor, testing::MakeTensor, testing::TestContext;

using AnyRequest =
    std::variant<v1::SinusoidalRequest, v1::AddPositionEncodingRequest, v1::RopeCacheRequest,
                 v1::ApplyRopeRequest, v1::AlibiSlopesRequest, v1::AlibiBiasRequest,
                 v1::RelativeBiasRequest, v1::RelativeEmbeddingRequest>;

struct BadCase {
  std::string name;
  std::function<AnyRequest()> build;
  grpc::StatusCode code;
  std::string substr;  // the message must contain it (the offending field)
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;

// ----- valid base requests, each broken in one place by a case ------------------------------

v1::ApplyRopeRequest ValidApplyRope() {
  v1::ApplyRopeRequest r;
  *r.mutable_q() = FloatTensor({1, 4, 2, 8});
  *r.mutable_k() = FloatTensor({1, 4, 1, 8}, 0.5f);
  return r;
}

v1::RopeCacheRequest ValidRopeCache() {
  v1::RopeCacheRequest r;
  r.mutable_positions()->mutable_range()->set_count(8);
  r.mutable_config()->set_head_dim(64);
  return r;
}

v1::SinusoidalRequest ValidSinusoidal() {
  v1::SinusoidalRequest r;
  r.mutable_positions()->mutable_range()->set_count(16);
  r.mutable_params()->set_dim(32);
  return r;
}

v1::AddPositionEncodingRequest ValidAddPe() {
  v1::AddPositionEncodingRequest r;
  *r.mutable_x() = FloatTensor({2, 4, 8});
  r.mutable_sinusoidal();
  return r;
}

v1::AlibiSlopesRequest ValidAlibiSlopes() {
  v1::AlibiSlopesRequest r;
  r.set_num_heads(8);
  return r;
}

v1::AlibiBiasRequest ValidAlibiBias() {
  v1::AlibiBiasRequest r;
  r.set_num_heads(4);
  r.set_q_len(3);
  r.set_k_len(5);
  return r;
}

v1::RelativeBiasRequest ValidRelativeBias() {
  v1::RelativeBiasRequest r;
  r.set_q_len(4);
  r.set_k_len(4);
  *r.mutable_table_inline() = FloatTensor({32, 2});
  return r;
}

v1::RelativeEmbeddingRequest ValidRelativeEmbedding() {
  v1::RelativeEmbeddingRequest r;
  r.set_q_len(3);
  r.set_k_len(3);
  r.set_max_relative(2);
  *r.mutable_table_inline() = FloatTensor({5, 4});
  return r;
}

// A case that edits a valid base request.
template <typename Request>
BadCase Case(std::string name, Request (*base)(), std::function<void(Request&)> edit,
             grpc::StatusCode code, std::string substr) {
  return BadCase{std::move(name),
                 [base, edit]() -> AnyRequest {
                   Request r = base();
                   edit(r);
                   return r;
                 },
                 code, std::move(substr)};
}

BadCase Apply(std::string name, std::function<void(v1::ApplyRopeRequest&)> edit, std::string substr,
              grpc::StatusCode code = kInvalid) {
  return Case<v1::ApplyRopeRequest>(std::move(name), ValidApplyRope, std::move(edit), code,
                                    std::move(substr));
}
BadCase Cache(std::string name, std::function<void(v1::RopeCacheRequest&)> edit, std::string substr,
              grpc::StatusCode code = kInvalid) {
  return Case<v1::RopeCacheRequest>(std::move(name), ValidRopeCache, std::move(edit), code,
                                    std::move(substr));
}
BadCase Sin(std::string name, std::function<void(v1::SinusoidalRequest&)> edit, std::string substr,
            grpc::StatusCode code = kInvalid) {
  return Case<v1::SinusoidalRequest>(std::move(name), ValidSinusoidal, std::move(edit), code,
                                     std::move(substr));
}
BadCase AddPe(std::string name, std::function<void(v1::AddPositionEncodingRequest&)> edit,
              std::string substr, grpc::StatusCode code = kInvalid) {
  return Case<v1::AddPositionEncodingRequest>(std::move(name), ValidAddPe, std::move(edit), code,
                                              std::move(substr));
}
BadCase Slopes(std::string name, std::function<void(v1::AlibiSlopesRequest&)> edit,
               std::string substr, grpc::StatusCode code = kInvalid) {
  return Case<v1::AlibiSlopesRequest>(std::move(name), ValidAlibiSlopes, std::move(edit), code,
                                      std::move(substr));
}
BadCase Alibi(std::string name, std::function<void(v1::AlibiBiasRequest&)> edit, std::string substr,
              grpc::StatusCode code = kInvalid) {
  return Case<v1::AlibiBiasRequest>(std::move(name), ValidAlibiBias, std::move(edit), code,
                                    std::move(substr));
}
BadCase T5(std::string name, std::function<void(v1::RelativeBiasRequest&)> edit, std::string substr,
           grpc::StatusCode code = kInvalid) {
  return Case<v1::RelativeBiasRequest>(std::move(name), ValidRelativeBias, std::move(edit), code,
                                       std::move(substr));
}
BadCase RelEmb(std::string name, std::function<void(v1::RelativeEmbeddingRequest&)> edit,
               std::string substr, grpc::StatusCode code = kInvalid) {
  return Case<v1::RelativeEmbeddingRequest>(std::move(name), ValidRelativeEmbedding,
                                            std::move(edit), code, std::move(substr));
}

constexpr char kLlamaJson[] =
    R"({"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
        "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})";

std::vector<BadCase> AllCases() {
  using R = v1::ApplyRopeRequest;
  using C = v1::RopeCacheRequest;
  return {
      // ----- tensors on the wire -----
      Apply(
          "q_byte_length_mismatch", [](R& r) { r.mutable_q()->mutable_data()->resize(100); },
          "q: data has 100 bytes, expected 256 (FLOAT32 [1, 4, 2, 8])"),
      Apply(
          "q_dtype_unspecified", [](R& r) { r.mutable_q()->set_dtype(v1::DTYPE_UNSPECIFIED); },
          "q.dtype"),
      Apply(
          "q_dtype_int32", [](R& r) { r.mutable_q()->set_dtype(v1::DTYPE_INT32); }, "q.dtype"),
      Apply(
          "q_dtype_unknown_number",
          [](R& r) { r.mutable_q()->set_dtype(static_cast<v1::DType>(99)); }, "q.dtype"),
      Apply(
          "q_rank_3_for_bshd",
          [](R& r) {
            *r.mutable_q() = FloatTensor({4, 2, 8});
          },
          "q"),
      Apply(
          "q_zero_dim", [](R& r) { r.mutable_q()->set_shape(1, 0); }, "q.shape[1]"),
      Apply(
          "q_negative_dim", [](R& r) { r.mutable_q()->set_shape(0, -1); }, "q.shape[0]"),
      Apply(
          "q_shape_overflow",
          [](R& r) {
            r.mutable_q()->clear_shape();
            for (int i = 0; i < 4; ++i) r.mutable_q()->add_shape(int64_t{1} << 20);
          },
          "q.shape"),
      Apply(
          "k_dtype_mismatch",
          [](R& r) {
            std::vector<double> v(1 * 4 * 1 * 8, 0.5);
            *r.mutable_k() = MakeTensor(v1::DTYPE_FLOAT64, {1, 4, 1, 8}, v);
          },
          "k"),
      Apply(
          "k_batch_mismatch",
          [](R& r) {
            *r.mutable_k() = FloatTensor({2, 4, 1, 8});
          },
          "k"),
      Apply(
          "k_empty_message", [](R& r) { r.mutable_k()->Clear(); }, "k.dtype"),
      Apply(
          "layout_unknown", [](R& r) { r.set_layout(static_cast<v1::TensorLayout>(9)); }, "layout"),
      // ----- rotary config -----
      Apply(
          "odd_rotary_dim", [](R& r) { r.mutable_config()->set_rotary_dim(5); },
          "config.rotary_dim"),
      Apply(
          "rotary_dim_over_head_dim", [](R& r) { r.mutable_config()->set_rotary_dim(16); },
          "config.rotary_dim"),
      Apply(
          "head_dim_mismatch_with_q", [](R& r) { r.mutable_config()->set_head_dim(16); },
          "config.head_dim"),
      Apply(
          "head_dim_negative", [](R& r) { r.mutable_config()->set_head_dim(-8); },
          "config.head_dim"),
      Apply(
          "base_zero", [](R& r) { r.mutable_config()->set_base(0); }, "config.base"),
      Apply(
          "base_negative", [](R& r) { r.mutable_config()->set_base(-10); }, "config.base"),
      Apply(
          "base_one", [](R& r) { r.mutable_config()->set_base(1); }, "config.base"),
      Apply(
          "base_nan", [](R& r) { r.mutable_config()->set_base(kNaN); }, "config.base"),
      Apply(
          "base_inf", [](R& r) { r.mutable_config()->set_base(kInf); }, "config.base"),
      Apply(
          "style_unknown",
          [](R& r) { r.mutable_config()->set_style(static_cast<v1::RopeStyle>(7)); },
          "config.style"),
      Apply(
          "scaling_type_unknown",
          [](R& r) {
            r.mutable_config()->mutable_scaling()->set_type(static_cast<v1::RopeScalingType>(42));
          },
          "config.scaling.type"),
      Apply(
          "linear_factor_nan",
          [](R& r) {
            auto* s = r.mutable_config()->mutable_scaling();
            s->set_type(v1::ROPE_SCALING_LINEAR);
            s->set_factor(kNaN);
          },
          "config.scaling.factor"),
      Apply(
          "linear_factor_zero",
          [](R& r) {
            auto* s = r.mutable_config()->mutable_scaling();
            s->set_type(v1::ROPE_SCALING_LINEAR);
            s->set_factor(0);
          },
          "config.scaling.factor"),
      Apply(
          "linear_factor_negative",
          [](R& r) {
            auto* s = r.mutable_config()->mutable_scaling();
            s->set_type(v1::ROPE_SCALING_LINEAR);
            s->set_factor(-2);
          },
          "config.scaling.factor"),
      Apply(
          "llama3_missing_low_freq_factor",
          [](R& r) {
            auto* s = r.mutable_config()->mutable_scaling();
            s->set_type(v1::ROPE_SCALING_LLAMA3);
            s->set_factor(8);
            s->set_high_freq_factor(4);
            s->set_original_max_position_embeddings(8192);
          },
          "config.scaling.low_freq_factor"),
      Apply(
          "llama3_high_below_low",
          [](R& r) {
            auto* s = r.mutable_config()->mutable_scaling();
            s->set_type(v1::ROPE_SCALING_LLAMA3);
            s->set_factor(8);
            s->set_low_freq_factor(4);
            s->set_high_freq_factor(2);
            s->set_original_max_position_embeddings(8192);
          },
          "config.scaling.high_freq_factor"),
      Apply(
          "yarn_with_llama3_field",
          [](R& r) {
            auto* s = r.mutable_config()->mutable_scaling();
            s->set_type(v1::ROPE_SCALING_YARN);
            s->set_factor(4);
            s->set_original_max_position_embeddings(4096);
            s->set_low_freq_factor(1);
          },
          "config.scaling.low_freq_factor"),
      Apply(
          "longrope_factor_lengths",
          [](R& r) {
            auto* s = r.mutable_config()->mutable_scaling();
            s->set_type(v1::ROPE_SCALING_LONGROPE);
            s->set_original_max_position_embeddings(4096);
            for (int i = 0; i < 4; ++i) s->add_short_factor(1.0);
            for (int i = 0; i < 3; ++i) s->add_long_factor(2.0);
          },
          "config.scaling.long_factor"),
      Apply(
          "longrope_factor_inf",
          [](R& r) {
            auto* s = r.mutable_config()->mutable_scaling();
            s->set_type(v1::ROPE_SCALING_LONGROPE);
            s->set_original_max_position_embeddings(4096);
            for (int i = 0; i < 4; ++i) s->add_short_factor(1.0);
            for (int i = 0; i < 4; ++i) s->add_long_factor(i == 2 ? kInf : 2.0);
          },
          "config.scaling.long_factor[2]"),
      Cache(
          "mrope_section_sum_mismatch",
          [](C& r) {
            for (int64_t s : {1, 1, 1}) r.mutable_config()->add_mrope_section(s);
          },
          "config.mrope_section"),
      Cache(
          "ntk_rotary_dim_2",
          [](C& r) {
            r.mutable_config()->set_head_dim(2);
            r.mutable_config()->mutable_scaling()->set_type(v1::ROPE_SCALING_NTK);
            r.mutable_config()->mutable_scaling()->set_factor(2);
          },
          "config.rotary_dim"),
      Cache(
          "dynamic_without_max_position_embeddings",
          [](C& r) {
            r.mutable_config()->mutable_scaling()->set_type(v1::ROPE_SCALING_DYNAMIC);
            r.mutable_config()->mutable_scaling()->set_factor(2);
          },
          "config.max_position_embeddings"),
      Cache(
          "head_dim_missing", [](C& r) { r.mutable_config()->set_head_dim(0); }, "config.head_dim"),
      // Issue #8: 24 bytes that asked for 2^27 frequencies (1-1.5 GiB held per distinct base).
      Cache(
          "head_dim_over_cap",
          [](C& r) {
            r.mutable_config()->set_head_dim(int64_t{1} << 27);
            r.mutable_config()->set_base(12345.678);
            r.set_output_dtype(v1::DTYPE_FLOAT16);
          },
          "config.head_dim"),
      Cache(
          "layer_type_without_hf", [](C& r) { r.mutable_config()->set_layer_type("full"); },
          "config.layer_type"),
      Cache(
          "layout_unknown", [](C& r) { r.set_layout(static_cast<v1::RopeCacheLayout>(5)); },
          "layout"),
      Cache(
          "output_dtype_int64", [](C& r) { r.set_output_dtype(v1::DTYPE_INT64); }, "output_dtype"),
      Cache(
          "output_bytes_over_limit",
          [](C& r) {
            // 2^20 x 64 = 2^26 elements per output (at the element limit), FLOAT64: 2 x 512 MiB.
            r.mutable_positions()->mutable_range()->set_count(int64_t{1} << 20);
            r.mutable_config()->set_head_dim(128);
            r.set_output_dtype(v1::DTYPE_FLOAT64);
          },
          "--max_message_bytes", grpc::StatusCode::RESOURCE_EXHAUSTED),
      // ----- Hugging Face config.json -----
      Cache(
          "hf_malformed_json",
          [](C& r) {
            r.mutable_config()->set_head_dim(0);
            r.mutable_config()->set_hf_config_json("{\"rope_theta\": 10000,");
          },
          "config.hf_config_json"),
      Cache(
          "hf_unknown_rope_type",
          [](C& r) {
            r.mutable_config()->set_head_dim(0);
            r.mutable_config()->set_hf_config_json(
                R"({"head_dim": 64, "rope_scaling": {"rope_type": "banana", "factor": 2}})");
          },
          "rope_scaling.rope_type: unknown rope type 'banana'"),
      Cache(
          "hf_value_of_wrong_type",
          [](C& r) {
            r.mutable_config()->set_head_dim(0);
            r.mutable_config()->set_hf_config_json(
                R"({"head_dim": 64, "max_position_embeddings": 8192,
                      "rope_scaling": {"rope_type": "yarn", "factor": "four"}})");
          },
          "rope_scaling.factor must be a number, got string"),
      Cache(
          "hf_conflicting_head_dim",
          [](C& r) { r.mutable_config()->set_hf_config_json(kLlamaJson); }, "config.head_dim"),
      Cache(
          "hf_conflicting_base",
          [](C& r) {
            r.mutable_config()->set_head_dim(0);
            r.mutable_config()->set_base(10000);
            r.mutable_config()->set_hf_config_json(kLlamaJson);
          },
          "config.base"),
      Cache(
          "hf_conflicting_scaling",
          [](C& r) {
            r.mutable_config()->set_head_dim(0);
            r.mutable_config()->mutable_scaling()->set_type(v1::ROPE_SCALING_LINEAR);
            r.mutable_config()->set_hf_config_json(kLlamaJson);
          },
          "config.scaling"),
      Cache(
          "hf_wrong_value_type",
          [](C& r) {
            r.mutable_config()->set_head_dim(0);
            r.mutable_config()->set_hf_config_json(R"({"head_dim": 64, "rope_theta": "big"})");
          },
          "rope_theta must be a number"),
      Cache(
          "hf_missing_llama3_key",
          [](C& r) {
            r.mutable_config()->set_head_dim(0);
            r.mutable_config()->set_hf_config_json(
                R"({"head_dim": 64, "rope_scaling": {"rope_type": "llama3", "factor": 8,
                      "high_freq_factor": 4, "original_max_position_embeddings": 8192}})");
          },
          "low_freq_factor"),
      Cache(
          "hf_layer_keyed_without_layer_type",
          [](C& r) {
            r.mutable_config()->set_head_dim(0);
            r.mutable_config()->set_hf_config_json(
                R"({"head_dim": 64, "rope_parameters": {
                        "full_attention": {"rope_type": "default", "rope_theta": 1000000},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000}}})");
          },
          "config.layer_type"),
      // ----- positions -----
      Apply(
          "position_negative",
          [](R& r) {
            *r.mutable_positions()->mutable_ids() = Int64Tensor({4}, {0, 1, -1, 3});
          },
          "positions"),
      Apply(
          "position_2_pow_31",
          [](R& r) {
            *r.mutable_positions()->mutable_ids() = Int64Tensor({4}, {0, 1, int64_t{1} << 31, 3});
          },
          "positions"),
      Apply(
          "ids_float_dtype", [](R& r) { *r.mutable_positions()->mutable_ids() = FloatTensor({4}); },
          "positions.ids.dtype"),
      Apply(
          "ids_shape_mismatch",
          [](R& r) {
            *r.mutable_positions()->mutable_ids() = Int64Tensor({3}, {0, 1, 2});
          },
          "positions.ids"),
      Apply(
          "range_count_mismatch",
          [](R& r) { r.mutable_positions()->mutable_range()->set_count(3); },
          "positions.range.count"),
      Cache(
          "range_start_negative",
          [](C& r) { r.mutable_positions()->mutable_range()->set_start(-5); },
          "positions.range.start"),
      Cache(
          "range_past_2_pow_31",
          [](C& r) {
            r.mutable_positions()->mutable_range()->set_start((int64_t{1} << 31) - 4);
            r.mutable_positions()->mutable_range()->set_count(8);
          },
          "positions.range.count"),
      Apply(
          "offsets_length_mismatch",
          [](R& r) {
            r.mutable_positions()->mutable_offsets()->add_offsets(0);
            r.mutable_positions()->mutable_offsets()->add_offsets(4);
          },
          "offsets"),
      Apply(
          "cu_seqlens_decreasing",
          [](R& r) {
            *r.mutable_q() = FloatTensor({4, 2, 8});
            r.clear_k();
            r.set_layout(v1::TENSOR_LAYOUT_THD);
            for (int64_t c : {0, 3, 2, 4}) {
              r.mutable_positions()->mutable_cu_seqlens()->add_cu_seqlens(c);
            }
          },
          "cu_seqlens"),
      Apply(
          "cu_seqlens_wrong_end",
          [](R& r) {
            *r.mutable_q() = FloatTensor({4, 2, 8});
            r.clear_k();
            r.set_layout(v1::TENSOR_LAYOUT_THD);
            for (int64_t c : {0, 2, 5}) {
              r.mutable_positions()->mutable_cu_seqlens()->add_cu_seqlens(c);
            }
          },
          "cu_seqlens"),
      Apply(
          "attention_mask_shape_mismatch",
          [](R& r) {
            *r.mutable_positions()->mutable_attention_mask() = Int64Tensor({1, 3}, {1, 1, 1});
          },
          "positions.attention_mask"),
      Sin(
          "no_positions", [](v1::SinusoidalRequest& r) { r.clear_positions(); }, "positions"),
      // ----- sinusoidal / AddPositionEncoding -----
      Sin(
          "dim_zero", [](v1::SinusoidalRequest& r) { r.mutable_params()->set_dim(0); },
          "params.dim"),
      Sin(
          "base_one", [](v1::SinusoidalRequest& r) { r.mutable_params()->set_base(1); },
          "params.base"),
      Sin(
          "base_nan", [](v1::SinusoidalRequest& r) { r.mutable_params()->set_base(kNaN); },
          "params.base"),
      Sin(
          "layout_unknown",
          [](v1::SinusoidalRequest& r) {
            r.mutable_params()->set_layout(static_cast<v1::SinusoidalLayout>(3));
          },
          "params.layout"),
      Sin(
          "output_dtype_int32",
          [](v1::SinusoidalRequest& r) { r.set_output_dtype(v1::DTYPE_INT32); }, "output_dtype"),
      Sin(
          "output_elements_over_limit",
          [](v1::SinusoidalRequest& r) {
            r.mutable_positions()->mutable_range()->set_count(int64_t{1} << 30);
            r.mutable_params()->set_dim(64);
          },
          "--max_output_elements", grpc::StatusCode::RESOURCE_EXHAUSTED),
      AddPe(
          "x_rank_1", [](v1::AddPositionEncodingRequest& r) { *r.mutable_x() = FloatTensor({8}); },
          "x"),
      AddPe(
          "combine_unknown",
          [](v1::AddPositionEncodingRequest& r) { r.set_combine(static_cast<v1::Combine>(11)); },
          "combine"),
      AddPe(
          "scale_nan", [](v1::AddPositionEncodingRequest& r) { r.set_scale(kNaN); }, "scale"),
      AddPe(
          "padding_idx_negative", [](v1::AddPositionEncodingRequest& r) { r.set_padding_idx(-1); },
          "padding_idx"),
      AddPe(
          "add_width_mismatch",
          [](v1::AddPositionEncodingRequest& r) { r.mutable_sinusoidal()->set_dim(6); },
          "sinusoidal.dim"),
      AddPe(
          "no_source", [](v1::AddPositionEncodingRequest& r) { r.clear_source(); }, "source"),
      AddPe(
          "learned_table_name_unknown",
          [](v1::AddPositionEncodingRequest& r) {
            r.mutable_learned()->set_table_name("opt_125m");
          },
          "learned.table_name: no table named \"opt_125m\""),
      AddPe(
          "learned_position_past_table",
          [](v1::AddPositionEncodingRequest& r) {
            *r.mutable_learned()->mutable_table_inline() = FloatTensor({6, 8});
            r.mutable_learned()->set_table_offset(2);  // positions 0..3 read rows 2..5: fits
            r.mutable_positions()->mutable_range()->set_start(1);  // row 6 of 6: out of range
          },
          "positions", grpc::StatusCode::OUT_OF_RANGE),
      AddPe(
          "learned_table_byte_mismatch",
          [](v1::AddPositionEncodingRequest& r) {
            *r.mutable_learned()->mutable_table_inline() = FloatTensor({6, 8});
            r.mutable_learned()->mutable_table_inline()->mutable_data()->pop_back();
          },
          "learned.table_inline: data has 191 bytes, expected 192"),
      // ----- ALiBi -----
      Slopes(
          "heads_zero", [](v1::AlibiSlopesRequest& r) { r.set_num_heads(0); }, "num_heads"),
      Slopes(
          "max_bias_negative", [](v1::AlibiSlopesRequest& r) { r.set_max_bias(-1); }, "max_bias"),
      Slopes(
          "output_dtype_unknown",
          [](v1::AlibiSlopesRequest& r) { r.set_output_dtype(static_cast<v1::DType>(17)); },
          "output_dtype"),
      Slopes(
          "heads_over_limit", [](v1::AlibiSlopesRequest& r) { r.set_num_heads(int64_t{1} << 40); },
          "--max_output_elements", grpc::StatusCode::RESOURCE_EXHAUSTED),
      Alibi(
          "heads_zero", [](v1::AlibiBiasRequest& r) { r.set_num_heads(0); }, "num_heads"),
      Alibi(
          "q_len_zero", [](v1::AlibiBiasRequest& r) { r.set_q_len(0); }, "q_len"),
      Alibi(
          "k_len_negative", [](v1::AlibiBiasRequest& r) { r.set_k_len(-3); }, "k_len"),
      Alibi(
          "max_bias_zero", [](v1::AlibiBiasRequest& r) { r.set_max_bias(0); }, "max_bias"),
      Alibi(
          "max_bias_nan", [](v1::AlibiBiasRequest& r) { r.set_max_bias(kNaN); }, "max_bias"),
      Alibi(
          "mode_unknown",
          [](v1::AlibiBiasRequest& r) { r.set_mode(static_cast<v1::AlibiMode>(8)); }, "mode"),
      Alibi(
          "future_unknown",
          [](v1::AlibiBiasRequest& r) { r.set_future(static_cast<v1::FutureMode>(-1)); }, "future"),
      Alibi(
          "form_buckets", [](v1::AlibiBiasRequest& r) { r.set_form(v1::BIAS_FORM_BUCKETS); },
          "form"),
      Alibi(
          "mask_without_bloom",
          [](v1::AlibiBiasRequest& r) {
            *r.mutable_attention_mask() = Int64Tensor({1, 5}, {1, 1, 1, 1, 1});
          },
          "attention_mask"),
      Alibi(
          "mask_shape_mismatch",
          [](v1::AlibiBiasRequest& r) {
            r.set_mode(v1::ALIBI_MODE_BLOOM);
            *r.mutable_attention_mask() = Int64Tensor({1, 4}, {1, 1, 1, 1});
          },
          "attention_mask"),
      Alibi(
          "output_over_limit_64x2^20x2^20",
          [](v1::AlibiBiasRequest& r) {
            r.set_num_heads(64);
            r.set_q_len(int64_t{1} << 20);
            r.set_k_len(int64_t{1} << 20);
          },
          "bias [64, 1048576, 1048576] has 7.0e+13 elements, over "
          "--max_output_elements=67108864",
          grpc::StatusCode::RESOURCE_EXHAUSTED),
      // ----- T5 relative bias -----
      T5(
          "max_distance_at_exact_range", [](v1::RelativeBiasRequest& r) { r.set_max_distance(8); },
          "max_distance"),
      T5(
          "unidirectional_max_distance_at_exact_range",
          [](v1::RelativeBiasRequest& r) {
            r.set_bidirectional(false);
            r.set_max_distance(16);
          },
          "max_distance"),
      T5(
          "table_shape_mismatch",
          [](v1::RelativeBiasRequest& r) {
            *r.mutable_table_inline() = FloatTensor({16, 2});
          },
          "table"),
      T5(
          "table_name_unknown", [](v1::RelativeBiasRequest& r) { r.set_table_name("t5_small"); },
          "table_name: no table named \"t5_small\" (loaded: none)"),
      T5(
          "no_table_for_full", [](v1::RelativeBiasRequest& r) { r.clear_table(); }, "table"),
      T5(
          "buckets_with_float_output",
          [](v1::RelativeBiasRequest& r) {
            r.set_form(v1::BIAS_FORM_BUCKETS);
            r.set_output_dtype(v1::DTYPE_FLOAT32);
          },
          "output_dtype"),
      T5(
          "num_buckets_too_small", [](v1::RelativeBiasRequest& r) { r.set_num_buckets(2); },
          "num_buckets"),
      // ----- Shaw relative embeddings -----
      RelEmb(
          "table_rows_not_2k_plus_1",
          [](v1::RelativeEmbeddingRequest& r) {
            *r.mutable_table_inline() = FloatTensor({4, 4});
          },
          "table"),
      RelEmb(
          "max_relative_negative", [](v1::RelativeEmbeddingRequest& r) { r.set_max_relative(-1); },
          "max_relative"),
      RelEmb(
          "table_dtype_int64",
          [](v1::RelativeEmbeddingRequest& r) {
            *r.mutable_table_inline() = Int64Tensor({5, 1}, {1, 2, 3, 4, 5});
          },
          "table_inline.dtype"),
      RelEmb(
          "q_len_zero", [](v1::RelativeEmbeddingRequest& r) { r.set_q_len(0); }, "q_len"),
  };
}

// ----- running a request through the handlers or a stub -----------------------------------

grpc::Status RunHandler(const HandlerContext& ctx, const AnyRequest& request) {
  return std::visit(
      [&ctx](const auto& req) -> grpc::Status {
        using T = std::decay_t<decltype(req)>;
        if constexpr (std::is_same_v<T, v1::SinusoidalRequest>) {
          v1::SinusoidalResponse resp;
          return HandleSinusoidal(ctx, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::AddPositionEncodingRequest>) {
          v1::AddPositionEncodingResponse resp;
          return HandleAddPositionEncoding(ctx, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::RopeCacheRequest>) {
          v1::RopeCacheResponse resp;
          return HandleRopeCache(ctx, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::ApplyRopeRequest>) {
          v1::ApplyRopeResponse resp;
          return HandleApplyRope(ctx, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::AlibiSlopesRequest>) {
          v1::AlibiSlopesResponse resp;
          return HandleAlibiSlopes(ctx, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::AlibiBiasRequest>) {
          v1::AlibiBiasResponse resp;
          return HandleAlibiBias(ctx, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::RelativeBiasRequest>) {
          v1::RelativeBiasResponse resp;
          return HandleRelativeBias(ctx, req, &resp);
        } else {
          v1::RelativeEmbeddingResponse resp;
          return HandleRelativeEmbedding(ctx, req, &resp);
        }
      },
      request);
}

grpc::Status RunStub(v1::PositionEncoding::Stub& stub, const AnyRequest& request) {
  return std::visit(
      [&stub](const auto& req) -> grpc::Status {
        using T = std::decay_t<decltype(req)>;
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        if constexpr (std::is_same_v<T, v1::SinusoidalRequest>) {
          v1::SinusoidalResponse resp;
          return stub.Sinusoidal(&context, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::AddPositionEncodingRequest>) {
          v1::AddPositionEncodingResponse resp;
          return stub.AddPositionEncoding(&context, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::RopeCacheRequest>) {
          v1::RopeCacheResponse resp;
          return stub.RopeCache(&context, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::ApplyRopeRequest>) {
          v1::ApplyRopeResponse resp;
          return stub.ApplyRope(&context, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::AlibiSlopesRequest>) {
          v1::AlibiSlopesResponse resp;
          return stub.AlibiSlopes(&context, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::AlibiBiasRequest>) {
          v1::AlibiBiasResponse resp;
          return stub.AlibiBias(&context, req, &resp);
        } else if constexpr (std::is_same_v<T, v1::RelativeBiasRequest>) {
          v1::RelativeBiasResponse resp;
          return stub.RelativeBias(&context, req, &resp);
        } else {
          v1::RelativeEmbeddingResponse resp;
          return stub.RelativeEmbedding(&context, req, &resp);
        }
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
        AnyRequest(ValidRelativeBias()), AnyRequest(ValidRelativeEmbedding())}) {
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

// Every case through a real server: same code, same message, and the server keeps serving.
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
  }
  grpc::ClientContext context;
  v1::GetServerInfoResponse info;
  EXPECT_TRUE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.backends(0).name(), "cpu");
  (*server)->Shutdown(std::chrono::system_clock::now());
  (*server)->Wait();
}

}  // namespace
}  // namespace posenc::server
