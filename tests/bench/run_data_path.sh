#!/usr/bin/env bash
# The data-path benchmark of BENCHMARKS.md "Data path" (issue #20 item 7) in one invocation:
# builds posenc-server, data_path_bench (the C++ half) and the Python package, then for each
# server configuration starts a posenc-server, runs the C++ half and the Python half
# (data_path.py measure) against it, and prints the tables (data_path.py table):
#   threads_1       --allow_shared_memory --threads=1: kernel vs shared memory (C++, Python),
#                   the wire at 2 .. 256 MiB (C++, Python) beside one stream socket and a bare
#                   gRPC echo, the tiny calls
#   threads_2       --allow_shared_memory --threads=2: kernel vs shared memory at 2 threads
#   without_shm     --threads=1, no --allow_shared_memory: the tiny calls as before #20
#
#   tests/bench/run_data_path.sh [--quick] [--sizes MIB,...] [--listen ADDRESS]
#     --listen  where the servers listen: 127.0.0.1:0 (default: TCP on loopback, a free port) or
#               unix:///path (a Unix socket); the stream and echo baselines use the same kind.
#     --quick   3 runs and sizes 2,32 (a smoke run of ~80 s on 2 cores).
#     --sizes   the wire's q+k sizes in MiB (default 2,8,32,128,256; after --quick to keep its
#               run count with other sizes).
#   POSENC_BENCH_BUILD_DIR  the build directory (default build/bench-release; a configured
#                           build with -DPOSENC_BUILD_BENCHMARKS=ON, e.g. build/release, saves
#                           a build). POSENC_BENCH_OUT: where the results go (default build/bench).
#   POSENC_BENCH_CLIENT_RETAIN  bytes of freed memory each client process keeps for reuse
#                           (RetainFreedMemory / posenc.retain_freed_memory; default 1 GiB as the
#                           servers' --retain_free_memory_bytes; 0 = the allocator's defaults).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${POSENC_BENCH_BUILD_DIR:-$root/build/bench-release}
out=${POSENC_BENCH_OUT:-$root/build/bench}/data_path
listen=127.0.0.1:0
runs=7
py_runs=5
sizes=2,8,32,128,256
client_retain=${POSENC_BENCH_CLIENT_RETAIN:-1073741824}
while (($#)); do
  case $1 in
    --quick) runs=3 py_runs=3 sizes=2,32; shift ;;
    --sizes) sizes=$2; shift 2 ;;
    --listen) listen=$2; shift 2 ;;
    *) echo "usage: $0 [--quick] [--sizes MIB,...] [--listen ADDRESS]" >&2; exit 2 ;;
  esac
done
cd "$root"
mkdir -p "$out"
rm -f "$out"/*.jsonl
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPOSENC_BUILD_BENCHMARKS=ON \
    -DPOSENC_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$build" --target posenc-server data_path_bench posenc_python >/dev/null

server_pid=
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
}
trap stop_server EXIT

# start_server NAME FLAGS...: a server on $listen; sets $target: a TCP listener's address (its
# free port) from the start-up line, a unix: listener as given.
start_server() {
  local log=$out/$1.log
  shift
  "$build/posenc-server" --listen="$listen" --drain_grace=0s "$@" >"$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 200); do
    if grep -q "listening on" "$log"; then break; fi
    sleep 0.05
  done
  grep -q "listening on" "$log" || { cat "$log" >&2; exit 1; }
  case $listen in
    unix:*) target=$listen ;;
    *) target=$(grep -o 'listening on [^ ]*' "$log" | head -1 | cut -d' ' -f3) ;;
  esac
}

# run NAME THREADS C++PARTS PYTHONPARTS SERVER-FLAGS...
run() {
  local name=$1 threads=$2 cpp_parts=$3 py_parts=$4
  shift 4
  start_server "$name" --threads="$threads" "$@"
  echo "data path: $name (posenc-server --threads=$threads $*, $target)" >&2
  "$build/data_path_bench" --target "$target" --threads "$threads" --runs "$runs" \
    --sizes_mib "$sizes" --parts "$cpp_parts" --retain_free_bytes "$client_retain" \
    >>"$out/$name.jsonl"
  PYTHONPATH="$build/python" /usr/bin/python3 tests/bench/data_path.py measure \
    --target "$target" --threads "$threads" --runs "$py_runs" --sizes_mib "$sizes" \
    --parts "$py_parts" --retain_free_bytes "$client_retain" >>"$out/$name.jsonl"
  stop_server
}

run threads_1 1 kernel,wire,tiny shm,wire,tiny --allow_shared_memory
run threads_2 2 kernel shm --allow_shared_memory
run without_shm 1 tiny tiny
echo "data path: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "server listening on ${listen}, clients retaining ${client_retain} freed bytes" |
  tee "$out/table.md"
/usr/bin/python3 tests/bench/data_path.py table "$out"/threads_1.jsonl "$out"/threads_2.jsonl \
  "$out"/without_shm.jsonl | tee -a "$out/table.md"
