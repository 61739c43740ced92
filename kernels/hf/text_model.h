// What every layer of a config.json's text model shares (kernels/hf; internal to it): the text
// config (text_config or the root), its architecture, and the values read once from it (head
// dim, max positions, base, partial rotary, pairing) with where each came from.
//
// Thread-safety: pure functions; a TextModel points into the parsed JSON, which must outlive it.
#ifndef POSENC_KERNELS_HF_TEXT_MODEL_H_
#define POSENC_KERNELS_HF_TEXT_MODEL_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/common/status.h"
#include "kernels/hf/architectures.h"
#include "kernels/hf/config.h"
#include "kernels/hf/json.h"
#include "kernels/rope/config.h"

namespace posenc::hf {

// What every layer shares: read once from the text config.
struct TextModel {
  const Json* text = nullptr;  // text_config, or the root
  const Json* root = nullptr;
  std::string path_prefix;  // "text_config." or ""
  const Family* family = nullptr;
  std::optional<int64_t> head_dim;
  std::optional<int64_t> max_position;
  std::optional<double> theta;  // top-level rope_theta | rotary_emb_base
  std::string theta_key;
  std::optional<double> fraction;  // top-level partial_rotary_factor | rotary_pct
  std::string fraction_key;
  bool fraction_default = false;      // fraction is the class default
  std::optional<int64_t> rotary_dim;  // top-level absolute rotary_dim
  bool rotary_dim_default = false;    // rotary_dim is the class default (GPT-J)
  std::optional<int64_t> original_max;
  kernels::RopeStyle style = kernels::RopeStyle::kNeox;
  std::vector<ValueSource> sources;   // the values every layer shares, where they came from
  std::vector<std::string> warnings;  // about keys every layer shares
};

// `key` as a path in the file ("text_config.rope_theta").
std::string KeyPath(const TextModel& m, absl::string_view key);

template <typename T>
absl::StatusOr<std::optional<T>> GetText(const TextModel& m, absl::string_view key) {
  return Get<T>(*m.text, key, KeyPath(m, key));
}

// The first of `keys` that the text config gives.
template <typename T>
absl::StatusOr<std::optional<T>> GetFirst(const TextModel& m,
                                          std::initializer_list<absl::string_view> keys,
                                          std::string* which = nullptr) {
  for (absl::string_view key : keys) {
    POSENC_ASSIGN_OR_RETURN(std::optional<T> v, GetText<T>(m, key));
    if (v.has_value()) {
      if (which != nullptr) *which = KeyPath(m, key);
      return v;
    }
  }
  return std::nullopt;
}

// Reads what every layer shares into `m` (whose text, root and family are set).
absl::Status ReadTextModel(TextModel* m);

}  // namespace posenc::hf

#endif  // POSENC_KERNELS_HF_TEXT_MODEL_H_
