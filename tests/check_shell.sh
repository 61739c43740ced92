#!/usr/bin/env bash
# Shell gate of CI: shellcheck (Debian 12's 0.9, default severity: style and up) over every shell
# script of the repository, which is every script CI runs (.ci/run, tests/run_all.sh and the
# scripts it calls, deploy/*.sh). Sourced files are followed (-x). Exits non-zero on any finding.
#
#   tests/check_shell.sh                     (tests/run_all.sh runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t scripts < <(git ls-files '*.sh' .ci/run)
echo "shell: shellcheck $(shellcheck --version | sed -n 's/^version: //p') over ${#scripts[@]} scripts"
shellcheck -x "${scripts[@]}"
echo "shell: clean"
