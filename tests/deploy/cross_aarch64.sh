#!/usr/bin/env bash
# Portability check: compiles kernels/ (the posenc_kernels library, every op and the CPU
# backend's portable SIMD level) for aarch64 with Debian's cross compiler, and checks that the
# x86 instruction-set levels are not part of that build and that the objects are AArch64 code.
# Installs g++-aarch64-linux-gnu when missing (needs root). Usage: tests/deploy/cross_aarch64.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${1:-build/aarch64}
jobs=${POSENC_JOBS:-$(nproc)}
if ! command -v aarch64-linux-gnu-g++ >/dev/null; then
  echo "cross_aarch64: installing g++-aarch64-linux-gnu"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends g++-aarch64-linux-gnu >/dev/null
fi
# Abseil's CMake package of the build machine: its headers are the same on every architecture,
# and the library is only compiled here, never linked.
absl_dir=$(dirname "$(find /usr/lib /usr/share -path '*cmake/absl/abslConfig.cmake' -print -quit)")
cmake -S . -B "$build" -G Ninja --toolchain cmake/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=Release -DPOSENC_KERNELS_ONLY=ON -Dabsl_DIR="$absl_dir" >/dev/null
cmake --build "$build" -j "$jobs" --target posenc_kernels
# Only the portable level: no avx2/avx512 objects, no x86 dispatch.
levels=$(ninja -C "$build" -t targets all | grep -o 'posenc_simd_[a-z0-9]*' | sort -u | tr '\n' ' ')
echo "cross_aarch64: SIMD levels built: $levels"
if [ "$levels" != "posenc_simd_scalar " ]; then
  echo "cross_aarch64: FAILED: expected only posenc_simd_scalar on aarch64" >&2
  exit 1
fi
lib="$build/libposenc_kernels.a"
machines=$(aarch64-linux-gnu-readelf -h "$lib" | awk -F: '/Machine:/ {gsub(/^ +/, "", $2); print $2}' | sort -u)
echo "cross_aarch64: $(aarch64-linux-gnu-ar t "$lib" | wc -l) objects in $lib, machine: $machines"
if [ "$machines" != "AArch64" ]; then
  echo "cross_aarch64: FAILED: objects are not all AArch64" >&2
  exit 1
fi
echo "cross_aarch64: OK"
