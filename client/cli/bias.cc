// The bias commands: alibi-slopes, alibi-bias, relative-bias and relative-embedding.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/cli/commands.h"
#include "client/cli/heatmap.h"
#include "client/cli/inputs.h"
#include "client/cli/wire_names.h"
#include "kernels/common/status.h"

namespace posenc::cli {
namespace {

const FlagGroup& AlibiSlopesFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"heads", FlagType::kInt, "N", "number of heads"},
      {"max-bias", FlagType::kDouble, "B", "maximum bias (default 8)"},
  };
  return *kFlags;
}

const FlagGroup& AlibiBiasFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"heads", FlagType::kInt, "N", "number of heads"},
      {"q-len", FlagType::kInt, "N", "number of queries"},
      {"k-len", FlagType::kInt, "N", "number of keys"},
      {"query-offset", FlagType::kInt, "N", "position of query 0 (default k-len - q-len)"},
      EnumFlagSpec<client::AlibiMode>("mode", "bias formula (default causal)"),
      EnumFlagSpec<client::FutureMode>("future", "keys after the query (default mask = -inf)"),
      {"max-bias", FlagType::kDouble, "B", "maximum bias (default 8)"},
      EnumFlagSpec<client::BiasForm>(
          "form",
          "full matrices over the wire, or the compact form (default: full matrices, fetched "
          "compact and expanded here)",
          {v1::BIAS_FORM_BUCKETS}),
      {"expand", FlagType::kSwitch, "",
       "with --form compact: expand the compact form locally to full matrices"},
      {"mask", FlagType::kString, "MASK",
       "bloom: attention mask, a list 0,1,1 ([1, k]) or mask.npy [B, k]"},
      kPngFlag,
  };
  return *kFlags;
}

const FlagGroup& RelativeFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"q-len", FlagType::kInt, "N", "number of queries"},
      {"k-len", FlagType::kInt, "N", "number of keys"},
      {"query-offset", FlagType::kInt, "N", "position of query 0 (default k-len - q-len)"},
      {"key-offset", FlagType::kInt, "N", "position of key 0 (default 0)"},
      {"table", FlagType::kString, "FILE", "the table from a .npy file"},
      {"table-name", FlagType::kString, "NAME", "a table loaded by the server"},
      {"random-table", FlagType::kInt, "SEED", "a random table (uniform in [-1, 1]) for a demo"},
  };
  return *kFlags;
}

const FlagGroup& RelativeBiasFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"heads", FlagType::kInt, "N", "heads of --random-table (default 4)"},
      {"bidirectional", FlagType::kSwitch, "", "encoder buckets (the default)"},
      {"unidirectional", FlagType::kSwitch, "", "decoder buckets"},
      {"num-buckets", FlagType::kInt, "N", "number of buckets (default 32)"},
      {"max-distance", FlagType::kInt, "N", "max distance (default 128)"},
      EnumFlagSpec<client::BiasForm>("form",
                                     "[H,q,k], the compact [H,q+k-1], or INT32 buckets [q,k]"),
      {"expand", FlagType::kSwitch, "",
       "with --form compact: expand the compact form locally to full matrices"},
      kPngFlag,
  };
  return *kFlags;
}

const FlagGroup& RelativeEmbeddingFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"max-relative", FlagType::kInt, "K", "clip distance K (table rows 2K+1)"},
      {"embed-dim", FlagType::kInt, "D", "width of --random-table (default 4)"},
      kPngFlag,
  };
  return *kFlags;
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
  options.mode = EnumFlag<client::AlibiMode>(flags, "mode");
  options.future = EnumFlag<client::FutureMode>(flags, "future");
  options.max_bias = flags.Double("max-bias");
  options.form = EnumFlag<client::BiasForm>(flags, "form");
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
  options.form = EnumFlag<client::BiasForm>(flags, "form");
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

}  // namespace

Command AlibiSlopesCommand() {
  return {"alibi-slopes",
          "ALiBi head slopes",
          "example: posenc alibi-slopes --heads 12",
          {&AlibiSlopesFlags(), &OutputDTypeFlags()},
          &RunAlibiSlopes};
}

Command AlibiBiasCommand() {
  return {"alibi-bias",
          "ALiBi bias matrices [H, q, k] (or the compact form)",
          "example: posenc alibi-bias --heads 2 --q-len 4 --k-len 6\n"
          "         posenc alibi-bias --heads 2 --q-len 4 --k-len 6 --form compact --expand",
          {&AlibiBiasFlags(), &OutputDTypeFlags()},
          &RunAlibiBias};
}

Command RelativeBiasCommand() {
  return {"relative-bias",
          "T5 bucketed relative bias (or buckets, or the compact form)",
          "example: posenc relative-bias --q-len 4 --k-len 4 --random-table 1 --heads 2\n"
          "         posenc relative-bias --q-len 8 --k-len 8 --form buckets",
          {&RelativeFlags(), &RelativeBiasFlags(), &OutputDTypeFlags()},
          &RunRelativeBias};
}

Command RelativeEmbeddingCommand() {
  return {"relative-embedding",
          "Shaw et al. relative embeddings [q, k, D]",
          "example: posenc relative-embedding --q-len 3 --k-len 3 --max-relative 2 "
          "--random-table 7",
          {&RelativeFlags(), &RelativeEmbeddingFlags(), &OutputDTypeFlags()},
          &RunRelativeEmbedding};
}

}  // namespace posenc::cli
