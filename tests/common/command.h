// Runs a shell command for the tests of the binaries (the `posenc` CLI, posenc-server) with its
// stdout and stderr captured separately.
#ifndef POSENC_TESTS_COMMON_COMMAND_H_
#define POSENC_TESTS_COMMON_COMMAND_H_

#include <string>

namespace posenc::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally (or popen failed)
  std::string out;
  std::string err;
};

// Runs `command` through popen with " 2>err_path" appended: its stdout is read from the pipe,
// its stderr from err_path afterwards (the file is left in place). A popen failure is a test
// failure (ADD_FAILURE) and returns exit_code -1.
CommandResult RunCommand(const std::string& command, const std::string& err_path);

}  // namespace posenc::testing

#endif  // POSENC_TESTS_COMMON_COMMAND_H_
