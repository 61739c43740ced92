// The posenc CLI as a library (posenc_cli): RunCli runs one command line; client/cli/main.cc is
// the `posenc` binary around it.
//
//   posenc [--server HOST:PORT] [--format table|json|none] [--timeout 30s] [--full]
//          SUBCOMMAND [flags]
//
// Global flags may also follow the subcommand (a repeated flag: the last one wins). Exit codes:
// 0 success; 1 the call (or a file) failed, with "error: CODE: message" on stderr, or `health`
// found the server not SERVING, or a `bench` call failed; 2 usage error (also an output file that
// cannot be written: checked before any call); 130 `bench` stopped by Ctrl-C. `posenc --help`
// lists the subcommands, `posenc SUBCOMMAND --help` their flags; `posenc --version` prints the
// version.
#ifndef POSENC_CLIENT_CLI_CLI_H_
#define POSENC_CLIENT_CLI_CLI_H_

#include <string>
#include <vector>

#include "client/cli/flags.h"

namespace posenc::cli {

// The global flags (--server, --format, --timeout, --tls*, ...), accepted before or after the
// subcommand.
const FlagGroup& GlobalFlags();

// Runs `posenc ARGS...` (args without the program name); the exit code.
int RunCli(const std::vector<std::string>& args);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_CLI_H_
