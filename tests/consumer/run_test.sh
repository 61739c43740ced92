#!/usr/bin/env bash
# ctest `install_consumer` (label install): the C++ client library as another project sees it.
#   1. cmake --install BUILD_DIR --prefix TMP/prefix, and a check of the tree;
#   2. this directory's consumer project built with CMake (find_package(posenc CONFIG REQUIRED),
#      -DCMAKE_PREFIX_PATH=TMP/prefix) and main.cc built with pkg-config (posenc.pc);
#   3. the installed posenc-server started on a free loopback port (--listen 127.0.0.1:0, the
#      port read from its "listening on" line), both consumers and the installed CLI run against
#      it, then the server drained with SIGTERM (exit 0 expected).
# Every step is bounded by timeout(1); the trap stops the server and removes TMP on any exit.
#
#   run_test.sh BUILD_DIR LIBDIR VERSION [CONSUMER_FLAGS]
# LIBDIR is CMAKE_INSTALL_LIBDIR (lib), VERSION the project version the package must report,
# CONSUMER_FLAGS extra compile/link flags for the consumers (the sanitizer flags of a sanitized
# build, whose archives need its runtime).
set -euo pipefail
build=$1
libdir=$2
version=$3
flags=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/posenc-install-test.XXXXXX")
prefix=$work/prefix
server_pid=

# $server_pid is timeout(1), which forwards SIGTERM to the server and runs in its own process
# group (pgid = its pid): SIGTERM first, then SIGKILL to that group, so the server cannot outlive
# the test.
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$server_pid" 2>/dev/null || kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

step() { printf '== %s (at %ds)\n' "$1" "$SECONDS"; }
fail() {
  echo "install_consumer: $1" >&2
  [ $# -gt 1 ] && [ -f "$2" ] && cat "$2" >&2
  exit 1
}

step "cmake --install $build --prefix $prefix"
timeout 60 cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  fail "cmake --install failed" "$work/install.log"
for f in include/posenc/client.h include/posenc/tensor.h \
  "$libdir/libposenc_client.a" "$libdir/libposenc_proto.a" "$libdir/libposenc_kernels.a" \
  "$libdir/cmake/posenc/posencConfig.cmake" "$libdir/cmake/posenc/posencConfigVersion.cmake" \
  "$libdir/cmake/posenc/posencTargets.cmake" "$libdir/pkgconfig/posenc.pc" \
  bin/posenc-server bin/posenc; do
  [ -e "$prefix/$f" ] || fail "missing from the install tree: $f"
done
# The public headers must not need anything that is not installed.
if grep -rhoE '#include "[^"]+"' "$prefix/include/posenc" | grep -vE '"(posenc|absl)/'; then
  fail "an installed header includes a file that is not installed"
fi

step "consumer with CMake (find_package(posenc CONFIG REQUIRED))"
cmake_flags=()
if [ -n "$flags" ]; then
  cmake_flags=(-DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags")
fi
timeout 120 cmake -S "$here" -B "$work/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" "${cmake_flags[@]}" >"$work/cmake.log" 2>&1 ||
  fail "configuring the consumer failed" "$work/cmake.log"
grep -q "posenc $version from $prefix/$libdir/cmake/posenc" "$work/cmake.log" ||
  fail "find_package did not report posenc $version from the prefix" "$work/cmake.log"
timeout 180 cmake --build "$work/cmake-build" >"$work/cmake-build.log" 2>&1 ||
  fail "building the consumer with CMake failed" "$work/cmake-build.log"

step "consumer with pkg-config (posenc.pc)"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
[ "$(pkg-config --modversion posenc)" = "$version" ] ||
  fail "pkg-config --modversion posenc: $(pkg-config --modversion posenc 2>&1), expected $version"
# shellcheck disable=SC2046,SC2086  # word splitting of the flags is the point
timeout 180 c++ $flags -o "$work/consumer-pkg-config" "$here/main.cc" \
  $(pkg-config --cflags --libs posenc) >"$work/pkg-config-build.log" 2>&1 ||
  fail "building the consumer with pkg-config failed ($(pkg-config --cflags --libs posenc))" \
    "$work/pkg-config-build.log"

step "posenc-server on a free loopback port"
# timeout(1) too, so that even a killed test cannot leave the server behind for long.
timeout 240 "$prefix/bin/posenc-server" --listen 127.0.0.1:0 --drain_grace 0s \
  --drain_timeout 5s >"$work/server.log" 2>&1 &
server_pid=$!
port=
for _ in $(seq 300); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9][0-9]*\) .*/\1/p' "$work/server.log" |
    head -n 1)
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "posenc-server exited before listening" "$work/server.log"
  sleep 0.1
done
[ -n "$port" ] || fail "posenc-server did not listen within 30 s" "$work/server.log"
echo "posenc-server on 127.0.0.1:$port"

for consumer in "$work/cmake-build/consumer" "$work/consumer-pkg-config"; do
  step "$(basename "$consumer") 127.0.0.1:$port"
  timeout 60 "$consumer" "127.0.0.1:$port" || fail "$consumer failed" "$work/server.log"
done
step "posenc health (the installed CLI)"
timeout 60 "$prefix/bin/posenc" --server "127.0.0.1:$port" health ||
  fail "posenc health failed" "$work/server.log"

step "SIGTERM"
kill -TERM "$server_pid"
status=0
for _ in $(seq 300); do
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
wait "$server_pid" || status=$?
server_pid=
[ "$status" = 0 ] || fail "posenc-server exited with status $status after SIGTERM" "$work/server.log"
step "done"
