// The RoPE configuration flags of rope-cache, apply-rope, check, describe and bench (one flag per
// field of posenc.v1.RopeConfig and RopeScaling: tests/client/cli_rope_flags_test.cc holds the
// map and fails when the proto gains a field without a flag), and the derived values as JSON.
//
// Thread-safety: the flag group is immutable; the functions hold no state.
#ifndef POSENC_CLIENT_CLI_ROPE_CONFIG_H_
#define POSENC_CLIENT_CLI_ROPE_CONFIG_H_

#include "absl/status/statusor.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"

namespace posenc::cli {

const FlagGroup& RopeConfigFlags();

// The RopeConfig the flags of RopeConfigFlags() describe (--hf-config FILE read here).
absl::StatusOr<client::RopeConfig> ReadRopeConfigFlags(const ParsedFlags& flags);

// The derived values of a RoPE call as the commands print them.
Json DerivedToJson(const client::RopeDerived& d);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_ROPE_CONFIG_H_
