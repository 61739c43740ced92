// A small table-driven command-line parser for the posenc CLI.
//
// Each flag is described once by a FlagSpec (name, type, value name, help); the parser checks
// and converts every value as it reads it, so a bad value is a usage error naming the flag and a
// command only ever reads well-typed values. Accepted forms: `--name value`, `--name=value`,
// `--switch`. Absl flags are global and know nothing of subcommands, hence this parser.
//
// Thread-safety: plain values; the functions are thread-safe.
#ifndef POSENC_CLIENT_CLI_FLAGS_H_
#define POSENC_CLIENT_CLI_FLAGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace posenc::cli {

enum class FlagType {
  kSwitch,      // no value: present or not
  kString,      // any text
  kInt,         // int64
  kDouble,      // finite or not, as strtod reads it ("inf" allowed)
  kIntList,     // comma-separated int64s: 1,2,3
  kDoubleList,  // comma-separated doubles
  kChoice,      // one of the '|'-separated words of FlagSpec::choices
};

struct FlagSpec {
  std::string_view name;  // without the leading "--"
  FlagType type = FlagType::kString;
  std::string_view value_name;  // shown in help, e.g. "N", "FILE" (choices show themselves)
  std::string_view help;
  std::string_view choices;  // kChoice: "neox|gptj"
};

using FlagGroup = std::vector<FlagSpec>;

// `s` for the absl string functions (absl::string_view need not be std::string_view).
inline absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

// The values of the flags present on a command line.
class ParsedFlags {
 public:
  using Value =
      std::variant<bool, std::string, int64_t, double, std::vector<int64_t>, std::vector<double>>;

  bool Has(std::string_view name) const { return values_.find(name) != values_.end(); }
  bool Switch(std::string_view name) const { return Has(name); }
  // nullopt when absent. Also returns kChoice values.
  std::optional<std::string> String(std::string_view name) const;
  std::optional<int64_t> Int(std::string_view name) const;
  std::optional<double> Double(std::string_view name) const;
  // Empty when absent.
  std::vector<int64_t> IntList(std::string_view name) const;
  std::vector<double> DoubleList(std::string_view name) const;

  void Set(std::string name, Value value) { values_[std::move(name)] = std::move(value); }

 private:
  template <typename T>
  const T* Get(std::string_view name) const;

  std::map<std::string, Value, std::less<>> values_;
};

// Parses args[start..] against the flags of `groups`. With `stop_at_positional`, stops at the
// first argument that is not a flag and sets *next to its index; otherwise any positional
// argument is a usage error. Errors are INVALID_ARGUMENT with a message for the user ("unknown
// flag --x", "--heads expects an integer, got 'abc'").
absl::Status ParseFlags(std::span<const std::string> args, size_t start,
                        std::span<const FlagGroup* const> groups, bool stop_at_positional,
                        ParsedFlags* out, size_t* next);

// The candidate closest to `word` (edit distance at most 2, or at most a third of the word's
// length when longer; or a candidate `word` is a prefix of) as " (did you mean 'X'?)", else "".
std::string DidYouMean(std::string_view word, std::span<const std::string_view> candidates,
                       std::string_view prefix = "");

// "  --name VALUE   help" lines, aligned, for every flag of `groups`.
std::string FlagsHelp(std::span<const FlagGroup* const> groups);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_FLAGS_H_
