// The multimodal commands: mm-positions (MultimodalPositions) and rerotate (RerotateKeys).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cli/commands.h"
#include "client/cli/heatmap.h"
#include "client/cli/inputs.h"
#include "client/cli/rope_config.h"
#include "client/cli/wire_names.h"
#include "kernels/common/file.h"
#include "kernels/common/status.h"

namespace posenc::cli {
namespace {

using client::MultimodalSpan;

const FlagGroup& MmPositionsFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      EnumFlagSpec<client::MultimodalFamily>(
          "family", "the model family's rule (default: model_type of --hf-config)"),
      {"hf-config", FlagType::kString, "FILE",
       "a VL config.json: model_type, spatial_merge_size, tokens_per_second, "
       "temporal_merge_size, token ids"},
      {"input-ids", FlagType::kString, "IDS", "token ids: a list 1,2,3 ([1, n]) or ids.npy [B, S]"},
      {"mask", FlagType::kString, "MASK", "with --input-ids: attention mask, a list or mask.npy"},
      {"image-grid", FlagType::kIntList, "T,H,W,...", "with --input-ids: every image's grid"},
      {"video-grid", FlagType::kIntList, "T,H,W,...", "with --input-ids: every video's grid"},
      {"second-per-grid", FlagType::kDoubleList, "S,...", "with --input-ids: per video (2.5-VL)"},
      {"spans", FlagType::kString, "SPANS",
       "instead of --input-ids: text:N,image:TxHxW,video:TxHxW[@SECONDS], sequences split by ;"},
      {"decode-deltas", FlagType::kIntList, "D,...",
       "decode steps instead of a prompt: the sequences' mrope_position_deltas"},
      {"prompt-length", FlagType::kInt, "N", "with --decode-deltas: the prompt's length"},
      {"steps", FlagType::kInt, "K", "with --decode-deltas: decode steps (default 1)"},
      {"image-token-id", FlagType::kInt, "ID", "override the image token id"},
      {"video-token-id", FlagType::kInt, "ID", "override the video token id"},
      {"vision-start-token-id", FlagType::kInt, "ID", "override the vision start token id"},
      {"video-start-token-id", FlagType::kInt, "ID", "override the video start token id"},
      {"video-end-token-id", FlagType::kInt, "ID", "override the video end token id"},
      {"spatial-merge-size", FlagType::kInt, "M", "override vision_config.spatial_merge_size"},
      {"tokens-per-second", FlagType::kDouble, "X", "override tokens_per_second"},
      {"temporal-merge-size", FlagType::kInt, "N",
       "override vision_config.temporal_merge_size (ERNIE-4.5-VL)"},
      {"npy", FlagType::kString, "FILE", "write position_ids [3, B, S] to FILE as .npy"},
      {"out-deltas", FlagType::kString, "FILE", "write mrope_position_deltas [B, 1] as .npy"},
      kPngFlag,
  };
  return *kFlags;
}

const FlagGroup& RerotateFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"k", FlagType::kString, "FILE", "the keys, rotated at --positions, from a .npy file"},
      {"delta", FlagType::kString, "DELTA",
       "the move: N (every key), a list per sequence, or delta.npy ([B, S], [T], M-RoPE [A, ..])"},
      FloatDTypeFlag("dtype of k (converted from the file)"),
      EnumFlagSpec<client::TensorLayout>("layout", "tensor layout (default bshd)"),
      {"out-k", FlagType::kString, "FILE", "write the moved keys to FILE as .npy"},
      {"npy", FlagType::kString, "FILE", "same as --out-k"},
  };
  return *kFlags;
}

// ---------------------------------------------------------------------------------------------
// mm-positions.
// ---------------------------------------------------------------------------------------------

// "4x6x8" as t, h, w.
absl::StatusOr<std::vector<int64_t>> ParseGrid(absl::string_view text, absl::string_view item) {
  std::vector<int64_t> thw;
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) thw.assign(4, 0);  // reported below
    if (thw.size() > 3) break;
    thw.push_back(v);
  }
  if (thw.size() != 3) {
    return UsageError(absl::StrCat("--spans: '", item, "' needs a grid TxHxW of integers"));
  }
  return thw;
}

// One span "text:N", "image:TxHxW" or "video:TxHxW[@SECONDS]".
absl::StatusOr<MultimodalSpan> ParseSpan(absl::string_view item) {
  const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, ':');
  if (kv.first == "text") {
    int64_t n = 0;
    if (!absl::SimpleAtoi(kv.second, &n)) {
      return UsageError(absl::StrCat("--spans: '", item, "' needs text:N, N an integer"));
    }
    return MultimodalSpan::Text(n);
  }
  if (kv.first != "image" && kv.first != "video") {
    return UsageError(
        absl::StrCat("--spans: '", item, "' is not text:N, image:TxHxW or video:TxHxW[@SECONDS]"));
  }
  const std::pair<absl::string_view, absl::string_view> grid_seconds =
      absl::StrSplit(kv.second, absl::MaxSplits('@', 1));
  POSENC_ASSIGN_OR_RETURN(const std::vector<int64_t> g, ParseGrid(grid_seconds.first, item));
  if (kv.first == "image") return MultimodalSpan::Image(g[0], g[1], g[2]);
  std::optional<double> seconds;
  if (!grid_seconds.second.empty()) {
    double s = 0;
    if (!absl::SimpleAtod(grid_seconds.second, &s)) {
      return UsageError(absl::StrCat("--spans: '", item, "' needs seconds after @"));
    }
    seconds = s;
  }
  return MultimodalSpan::Video(g[0], g[1], g[2], seconds);
}

// --spans: sequences split by ';', spans by ','.
absl::StatusOr<std::vector<std::vector<MultimodalSpan>>> ParseSpans(const std::string& text) {
  std::vector<std::vector<MultimodalSpan>> sequences;
  for (absl::string_view sequence : absl::StrSplit(text, ';')) {
    std::vector<MultimodalSpan>& spans = sequences.emplace_back();
    for (absl::string_view item : absl::StrSplit(sequence, ',', absl::SkipWhitespace())) {
      POSENC_ASSIGN_OR_RETURN(MultimodalSpan span, ParseSpan(absl::StripAsciiWhitespace(item)));
      spans.push_back(span);
    }
  }
  return sequences;
}

// A [N, 3] INT64 grid from --image-grid / --video-grid (a multiple of 3 values).
absl::StatusOr<std::optional<Tensor>> GridFlag(const ParsedFlags& flags, std::string_view name) {
  if (!flags.Has(name)) return std::nullopt;
  const std::vector<int64_t> values = flags.IntList(name);
  if (values.empty() || values.size() % 3 != 0) {
    return UsageError(absl::StrCat("--", AbslView(name), " needs T,H,W per item (a multiple of 3 ",
                                   "integers), got ", values.size()));
  }
  POSENC_ASSIGN_OR_RETURN(Tensor t,
                          Tensor::FromInt64s(values, {static_cast<int64_t>(values.size() / 3), 3}));
  return t;
}

// The prompt's form: exactly one of --input-ids, --spans and --decode-deltas, and the flags
// that go only with one of them.
absl::Status CheckMmForm(const ParsedFlags& flags) {
  const int forms = flags.Has("input-ids") + flags.Has("spans") + flags.Has("decode-deltas");
  if (forms != 1) {
    return UsageError(
        "give one of --input-ids (token form), --spans (span form) and "
        "--decode-deltas (decode steps)");
  }
  for (std::string_view f : {"mask", "image-grid", "video-grid", "second-per-grid"}) {
    if (flags.Has(f) && !flags.Has("input-ids")) {
      return UsageError(absl::StrCat("--", AbslView(f), " goes with --input-ids"));
    }
  }
  for (std::string_view f : {"prompt-length", "steps"}) {
    if (flags.Has(f) && !flags.Has("decode-deltas")) {
      return UsageError(absl::StrCat("--", AbslView(f), " goes with --decode-deltas"));
    }
  }
  if (flags.Has("decode-deltas") && !flags.Has("prompt-length")) {
    return UsageError("--decode-deltas needs --prompt-length");
  }
  if (flags.Has("decode-deltas") && flags.Has("out-deltas")) {
    return UsageError("--out-deltas: decode steps return no deltas");
  }
  return absl::OkStatus();
}

// The token form: ids, mask, grids and seconds.
absl::Status ReadTokenForm(const ParsedFlags& flags, client::MultimodalPositionsOptions* o) {
  POSENC_ASSIGN_OR_RETURN(o->input_ids,
                          IntTensorFromText("input-ids", *flags.String("input-ids"), true));
  if (std::optional<std::string> mask = flags.String("mask")) {
    POSENC_ASSIGN_OR_RETURN(o->attention_mask, IntTensorFromText("mask", *mask, true));
  }
  POSENC_ASSIGN_OR_RETURN(o->image_grid_thw, GridFlag(flags, "image-grid"));
  POSENC_ASSIGN_OR_RETURN(o->video_grid_thw, GridFlag(flags, "video-grid"));
  if (flags.Has("second-per-grid")) {
    const std::vector<double> s = flags.DoubleList("second-per-grid");
    POSENC_ASSIGN_OR_RETURN(o->second_per_grid_ts,
                            Tensor::FromDoubles(s, {static_cast<int64_t>(s.size())}));
  }
  return absl::OkStatus();
}

// The decode form: deltas [B], prompt length, steps.
absl::Status ReadDecodeForm(const ParsedFlags& flags, client::MultimodalPositionsOptions* o) {
  const std::vector<int64_t> deltas = flags.IntList("decode-deltas");
  client::MultimodalDecode decode;
  POSENC_ASSIGN_OR_RETURN(decode.deltas,
                          Tensor::FromInt64s(deltas, {static_cast<int64_t>(deltas.size())}));
  decode.prompt_length = *flags.Int("prompt-length");
  decode.num_steps = flags.Int("steps").value_or(1);
  o->decode = std::move(decode);
  return absl::OkStatus();
}

absl::StatusOr<client::MultimodalPositionsOptions> MmOptions(const ParsedFlags& flags) {
  POSENC_RETURN_IF_ERROR(CheckMmForm(flags));
  client::MultimodalPositionsOptions o;
  if (std::optional<std::string> path = flags.String("hf-config")) {
    POSENC_ASSIGN_OR_RETURN(o.hf_config_json, kernels::ReadFileToString(*path));
  }
  o.family = EnumFlag<client::MultimodalFamily>(flags, "family");
  if (o.hf_config_json.empty() && o.family == client::MultimodalFamily::kUnspecified) {
    return UsageError("give --family or --hf-config (whose model_type names the family)");
  }
  o.token_ids.image_token_id = flags.Int("image-token-id");
  o.token_ids.video_token_id = flags.Int("video-token-id");
  o.token_ids.vision_start_token_id = flags.Int("vision-start-token-id");
  o.token_ids.video_start_token_id = flags.Int("video-start-token-id");
  o.token_ids.video_end_token_id = flags.Int("video-end-token-id");
  o.spatial_merge_size = flags.Int("spatial-merge-size");
  o.tokens_per_second = flags.Double("tokens-per-second");
  o.temporal_merge_size = flags.Int("temporal-merge-size");
  if (flags.Has("input-ids")) {
    POSENC_RETURN_IF_ERROR(ReadTokenForm(flags, &o));
  } else if (std::optional<std::string> spans = flags.String("spans")) {
    POSENC_ASSIGN_OR_RETURN(o.sequences, ParseSpans(*spans));
  } else {
    POSENC_RETURN_IF_ERROR(ReadDecodeForm(flags, &o));
  }
  return o;
}

absl::StatusOr<CommandOutput> RunMmPositions(const ParsedFlags& flags,
                                             const client::Client& client) {
  POSENC_ASSIGN_OR_RETURN(const client::MultimodalPositionsOptions options, MmOptions(flags));
  POSENC_ASSIGN_OR_RETURN(client::MultimodalPositionsResult result,
                          client.MultimodalPositions(options));
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "npy", result.position_ids));
  if (result.mrope_position_deltas.has_value()) {
    POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "out-deltas", *result.mrope_position_deltas));
  }
  CommandOutput out;
  out.extras["family"] = NameOf(result.family);
  out.extras["source"] = result.source;
  out.tensors.push_back({"position_ids", std::move(result.position_ids), {}, "seq"});
  if (result.mrope_position_deltas.has_value()) {
    out.tensors.push_back(
        {"mrope_position_deltas", *std::move(result.mrope_position_deltas), {}, "seq"});
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// rerotate.
// ---------------------------------------------------------------------------------------------

// --delta: one integer (shape [], every key), a list ([n]) or an integer .npy file.
absl::StatusOr<Tensor> DeltaFlag(const std::string& text) {
  if (int64_t one = 0; absl::SimpleAtoi(text, &one)) {
    const std::vector<int64_t> value = {one};
    return Tensor::FromInt64s(value, {});
  }
  return IntTensorFromText("delta", text, /*as_row=*/false);
}

absl::StatusOr<CommandOutput> RunRerotate(const ParsedFlags& flags, const client::Client& client) {
  if (!flags.Has("k")) return UsageError("--k FILE.npy is required (the keys to move)");
  if (!flags.Has("delta")) return UsageError("--delta is required (how far to move the keys)");
  if (flags.Has("npy") && flags.Has("out-k")) return UsageError("--npy is --out-k: give one");
  client::RerotateKeysOptions options;
  std::vector<int64_t> labels;
  POSENC_ASSIGN_OR_RETURN(options.positions, PositionsFromFlags(flags, &labels));
  POSENC_ASSIGN_OR_RETURN(options.config, ReadRopeConfigFlags(flags));
  options.layout = EnumFlag<client::TensorLayout>(flags, "layout");
  POSENC_ASSIGN_OR_RETURN(options.k, FloatTensorFromFile(flags, *flags.String("k")));
  POSENC_ASSIGN_OR_RETURN(options.delta, DeltaFlag(*flags.String("delta")));
  POSENC_ASSIGN_OR_RETURN(client::RerotateKeysResult result, client.RerotateKeys(options));
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, flags.Has("npy") ? "npy" : "out-k", result.k));
  CommandOutput out;
  out.extras["derived"] = DerivedToJson(result.derived);
  const std::string row_title = options.layout == client::TensorLayout::kBHSD ? "pos" : "head";
  out.tensors.push_back({"k", std::move(result.k), {}, row_title});
  return out;
}

}  // namespace

Command MmPositionsCommand() {
  return {"mm-positions",
          "M-RoPE position ids of a multimodal prompt (Qwen2/2.5/3-VL, GLM-4V), or decode steps",
          "example: posenc mm-positions --family qwen2_vl --spans text:3,image:1x4x4,text:2\n"
          "         posenc mm-positions --hf-config config.json --input-ids ids.npy "
          "--image-grid 1,28,40 --npy position_ids.npy\n"
          "         posenc mm-positions --family qwen2_vl --decode-deltas -5 --prompt-length 20 "
          "--steps 4\n"
          "Spans: text:N, image:TxHxW, video:TxHxW[@SECONDS] (grids in patches before merging),\n"
          "several sequences split by ';'. --png draws the t, h and w axes side by side.",
          {&MmPositionsFlags()},
          &RunMmPositions};
}

Command RerotateCommand() {
  return {"rerotate",
          "move keys rotated at their positions to positions + delta in one exact rotation",
          "example: posenc rerotate --k keys.npy --positions 100:108 --delta -64 --head-dim 64 "
          "--out-k moved.npy\n"
          "The keys must have been rotated with the same RoPE configuration (--hf-config or the\n"
          "RoPE flags); --delta N moves every key, a list moves each sequence, a .npy each token.",
          {&RerotateFlags(), &PositionFlags(), &RopeConfigFlags()},
          &RunRerotate};
}

}  // namespace posenc::cli
