// The absolute position commands: sinusoidal and add (AddPositionEncoding).
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

const FlagGroup& SinusoidalParamFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"dim", FlagType::kInt, "D", "table width D (add: 0 = the width of x)"},
      {"base", FlagType::kDouble, "B", "base (default 10000)"},
      EnumFlagSpec<client::SinusoidalLayout>("layout", "column layout (default interleaved)"),
      EnumFlagSpec<client::FreqScheme>(
          "freq", "frequency scheme (default vaswani for interleaved, t2t for concat)"),
  };
  return *kFlags;
}

const FlagGroup& SinusoidalFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      FloatDTypeFlag("output dtype (default float32)"),
      {"npy", FlagType::kString, "FILE", "also write the table to FILE as .npy"},
      kPngFlag,
  };
  return *kFlags;
}

const FlagGroup& AddFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"x", FlagType::kString, "FILE", "x from a .npy file, [B, T, D] or [T, D]"},
      FloatDTypeFlag("dtype of x (generated, or converted from --x)"),
      {"table", FlagType::kString, "FILE", "learned table E[max_pos, D] from a .npy file"},
      {"table-name", FlagType::kString, "NAME", "learned table loaded by the server"},
      {"table-offset", FlagType::kInt, "K", "position p reads row p+K (fairseq, OPT: 2)"},
      EnumFlagSpec<client::Combine>("combine", "x*scale + PE or [x*scale ; PE] (default add)"),
      {"scale", FlagType::kDouble, "S", "multiply x by S first (e.g. sqrt(D))"},
      {"padding-idx", FlagType::kInt, "N", "fairseq padding_idx (sinusoidal)"},
      {"npy", FlagType::kString, "FILE", "also write y to FILE as .npy"},
      kPngFlag,
  };
  return *kFlags;
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
  options.params.layout = EnumFlag<client::SinusoidalLayout>(flags, "layout");
  options.params.freq_scheme = EnumFlag<client::FreqScheme>(flags, "freq");
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
    params.layout = EnumFlag<client::SinusoidalLayout>(flags, "layout");
    params.freq_scheme = EnumFlag<client::FreqScheme>(flags, "freq");
    options.sinusoidal = params;
  }
  options.combine = EnumFlag<client::Combine>(flags, "combine");
  options.scale = flags.Double("scale");
  options.padding_idx = flags.Int("padding-idx");
  POSENC_ASSIGN_OR_RETURN(Tensor y, client.AddPositionEncoding(options));
  POSENC_RETURN_IF_ERROR(MaybeWriteNpy(flags, "npy", y));
  CommandOutput out;
  out.tensors.push_back({"y", std::move(y), {}, "token"});
  return out;
}

}  // namespace

Command SinusoidalCommand() {
  return {"sinusoidal",
          "sinusoidal position table PE[positions, D]",
          "example: posenc sinusoidal --positions 0:8 --dim 16",
          {&PositionFlags(), &SinusoidalParamFlags(), &SinusoidalFlags()},
          &RunSinusoidal};
}

Command AddCommand() {
  return {"add",
          "AddPositionEncoding: x*scale + PE or [x*scale ; PE] (sinusoidal or learned)",
          "example: posenc add --shape 1,4,8 --fill ones --positions 0:4\n"
          "x comes from --x x.npy or is generated with --shape; the source is sinusoidal unless\n"
          "--table/--table-name names a learned table.",
          {&AddFlags(), &TensorInputFlags(), &PositionFlags(), &SinusoidalParamFlags()},
          &RunAdd};
}

}  // namespace posenc::cli
