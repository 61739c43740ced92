// The server commands: info (GetServerInfo) and health (grpc.health.v1).
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "kernels/common/status.h"

namespace posenc::cli {
namespace {

const FlagGroup& HealthFlags() {
  static const FlagGroup* const kFlags = new FlagGroup{
      {"service", FlagType::kString, "NAME", "service to check (default: the whole server)"},
  };
  return *kFlags;
}

absl::StatusOr<CommandOutput> RunInfo(const ParsedFlags&, const client::Client& client) {
  POSENC_ASSIGN_OR_RETURN(client::ServerInfo info, client.GetServerInfo());
  CommandOutput out;
  out.extras["version"] = info.version;
  out.extras["build"] = info.build;
  Json backends = Json::object();
  for (const client::ServerInfo::Backend& b : info.backends) {
    backends[b.name] = absl::StrCat(
        b.detail, b.is_default ? " (default)" : "",
        b.small_call_bytes > 0 ? absl::StrCat(", calls under ", b.small_call_bytes, " bytes on cpu")
                               : "");
  }
  out.extras["backends"] = std::move(backends);
  Json devices = Json::array();
  for (const client::ServerInfo::Device& d : info.devices) {
    devices.push_back(absl::StrCat(d.index, ": ", d.name, ", ", d.total_memory_bytes >> 20,
                                   " MiB, compute ", d.compute_capability, ", driver CUDA ",
                                   d.driver_version, d.in_use ? " (in use)" : ""));
  }
  out.extras["cuda"] = {{"built_in", info.cuda_built_in}, {"devices", std::move(devices)}};
  out.extras["limits"] = {{"max_message_bytes", info.max_message_bytes},
                          {"max_output_elements", info.max_output_elements},
                          {"max_inflight_bytes", info.max_inflight_bytes},
                          {"max_heavy_calls", info.max_heavy_calls}};
  Json tables = Json::object();
  for (const client::ServerInfo::Table& t : info.tables) {
    tables[t.name] = absl::StrCat(std::string(client::DTypeName(t.dtype)), " [",
                                  absl::StrJoin(t.shape, ", "), "]");
  }
  out.extras["tables"] = std::move(tables);
  return out;
}

absl::StatusOr<CommandOutput> RunHealth(const ParsedFlags& flags, const client::Client& client) {
  POSENC_ASSIGN_OR_RETURN(client::HealthStatus status,
                          client.Health(flags.String("service").value_or("")));
  CommandOutput out;
  out.extras["status"] = std::string(client::HealthStatusName(status));
  out.exit_code = status == client::HealthStatus::kServing ? 0 : 1;
  return out;
}

}  // namespace

Command InfoCommand() {
  return {"info", "server version, build, backends, limits and loaded tables", "", {}, &RunInfo};
}

Command HealthCommand() {
  return {"health",
          "grpc.health.v1 check; exit code 0 only when SERVING",
          "",
          {&HealthFlags()},
          &RunHealth};
}

}  // namespace posenc::cli
