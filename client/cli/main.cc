// posenc: the command-line client of the posenc service (the library posenc_cli, cli.h).
#include <string>
#include <vector>

#include "client/cli/cli.h"

int main(int argc, char** argv) {
  return posenc::cli::RunCli(std::vector<std::string>(argv + 1, argv + argc));
}
