#!/usr/bin/env bash
# Times AnalyzeEncoding over a million positions (issue #22) through a local posenc-server: each
# case runs `posenc analyze` ROUNDS times (default 3) and prints the wall time of each run (the
# CLI's start, the call and the printing; the CLI alone is ~10 ms) and the server's peak
# resident memory. Figures: BENCHMARKS.md "AnalyzeEncoding over a million positions".
#
#   tests/bench/run_analyze_bench.sh [BUILD_DIR] [ROUNDS] [REGEX]
#     (default build/release, 3 rounds, every case; REGEX picks cases by name, grep -E)
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build/release}"
rounds="${2:-3}"
only="${3:-.}"
llama=docs/analysis/meta-llama-3.1-8b.config.json
# shellcheck source=tests/local_server.sh
source tests/local_server.sh
start_local_server "$build"
socket="$local_server"

run() {
  local name="$1"
  shift
  grep -qE "$only" <<<"$name" || return 0
  local times=()
  for _ in $(seq "$rounds"); do
    local t0 t1 ms
    t0=$(date +%s%N)
    "$build/posenc" --server "$socket" --timeout 10m analyze "$@" >/dev/null
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    times+=("$(printf '%d.%02d' $((ms / 1000)) $((ms % 1000 / 10)))")
  done
  printf '%-44s %s s\n' "$name" "${times[*]}"
}

n=$((1 << 20))
echo "AnalyzeEncoding, $n positions/distances, $(nproc) cores, rounds: $rounds"
run "rope d128 uniqueness (offsets) + bounds" --encoding rope --hf-config "$llama" \
  --count "$n" --properties uniqueness,bounds
run "rope d128 bf16 collision search" --encoding rope --hf-config "$llama" --count "$n" \
  --collision bfloat16 --properties bounds
run "rope d128 relative (16 distances)" --encoding rope --hf-config "$llama" --count "$n" \
  --properties relative
run "rope d128 decay (256 q/k pairs)" --encoding rope --hf-config "$llama" --count "$n" \
  --properties decay
run "rope d128 extrapolation (llama3, default)" --encoding rope --hf-config "$llama" \
  --count "$n" --properties extrapolation
run "sinusoidal d512 uniqueness + bounds" --encoding sinusoidal --dim 512 --count "$n" \
  --properties uniqueness,bounds
run "alibi 32 heads decay" --encoding alibi --heads 32 --count "$n" --properties decay
echo "server peak RSS: $(grep VmHWM "/proc/$local_server_pid/status" | awk '{print $2, $3}')"
