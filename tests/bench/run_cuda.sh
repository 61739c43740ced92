#!/usr/bin/env bash
# The CUDA backend on a GPU machine, in one go: device info, the device parity suite
# (cuda_parity_test), the golden suite through every backend incl. cuda (kernels_test's
# GoldenTest) and end to end through posenc-server --backend=cuda (tests/python/test_golden.py),
# the host-side math tests, CUDA IPC regions (cuda_ipc_test; cuda_shm_test and
# test_cuda_shared_memory.py through the server), the GPU benchmarks (cuda_bench: kernels on
# device data beside cudaMemcpy, and end to end) and the PyTorch eager peer on the GPU when torch
# with CUDA is importable. Exits non-zero when a test fails (benchmarks never fail the run).
#
#   tests/bench/run_cuda.sh [--quick] [--sanitize] [--profile]   (BUILD_DIR: build/cuda-release)
#
# --sanitize also runs cuda_parity_test (without its 1-stream variants) under compute-sanitizer's
# memcheck (--leak-check full) and initcheck, each a failing step on any error (about two minutes
# more on an H200). --profile, where Nsight Systems (nsys) is installed, records where a GPU
# caller's time goes past the kernel: the in-process device-view call at [16,4096,32,128] and the
# decode step end to end (posenc-server runs as the benchmark's child process), with nsys's CUDA
# API and GPU summaries in $out/nsys.log (the lent H200s have no nsys: skipped there, 2026-11-29).
#
# POSENC_PREBUILT=1 skips the build (a folder made by device_bundle.sh on a machine with our build
# dependencies); POSENC_PYTHON names the Python with grpcio and numpy (default /usr/bin/python3).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build/cuda-release}
out=${POSENC_BENCH_OUT:-$build/bench}
min_time=0.5
sanitize=0
profile=0
for arg in "$@"; do
  case "$arg" in
    --quick) min_time=0.1 ;;
    --sanitize) sanitize=1 ;;
    --profile) profile=1 ;;
    *) echo "usage: $0 [--quick] [--sanitize] [--profile]" >&2; exit 2 ;;
  esac
done
cd "$root"
mkdir -p "$out"
echo "== device"
nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap --format=csv ||
  echo "nvidia-smi not available"
py=${POSENC_PYTHON:-/usr/bin/python3}
prebuilt=${POSENC_PREBUILT:-}
if [ -z "$prebuilt" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPOSENC_ENABLE_CUDA=ON \
    -DPOSENC_BUILD_BENCHMARKS=ON >/dev/null
  cmake --build "$build" --target kernels_test cuda_parity_test cuda_bench cuda_ipc_test \
    cuda_ipc_exporter cuda_shm_test
fi
status=0
echo "== cuda_parity_test (the cuda backend vs the reference; skips without a device)"
"$build/tests/cuda_parity_test" || status=1
echo "== golden cases through every backend (incl. cuda) and the kernels' math on the host"
"$build/tests/kernels_test" --gtest_filter='AllCases/GoldenTest.*:CudaMath*:CudaEntryPoints*' ||
  status=1
echo "== golden cases end to end: the Python client against posenc-server --backend=cuda"
[ -n "$prebuilt" ] || cmake --build "$build" --target posenc-server posenc_python
if [ -x "$(command -v "$py")" ] && "$py" -c 'import grpc, numpy' 2>/dev/null; then
  (cd tests/python && PYTHONPATH="$build/python" POSENC_SERVER_PATH="$build/posenc-server" \
    POSENC_GOLDEN_BACKENDS=cuda "$py" -m unittest test_golden) || status=1
else
  echo "skipped: a python3 with grpcio and numpy is needed (POSENC_PYTHON, default Debian's)"
fi
echo "== CUDA IPC regions: the kernels in another process's device memory, and through the server"
POSENC_IPC_EXPORTER="$build/tests/cuda_ipc_exporter" "$build/tests/cuda_ipc_test" || status=1
POSENC_SERVER_PATH="$build/posenc-server" "$build/tests/cuda_shm_test" || status=1
if [ -x "$(command -v "$py")" ] && "$py" -c 'import grpc, numpy' 2>/dev/null; then
  (cd tests/python && PYTHONPATH="$build/python" POSENC_SERVER_PATH="$build/posenc-server" \
    "$py" -m unittest test_cuda_shared_memory) || status=1
fi
if [ "$sanitize" = 1 ]; then
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$cs" ]; then
    for tool in "memcheck --leak-check full" "initcheck"; do
      echo "== compute-sanitizer $tool: cuda_parity_test"
      # shellcheck disable=SC2086  # the tool and its options are words
      "$cs" --tool $tool --target-processes all --error-exitcode 9 \
        "$build/tests/cuda_parity_test" --gtest_filter='-*1stream*' >"$out/${tool%% *}.log" 2>&1 ||
        status=1
      grep -E "ERROR SUMMARY|LEAK SUMMARY|^\[  (PASSED|FAILED) " "$out/${tool%% *}.log" || true
    done
  else
    echo "compute-sanitizer not found: --sanitize skipped"; status=1
  fi
fi
echo "== cuda_bench (kernel GB/s on device data, beside cudaMemcpy; end to end with copies)"
POSENC_SERVER_PATH="$build/posenc-server" "$build/cuda_bench" --benchmark_min_time="$min_time" --benchmark_counters_tabular=true \
  --benchmark_out="$out/cuda_bench.json" --benchmark_out_format=json || true
if [ "$profile" = 1 ]; then
  ns=$(command -v nsys || true)
  for candidate in /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys; do
    if [ -z "$ns" ] && [ -x "$candidate" ]; then ns=$candidate; fi
  done
  if [ -n "$ns" ]; then
    echo "== nsys: a GPU caller's time past the kernel ($out/nsys.log)"
    POSENC_SERVER_PATH="$build/posenc-server" "$ns" profile --stats=true --force-overwrite true \
      -o "$out/gpu_caller" "$build/cuda_bench" --benchmark_min_time=0.2 \
      --benchmark_filter='DeviceTensorsApplyRope/b:16/.*/ids:0|GpuCallerApplyRope/b:64/' \
      >"$out/nsys.log" 2>&1 || echo "nsys failed (see $out/nsys.log)"
    grep -A14 -E "cuda_api_sum|cuda_gpu_kern_sum|cuda_gpu_mem_time_sum" "$out/nsys.log" || true
  else
    echo "nsys not found: --profile skipped"
  fi
fi
echo "== GPU callers: ApplyRope on q and k in CUDA shared memory, end to end vs the kernel"
PYTHONPATH="$build/python" POSENC_SERVER_PATH="$build/posenc-server" "$py" \
  tests/bench/cuda_shm_bench.py --cuda-bench-json "$out/cuda_bench.json" |
  tee "$out/cuda_shm.jsonl" || true
echo "== small calls: cpu vs cuda end to end (for --cuda_small_call_bytes)"
python3 tests/bench/small_call_threshold.py "$out/cuda_bench.json" || true
echo "== PyTorch eager on the GPU, same shapes"
python3 tests/bench/torch_cuda_peer.py | tee "$out/torch_cuda.jsonl" || true
echo "results: $out (cuda_bench.json, cuda_shm.jsonl, torch_cuda.jsonl)"
exit $status
