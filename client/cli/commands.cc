#include "client/cli/commands.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/cli/bench.h"
#include "client/cli/check.h"
#include "client/cli/npy.h"
#include "client/cli/png.h"
#include "kernels/common/file.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"

namespace posenc::cli {
namespace {

constexpr char kUsagePayloadUrl[] = "type.posenc.dev/cli.usage";

// ---------------------------------------------------------------------------------------------
// Flag tables.
// ---------------------------------------------------------------------------------------------
const FlagGroup kPositionFlags = {
    {"positions", FlagType::kString, "SPEC",
     "START:END (half-open: 0:8 is 0..7), a list 3,5,9, or ids.npy (M-RoPE: [3, n])"},
    {"offsets", FlagType::kIntList, "LIST",
     "token t of sequence b at offsets[b]+t (with --cu-seqlens: per packed sequence)"},
    {"cu-seqlens", FlagType::kIntList, "LIST", "packed sequences, e.g. 0,3,7 (THD)"},
    {"mask", FlagType::kString, "MASK",
     "attention mask, 1 = real token: a list 0,1,1 ([1, n]) or mask.npy [B, S]"},
};

const FlagGroup kOutputDTypeFlags = {
    FloatDTypeFlag("output dtype (default float32)"),
    {"npy", FlagType::kString, "FILE", "also write the main output to FILE as .npy"},
};

const FlagGroup kSinusoidalParamFlags = {
    {"dim", FlagType::kInt, "D", "table width D (add: 0 = the width of x)"},
    {"base", FlagType::kDouble, "B", "base (default 10000)"},
    {"layout", FlagType::kChoice, "", "column layout (default interleaved)", "interleaved|concat"},
    {"freq", FlagType::kChoice, "",
     "frequency scheme (default vaswani for interleaved, t2t for concat)", "vaswani|t2t"},
};

const FlagGroup kRopeConfigFlags = {
    {"hf-config", FlagType::kString, "FILE",
     "a Hugging Face config.json as the RoPE configuration"},
    {"layer-type", FlagType::kString, "NAME",
     "with --hf-config: the layer's type (sliding_attention, ...) or index"},
    {"head-dim", FlagType::kInt, "N", "head width (apply-rope: default the last dim of q)"},
    {"rotary-dim", FlagType::kInt, "N", "rotated channels d (even, default head-dim)"},
    {"base", FlagType::kDouble, "B", "rope_theta (default 10000)"},
    {"style", FlagType::kChoice, "", "rotation pairs (default neox)", "neox|gptj|deepseek"},
    {"scaling", FlagType::kChoice, "", "rope scaling type (default: none)",
     "default|linear|ntk|dynamic|yarn|llama3|longrope|proportional"},
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
    {"mrope-layout", FlagType::kChoice, "", "M-RoPE layout (default contiguous)",
     "contiguous|interleaved"},
    {"seq-len", FlagType::kInt, "N", "seq_len for dynamic/longrope (default max position + 1)"},
    {"inverse", FlagType::kSwitch, "", "rotate by -theta and divide by m (undo)"},
    {"no-attention-factor", FlagType::kSwitch, "",
     "do not multiply cos/sin by the attention factor m"},
};

const FlagGroup kTensorInputFlags = {
    {"shape", FlagType::kIntList, "DIMS", "generate the input with this shape, e.g. 1,4,2,8"},
    {"fill", FlagType::kChoice, "", "values of a generated input (default ones)",
     "ones|iota|random"},
    {"seed", FlagType::kInt, "N", "seed of --fill random (default 0)"},
};

const FlagGroup kSinusoidalFlags = {
    FloatDTypeFlag("output dtype (default float32)"),
    {"npy", FlagType::kString, "FILE", "also write the table to FILE as .npy"},
    kPngFlag,
};

const FlagGroup kAddFlags = {
    {"x", FlagType::kString, "FILE", "x from a .npy file, [B, T, D] or [T, D]"},
    FloatDTypeFlag("dtype of x (generated, or converted from --x)"),
    {"table", FlagType::kString, "FILE", "learned table E[max_pos, D] from a .npy file"},
    {"table-name", FlagType::kString, "NAME", "learned table loaded by the server"},
    {"table-offset", FlagType::kInt, "K", "position p reads row p+K (fairseq, OPT: 2)"},
    {"combine", FlagType::kChoice, "", "x*scale + PE or [x*scale ; PE] (default add)",
     "add|concat"},
    {"scale", FlagType::kDouble, "S", "multiply x by S first (e.g. sqrt(D))"},
    {"padding-idx", FlagType::kInt, "N", "fairseq padding_idx (sinusoidal)"},
    {"npy", FlagType::kString, "FILE", "also write y to FILE as .npy"},
    kPngFlag,
};

const FlagGroup kRopeCacheFlags = {
    FloatDTypeFlag("output dtype (default float32)"),
    {"layout", FlagType::kChoice, "", "cache layout: [n, d/2] or full width [n, d]",
     "compact|neox|gptj"},
    {"out-cos", FlagType::kString, "FILE", "write cos to FILE as .npy"},
    {"out-sin", FlagType::kString, "FILE", "write sin to FILE as .npy"},
    kPngFlag,
};

const FlagGroup kApplyRopeFlags = {
    {"q", FlagType::kString, "FILE", "q from a .npy file"},
    {"k", FlagType::kString, "FILE", "k from a .npy file (optional)"},
    {"k-heads", FlagType::kInt, "N", "with --shape: also generate a k with N heads"},
    FloatDTypeFlag("dtype of q/k (generated, or converted from the files)"),
    {"layout", FlagType::kChoice, "", "tensor layout (default bshd)", "bshd|bhsd|thd"},
    {"out-q", FlagType::kString, "FILE", "write the rotated q to FILE as .npy"},
    {"npy", FlagType::kString, "FILE", "same as --out-q"},
    {"out-k", FlagType::kString, "FILE", "write the rotated k to FILE as .npy"},
    kPngFlag,
};

const FlagGroup kAlibiSlopesFlags = {
    {"heads", FlagType::kInt, "N", "number of heads"},
    {"max-bias", FlagType::kDouble, "B", "maximum bias (default 8)"},
};

const FlagGroup kAlibiBiasFlags = {
    {"heads", FlagType::kInt, "N", "number of heads"},
    {"q-len", FlagType::kInt, "N", "number of queries"},
    {"k-len", FlagType::kInt, "N", "number of keys"},
    {"query-offset", FlagType::kInt, "N", "position of query 0 (default k-len - q-len)"},
    {"mode", FlagType::kChoice, "", "bias formula (default causal)", "causal|symmetric|bloom"},
    {"future", FlagType::kChoice, "", "keys after the query (default mask = -inf)",
     "mask|zero|linear"},
    {"max-bias", FlagType::kDouble, "B", "maximum bias (default 8)"},
    {"form", FlagType::kChoice, "",
     "full matrices over the wire, or the compact form (default: full matrices, fetched "
     "compact and expanded here)",
     "full|compact"},
    {"expand", FlagType::kSwitch, "",
     "with --form compact: expand the compact form locally to full matrices"},
    {"mask", FlagType::kString, "MASK",
     "bloom: attention mask, a list 0,1,1 ([1, k]) or mask.npy [B, k]"},
    kPngFlag,
};

const FlagGroup kRelativeFlags = {
    {"q-len", FlagType::kInt, "N", "number of queries"},
    {"k-len", FlagType::kInt, "N", "number of keys"},
    {"query-offset", FlagType::kInt, "N", "position of query 0 (default k-len - q-len)"},
    {"key-offset", FlagType::kInt, "N", "position of key 0 (default 0)"},
    {"table", FlagType::kString, "FILE", "the table from a .npy file"},
    {"table-name", FlagType::kString, "NAME", "a table loaded by the server"},
    {"random-table", FlagType::kInt, "SEED", "a random table (uniform in [-1, 1]) for a demo"},
};

const FlagGroup kRelativeBiasFlags = {
    {"heads", FlagType::kInt, "N", "heads of --random-table (default 4)"},
    {"bidirectional", FlagType::kSwitch, "", "encoder buckets (the default)"},
    {"unidirectional", FlagType::kSwitch, "", "decoder buckets"},
    {"num-buckets", FlagType::kInt, "N", "number of buckets (default 32)"},
    {"max-distance", FlagType::kInt, "N", "max distance (default 128)"},
    {"form", FlagType::kChoice, "", "[H,q,k], the compact [H,q+k-1], or INT32 buckets [q,k]",
     "full|compact|buckets"},
    {"expand", FlagType::kSwitch, "",
     "with --form compact: expand the compact form locally to full matrices"},
    kPngFlag,
};

const FlagGroup kRelativeEmbeddingFlags = {
    {"max-relative", FlagType::kInt, "K", "clip distance K (table rows 2K+1)"},
    {"embed-dim", FlagType::kInt, "D", "width of --random-table (default 4)"},
    kPngFlag,
};

const FlagGroup kHealthFlags = {
    {"service", FlagType::kString, "NAME", "service to check (default: the whole server)"},
};

// ---------------------------------------------------------------------------------------------
// Shared helpers.
// ---------------------------------------------------------------------------------------------

// The enum value of choice flag `name` (`fallback` when absent). The parser has already checked
// the value is one of the flag's choices, which `table` lists in the same spelling.
template <typename E>
E ChoiceFlag(const ParsedFlags& flags, std::string_view name,
             std::initializer_list<std::pair<std::string_view, E>> table, E fallback) {
  std::optional<std::string> value = flags.String(name);
  if (!value.has_value()) return fallback;
  for (const auto& [word, e] : table) {
    if (word == *value) return e;
  }
  return fallback;
}

// --dtype; nullopt when absent (the server's default).
std::optional<DType> DTypeFlag(const ParsedFlags& flags) {
  std::optional<std::string> value = flags.String("dtype");
  return value.has_value() ? client::ParseDType(*value) : std::nullopt;
}

// Writes `tensor` as .npy (BFLOAT16 widened to FLOAT32, exactly: NumPy has no bfloat16) and
// says so on stderr.
absl::Status WriteNpyFile(const std::string& path, const Tensor& tensor) {
  if (tensor.dtype == DType::kBFloat16) {
    POSENC_ASSIGN_OR_RETURN(Tensor wide, client::ConvertTensor(tensor, DType::kFloat32));
    POSENC_RETURN_IF_ERROR(WriteNpy(path, wide));
    std::cerr << "wrote " << path << " (BFLOAT16 widened to FLOAT32 ["
              << absl::StrJoin(tensor.shape, ", ") << "])\n";
    return absl::OkStatus();
  }
  POSENC_RETURN_IF_ERROR(WriteNpy(path, tensor));
  std::cerr << "wrote " << path << " (" << client::DTypeName(tensor.dtype) << " ["
            << absl::StrJoin(tensor.shape, ", ") << "])\n";
  return absl::OkStatus();
}

absl::Status MaybeWriteNpy(const ParsedFlags& flags, std::string_view flag, const Tensor& t) {
  std::optional<std::string> path = flags.String(flag);
  return path.has_value() ? WriteNpyFile(*path, t) : absl::OkStatus();
}

// An INT64 tensor from "a,b,c" ([1, n] for masks, [n] otherwise) or from an integer .npy file.
absl::StatusOr<Tensor> IntTensorFromText(std::string_view flag, const std::string& text,
                                         bool as_row) {
  if (absl::EndsWith(text, ".npy")) {
    POSENC_ASSIGN_OR_RETURN(Tensor t, ReadNpy(text));
    if (client::IsFloatDType(t.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(text, ": --", AbslView(flag),
                                                     " needs an INT32 or INT64 array, got ",
                                                     std::string(client::DTypeName(t.dtype))));
    }
    return t;
  }
  std::vector<int64_t> values;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(item, &v)) {
      return UsageError(absl::StrCat(
          "--", AbslView(flag), " expects a list of integers or a .npy file, got '", text, "'"));
    }
    values.push_back(v);
  }
  std::vector<int64_t> shape = {static_cast<int64_t>(values.size())};
  if (as_row) shape.insert(shape.begin(), 1);
  return Tensor::FromInt64s(values, std::move(shape));
}

// The positions of the request; `labels` gets the positions of a 1-D spec (row labels).
absl::StatusOr<Positions> PositionsFromFlags(const ParsedFlags& flags,
                                             std::vector<int64_t>* labels) {
  const int kinds = flags.Has("positions") + flags.Has("cu-seqlens") + flags.Has("mask") +
                    (flags.Has("offsets") && !flags.Has("cu-seqlens"));
  if (kinds > 1) {
    return UsageError(
        "give at most one of --positions, --offsets, --cu-seqlens (with optional --offsets) "
        "and --mask");
  }
  if (flags.Has("cu-seqlens")) {
    return Positions::CuSeqlens(flags.IntList("cu-seqlens"), flags.IntList("offsets"));
  }
  if (flags.Has("offsets")) return Positions::Offsets(flags.IntList("offsets"));
  if (std::optional<std::string> mask = flags.String("mask")) {
    POSENC_ASSIGN_OR_RETURN(Tensor t, IntTensorFromText("mask", *mask, /*as_row=*/true));
    Positions p;
    p.kind = Positions::Kind::kAttentionMask;
    p.tensor = std::move(t);
    return p;
  }
  std::optional<std::string> spec = flags.String("positions");
  if (!spec.has_value()) return Positions::Default();
  if (std::vector<std::string> parts = absl::StrSplit(*spec, ':'); parts.size() == 2) {
    int64_t start = 0;
    int64_t end = 0;
    if (!absl::SimpleAtoi(parts[0], &start) || !absl::SimpleAtoi(parts[1], &end) || end < start) {
      return UsageError(
          absl::StrCat("--positions START:END needs integers with END >= START, "
                       "got '",
                       *spec, "'"));
    }
    for (int64_t p = start; p < end && p - start < (int64_t{1} << 20); ++p) {
      labels->push_back(p);
    }
    return Positions::Range(start, end - start);
  }
  POSENC_ASSIGN_OR_RETURN(Tensor ids, IntTensorFromText("positions", *spec, false));
  if (ids.shape.size() == 1) *labels = ids.ToInt64s();
  return Positions::Ids(std::move(ids));
}

absl::StatusOr<client::RopeConfig> RopeConfigFromFlags(const ParsedFlags& flags) {
  using client::RopeScalingType;
  client::RopeConfig config;
  if (std::optional<std::string> path = flags.String("hf-config")) {
    POSENC_ASSIGN_OR_RETURN(config.hf_config_json, kernels::ReadFileToString(*path));
  }
  config.layer_type = flags.String("layer-type").value_or("");
  config.head_dim = flags.Int("head-dim").value_or(0);
  config.rotary_dim = flags.Int("rotary-dim");
  config.base = flags.Double("base");
  config.style = ChoiceFlag(flags, "style",
                            {{"neox", client::RopeStyle::kNeox},
                             {"gptj", client::RopeStyle::kGptj},
                             {"deepseek", client::RopeStyle::kDeepseek}},
                            client::RopeStyle::kUnspecified);
  client::RopeScaling& s = config.scaling;
  s.type = ChoiceFlag(flags, "scaling",
                      {{"default", RopeScalingType::kDefault},
                       {"linear", RopeScalingType::kLinear},
                       {"ntk", RopeScalingType::kNtk},
                       {"dynamic", RopeScalingType::kDynamic},
                       {"yarn", RopeScalingType::kYarn},
                       {"llama3", RopeScalingType::kLlama3},
                       {"longrope", RopeScalingType::kLongrope},
                       {"proportional", RopeScalingType::kProportional}},
                      RopeScalingType::kUnspecified);
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
  config.mrope_layout = ChoiceFlag(flags, "mrope-layout",
                                   {{"contiguous", client::MropeLayout::kContiguous},
                                    {"interleaved", client::MropeLayout::kInterleaved}},
                                   client::MropeLayout::kUnspecified);
  config.inverse = flags.Switch("inverse");
  if (flags.Switch("no-attention-factor")) config.apply_attention_factor = false;
  config.seq_len = flags.Int("seq-len");
  return config;
}

std::string_view ScalingName(client::RopeScalingType type) {
  static constexpr std::string_view kNames[] = {"default", "default",  "linear",
                                                "ntk",     "dynamic",  "yarn",
                                                "llama3",  "longrope", "proportional"};
  return kNames[static_cast<int>(type)];
}

std::string StyleName(client::RopeStyle style) {
  return style == client::RopeStyle::kGptj       ? "gptj"
         : style == client::RopeStyle::kDeepseek ? "deepseek"
                                                 : "neox";
}

Json DerivedToJson(const client::RopeDerived& d) {
  Json j;
  j["head_dim"] = d.head_dim;
  j["rotary_dim"] = d.rotary_dim;
  j["style"] = StyleName(d.style);
  j["scaling"] = std::string(ScalingName(d.scaling_type));
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
  if (d.nope) j["nope"] = true;
  if (!d.warnings.empty()) j["warnings"] = d.warnings;
  j["inv_freq"] = d.inv_freq;
  return j;
}

// A generated tensor for demonstrations: ones, 0,1,2,... or uniform in [-1, 1].
absl::StatusOr<Tensor> GeneratedTensor(const ParsedFlags& flags, std::vector<int64_t> shape,
                                       DType dtype, uint64_t seed_salt) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0 || d > (int64_t{1} << 31) || n > (int64_t{1} << 31) / d) {
      return UsageError(absl::StrCat("--shape ", absl::StrJoin(shape, ","),
                                     ": dimensions must be positive and the size at most 2^31"));
    }
    n *= d;
  }
  const std::string fill = flags.String("fill").value_or("ones");
  std::vector<double> values(static_cast<size_t>(n), 1.0);
  if (fill == "iota") {
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  } else if (fill == "random") {
    std::mt19937_64 rng(static_cast<uint64_t>(flags.Int("seed").value_or(0)) + seed_salt);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    for (double& v : values) v = uniform(rng);
  }
  return Tensor::FromDoubles(values, std::move(shape), dtype);
}

// A float input tensor from --<file_flag> (converted to --dtype when given).
absl::StatusOr<Tensor> FloatTensorFromFile(const ParsedFlags& flags, const std::string& path) {
  POSENC_ASSIGN_OR_RETURN(Tensor t, ReadNpy(path));
  if (!client::IsFloatDType(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected a float array, got ",
                                                   std::string(client::DTypeName(t.dtype))));
  }
  if (std::optional<DType> dtype = DTypeFlag(flags)) return client::ConvertTensor(t, *dtype);
  return t;
}

// A table from --table FILE, --table-name NAME or --random-table SEED (shape `random_shape`).
absl::Status TableFromFlags(const ParsedFlags& flags, std::vector<int64_t> random_shape,
                            std::optional<Tensor>* table_inline, std::string* table_name) {
  if (flags.Has("table") + flags.Has("table-name") + flags.Has("random-table") > 1) {
    return UsageError("give one of --table, --table-name and --random-table");
  }
  if (std::optional<std::string> path = flags.String("table")) {
    POSENC_ASSIGN_OR_RETURN(*table_inline, ReadNpy(*path));
  } else if (std::optional<std::string> name = flags.String("table-name")) {
    *table_name = *name;
  } else if (std::optional<int64_t> seed = flags.Int("random-table")) {
    std::mt19937_64 rng(static_cast<uint64_t>(*seed));
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    int64_t n = 1;
    for (int64_t d : random_shape) {
      if (d <= 0 || d > (int64_t{1} << 24)) {
        return UsageError(absl::StrCat("--random-table: invalid table shape [",
                                       absl::StrJoin(random_shape, ", "), "]"));
      }
      n *= d;
    }
    std::vector<double> values(static_cast<size_t>(n));
    for (double& v : values) v = uniform(rng);
    POSENC_ASSIGN_OR_RETURN(*table_inline,
                            Tensor::FromDoubles(values, std::move(random_shape), DType::kFloat32));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RequiredInt(const ParsedFlags& flags, std::string_view name) {
  std::optional<int64_t> v = flags.Int(name);
  if (!v.has_value()) return UsageError(absl::StrCat("--", AbslView(name), " is required"));
  return *v;
}

// ---------------------------------------------------------------------------------------------
// The commands.
// ---------------------------------------------------------------------------------------------
absl::StatusOr<CommandOutput> RunSinusoidal(const ParsedFlags& flags,
                                            const client::Client& client) {
  client::SinusoidalOptions options;
  std::vector<int64_t> labels;
  POSENC_ASSIGN_OR_RETURN(options.positions, PositionsFromFlags(flags, &labels));
  POSENC_ASSIGN_OR_RETURN(options.params.dim, RequiredInt(flags, "dim"));
  options.params.base = flags.Double("base");
  options.params.layout = ChoiceFlag(flags, "layout",
                                     {{"interleaved", client::SinusoidalLayout::kInterleaved},
                                      {"concat", client::SinusoidalLayout::kConcat}},
                                     client::SinusoidalLayout::kUnspecified);
  options.params.freq_scheme = ChoiceFlag(
      flags, "freq", {{"vaswani", client::FreqScheme::kVaswani}, {"t2t", client::FreqScheme::kT2t}},
      client::FreqScheme::kUnspecified);
  options.output_dtype = DTypeFlag(flags);
  POSENC_ASSIGN_OR_RETURN(Tensor table, client.Sinusoidal(options));
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "npy", table));
  CommandOutput out;
  if (table.shape.size() != 2) labels.clear();
  out.tensors.push_back({"table", std::move(table), std::move(labels), "pos"});
  return out;
}

absl::StatusOr<CommandOutput> RunAdd(const ParsedFlags& flags, const client::Client& client) {
  client::AddPositionEncodingOptions options;
  std::vector<int64_t> labels;
  POSENC_ASSIGN_OR_RETURN(options.positions, PositionsFromFlags(flags, &labels));
  if (flags.Has("x") == flags.Has("shape")) {
    return UsageError("give x as --x FILE.npy or generate it with --shape B,T,D");
  }
  if (std::optional<std::string> path = flags.String("x")) {
    POSENC_ASSIGN_OR_RETURN(options.x, FloatTensorFromFile(flags, *path));
  } else {
    POSENC_ASSIGN_OR_RETURN(options.x,
                            GeneratedTensor(flags, flags.IntList("shape"),
                                            DTypeFlag(flags).value_or(DType::kFloat32), 0));
  }
  if (flags.Has("table") || flags.Has("table-name")) {
    client::LearnedTable learned;
    POSENC_RETURN_IF_ERROR(TableFromFlags(flags, {}, &learned.table_inline, &learned.table_name));
    learned.table_offset = flags.Int("table-offset").value_or(0);
    options.learned = std::move(learned);
  } else {
    client::SinusoidalParams params;
    params.dim = flags.Int("dim").value_or(0);
    params.base = flags.Double("base");
    params.layout = ChoiceFlag(flags, "layout",
                               {{"interleaved", client::SinusoidalLayout::kInterleaved},
                                {"concat", client::SinusoidalLayout::kConcat}},
                               client::SinusoidalLayout::kUnspecified);
    params.freq_scheme =
        ChoiceFlag(flags, "freq",
                   {{"vaswani", client::FreqScheme::kVaswani}, {"t2t", client::FreqScheme::kT2t}},
                   client::FreqScheme::kUnspecified);
    options.sinusoidal = params;
  }
  options.combine = ChoiceFlag(
      flags, "combine", {{"add", client::Combine::kAdd}, {"concat", client::Combine::kConcat}},
      client::Combine::kUnspecified);
  options.scale = flags.Double("scale");
  options.padding_idx = flags.Int("padding-idx");
  POSENC_ASSIGN_OR_RETURN(Tensor y, client.AddPositionEncoding(options));
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "npy", y));
  CommandOutput out;
  out.tensors.push_back({"y", std::move(y), {}, "token"});
  return out;
}

absl::StatusOr<CommandOutput> RunRopeCache(const ParsedFlags& flags, const client::Client& client) {
  if (!flags.Has("head-dim") && !flags.Has("hf-config")) {
    return UsageError("--head-dim is required (or --hf-config FILE, which gives it)");
  }
  client::RopeCacheOptions options;
  std::vector<int64_t> labels;
  POSENC_ASSIGN_OR_RETURN(options.positions, PositionsFromFlags(flags, &labels));
  POSENC_ASSIGN_OR_RETURN(options.config, RopeConfigFromFlags(flags));
  options.output_dtype = DTypeFlag(flags);
  options.layout = ChoiceFlag(flags, "layout",
                              {{"compact", client::RopeCacheLayout::kCompact},
                               {"neox", client::RopeCacheLayout::kNeox},
                               {"gptj", client::RopeCacheLayout::kGptj}},
                              client::RopeCacheLayout::kUnspecified);
  POSENC_ASSIGN_OR_RETURN(client::RopeCacheResult result, client.RopeCache(options));
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "out-cos", result.cos));
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "out-sin", result.sin));
  CommandOutput out;
  out.extras["derived"] = DerivedToJson(result.derived);
  if (result.cos.shape.size() != 2) labels.clear();
  out.tensors.push_back({"cos", std::move(result.cos), labels, "pos"});
  out.tensors.push_back({"sin", std::move(result.sin), std::move(labels), "pos"});
  return out;
}

// The shape of k generated beside q: q's shape with the head axis set to `heads`.
std::vector<int64_t> KShape(std::vector<int64_t> q_shape, client::TensorLayout layout,
                            int64_t heads) {
  // BSHD [B,S,H,D]: axis 2; BHSD [B,H,S,D] and THD [T,H,D]: axis 1.
  const size_t axis =
      layout == client::TensorLayout::kBHSD || layout == client::TensorLayout::kTHD ? 1 : 2;
  if (axis < q_shape.size()) q_shape[axis] = heads;
  return q_shape;
}

absl::StatusOr<CommandOutput> RunApplyRope(const ParsedFlags& flags, const client::Client& client) {
  client::ApplyRopeOptions options;
  std::vector<int64_t> labels;
  POSENC_ASSIGN_OR_RETURN(options.positions, PositionsFromFlags(flags, &labels));
  POSENC_ASSIGN_OR_RETURN(options.config, RopeConfigFromFlags(flags));
  options.layout = ChoiceFlag(flags, "layout",
                              {{"bshd", client::TensorLayout::kBSHD},
                               {"bhsd", client::TensorLayout::kBHSD},
                               {"thd", client::TensorLayout::kTHD}},
                              client::TensorLayout::kUnspecified);
  if (flags.Has("q") == flags.Has("shape")) {
    return UsageError("give q as --q FILE.npy or generate it with --shape (e.g. 1,4,2,8)");
  }
  if (flags.Has("k") && flags.Has("k-heads")) return UsageError("give --k or --k-heads");
  if (flags.Has("k-heads") && !flags.Has("shape")) {
    return UsageError("--k-heads generates k beside a generated q: use it with --shape");
  }
  if (flags.Has("npy") && flags.Has("out-q")) return UsageError("--npy is --out-q: give one");
  if (std::optional<std::string> path = flags.String("q")) {
    POSENC_ASSIGN_OR_RETURN(options.q, FloatTensorFromFile(flags, *path));
  } else {
    POSENC_ASSIGN_OR_RETURN(options.q, GeneratedTensor(flags, flags.IntList("shape"),
                                                       DTypeFlag(flags).value_or(DType::kFloat32),
                                                       /*seed_salt=*/0));
  }
  if (std::optional<std::string> path = flags.String("k")) {
    POSENC_ASSIGN_OR_RETURN(options.k, FloatTensorFromFile(flags, *path));
  } else if (std::optional<int64_t> heads = flags.Int("k-heads")) {
    POSENC_ASSIGN_OR_RETURN(
        options.k, GeneratedTensor(flags, KShape(flags.IntList("shape"), options.layout, *heads),
                                   DTypeFlag(flags).value_or(DType::kFloat32), /*seed_salt=*/1));
  }
  POSENC_ASSIGN_OR_RETURN(client::ApplyRopeResult result, client.ApplyRope(options));
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, flags.Has("npy") ? "npy" : "out-q", result.q));
  if (result.k.has_value()) POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "out-k", *result.k));
  CommandOutput out;
  out.extras["derived"] = DerivedToJson(result.derived);
  const std::string row_title = options.layout == client::TensorLayout::kBHSD ? "pos" : "head";
  out.tensors.push_back({"q", std::move(result.q), {}, row_title});
  if (result.k.has_value()) out.tensors.push_back({"k", *std::move(result.k), {}, row_title});
  return out;
}

absl::StatusOr<CommandOutput> RunAlibiSlopes(const ParsedFlags& flags,
                                             const client::Client& client) {
  client::AlibiSlopesOptions options;
  POSENC_ASSIGN_OR_RETURN(options.num_heads, RequiredInt(flags, "heads"));
  options.max_bias = flags.Double("max-bias");
  options.output_dtype = DTypeFlag(flags);
  POSENC_ASSIGN_OR_RETURN(Tensor slopes, client.AlibiSlopes(options));
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "npy", slopes));
  CommandOutput out;
  out.tensors.push_back({"slopes", std::move(slopes), {}, "head"});
  return out;
}

absl::StatusOr<CommandOutput> RunAlibiBias(const ParsedFlags& flags, const client::Client& client) {
  client::AlibiBiasOptions options;
  POSENC_ASSIGN_OR_RETURN(options.num_heads, RequiredInt(flags, "heads"));
  POSENC_ASSIGN_OR_RETURN(options.q_len, RequiredInt(flags, "q-len"));
  POSENC_ASSIGN_OR_RETURN(options.k_len, RequiredInt(flags, "k-len"));
  options.query_offset = flags.Int("query-offset");
  options.mode = ChoiceFlag(flags, "mode",
                            {{"causal", client::AlibiMode::kCausal},
                             {"symmetric", client::AlibiMode::kSymmetric},
                             {"bloom", client::AlibiMode::kBloom}},
                            client::AlibiMode::kUnspecified);
  options.future = ChoiceFlag(flags, "future",
                              {{"mask", client::FutureMode::kMask},
                               {"zero", client::FutureMode::kZero},
                               {"linear", client::FutureMode::kLinear}},
                              client::FutureMode::kUnspecified);
  options.max_bias = flags.Double("max-bias");
  options.form = ChoiceFlag(
      flags, "form", {{"full", client::BiasForm::kFull}, {"compact", client::BiasForm::kCompact}},
      client::BiasForm::kUnspecified);
  if (flags.Switch("expand") && options.form != client::BiasForm::kCompact) {
    return UsageError("--expand needs --form compact");
  }
  if (std::optional<std::string> mask = flags.String("mask")) {
    POSENC_ASSIGN_OR_RETURN(options.attention_mask,
                            IntTensorFromText("mask", *mask, /*as_row=*/true));
  }
  options.output_dtype = DTypeFlag(flags);
  POSENC_ASSIGN_OR_RETURN(client::AlibiBiasResult result, client.AlibiBias(options));
  Tensor bias = std::move(result.bias);
  if (flags.Switch("expand")) {
    if (options.mode == client::AlibiMode::kBloom) {
      POSENC_ASSIGN_OR_RETURN(
          bias, client::ExpandBloomRows(bias, options.q_len, options.query_offset, options.future));
    } else {
      POSENC_ASSIGN_OR_RETURN(bias, client::ExpandToeplitz(bias, options.q_len, options.k_len));
    }
  }
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "npy", bias));
  CommandOutput out;
  out.extras["slopes"] = result.slopes.ToDoubles();
  out.tensors.push_back({"bias", std::move(bias), {}, "query"});
  return out;
}

absl::StatusOr<CommandOutput> RunRelativeBias(const ParsedFlags& flags,
                                              const client::Client& client) {
  client::RelativeBiasOptions options;
  POSENC_ASSIGN_OR_RETURN(options.q_len, RequiredInt(flags, "q-len"));
  POSENC_ASSIGN_OR_RETURN(options.k_len, RequiredInt(flags, "k-len"));
  options.query_offset = flags.Int("query-offset");
  options.key_offset = flags.Int("key-offset");
  if (flags.Switch("bidirectional") && flags.Switch("unidirectional")) {
    return UsageError("give --bidirectional or --unidirectional, not both");
  }
  if (flags.Switch("bidirectional")) options.bidirectional = true;
  if (flags.Switch("unidirectional")) options.bidirectional = false;
  options.num_buckets = flags.Int("num-buckets");
  options.max_distance = flags.Int("max-distance");
  options.form = ChoiceFlag(flags, "form",
                            {{"full", client::BiasForm::kFull},
                             {"compact", client::BiasForm::kCompact},
                             {"buckets", client::BiasForm::kBuckets}},
                            client::BiasForm::kUnspecified);
  if (flags.Switch("expand") && options.form != client::BiasForm::kCompact) {
    return UsageError("--expand needs --form compact");
  }
  POSENC_RETURN_IF_ERROR(
      TableFromFlags(flags, {options.num_buckets.value_or(32), flags.Int("heads").value_or(4)},
                     &options.table_inline, &options.table_name));
  if (options.form != client::BiasForm::kBuckets && !options.table_inline.has_value() &&
      options.table_name.empty()) {
    return UsageError(
        "relative-bias needs a table: --table FILE.npy, --table-name NAME or --random-table "
        "SEED (or --form buckets)");
  }
  options.output_dtype = DTypeFlag(flags);
  POSENC_ASSIGN_OR_RETURN(Tensor bias, client.RelativeBias(options));
  if (flags.Switch("expand")) {
    POSENC_ASSIGN_OR_RETURN(bias, client::ExpandToeplitz(bias, options.q_len, options.k_len));
  }
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "npy", bias));
  CommandOutput out;
  out.tensors.push_back({options.form == client::BiasForm::kBuckets ? "buckets" : "bias",
                         std::move(bias),
                         {},
                         "query"});
  return out;
}

absl::StatusOr<CommandOutput> RunRelativeEmbedding(const ParsedFlags& flags,
                                                   const client::Client& client) {
  client::RelativeEmbeddingOptions options;
  POSENC_ASSIGN_OR_RETURN(options.q_len, RequiredInt(flags, "q-len"));
  POSENC_ASSIGN_OR_RETURN(options.k_len, RequiredInt(flags, "k-len"));
  POSENC_ASSIGN_OR_RETURN(options.max_relative, RequiredInt(flags, "max-relative"));
  options.query_offset = flags.Int("query-offset");
  options.key_offset = flags.Int("key-offset");
  POSENC_RETURN_IF_ERROR(
      TableFromFlags(flags, {2 * options.max_relative + 1, flags.Int("embed-dim").value_or(4)},
                     &options.table_inline, &options.table_name));
  if (!options.table_inline.has_value() && options.table_name.empty()) {
    return UsageError(
        "relative-embedding needs a table: --table FILE.npy, --table-name NAME or "
        "--random-table SEED");
  }
  options.output_dtype = DTypeFlag(flags);
  POSENC_ASSIGN_OR_RETURN(Tensor embeddings, client.RelativeEmbedding(options));
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "npy", embeddings));
  CommandOutput out;
  out.tensors.push_back({"embeddings", std::move(embeddings), {}, "key"});
  return out;
}

// `check` (check.h) with the shared position and RoPE configuration flags.
absl::StatusOr<CommandOutput> RunCheckCommand(const ParsedFlags& flags,
                                              const client::Client& client) {
  std::vector<int64_t> labels;
  POSENC_ASSIGN_OR_RETURN(Positions positions, PositionsFromFlags(flags, &labels));
  POSENC_ASSIGN_OR_RETURN(client::RopeConfig config, RopeConfigFromFlags(flags));
  return RunCheck(flags, client, std::move(positions), std::move(config));
}

absl::StatusOr<CommandOutput> RunInfo(const ParsedFlags&, const client::Client& client) {
  POSENC_ASSIGN_OR_RETURN(client::ServerInfo info, client.GetServerInfo());
  CommandOutput out;
  out.extras["version"] = info.version;
  out.extras["build"] = info.build;
  Json backends = Json::object();
  for (const client::ServerInfo::Backend& b : info.backends) {
    backends[b.name] = absl::StrCat(
        b.detail, b.is_default ? " (default)" : "",
        b.small_call_bytes > 0 ? absl::StrCat(", calls under ", b.small_call_bytes, " bytes on cpu")
                               : "");
  }
  out.extras["backends"] = std::move(backends);
  Json devices = Json::array();
  for (const client::ServerInfo::Device& d : info.devices) {
    devices.push_back(absl::StrCat(d.index, ": ", d.name, ", ", d.total_memory_bytes >> 20,
                                   " MiB, compute ", d.compute_capability, ", driver CUDA ",
                                   d.driver_version, d.in_use ? " (in use)" : ""));
  }
  out.extras["cuda"] = {{"built_in", info.cuda_built_in}, {"devices", std::move(devices)}};
  out.extras["limits"] = {{"max_message_bytes", info.max_message_bytes},
                          {"max_output_elements", info.max_output_elements},
                          {"max_inflight_bytes", info.max_inflight_bytes},
                          {"max_heavy_calls", info.max_heavy_calls}};
  Json tables = Json::object();
  for (const client::ServerInfo::Table& t : info.tables) {
    tables[t.name] = absl::StrCat(std::string(client::DTypeName(t.dtype)), " [",
                                  absl::StrJoin(t.shape, ", "), "]");
  }
  out.extras["tables"] = std::move(tables);
  return out;
}

// "0-4,6-10,12": the layer indices as runs ("-" for none).
std::string LayerRuns(const std::vector<int64_t>& layers) {
  return layers.empty() ? std::string("-") : kernels::IndexRuns(layers, ",");
}

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

// Llama 4's q scale at position p, with the group's parameters.
std::string TemperatureFormula(const client::AttentionTemperatureTuning& t) {
  return absl::StrCat("q *= log(floor((p + 1) / ", Num(t.floor_scale), ") + 1) * ",
                      Num(t.attn_scale), " + 1");
}

// The rows as lines of columns padded to their widest cell, two spaces apart.
std::vector<std::string> AlignedRows(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::vector<std::string> lines;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&line, c == 0 ? "" : "  ", row[c],
                      std::string(widths[c] - row[c].size(), ' '));
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    lines.push_back(std::move(line));
  }
  return lines;
}

absl::StatusOr<CommandOutput> RunDescribe(const ParsedFlags& flags, const client::Client& client) {
  if (!flags.Has("hf-config") && !flags.Has("head-dim")) {
    return UsageError("--hf-config FILE is required (or an explicit config with --head-dim)");
  }
  POSENC_ASSIGN_OR_RETURN(client::RopeConfig config, RopeConfigFromFlags(flags));
  POSENC_ASSIGN_OR_RETURN(client::DescribeRopeResult result, client.DescribeRope(config));
  CommandOutput out;
  if (!result.model_type.empty()) out.extras["model_type"] = result.model_type;
  if (result.num_layers > 0) out.extras["num_layers"] = result.num_layers;
  Json groups = Json::array();
  std::vector<std::vector<std::string>> rows = {{"layers", "n", "layer_type", "rope", "base",
                                                 "head", "rot", "pairs", "factor", "attn",
                                                 "softmax", "max_pos", "orig_pos"}};
  for (const client::RopeLayerGroup& g : result.groups) {
    const client::RopeDerived& d = g.derived;
    Json j;
    j["layers"] = g.layers;
    j["layer_type"] = g.layer_type;
    j["nope"] = d.nope;
    j["rope_type"] = std::string(ScalingName(d.scaling_type));
    j["base"] = g.base;
    j["effective_base"] = d.effective_base;
    j["head_dim"] = d.head_dim;
    j["rotary_dim"] = d.rotary_dim;
    j["style"] = StyleName(d.style);
    j["factor"] = d.factor;
    j["attention_factor"] = d.attention_factor;
    j["softmax_scale_multiplier"] =
        g.softmax_scale_multiplier.has_value() ? Json(*g.softmax_scale_multiplier) : Json(nullptr);
    j["max_position_embeddings"] = g.max_position_embeddings;
    j["original_max_position_embeddings"] = g.original_max_position_embeddings;
    if (d.scaling_type == client::RopeScalingType::kLongrope) {
      j["longrope_switch_seq_len"] = g.longrope_switch_seq_len;
    }
    if (!g.mrope_section.empty()) j["mrope_section"] = g.mrope_section;
    j["warnings"] = g.warnings;
    if (g.attn_temperature_tuning) {
      j["attn_temperature_tuning"] = {{"floor_scale", g.attn_temperature_tuning->floor_scale},
                                      {"attn_scale", g.attn_temperature_tuning->attn_scale},
                                      {"formula", TemperatureFormula(*g.attn_temperature_tuning)}};
    }
    Json sources = Json::array();
    for (const client::RopeValueSource& s : g.sources) {
      sources.push_back(
          {{"name", s.name}, {"key", s.key}, {"origin", s.origin}, {"value", s.value}});
    }
    j["sources"] = std::move(sources);
    groups.push_back(std::move(j));

    const bool nope = d.nope;
    std::string base = Num(g.base);
    if (!nope && d.effective_base != g.base)
      absl::StrAppend(&base, " (", Num(d.effective_base), ")");
    rows.push_back({LayerRuns(g.layers), absl::StrCat(g.layers.size()),
                    g.layer_type.empty() ? "-" : g.layer_type,
                    nope ? "NoPE" : std::string(ScalingName(d.scaling_type)), nope ? "-" : base,
                    absl::StrCat(d.head_dim), nope ? "-" : absl::StrCat(d.rotary_dim),
                    nope ? "-" : StyleName(d.style), nope ? "-" : Num(d.factor),
                    nope ? "-" : Num(d.attention_factor),
                    g.softmax_scale_multiplier ? Num(*g.softmax_scale_multiplier) : "-",
                    g.max_position_embeddings ? absl::StrCat(g.max_position_embeddings) : "-",
                    g.original_max_position_embeddings
                        ? absl::StrCat(g.original_max_position_embeddings,
                                       g.longrope_switch_seq_len ? " (longrope switch)" : "")
                        : "-"});
  }
  out.extras["groups"] = std::move(groups);
  out.extras["warnings"] = result.warnings;
  // The table: model_type, num_layers, one aligned row per group, then the warnings.
  std::string text;
  if (!result.model_type.empty()) absl::StrAppend(&text, "model_type: ", result.model_type, "\n");
  if (result.num_layers > 0) absl::StrAppend(&text, "num_layers: ", result.num_layers, "\n");
  for (const std::string& line : AlignedRows(rows)) absl::StrAppend(&text, line, "\n");
  // Per group: the per-position q scale to apply, and where each value came from.
  for (const client::RopeLayerGroup& g : result.groups) {
    if (!g.attn_temperature_tuning && g.sources.empty()) continue;
    absl::StrAppend(&text, "\nlayers ", LayerRuns(g.layers),
                    g.layer_type.empty() ? "" : absl::StrCat(" (", g.layer_type, ")"), ":\n");
    if (g.attn_temperature_tuning) {
      absl::StrAppend(
          &text, "  attention temperature: ", TemperatureFormula(*g.attn_temperature_tuning), "\n");
    }
    std::vector<std::vector<std::string>> source_rows;
    for (const client::RopeValueSource& s : g.sources) {
      source_rows.push_back({s.name, s.value, s.key, s.origin});
    }
    for (const std::string& line : AlignedRows(source_rows)) {
      absl::StrAppend(&text, "  ", line, "\n");
    }
  }
  for (const std::string& w : result.warnings) absl::StrAppend(&text, "warning: ", w, "\n");
  out.text = std::move(text);
  return out;
}

absl::StatusOr<CommandOutput> RunHealth(const ParsedFlags& flags, const client::Client& client) {
  POSENC_ASSIGN_OR_RETURN(client::HealthStatus status,
                          client.Health(flags.String("service").value_or("")));
  CommandOutput out;
  out.extras["status"] = std::string(client::HealthStatusName(status));
  out.exit_code = status == client::HealthStatus::kServing ? 0 : 1;
  return out;
}

}  // namespace

absl::Status UsageError(std::string_view message) {
  absl::Status status = absl::InvalidArgumentError(AbslView(message));
  status.SetPayload(kUsagePayloadUrl, absl::Cord("usage"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayloadUrl).has_value();
}

absl::StatusOr<client::RopeConfig> ReadRopeConfigFlags(const ParsedFlags& flags) {
  return RopeConfigFromFlags(flags);
}

const std::vector<Command>& Commands() {
  static const std::vector<Command>* const kCommands = new std::vector<Command>{
      {"sinusoidal",
       "sinusoidal position table PE[positions, D]",
       "example: posenc sinusoidal --positions 0:8 --dim 16",
       {&kPositionFlags, &kSinusoidalParamFlags, &kSinusoidalFlags},
       &RunSinusoidal},
      {"add",
       "AddPositionEncoding: x*scale + PE or [x*scale ; PE] (sinusoidal or learned)",
       "example: posenc add --shape 1,4,8 --fill ones --positions 0:4\n"
       "x comes from --x x.npy or is generated with --shape; the source is sinusoidal unless\n"
       "--table/--table-name names a learned table.",
       {&kAddFlags, &kTensorInputFlags, &kPositionFlags, &kSinusoidalParamFlags},
       &RunAdd},
      {"rope-cache",
       "RoPE cos/sin tables and the derived values of a configuration",
       "example: posenc rope-cache --positions 0:4 --head-dim 8 --scaling yarn --factor 4 "
       "--original-max-pos 4096\n"
       "         posenc rope-cache --positions 0:16 --hf-config config.json",
       {&kPositionFlags, &kRopeCacheFlags, &kRopeConfigFlags},
       &RunRopeCache},
      {"apply-rope",
       "rotate q (and k) by their positions",
       "example: posenc apply-rope --shape 1,4,2,8 --fill iota --k-heads 1 --positions 10:14\n"
       "q/k come from --q/--k .npy files or are generated with --shape (and --k-heads).",
       {&kApplyRopeFlags, &kTensorInputFlags, &kPositionFlags, &kRopeConfigFlags},
       &RunApplyRope},
      {"check",
       kCheckSummary,
       kCheckDetails,
       {&CheckFlags(), &kPositionFlags, &kRopeConfigFlags},
       &RunCheckCommand},
      {"alibi-slopes",
       "ALiBi head slopes",
       "example: posenc alibi-slopes --heads 12",
       {&kAlibiSlopesFlags, &kOutputDTypeFlags},
       &RunAlibiSlopes},
      {"alibi-bias",
       "ALiBi bias matrices [H, q, k] (or the compact form)",
       "example: posenc alibi-bias --heads 2 --q-len 4 --k-len 6\n"
       "         posenc alibi-bias --heads 2 --q-len 4 --k-len 6 --form compact --expand",
       {&kAlibiBiasFlags, &kOutputDTypeFlags},
       &RunAlibiBias},
      {"relative-bias",
       "T5 bucketed relative bias (or buckets, or the compact form)",
       "example: posenc relative-bias --q-len 4 --k-len 4 --random-table 1 --heads 2\n"
       "         posenc relative-bias --q-len 8 --k-len 8 --form buckets",
       {&kRelativeFlags, &kRelativeBiasFlags, &kOutputDTypeFlags},
       &RunRelativeBias},
      {"relative-embedding",
       "Shaw et al. relative embeddings [q, k, D]",
       "example: posenc relative-embedding --q-len 3 --k-len 3 --max-relative 2 "
       "--random-table 7",
       {&kRelativeFlags, &kRelativeEmbeddingFlags, &kOutputDTypeFlags},
       &RunRelativeEmbedding},
      {"bench",
       "load generator: calls in flight, QPS, latency percentiles, errors, MB/s",
       kBenchDetails,
       {&kBenchFlags, &kRopeConfigFlags},
       &RunBench},
      {"describe",
       "every layer's RoPE of a model: types, bases, pairing, scaling, NoPE, context, warnings",
       "example: posenc describe --hf-config config.json\n"
       "         posenc --format json describe --hf-config config.json\n"
       "Layers with the same RoPE form one row; base shows b' in parentheses where ntk/dynamic\n"
       "change it; softmax is the multiplier of the softmax scale the model applies (DeepSeek\n"
       "YaRN: mscale(factor, mscale_all_dim)^2), - where posenc knows of none. Below the table,\n"
       "per group: the q scale to apply by position (Llama 4's attention temperature tuning)\n"
       "and every value read with its key and origin (file, text_config, architecture default).",
       {&kRopeConfigFlags},
       &RunDescribe},
      {"info", "server version, build, backends, limits and loaded tables", "", {}, &RunInfo},
      {"health",
       "grpc.health.v1 check; exit code 0 only when SERVING",
       "",
       {&kHealthFlags},
       &RunHealth},
  };
  return *kCommands;
}

}  // namespace posenc::cli
