#!/usr/bin/env bash
# Did a change make any kernel slower? Builds posenc_bench at REV (in a temporary git worktree)
# and at the working tree, runs the two alternately ROUNDS times (each run: repetitions in random
# interleaved order, STREAM among them), and prints each kernel's time relative to the same run's
# STREAM triad (fill for the biases), old vs new, medians over the rounds. Ratios taken within
# one run cancel most of the noise of a shared machine.
#
#   tests/bench/compare_revisions.sh REV [ROUNDS] [FILTER]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rev=${1:?usage: compare_revisions.sh REV [ROUNDS] [FILTER]}
rounds=${2:-2}
filter=${3:-.}
out=$root/build/compare
mkdir -p "$out"
old=$out/old-src
[ -d "$old" ] && git -C "$root" worktree remove --force "$old"
git -C "$root" worktree add -q --detach "$old" "$rev"
trap 'git -C "$root" worktree remove --force "$old"' EXIT
for src in "$old" "$root"; do
  cmake -S "$src" -B "$src/build/bench-release" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPOSENC_BUILD_BENCHMARKS=ON -DPOSENC_BUILD_TESTS=OFF >/dev/null
  cmake --build "$src/build/bench-release" --target posenc_bench >/dev/null
done
for round in $(seq "$rounds"); do
  for side in old new; do
    src=$old
    [ $side = new ] && src=$root
    "$src/build/bench-release/posenc_bench" --benchmark_filter="$filter" --benchmark_min_time=0.3 \
      --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \
      --benchmark_report_aggregates_only=true --benchmark_out="$out/$side-$round.json" \
      --benchmark_out_format=json >/dev/null
    echo "compare: $side round $round done"
  done
done
/usr/bin/python3 "$root/tests/bench/compare_revisions.py" "$out" "$rounds"
