#include "client/cli/flags.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "kernels/common/status.h"

namespace posenc::cli {
namespace {

const FlagSpec* FindFlag(std::span<const FlagGroup* const> groups, std::string_view name) {
  for (const FlagGroup* group : groups) {
    for (const FlagSpec& spec : *group) {
      if (spec.name == name) return &spec;
    }
  }
  return nullptr;
}

absl::Status BadValue(const FlagSpec& spec, std::string_view expected, std::string_view value) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--", AbslView(spec.name), " expects ", AbslView(expected), ", got '", AbslView(value), "'"));
}

// The comma-separated list `text`, each item read by parse(item, &value) -> bool.
template <typename T, typename Parse>
absl::StatusOr<ParsedFlags::Value> ParseList(const FlagSpec& spec, std::string_view text,
                                             std::string_view expected, Parse parse) {
  std::vector<T> values;
  for (absl::string_view item : absl::StrSplit(AbslView(text), ',')) {
    T v;
    if (!parse(absl::StripAsciiWhitespace(item), &v)) return BadValue(spec, expected, text);
    values.push_back(v);
  }
  return ParsedFlags::Value(std::move(values));
}

absl::StatusOr<ParsedFlags::Value> ParseValue(const FlagSpec& spec, std::string_view text) {
  switch (spec.type) {
    case FlagType::kSwitch: return ParsedFlags::Value(true);
    case FlagType::kString: return ParsedFlags::Value(std::string(text));
    case FlagType::kInt: {
      int64_t v = 0;
      if (!absl::SimpleAtoi(AbslView(text), &v)) return BadValue(spec, "an integer", text);
      return ParsedFlags::Value(v);
    }
    case FlagType::kDouble: {
      double v = 0;
      if (!absl::SimpleAtod(AbslView(text), &v)) return BadValue(spec, "a number", text);
      return ParsedFlags::Value(v);
    }
    case FlagType::kIntList:
      return ParseList<int64_t>(
          spec, text, "comma-separated integers",
          [](absl::string_view t, int64_t* x) { return absl::SimpleAtoi(t, x); });
    case FlagType::kDoubleList:
      return ParseList<double>(
          spec, text, "comma-separated numbers",
          [](absl::string_view t, double* x) { return absl::SimpleAtod(t, x); });
    case FlagType::kChoice:
      for (absl::string_view choice : absl::StrSplit(AbslView(spec.choices), '|')) {
        if (choice == AbslView(text)) return ParsedFlags::Value(std::string(text));
      }
      return BadValue(spec, spec.choices, text);
  }
  return absl::InternalError("unknown flag type");
}

}  // namespace

template <typename T>
const T* ParsedFlags::Get(std::string_view name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : std::get_if<T>(&it->second);
}

std::optional<std::string> ParsedFlags::String(std::string_view name) const {
  const std::string* v = Get<std::string>(name);
  return v ? std::optional<std::string>(*v) : std::nullopt;
}

std::optional<int64_t> ParsedFlags::Int(std::string_view name) const {
  const int64_t* v = Get<int64_t>(name);
  return v ? std::optional<int64_t>(*v) : std::nullopt;
}

std::optional<double> ParsedFlags::Double(std::string_view name) const {
  const double* v = Get<double>(name);
  return v ? std::optional<double>(*v) : std::nullopt;
}

std::vector<int64_t> ParsedFlags::IntList(std::string_view name) const {
  const std::vector<int64_t>* v = Get<std::vector<int64_t>>(name);
  return v ? *v : std::vector<int64_t>{};
}

std::vector<double> ParsedFlags::DoubleList(std::string_view name) const {
  const std::vector<double>* v = Get<std::vector<double>>(name);
  return v ? *v : std::vector<double>{};
}

absl::Status ParseFlags(std::span<const std::string> args, size_t start,
                        std::span<const FlagGroup* const> groups, bool stop_at_positional,
                        ParsedFlags* out, size_t* next) {
  size_t i = start;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h") {
      out->Set("help", true);
      continue;
    }
    if (arg.size() < 3 || !arg.starts_with("--")) {
      if (stop_at_positional) break;
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string_view body = std::string_view(arg).substr(2);
    std::optional<std::string_view> inline_value;
    if (size_t eq = body.find('='); eq != std::string_view::npos) {
      inline_value = body.substr(eq + 1);
      body = body.substr(0, eq);
    }
    const FlagSpec* spec = FindFlag(groups, body);
    if (spec == nullptr) {
      std::vector<std::string_view> names;
      for (const FlagGroup* group : groups) {
        for (const FlagSpec& candidate : *group) names.push_back(candidate.name);
      }
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", AbslView(body), DidYouMean(body, names, "--")));
    }
    std::string_view text;
    if (spec->type == FlagType::kSwitch) {
      if (inline_value.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat("--", AbslView(body), " takes no value"));
      }
    } else if (inline_value.has_value()) {
      text = *inline_value;
    } else if (i + 1 < args.size()) {
      text = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", AbslView(body), " needs a value (",
          AbslView(spec->type == FlagType::kChoice ? spec->choices : spec->value_name), ")"));
    }
    POSENC_ASSIGN_OR_RETURN(ParsedFlags::Value value, ParseValue(*spec, text));
    out->Set(std::string(spec->name), std::move(value));
  }
  if (next != nullptr) *next = i;
  return absl::OkStatus();
}

namespace {

// Levenshtein distance (insertions, deletions, substitutions), two rows.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      current[j] = std::min(
          {previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

}  // namespace

std::string DidYouMean(std::string_view word, std::span<const std::string_view> candidates,
                       std::string_view prefix) {
  const size_t allowed = std::max<size_t>(2, word.size() / 3);
  std::string_view best;
  size_t best_distance = allowed + 1;
  for (std::string_view candidate : candidates) {
    size_t distance = EditDistance(word, candidate);
    if (word.size() >= 3 && candidate.starts_with(word)) distance = std::min<size_t>(distance, 1);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  if (best.empty()) return "";
  return absl::StrCat(" (did you mean '", AbslView(prefix), AbslView(best), "'?)");
}

std::string FlagsHelp(std::span<const FlagGroup* const> groups) {
  // Help text starts in one column; a flag whose left part is longer gets its help on the next
  // line.
  constexpr size_t kHelpColumn = 30;
  std::string out;
  for (const FlagGroup* group : groups) {
    for (const FlagSpec& spec : *group) {
      std::string left = absl::StrCat("  --", AbslView(spec.name));
      if (spec.type == FlagType::kChoice) {
        absl::StrAppend(&left, " ", AbslView(spec.choices));
      } else if (spec.type != FlagType::kSwitch) {
        absl::StrAppend(&left, " ", AbslView(spec.value_name));
      }
      if (left.size() + 2 > kHelpColumn) {
        left += "\n";
        left.append(kHelpColumn, ' ');
      } else {
        left.resize(kHelpColumn, ' ');
      }
      absl::StrAppend(&out, left, AbslView(spec.help), "\n");
    }
  }
  return out;
}

}  // namespace posenc::cli
