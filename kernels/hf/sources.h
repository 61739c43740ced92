// Where each value the normalizer used came from (kernels/hf; internal to it): the ValueSource
// entries DescribeRope reports, read from the file, from text_config, or an architecture default.
//
// Thread-safety: pure functions.
#ifndef POSENC_KERNELS_HF_SOURCES_H_
#define POSENC_KERNELS_HF_SOURCES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "kernels/hf/architectures.h"
#include "kernels/hf/config.h"
#include "kernels/hf/json.h"

namespace posenc::hf {

// "architecture default (<the family's transformers file>)".
std::string DefaultOrigin(const Family& f);

// A number as sources show it ("%.10g").
std::string ValueText(double v);

// A JSON value as text; arrays by their length.
std::string JsonText(const Json& v);

// `name` was read at `key_path` ("text_config.rope_theta"; a class-default RoPE dict's path says
// so, and the origin follows).
void ReadFrom(std::vector<ValueSource>* out, const Family& f, absl::string_view name,
              absl::string_view key_path, std::string value);

// `name` is the architecture's default (`key`: the key that was absent, or the rule).
void Defaulted(std::vector<ValueSource>* out, const Family& f, absl::string_view name,
               absl::string_view key, std::string value);

}  // namespace posenc::hf

#endif  // POSENC_KERNELS_HF_SOURCES_H_
