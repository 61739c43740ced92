#!/usr/bin/env bash
# Reproduces BENCHMARKS.md: builds the release benchmarks, then runs in one invocation the
# STREAM-style limits (copy, triad, the in-place update a[i] = s*a[i] and fill) and posenc's
# kernels (posenc_bench) and the PyTorch eager peer (torch_peer.py, at its best with huge pages),
# at 1 and 2 threads, and prints the tables: each kernel as a fraction of the limit of its kind
# measured in the same run (ApplyRope of the in-place update, biases and tables of fill), the
# decode step's latency, and the targets of issue #19.
#
#   tests/bench/run_bench.sh [--quick]      (needs python3-torch; installs it if missing)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${POSENC_BENCH_OUT:-$root/build/bench}
min_time=0.3
[ "${1:-}" = "--quick" ] && min_time=0.1
mkdir -p "$out"
cd "$root"
bash deploy/install-deps.sh
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch python3-numpy >/dev/null
fi
cmake -S . -B build/bench-release -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPOSENC_BUILD_BENCHMARKS=ON -DPOSENC_BUILD_TESTS=OFF >/dev/null
cmake --build build/bench-release --target posenc_bench
echo "bench: posenc + STREAM (min_time ${min_time}s)"
# Five repetitions in random interleaved order (STREAM among them), so that the ratios compare
# runs taken side by side on a shared, noisy machine; the table uses the medians.
build/bench-release/posenc_bench --benchmark_min_time="$min_time" --benchmark_repetitions=5 \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/posenc.json" --benchmark_out_format=json >/dev/null
: >"$out/torch.jsonl"
for threads in 1 2; do
  echo "bench: PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') eager, $threads thread(s)"
  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 /usr/bin/python3 tests/bench/torch_peer.py "$threads" \
    >>"$out/torch.jsonl"
done
/usr/bin/python3 tests/bench/summarize.py "$out/posenc.json" "$out/torch.jsonl" | tee "$out/table.md"
