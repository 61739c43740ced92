#!/usr/bin/env bash
# Style gates of CI: clang-format over every C++ file of the repository (Debian 12's
# clang-format 14, .clang-format), then clang-tidy (.clang-tidy) over kernels/ with the compile
# commands of a configured build (default build/release). Exits non-zero on any finding.
#
#   tests/check_style.sh [BUILD_DIR]        (tests/run_all.sh runs it; POSENC_TIDY=0 skips tidy)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build/release}
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.inc' 2>/dev/null ||
                     find . -path ./build -prune -o \( -name '*.cc' -o -name '*.h' \) -print)
echo "style: clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1) over ${#files[@]} files"
clang-format --dry-run --Werror "${files[@]}"
if [ "${POSENC_TIDY:-1}" = 1 ]; then
  # select.cc asks GCC's __builtin_cpu_supports for feature names clang does not know.
  # Only the files this build compiles: with CUDA kernels/cuda/not_built.cc is left out, without
  # it kernels/cuda/backend.cc (clang-tidy needs each file's compile command).
  mapfile -t kernels < <(printf '%s\n' "${files[@]}" | grep '^kernels/.*\.cc$' |
                         grep -v '^kernels/cpu/select\.cc$' |
                         while read -r f; do
                           if grep -qF "\"file\": \"$root/$f\"" "$build/compile_commands.json"; then
                             echo "$f"
                           fi
                         done)
  echo "style: clang-tidy over ${#kernels[@]} kernel files"
  # run-clang-tidy 14 has no -warnings-as-errors: any warning in its log is a finding.
  run-clang-tidy -quiet -p "$build" -j "$(nproc)" "${kernels[@]/#/$root/}" \
    >"$build/clang-tidy.log" 2>&1 || true
  if grep -qE '(warning|error): ' "$build/clang-tidy.log"; then
    grep -E '(warning|error): ' "$build/clang-tidy.log" | sort -u | head -50
    echo "style: clang-tidy findings (full log: $build/clang-tidy.log)"
    exit 1
  fi
fi
echo "style: clean"
