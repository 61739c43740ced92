#!/usr/bin/env bash
# Style gates of CI: clang-format over every C++ and CUDA file of the repository (Debian 12's
# clang-format 14, .clang-format), then clang-tidy (.clang-tidy) over the product code (kernels/,
# kernels/hf, server/, client/ and the CLI; not tests/ nor generated code) with the compile
# commands of a configured build (default build/release). Exits non-zero on any finding; prints
# how long clang-tidy took. (Shell scripts: tests/check_shell.sh.)
#
#   tests/check_style.sh [BUILD_DIR]        (tests/run_all.sh runs it; POSENC_TIDY=0 skips tidy)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build/release}
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.inc' '*.cu' '*.cuh' 2>/dev/null ||
                     find . -path ./build -prune -o \( -name '*.cc' -o -name '*.h' -o \
                       -name '*.cu' -o -name '*.cuh' \) -print)
start=$SECONDS
echo "style: clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1) over ${#files[@]} files"
clang-format --dry-run --Werror "${files[@]}"
if [ "${POSENC_TIDY:-1}" = 1 ]; then
  # select.cc asks GCC's __builtin_cpu_supports for feature names clang does not know.
  # Only the files this build compiles: with CUDA kernels/cuda/not_built.cc is left out, without
  # it the CUDA host files (clang-tidy needs each file's compile command).
  mapfile -t product < <(printf '%s\n' "${files[@]}" |
                         grep -E '^(kernels|server|client)/.*\.cc$' |
                         grep -v '^kernels/cpu/select\.cc$' |
                         while read -r f; do
                           if grep -qF "\"file\": \"$root/$f\"" "$build/compile_commands.json"; then
                             echo "$f"
                           fi
                         done)
  tidy_start=$SECONDS
  echo "style: clang-tidy over ${#product[@]} files of kernels/, server/ and client/"
  # run-clang-tidy 14 has no -warnings-as-errors: any warning in its log is a finding.
  # A precompiled header of gRPC, protobuf and posenc.pb.h (-include-pch) does not make it
  # faster: the matchers walk the whole AST, the PCH's declarations too (measured 2026-11-29:
  # server/handlers.cc 18.7 -> 20.3 s, server/call_runner.cc 17.5 -> 18.0, client/client.cc
  # 31.4 -> 28.6).
  run-clang-tidy -quiet -p "$build" -j "$(nproc)" "${product[@]/#/$root/}" \
    >"$build/clang-tidy.log" 2>&1 || true
  if grep -qE '(warning|error): ' "$build/clang-tidy.log"; then
    grep -E '(warning|error): ' "$build/clang-tidy.log" | sort -u | head -50
    echo "style: clang-tidy findings (full log: $build/clang-tidy.log)"
    exit 1
  fi
  echo "style: clang-tidy took $((SECONDS - tidy_start))s"
fi
echo "style: clean in $((SECONDS - start))s"
