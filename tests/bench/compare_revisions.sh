#!/usr/bin/env bash
# Did a change make any kernel slower? Builds posenc_bench at REV (exported with git archive into
# build/compare/src-REV, kept for the next comparison) and at the working tree
# (build/bench-release), runs the two alternately ROUNDS times (each run: repetitions in random
# interleaved order, the STREAM limits among them), and prints each kernel as a fraction of the
# limit of its kind measured in the same run (compare_revisions.py), old vs new, medians over the
# rounds. Ratios taken within one run cancel most of the noise of a shared machine.
#
#   tests/bench/compare_revisions.sh REV [ROUNDS] [FILTER]
# MIN_TIME (default 0.3) sets --benchmark_min_time. Run it through /work/bin/locked on a shared
# machine. FILTER should keep the limits: e.g. 'Stream|RopeCache'.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rev=${1:?usage: compare_revisions.sh REV [ROUNDS] [FILTER]}
rounds=${2:-2}
filter=${3:-.}
min_time=${MIN_TIME:-0.3}
out=$root/build/compare
old=$out/src-$(git -C "$root" rev-parse --short "$rev")
mkdir -p "$out"
if [ ! -d "$old" ]; then
  mkdir -p "$old.tmp"
  git -C "$root" archive "$rev" | tar -x -C "$old.tmp"
  mv "$old.tmp" "$old"
fi
for build in "$old/build" "$root/build/bench-release"; do
  src=${build%/build}
  [ "$build" = "$root/build/bench-release" ] && src=$root
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPOSENC_BUILD_BENCHMARKS=ON -DPOSENC_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" --target posenc_bench >/dev/null
done
for round in $(seq "$rounds"); do
  for side in old new; do
    bin=$old/build/posenc_bench
    [ $side = new ] && bin=$root/build/bench-release/posenc_bench
    "$bin" --benchmark_filter="$filter" --benchmark_min_time="$min_time" \
      --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \
      --benchmark_report_aggregates_only=true --benchmark_out="$out/$side-$round.json" \
      --benchmark_out_format=json >/dev/null
    echo "compare: $side round $round done"
  done
done
/usr/bin/python3 "$root/tests/bench/compare_revisions.py" "$out" "$rounds"
