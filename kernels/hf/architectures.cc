// The architecture table of the config.json normalizer (architectures.h).
#include "kernels/hf/architectures.h"

#include <vector>

namespace posenc::hf {
namespace {

// One row per configuration class; "models/X/configuration_X.py" is the transformers file (the
// 5.x line) whose defaults the row repeats. Remote-code models (model_type not in transformers)
// name the repository's configuration file.
// NOLINTNEXTLINE(readability-function-size): a table of data, one row per class, not steps
const std::vector<Family>& Families() {
  static const auto* families = new std::vector<Family>{
      {.model_types = {"llama"},
       .source = "models/llama/configuration_llama.py",
       .max_position = 2048},
      {.model_types = {"llama4_text", "llama4"},
       .source = "models/llama4/configuration_llama4.py",
       .theta = 500000.0,
       .head_dim = 128,
       .max_position = 4096 * 32,
       .pairing = Pairing::kGptj,
       .layers = LayerRule::kNoRopeLayers,
       .layer_period = 4,
       .q_scale = QScale::kLlama4NoPE},
      {.model_types = {"mistral"},
       .source = "models/mistral/configuration_mistral.py",
       .max_position = 4096 * 32},
      // Ministral 3: the class-default YaRN dict carries llama_4_scaling_beta; Ministral3Attention
      // keeps MistralAttention's head_dim^-0.5 (no mscale^2). Not "mistral3": that composite also
      // wraps "mistral" text configs (its text_config's model_type decides).
      {.model_types = {"ministral3"},
       .source = "models/ministral3/configuration_ministral3.py",
       .theta = 1e6,
       .head_dim = 128,
       .max_position = 262144,
       .default_rope = R"({"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
                           "original_max_position_embeddings": 16384, "beta_fast": 32.0,
                           "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0,
                           "llama_4_scaling_beta": 0.1})",
       .q_scale = QScale::kLlama4ScalingBeta,
       .softmax_mscale = false},
      // Mistral 4: MLA (the rope slice qk_rope_head_dim, last in the head), rope_interleave
      // (default true), q scaled by llama_4_scaling_beta; Mistral4Attention's softmax scale is
      // qk_head_dim^-0.5 (no mscale^2).
      {.model_types = {"mistral4"},
       .source = "models/mistral4/configuration_mistral4.py",
       .max_position = 1048576,
       .pairing = Pairing::kInterleaveFlag,
       .interleave_default = true,
       .rope_head_dim = true,
       .default_rope = R"({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 128.0,
                           "original_max_position_embeddings": 8192, "beta_fast": 32.0,
                           "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0,
                           "llama_4_scaling_beta": 0.1})",
       .q_scale = QScale::kLlama4ScalingBeta,
       .softmax_mscale = false},
      {.model_types = {"mixtral"},
       .source = "models/mixtral/configuration_mixtral.py",
       .theta = 1e6,
       .max_position = 4096 * 32},
      {.model_types = {"qwen2", "qwen2_moe"},
       .source = "models/qwen2/configuration_qwen2.py",
       .max_position = 32768},
      {.model_types = {"qwen3", "qwen3_moe"},
       .source = "models/qwen3/configuration_qwen3.py",
       .head_dim = 128,
       .max_position = 32768},
      {.model_types = {"qwen3_next"},
       .source = "models/qwen3_next/configuration_qwen3_next.py",
       .head_dim = 256,
       .max_position = 32768,
       .partial = 0.25},
      {.model_types = {"qwen2_vl_text", "qwen2_vl", "qwen2_5_vl_text", "qwen2_5_vl"},
       .source = "models/qwen2_vl/configuration_qwen2_vl.py",
       .theta = 1e6,
       .max_position = 32768},
      {.model_types = {"qwen3_vl_text", "qwen3_vl", "qwen3_vl_moe_text", "qwen3_vl_moe"},
       .source = "models/qwen3_vl/configuration_qwen3_vl.py (modeling_qwen3_vl.py: "
                 "apply_interleaved_mrope)",
       .theta = 5e6,
       .head_dim = 128,
       .max_position = 128000,
       .mrope_layout = kernels::MropeLayout::kInterleaved},
      // GLM-4.1V: partial_rotary_factor 0.5 in the published files (no class default), GPT-J
      // pairs (rotate_half_llm), sections over the rotary half's frequencies.
      {.model_types = {"glm4v_text", "glm4v"},
       .source = "models/glm4v/configuration_glm4v.py (modeling_glm4v.py: rotate_half_llm)",
       .max_position = 32768,
       .pairing = Pairing::kGptj},
      // ERNIE-4.5-VL: mrope_section [s_h, s_w, s_t], h and w alternating, t last
      // (Ernie4_5_VLMoeTextRotaryEmbedding.recomposition_to_3d), GPT-J pairs (rotate_half_text).
      {.model_types = {"ernie4_5_vl_moe_text", "ernie4_5_vl_moe"},
       .source = "models/ernie4_5_vl_moe/configuration_ernie4_5_vl_moe.py",
       .theta = 500000.0,
       .max_position = 131072,
       .pairing = Pairing::kGptj,
       .mrope_layout = kernels::MropeLayout::kAlternating},
      {.model_types = {"deepseek_v2"},
       .source = "models/deepseek_v2/configuration_deepseek_v2.py",
       .max_position = 2048,
       .pairing = Pairing::kGptj,
       .rope_head_dim = true},
      {.model_types = {"deepseek_v3", "kimi_k2"},
       .source = "models/deepseek_v3/configuration_deepseek_v3.py (Kimi K2: its remote "
                 "configuration_deepseek.py, the same class)",
       .max_position = 4096,
       .pairing = Pairing::kInterleaveFlag,
       .interleave_default = true,
       .rope_head_dim = true},
      // DeepSeek-V3.2: MLA always interleaved (DeepseekV32Config removes rope_interleave), the
      // rope slice qk_rope_head_dim last in the head; its DSA indexer is a sub-module with a NEOX
      // RoPE of its own (submodules.cc).
      {.model_types = {"deepseek_v32"},
       .source = "models/deepseek_v32/modular_deepseek_v32.py",
       .max_position = 163840,
       .pairing = Pairing::kDeepseek,
       .rope_head_dim = true},
      // GLM-5 (GlmMoeDsaConfig extends DeepseekV32Config): GlmMoeDsaAttention rotates interleaved
      // (hard-coded); the indexer runs on the "full" layers of indexer_types (submodules.cc).
      {.model_types = {"glm_moe_dsa"},
       .source = "models/glm_moe_dsa/modular_glm_moe_dsa.py",
       .max_position = 202752,
       .pairing = Pairing::kDeepseek,
       .rope_head_dim = true},
      {.model_types = {"gemma"},
       .source = "models/gemma/configuration_gemma.py",
       .head_dim = 256,
       .max_position = 8192},
      {.model_types = {"gemma2"},
       .source = "models/gemma2/configuration_gemma2.py",
       .head_dim = 256,
       .max_position = 8192,
       .layers = LayerRule::kAlternating},
      {.model_types = {"gemma3_text", "gemma3"},
       .source = "models/gemma3/configuration_gemma3.py",
       .theta = 1e6,
       .head_dim = 256,
       .max_position = 131072,
       .layers = LayerRule::kSlidingPattern,
       .layer_period = 6,
       .local_theta = 10000.0,
       .local_theta_key = "rope_local_base_freq"},
      {.model_types = {"gemma4_text", "gemma4"},
       .source = "models/gemma4/configuration_gemma4.py",
       .theta = 1e6,
       .head_dim = 256,
       .max_position = 131072},
      {.model_types = {"phi"},
       .source = "models/phi/configuration_phi.py",
       .max_position = 2048,
       .partial = 0.5},
      {.model_types = {"phi3"},
       .source = "models/phi3/configuration_phi3.py",
       .max_position = 4096},
      {.model_types = {"phimoe"},
       .source = "models/phimoe/configuration_phimoe.py",
       .theta = 1e6,
       .max_position = 4096 * 32},
      {.model_types = {"gptj"},
       .source = "models/gptj/configuration_gptj.py (base 10000 is "
                 "hard-coded in modeling_gptj.py)",
       .max_position = 2048,
       .rotary_dim = 64,
       .pairing = Pairing::kGptj},
      {.model_types = {"gpt_neox"},
       .source = "models/gpt_neox/configuration_gpt_neox.py",
       .max_position = 2048,
       .partial = 0.25},
      {.model_types = {"gpt_neox_japanese"},
       .source = "models/gpt_neox_japanese/configuration_gpt_neox_japanese.py",
       .max_position = 2048,
       .partial = 1.0},
      {.model_types = {"cohere"},
       .source = "models/cohere/configuration_cohere.py",
       .max_position = 8192,
       .pairing = Pairing::kGptj},
      {.model_types = {"cohere2"},
       .source = "models/cohere2/configuration_cohere2.py",
       .max_position = 8192,
       .pairing = Pairing::kGptj,
       .layers = LayerRule::kSlidingPattern,
       .layer_period = 4,
       .nope_full_attention = true},
      {.model_types = {"glm", "glm4"},
       .source = "models/glm/configuration_glm.py",
       .head_dim = 128,
       .max_position = 131072,
       .partial = 0.5,
       .pairing = Pairing::kGptj},
      {.model_types = {"glm4_moe"},
       .source = "models/glm4_moe/configuration_glm4_moe.py",
       .head_dim = 128,
       .max_position = 131072,
       .partial = 0.5},
      {.model_types = {"chatglm"},
       .source = "THUDM/chatglm3-6b configuration_chatglm.py (remote)",
       .max_position = 32768,
       .pairing = Pairing::kGptj,
       .chatglm = true},
      {.model_types = {"internlm2", "internlm", "internlm3"},
       .source = "internlm/internlm2_5-7b-chat configuration_internlm2.py (remote)",
       .max_position = 2048},
      {.model_types = {"olmo", "olmo2", "olmoe"},
       .source = "models/olmo2/configuration_olmo2.py",
       .max_position = 2048},
      {.model_types = {"smollm3"},
       .source = "models/smollm3/configuration_smollm3.py",
       .theta = 2e6,
       .max_position = 32768,
       .layers = LayerRule::kNoRopeLayers,
       .layer_period = 4},
      {.model_types = {"stablelm"},
       .source = "models/stablelm/configuration_stablelm.py",
       .max_position = 4096,
       .partial = 0.25},
      {.model_types = {"modernbert"},
       .source = "models/modernbert/configuration_modernbert.py",
       .theta = 160000.0,
       .max_position = 8192,
       .layers = LayerRule::kGlobalEveryN,
       .layer_period = 3,
       .local_theta = 10000.0,
       .global_theta_key = "global_rope_theta",
       .local_theta_key = "local_rope_theta"},
      {.model_types = {"gpt_oss"},
       .source = "models/gpt_oss/configuration_gpt_oss.py",
       .theta = 150000.0,
       .head_dim = 64,
       .max_position = 131072,
       .default_rope = R"({"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                           "beta_slow": 1.0, "truncate": false,
                           "original_max_position_embeddings": 4096})"},
      {.model_types = {"minimax", "minimax_m2"},
       .source = "models/minimax/configuration_minimax.py (rotary_dim read as given)",
       .theta = 1e6,
       .max_position = 4096 * 32},
      {.model_types = {"mimo"},
       .source = "XiaomiMiMo/MiMo-7B-Base configuration_mimo.py (remote, "
                 "Qwen2's class)",
       .max_position = 32768},
      // Hunyuan: rope_scaling {"type": "dynamic", "alpha": A} is DynamicNTKAlpha (a fixed base).
      {.model_types = {"hunyuan_v1_dense", "hunyuan_v1_moe"},
       .source = "models/hunyuan_v1_dense/configuration_hunyuan_v1_dense.py",
       .max_position = 2048},
  };
  return *families;
}

}  // namespace

const Family& GenericFamily() {
  static const auto* generic = new Family{.source = "transformers' PreTrainedConfig defaults"};
  return *generic;
}

const Family* FindFamily(absl::string_view model_type) {
  for (const Family& f : Families()) {
    for (absl::string_view name : f.model_types) {
      if (name == model_type) return &f;
    }
  }
  return nullptr;
}

}  // namespace posenc::hf
