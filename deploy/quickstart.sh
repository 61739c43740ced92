#!/usr/bin/env bash
# Quick start on a fresh Debian 12 machine: installs what is missing, builds the release binaries,
# starts posenc-server on 127.0.0.1:50051 (in the background, logging to build/posenc-server.log)
# and shows real results through the posenc CLI. Stop the server with: kill $(cat build/posenc-server.pid)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
address=${POSENC_QUICKSTART_ADDRESS:-127.0.0.1:50051}
bash deploy/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target posenc-server posenc
bin=build/release
if [ -f build/posenc-server.pid ] && kill -0 "$(cat build/posenc-server.pid)" 2>/dev/null; then
  kill "$(cat build/posenc-server.pid)"; sleep 1
fi
"$bin/posenc-server" --listen="$address" >build/posenc-server.log 2>&1 &
echo $! >build/posenc-server.pid
for _ in $(seq 1 100); do
  grep -q "listening on" build/posenc-server.log 2>/dev/null && break
  kill -0 "$(cat build/posenc-server.pid)" 2>/dev/null || { cat build/posenc-server.log; exit 1; }
  sleep 0.1
done
grep "listening on" build/posenc-server.log
posenc() { "$bin/posenc" --server "$address" "$@"; }
set -x
posenc health
posenc info
posenc rope-cache --positions 0:4 --head-dim 8 --base 500000 --scaling llama3 --factor 8 \
  --low-freq-factor 1 --high-freq-factor 4 --original-max-pos 8192
posenc rope-cache --positions 2147483640:2147483643 --head-dim 4 --dtype float32
posenc alibi-bias --heads 4 --q-len 4 --k-len 6
posenc relative-bias --q-len 3 --k-len 5 --form buckets
{ set +x; } 2>/dev/null
echo
echo "posenc-server is running on $address (pid $(cat build/posenc-server.pid)); the CLI is $bin/posenc."
echo "Stop it with: kill \$(cat build/posenc-server.pid)"
