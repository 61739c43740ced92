// The RoPE configuration flags (rope_config.h).
#include "client/cli/rope_config.h"

#include <optional>
#include <string>

#include "client/cli/wire_names.h"
#include "kernels/common/file.h"
#include "kernels/common/status.h"

namespace posenc::cli {

const FlagGroup& RopeConfigFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"hf-config", FlagType::kString, "FILE",
       "a Hugging Face config.json as the RoPE configuration"},
      {"layer-type", FlagType::kString, "NAME",
       "with --hf-config: the layer's type (sliding_attention, ...) or index"},
      {"submodule", FlagType::kString, "NAME",
       "with --hf-config: a part of the layer with its own RoPE (indexer: DeepSeek-V3.2 / GLM-5)"},
      {"head-dim", FlagType::kInt, "N", "head width (apply-rope: default the last dim of q)"},
      {"rotary-dim", FlagType::kInt, "N", "rotated channels d (even, default head-dim)"},
      {"base", FlagType::kDouble, "B", "rope_theta (default 10000)"},
      EnumFlagSpec<client::RopeStyle>("style", "rotation pairs (default neox)"),
      EnumFlagSpec<client::RopeScalingType>("scaling", "rope scaling type (default: none)"),
      {"factor", FlagType::kDouble, "S", "scaling factor s"},
      {"original-max-pos", FlagType::kInt, "N", "original_max_position_embeddings L0"},
      {"max-pos", FlagType::kInt, "N", "max_position_embeddings Lmax"},
      {"beta-fast", FlagType::kDouble, "X", "yarn beta_fast (default 32)"},
      {"beta-slow", FlagType::kDouble, "X", "yarn beta_slow (default 1)"},
      {"no-truncate", FlagType::kSwitch, "", "yarn: no floor/ceil of the correction range"},
      {"mscale", FlagType::kDouble, "X", "yarn mscale (DeepSeek)"},
      {"mscale-all-dim", FlagType::kDouble, "X", "yarn mscale_all_dim (DeepSeek)"},
      {"attention-factor", FlagType::kDouble, "M", "yarn/longrope attention factor override"},
      {"low-freq-factor", FlagType::kDouble, "X", "llama3 low_freq_factor"},
      {"high-freq-factor", FlagType::kDouble, "X", "llama3 high_freq_factor"},
      {"long-factor", FlagType::kDoubleList, "LIST", "longrope long_factor (d/2 values)"},
      {"short-factor", FlagType::kDoubleList, "LIST", "longrope short_factor (d/2 values)"},
      {"partial-rotary-factor", FlagType::kDouble, "P",
       "proportional: fraction of the frequencies that rotate"},
      {"alpha", FlagType::kDouble, "A", "dynamic (Hunyuan): fixed base b*A^(d/(d-2))"},
      {"freq-factors", FlagType::kDoubleList, "LIST",
       "per-frequency divisors of omega (d/2 values, GGUF rope_freqs)"},
      {"mrope-section", FlagType::kIntList, "T,H,W", "M-RoPE sections (sum d/2)"},
      {"frequency-axes", FlagType::kIntList, "LIST",
       "the position axis each frequency reads (d/2 values; replaces the layout's map)"},
      EnumFlagSpec<client::MropeLayout>("mrope-layout", "M-RoPE layout (default contiguous)"),
      {"seq-len", FlagType::kInt, "N", "seq_len for dynamic/longrope (default max position + 1)"},
      {"inverse", FlagType::kSwitch, "", "rotate by -theta and divide by m (undo)"},
      {"no-attention-factor", FlagType::kSwitch, "",
       "do not multiply cos/sin by the attention factor m"},
  };
  return *kFlags;
}

absl::StatusOr<client::RopeConfig> ReadRopeConfigFlags(const ParsedFlags& flags) {
  client::RopeConfig config;
  if (std::optional<std::string> path = flags.String("hf-config")) {
    POSENC_ASSIGN_OR_RETURN(config.hf_config_json, kernels::ReadFileToString(*path));
  }
  config.layer_type = flags.String("layer-type").value_or("");
  config.submodule = flags.String("submodule").value_or("");
  config.head_dim = flags.Int("head-dim").value_or(0);
  config.rotary_dim = flags.Int("rotary-dim");
  config.base = flags.Double("base");
  config.style = EnumFlag<client::RopeStyle>(flags, "style");
  client::RopeScaling& s = config.scaling;
  s.type = EnumFlag<client::RopeScalingType>(flags, "scaling");
  s.factor = flags.Double("factor");
  s.original_max_position_embeddings = flags.Int("original-max-pos");
  s.beta_fast = flags.Double("beta-fast");
  s.beta_slow = flags.Double("beta-slow");
  if (flags.Switch("no-truncate")) s.truncate = false;
  s.mscale = flags.Double("mscale");
  s.mscale_all_dim = flags.Double("mscale-all-dim");
  s.attention_factor = flags.Double("attention-factor");
  s.low_freq_factor = flags.Double("low-freq-factor");
  s.high_freq_factor = flags.Double("high-freq-factor");
  s.long_factor = flags.DoubleList("long-factor");
  s.short_factor = flags.DoubleList("short-factor");
  s.partial_rotary_factor = flags.Double("partial-rotary-factor");
  s.alpha = flags.Double("alpha");
  config.freq_factors = flags.DoubleList("freq-factors");
  config.max_position_embeddings = flags.Int("max-pos");
  config.mrope_section = flags.IntList("mrope-section");
  config.frequency_axes = flags.IntList("frequency-axes");
  config.mrope_layout = EnumFlag<client::MropeLayout>(flags, "mrope-layout");
  config.inverse = flags.Switch("inverse");
  if (flags.Switch("no-attention-factor")) config.apply_attention_factor = false;
  config.seq_len = flags.Int("seq-len");
  return config;
}

Json DerivedToJson(const client::RopeDerived& d) {
  Json j;
  j["head_dim"] = d.head_dim;
  j["rotary_dim"] = d.rotary_dim;
  j["style"] = NameOf(d.style);
  j["scaling"] = NameOf(d.scaling_type);
  j["effective_base"] = d.effective_base;
  j["factor"] = d.factor;
  j["attention_factor"] = d.attention_factor;
  j["attention_factor_applied"] = d.attention_factor_applied;
  if (d.seq_len != 0) j["seq_len"] = d.seq_len;
  if (d.scaling_type == client::RopeScalingType::kYarn) {
    j["yarn_low"] = d.yarn_low;
    j["yarn_high"] = d.yarn_high;
  }
  if (d.scaling_type == client::RopeScalingType::kLongrope) {
    j["longrope_factors"] = d.longrope_long_factors ? "long" : "short";
  }
  if (!d.model_type.empty()) j["model_type"] = d.model_type;
  if (!d.layer_type.empty()) j["layer_type"] = d.layer_type;
  if (!d.submodule.empty()) j["submodule"] = d.submodule;
  if (d.nope) j["nope"] = true;
  if (!d.warnings.empty()) j["warnings"] = d.warnings;
  j["inv_freq"] = d.inv_freq;
  return j;
}

}  // namespace posenc::cli
