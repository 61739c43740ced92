// Inputs and outputs shared by the commands (inputs.h).
#include "client/cli/inputs.h"

#include <iostream>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/npy.h"
#include "client/cli/wire_names.h"
#include "kernels/common/status.h"

namespace posenc::cli {

// ---------------------------------------------------------------------------------------------
// Flag tables.
// ---------------------------------------------------------------------------------------------
const FlagGroup& PositionFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"positions", FlagType::kString, "SPEC",
       "START:END (half-open: 0:8 is 0..7), a list 3,5,9, or ids.npy (M-RoPE: [3, n])"},
      {"offsets", FlagType::kIntList, "LIST",
       "token t of sequence b at offsets[b]+t (with --cu-seqlens: per packed sequence)"},
      {"cu-seqlens", FlagType::kIntList, "LIST", "packed sequences, e.g. 0,3,7 (THD)"},
      {"mask", FlagType::kString, "MASK",
       "attention mask, 1 = real token: a list 0,1,1 ([1, n]) or mask.npy [B, S]"},
  };
  return *kFlags;
}

const FlagGroup& OutputDTypeFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      FloatDTypeFlag("output dtype (default float32)"),
      {"npy", FlagType::kString, "FILE", "also write the main output to FILE as .npy"},
  };
  return *kFlags;
}

const FlagGroup& TensorInputFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"shape", FlagType::kIntList, "DIMS", "generate the input with this shape, e.g. 1,4,2,8"},
      {"fill", FlagType::kChoice, "", "values of a generated input (default ones)",
       "ones|iota|random"},
      {"seed", FlagType::kInt, "N", "seed of --fill random (default 0)"},
  };
  return *kFlags;
}

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

absl::StatusOr<Tensor> FloatTensorFromFile(const ParsedFlags& flags, const std::string& path) {
  POSENC_ASSIGN_OR_RETURN(Tensor t, ReadNpy(path));
  if (!client::IsFloatDType(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected a float array, got ",
                                                   std::string(client::DTypeName(t.dtype))));
  }
  if (std::optional<DType> dtype = DTypeFlag(flags)) return client::ConvertTensor(t, *dtype);
  return t;
}

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

}  // namespace posenc::cli
