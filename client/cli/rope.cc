// The RoPE commands: rope-cache, apply-rope and describe (DescribeRope).
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/commands.h"
#include "client/cli/heatmap.h"
#include "client/cli/inputs.h"
#include "client/cli/rope_config.h"
#include "client/cli/wire_names.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"
#include "kernels/rope/config.h"

namespace posenc::cli {
namespace {

const FlagGroup& RopeCacheFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      FloatDTypeFlag("output dtype (default float32)"),
      EnumFlagSpec<client::RopeCacheLayout>(
          "layout",
          "cache layout: [n, d/2], full width [n, d]; one table: fused_cos_sin [n, d] (cos then "
          "sin), complex [n, d/2, 2] ((cos, sin) pairs)"),
      {"out-cos", FlagType::kString, "FILE", "write cos to FILE as .npy"},
      {"out-sin", FlagType::kString, "FILE", "write sin to FILE as .npy"},
      {"out-table", FlagType::kString, "FILE",
       "--layout fused_cos_sin or complex: write the one table to FILE as .npy"},
      kPngFlag,
  };
  return *kFlags;
}

const FlagGroup& ApplyRopeFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"q", FlagType::kString, "FILE", "q from a .npy file"},
      {"k", FlagType::kString, "FILE", "k from a .npy file (optional)"},
      {"k-heads", FlagType::kInt, "N", "with --shape: also generate a k with N heads"},
      FloatDTypeFlag("dtype of q/k (generated, or converted from the files)"),
      EnumFlagSpec<client::TensorLayout>("layout", "tensor layout (default bshd)"),
      {"out-q", FlagType::kString, "FILE", "write the rotated q to FILE as .npy"},
      {"npy", FlagType::kString, "FILE", "same as --out-q"},
      {"out-k", FlagType::kString, "FILE", "write the rotated k to FILE as .npy"},
      kPngFlag,
  };
  return *kFlags;
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

// "0-4,6-10,12": the layer indices as runs ("-" for none).
std::string LayerRuns(const std::vector<int64_t>& layers) {
  return layers.empty() ? std::string("-") : kernels::IndexRuns(layers, ",");
}

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

// The q scale at position p, with the group's parameters (Llama 4's "(p + 1)", Ministral 3's
// "p ... (after the rotation)").
std::string TemperatureFormula(const client::AttentionTemperatureTuning& t) {
  const std::string position =
      t.position_offset == 0 ? "p" : absl::StrCat("(p + ", Num(t.position_offset), ")");
  return absl::StrCat("q *= log(floor(", position, " / ", Num(t.floor_scale), ") + 1) * ",
                      Num(t.attn_scale), " + 1",
                      t.key == "llama_4_scaling_beta" ? " (after the rotation)" : "");
}

// The group's q scale at the last position of max_position_embeddings (null without either).
Json ScaleAtMaxPosition(const client::RopeLayerGroup& g) {
  if (!g.attn_temperature_tuning || g.max_position_embeddings <= 0) return Json(nullptr);
  const client::AttentionTemperatureTuning& t = *g.attn_temperature_tuning;
  return kernels::AttentionTemperatureScale(t.floor_scale, t.attn_scale, t.position_offset,
                                            g.max_position_embeddings - 1);
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

// --out-table goes with the one-table layouts, --out-cos and --out-sin with the others.
absl::Status CheckCacheOutputFlags(const ParsedFlags& flags, client::RopeCacheLayout layout) {
  const bool one_table = layout == client::RopeCacheLayout::kFusedCosSin ||
                         layout == client::RopeCacheLayout::kComplex;
  if (one_table && (flags.Has("out-cos") || flags.Has("out-sin"))) {
    return UsageError(absl::StrCat("--layout ", NameOf(layout),
                                   " returns one table: write it with --out-table FILE"));
  }
  if (!one_table && flags.Has("out-table")) {
    return UsageError("--out-table writes the one table of --layout fused_cos_sin or complex");
  }
  return absl::OkStatus();
}

// The one table of FUSED_COS_SIN (cos_sin) or COMPLEX (freqs_cis) as printed, moved out of
// `result`; nullopt for the layouts of cos and sin.
std::optional<NamedTensor> OneTable(client::RopeCacheResult* result,
                                    const std::vector<int64_t>& labels) {
  std::optional<NamedTensor> out;
  if (result->cos_sin.has_value()) out = NamedTensor{"cos_sin", *std::move(result->cos_sin)};
  if (result->freqs_cis.has_value()) {
    out = NamedTensor{"freqs_cis", *std::move(result->freqs_cis)};
  }
  if (out.has_value()) {
    out->row_title = "pos";
    if (out->tensor.shape.size() == 2) out->row_labels = labels;
  }
  return out;
}

absl::StatusOr<CommandOutput> RunRopeCache(const ParsedFlags& flags, const client::Client& client) {
  if (!flags.Has("head-dim") && !flags.Has("hf-config")) {
    return UsageError("--head-dim is required (or --hf-config FILE, which gives it)");
  }
  client::RopeCacheOptions options;
  std::vector<int64_t> labels;
  POSENC_ASSIGN_OR_RETURN(options.positions, PositionsFromFlags(flags, &labels));
  POSENC_ASSIGN_OR_RETURN(options.config, ReadRopeConfigFlags(flags));
  options.output_dtype = DTypeFlag(flags);
  options.layout = EnumFlag<client::RopeCacheLayout>(flags, "layout");
  POSENC_RETURN_IF_ERROR(CheckCacheOutputFlags(flags, options.layout));
  POSENC_ASSIGN_OR_RETURN(client::RopeCacheResult result, client.RopeCache(options));
  CommandOutput out;
  out.extras["derived"] = DerivedToJson(result.derived);
  if (std::optional<NamedTensor> one = OneTable(&result, labels)) {
    POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "out-table", one->tensor));
    out.tensors.push_back(*std::move(one));
    return out;
  }
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "out-cos", result.cos));
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "out-sin", result.sin));
  if (result.cos.shape.size() != 2) labels.clear();
  out.tensors.push_back({"cos", std::move(result.cos), labels, "pos"});
  out.tensors.push_back({"sin", std::move(result.sin), std::move(labels), "pos"});
  return out;
}

absl::StatusOr<CommandOutput> RunApplyRope(const ParsedFlags& flags, const client::Client& client) {
  client::ApplyRopeOptions options;
  std::vector<int64_t> labels;
  POSENC_ASSIGN_OR_RETURN(options.positions, PositionsFromFlags(flags, &labels));
  POSENC_ASSIGN_OR_RETURN(options.config, ReadRopeConfigFlags(flags));
  options.layout = EnumFlag<client::TensorLayout>(flags, "layout");
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

// Sources as JSON objects.
Json SourcesJson(const std::vector<client::RopeValueSource>& sources) {
  Json out = Json::array();
  for (const client::RopeValueSource& s : sources) {
    out.push_back({{"name", s.name}, {"key", s.key}, {"origin", s.origin}, {"value", s.value}});
  }
  return out;
}

// Sources as aligned "name value key origin" lines, indented.
std::string SourcesText(const std::vector<client::RopeValueSource>& sources) {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(sources.size());
  for (const client::RopeValueSource& s : sources) {
    rows.push_back({s.name, s.value, s.key, s.origin});
  }
  std::string text;
  for (const std::string& line : AlignedRows(rows)) absl::StrAppend(&text, "  ", line, "\n");
  return text;
}

// One group of DescribeRope as JSON.
Json GroupJson(const client::RopeLayerGroup& g) {
  const client::RopeDerived& d = g.derived;
  Json j;
  j["layers"] = g.layers;
  j["layer_type"] = g.layer_type;
  j["nope"] = d.nope;
  j["rope_type"] = NameOf(d.scaling_type);
  j["base"] = g.base;
  j["effective_base"] = d.effective_base;
  j["head_dim"] = d.head_dim;
  j["rotary_dim"] = d.rotary_dim;
  j["style"] = NameOf(d.style);
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
                                    {"position_offset", g.attn_temperature_tuning->position_offset},
                                    {"key", g.attn_temperature_tuning->key},
                                    {"scale_at_max_position", ScaleAtMaxPosition(g)},
                                    {"formula", TemperatureFormula(*g.attn_temperature_tuning)}};
  }
  j["sources"] = SourcesJson(g.sources);
  return j;
}

// One sub-module of DescribeRope as JSON.
Json SubmoduleJson(const client::RopeSubmodule& s) {
  Json j = DerivedToJson(s.derived);
  j["name"] = s.name;
  j["layers"] = s.layers;
  j["rotary_offset"] = s.rotary_offset;
  j["warnings"] = s.warnings;
  j["sources"] = SourcesJson(s.sources);
  return j;
}

// "sub-module indexer: layers 0-60: head 128, rotary 64 (first channels), NEOX, yarn, ..."
std::string SubmoduleText(const client::RopeSubmodule& s) {
  const client::RopeDerived& d = s.derived;
  std::string text =
      absl::StrCat("\nsub-module ", s.name, ": layers ", LayerRuns(s.layers), ": head ", d.head_dim,
                   ", rotary ", d.rotary_dim,
                   s.rotary_offset == 0 ? std::string(" (first channels)")
                                        : absl::StrCat(" (from channel ", s.rotary_offset, ")"),
                   ", ", NameOf(d.style), ", ", NameOf(d.scaling_type), ", factor ", Num(d.factor),
                   ", attn ", Num(d.attention_factor), "\n");
  return text + SourcesText(s.sources);
}

// One group as a row of the table (the columns RunDescribe names).
std::vector<std::string> GroupRow(const client::RopeLayerGroup& g) {
  const client::RopeDerived& d = g.derived;
  const bool nope = d.nope;
  std::string base = Num(g.base);
  if (!nope && d.effective_base != g.base) absl::StrAppend(&base, " (", Num(d.effective_base), ")");
  return {LayerRuns(g.layers),
          absl::StrCat(g.layers.size()),
          g.layer_type.empty() ? "-" : g.layer_type,
          nope ? "NoPE" : NameOf(d.scaling_type),
          nope ? "-" : base,
          absl::StrCat(d.head_dim),
          nope ? "-" : absl::StrCat(d.rotary_dim),
          nope ? "-" : NameOf(d.style),
          nope ? "-" : Num(d.factor),
          nope ? "-" : Num(d.attention_factor),
          g.softmax_scale_multiplier ? Num(*g.softmax_scale_multiplier) : "-",
          g.max_position_embeddings ? absl::StrCat(g.max_position_embeddings) : "-",
          g.original_max_position_embeddings
              ? absl::StrCat(g.original_max_position_embeddings,
                             g.longrope_switch_seq_len ? " (longrope switch)" : "")
              : "-"};
}

// The table: model_type, num_layers, one aligned row per group; per group the q scale to apply
// by position and where each value came from; then the warnings.
std::string DescribeText(const client::DescribeRopeResult& result,
                         const std::vector<std::vector<std::string>>& rows) {
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
      absl::StrAppend(&text,
                      "  attention temperature: ", TemperatureFormula(*g.attn_temperature_tuning));
      if (const Json at_max = ScaleAtMaxPosition(g); !at_max.is_null()) {
        absl::StrAppend(&text, "; at p = ", g.max_position_embeddings - 1, ": ",
                        Num(at_max.get<double>()));
      }
      absl::StrAppend(&text, "\n");
    }
    absl::StrAppend(&text, SourcesText(g.sources));
  }
  for (const client::RopeSubmodule& s : result.submodules) {
    absl::StrAppend(&text, SubmoduleText(s));
  }
  for (const std::string& w : result.warnings) absl::StrAppend(&text, "warning: ", w, "\n");
  return text;
}

absl::StatusOr<CommandOutput> RunDescribe(const ParsedFlags& flags, const client::Client& client) {
  if (!flags.Has("hf-config") && !flags.Has("head-dim")) {
    return UsageError("--hf-config FILE is required (or an explicit config with --head-dim)");
  }
  POSENC_ASSIGN_OR_RETURN(client::RopeConfig config, ReadRopeConfigFlags(flags));
  POSENC_ASSIGN_OR_RETURN(client::DescribeRopeResult result, client.DescribeRope(config));
  CommandOutput out;
  if (!result.model_type.empty()) out.extras["model_type"] = result.model_type;
  if (result.num_layers > 0) out.extras["num_layers"] = result.num_layers;
  Json groups = Json::array();
  std::vector<std::vector<std::string>> rows = {{"layers", "n", "layer_type", "rope", "base",
                                                 "head", "rot", "pairs", "factor", "attn",
                                                 "softmax", "max_pos", "orig_pos"}};
  for (const client::RopeLayerGroup& g : result.groups) {
    groups.push_back(GroupJson(g));
    rows.push_back(GroupRow(g));
  }
  out.extras["groups"] = std::move(groups);
  if (!result.submodules.empty()) {
    Json submodules = Json::array();
    for (const client::RopeSubmodule& s : result.submodules) submodules.push_back(SubmoduleJson(s));
    out.extras["submodules"] = std::move(submodules);
  }
  out.extras["warnings"] = result.warnings;
  out.text = DescribeText(result, rows);
  return out;
}

}  // namespace

Command RopeCacheCommand() {
  return {"rope-cache",
          "RoPE cos/sin tables and the derived values of a configuration",
          "example: posenc rope-cache --positions 0:4 --head-dim 8 --scaling yarn --factor 4 "
          "--original-max-pos 4096\n"
          "         posenc rope-cache --positions 0:16 --hf-config config.json",
          {&PositionFlags(), &RopeCacheFlags(), &RopeConfigFlags()},
          &RunRopeCache};
}

Command ApplyRopeCommand() {
  return {"apply-rope",
          "rotate q (and k) by their positions",
          "example: posenc apply-rope --shape 1,4,2,8 --fill iota --k-heads 1 --positions 10:14\n"
          "q/k come from --q/--k .npy files or are generated with --shape (and --k-heads).",
          {&ApplyRopeFlags(), &TensorInputFlags(), &PositionFlags(), &RopeConfigFlags()},
          &RunApplyRope};
}

Command DescribeCommand() {
  return {
      "describe",
      "every layer's RoPE of a model: types, bases, pairing, scaling, NoPE, context, warnings",
      "example: posenc describe --hf-config config.json\n"
      "         posenc --format json describe --hf-config config.json\n"
      "Layers with the same RoPE form one row; base shows b' in parentheses where ntk/dynamic\n"
      "change it; softmax is the multiplier of the softmax scale the model applies (DeepSeek\n"
      "YaRN: mscale(factor, mscale_all_dim)^2), - where posenc knows of none. Below the table,\n"
      "per group: the q scale to apply by position (Llama 4's attention temperature tuning,\n"
      "Ministral 3 / Mistral 4's llama_4_scaling_beta)\n"
      "and every value read with its key and origin (file, text_config, architecture default);\n"
      "then the sub-modules with a RoPE of their own (DeepSeek-V3.2 / GLM-5's indexer: select\n"
      "one in rope-cache / apply-rope with --submodule indexer).",
      {&RopeConfigFlags()},
      &RunDescribe};
}

}  // namespace posenc::cli
