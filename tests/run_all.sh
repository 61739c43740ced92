#!/usr/bin/env bash
# Runs every posenc test: installs what is missing, builds the release preset, checks the style
# gates (tests/check_style.sh: clang-format, clang-tidy over kernels/), runs ctest.
# With POSENC_SANITIZERS=1 (the default in CI) it also builds the asan-ubsan preset and runs the
# kernel and server suites under AddressSanitizer + UndefinedBehaviorSanitizer.
# Usage: tests/run_all.sh            (from anywhere; needs root or sudo for apt on first run)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=${POSENC_JOBS:-$(nproc)}
stage() { printf '\n=== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; stage_start=$SECONDS; }
done_stage() { printf '=== %s took %ds\n' "$1" $((SECONDS - stage_start)); }

stage "dependencies"
bash deploy/install-deps.sh
done_stage "dependencies"

stage "configure + build (release)"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
done_stage "configure + build (release)"

stage "style (clang-format, clang-tidy on kernels/)"
bash tests/check_style.sh build/release
done_stage "style (clang-format, clang-tidy on kernels/)"

stage "tests (release)"
ctest --preset release -j "$jobs"
done_stage "tests (release)"

if [ "${POSENC_SANITIZERS:-0}" = 1 ]; then
  stage "build (asan-ubsan)"
  cmake --preset asan-ubsan >/dev/null
  cmake --build --preset asan-ubsan -j "$jobs" --target kernels_test server_test
  done_stage "build (asan-ubsan)"
  stage "tests (asan-ubsan)"
  ctest --preset asan-ubsan -j "$jobs" -L '^(kernels_test|server_test)$'
  done_stage "tests (asan-ubsan)"
fi
