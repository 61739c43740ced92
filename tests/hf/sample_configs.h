// Published config.json texts (or their RoPE parts) the normalizer's tests (tests/hf) and the
// RPC tests through it (tests/server/hf_config_test.cc) share.
#ifndef POSENC_TESTS_HF_SAMPLE_CONFIGS_H_
#define POSENC_TESTS_HF_SAMPLE_CONFIGS_H_

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

#ifndef POSENC_HF_CONFIGS_DIR
#error "POSENC_HF_CONFIGS_DIR must name tests/hf_configs"
#endif

namespace posenc::hf::testing {

// meta-llama/Llama-3.1-8B
inline constexpr char kLlama31[] = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
  "num_key_value_heads": 8, "max_position_embeddings": 131072, "rope_theta": 500000.0,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "torch_dtype": "bfloat16", "vocab_size": 128256})";

// Qwen/Qwen2.5-7B-Instruct with the YaRN block its model card recommends for long context.
inline constexpr char kQwen25[] = R"({
  "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
  "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": 131072,
  "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}})";

// deepseek-ai/DeepSeek-V3
inline constexpr char kDeepSeekV3[] = R"({
  "hidden_size": 7168, "num_attention_heads": 128, "kv_lora_rank": 512, "q_lora_rank": 1536,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
  "max_position_embeddings": 163840, "rope_theta": 10000,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"}})";

// EleutherAI/gpt-neox-20b
inline constexpr char kNeox20b[] = R"({
  "hidden_size": 6144, "num_attention_heads": 64, "rotary_pct": 0.25,
  "rotary_emb_base": 10000, "max_position_embeddings": 2048, "use_parallel_residual": true})";

// mistralai/Mistral-7B-v0.3
inline constexpr char kMistral7b[] = R"({
  "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
  "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": null})";

// The published config.json of microsoft/Phi-3-vision-128k-instruct's language model (the
// Phi-3-mini-128k architecture: hidden 3072, 32 heads, head dim 96), LongRoPE under its older
// spelling "su", 48 factors each (d/2), from tests/hf_configs/config_only; and its factors.
inline std::string Phi3Vision128k(std::vector<double>* short_factor,
                                  std::vector<double>* long_factor) {
  std::ifstream in(std::string(POSENC_HF_CONFIGS_DIR) +
                   "/config_only/phi-3-vision-128k-instruct.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  *short_factor = j["rope_scaling"]["short_factor"].get<std::vector<double>>();
  *long_factor = j["rope_scaling"]["long_factor"].get<std::vector<double>>();
  return text.str();
}

// A config.json of tests/hf_configs/config_only, whole (`name` without ".json"; its README says
// which are published files and which are reconstructed from published values).
inline std::string ConfigOnly(const std::string& name) {
  std::ifstream in(std::string(POSENC_HF_CONFIGS_DIR) + "/config_only/" + name + ".json");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A Hunyuan dense config.json in the shape tencent publishes (model_type hunyuan_v1_dense,
// rope_scaling type dynamic with alpha beside factor 1.0 and YaRN keys it does not read).
inline constexpr char kHunyuanDense[] = R"({
  "model_type": "hunyuan_v1_dense", "hidden_size": 4096, "num_attention_heads": 32,
  "head_dim": 128, "num_hidden_layers": 32, "max_position_embeddings": 262144,
  "rope_theta": 10000.0,
  "rope_scaling": {"alpha": 50.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0,
                   "mscale": 1.0, "mscale_all_dim": 1.0, "type": "dynamic"}})";

}  // namespace posenc::hf::testing

#endif  // POSENC_TESTS_HF_SAMPLE_CONFIGS_H_
