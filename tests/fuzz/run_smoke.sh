#!/usr/bin/env bash
# Bounded smoke run of every libFuzzer target (tests/fuzz/README.md): replays each target's
# regression inputs (tests/fuzz/regressions/<target>/, every file once), then fuzzes it from its
# seed corpus (tests/fuzz/corpus/<target>/, read only) for SECONDS, with the RSS, allocation and
# time limits below. Any crash, sanitizer report, leak, timeout or over-limit allocation fails
# the run; the input that caused it is left in the printed artifact directory.
#
#   tests/fuzz/run_smoke.sh [BUILD_DIR] [SECONDS]      defaults: build/fuzz 20
#
# Builds nothing: build BUILD_DIR first (the asan-ubsan preset, which CI uses, or an optimized
# tree of its own: CC=clang CXX=clang++ -DPOSENC_BUILD_TESTS=OFF -DPOSENC_BUILD_FUZZERS=ON).
# Runs one target at a time, one process.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build_dir="${1:-$root/build/fuzz}"
seconds="${2:-20}"
targets=(rpc_fuzz inference_fuzz shm_fuzz hf_config_fuzz table_fuzz cli_flags_fuzz)
limits=(-rss_limit_mb=1024 -malloc_limit_mb=512 -timeout=10)

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

work="$(mktemp -d "${TMPDIR:-/tmp}/posenc-fuzz.XXXXXX")"
failed=()
summary=()
for target in "${targets[@]}"; do
  bin="$build_dir/$target"
  if [[ ! -x "$bin" ]]; then
    echo "run_smoke: $bin not built (configure with -DPOSENC_BUILD_FUZZERS=ON)" >&2
    failed+=("$target (not built)")
    continue
  fi
  regressions=()
  if [[ -d "$here/regressions/$target" ]]; then
    mapfile -t regressions < <(find "$here/regressions/$target" -type f | sort)
  fi
  if ((${#regressions[@]} > 0)); then
    if ! "$bin" "${limits[@]}" "${regressions[@]}" >"$work/$target.replay.log" 2>&1; then
      echo "run_smoke: $target fails a regression input; log:" >&2
      tail -n 40 "$work/$target.replay.log" >&2
      failed+=("$target (regression)")
      continue
    fi
  fi
  mkdir -p "$work/$target.corpus" "$work/$target.artifacts"
  # New inputs go to the scratch directory (the first one); the committed seeds are only read.
  if ! "$bin" "${limits[@]}" -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="$work/$target.artifacts/" \
      "$work/$target.corpus" "$here/corpus/$target" >"$work/$target.log" 2>&1; then
    echo "run_smoke: $target found a failure; its input is in $work/$target.artifacts/; log:" >&2
    tail -n 60 "$work/$target.log" >&2
    failed+=("$target")
    continue
  fi
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target.log" | tail -n 1)"
  cov="$(grep -E '^#[0-9]+' "$work/$target.log" | tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+' || true)"
  summary+=("$(printf '%-16s %10s execs  %s  regressions %d' "$target" "${execs:-?}" "$cov" \
    "${#regressions[@]}")")
done

printf '%s\n' "${summary[@]}"
if ((${#failed[@]} > 0)); then
  echo "run_smoke: FAILED: ${failed[*]} (logs in $work)" >&2
  exit 1
fi
rm -rf "$work"
echo "run_smoke: all ${#targets[@]} targets passed (${seconds}s each)"
