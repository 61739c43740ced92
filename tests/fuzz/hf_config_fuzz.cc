// libFuzzer target: the Hugging Face config.json normalizer (kernels/hf/config.h).
//
// Input: the config.json text; if it holds a NUL byte, what follows the first one is the
// layer_type (for rope_parameters keyed by layer type), and after a second NUL the submodule
// ("indexer"). A config that parses goes on through the kernels' RoPE validation, as in a
// request, with every sub-module's config. Errors must be INVALID_ARGUMENT naming
// config.hf_config_json, config.layer_type or config.submodule; anything else (an exception, a
// crash, a sanitizer report) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "kernels/hf/config.h"
#include "kernels/rope/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  absl::string_view json = input;
  absl::string_view layer_type;
  absl::string_view submodule;
  if (size_t nul = input.find('\0'); nul != absl::string_view::npos) {
    json = input.substr(0, nul);
    layer_type = input.substr(nul + 1);
    if (size_t second = layer_type.find('\0'); second != absl::string_view::npos) {
      submodule = layer_type.substr(second + 1);
      layer_type = layer_type.substr(0, second);
    }
  }
  absl::StatusOr<posenc::hf::ModelRope> parsed =
      posenc::hf::ParseModelRope(json, {.layer_type = layer_type, .submodule = submodule});
  if (!parsed.ok()) {
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument ||
        !(absl::StartsWith(parsed.status().message(), "config.hf_config_json: ") ||
          absl::StartsWith(parsed.status().message(), "config.layer_type: ") ||
          absl::StartsWith(parsed.status().message(), "config.submodule: "))) {
      std::abort();
    }
    return 0;
  }
  (void)posenc::kernels::ValidateRopeConfig(parsed->config);
  for (const posenc::hf::SubmoduleRope& sub : parsed->submodules) {
    (void)posenc::kernels::ValidateRopeConfig(sub.config);
  }
  return 0;
}
