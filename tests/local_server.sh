# shellcheck shell=bash
# Sourced by scripts that run the `posenc` CLI against a local posenc-server of a build
# (docs/analysis/make_pictures.sh, tests/bench/run_analyze_bench.sh):
#   start_local_server BUILD_DIR   starts BUILD_DIR/posenc-server on a Unix socket in a temporary
#                                  directory (--max_output_elements 2^24), waits until it answers,
#                                  and stops it and removes the directory on exit; sets
#                                  local_server_pid and local_server ("unix:..." for --server).
start_local_server() {
  local build="$1"
  local_server_dir="$(mktemp -d)"
  local_server="unix:$local_server_dir/posenc.sock"
  "$build/posenc-server" --listen "$local_server" --max_output_elements 16777216 \
    >"$local_server_dir/log" 2>&1 &
  local_server_pid=$!
  trap 'kill "$local_server_pid" 2>/dev/null; wait "$local_server_pid" 2>/dev/null; rm -rf "$local_server_dir"' EXIT
  for _ in $(seq 50); do
    "$build/posenc" --server "$local_server" health >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "posenc-server did not answer; its log:" >&2
  cat "$local_server_dir/log" >&2
  return 1
}
