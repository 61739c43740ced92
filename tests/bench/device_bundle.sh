#!/usr/bin/env bash
# Packs a CUDA build made here into a folder that runs on a GPU machine without our build
# dependencies (Debian 12's gRPC, protobuf, Abseil, spdlog, Google Benchmark are not there):
# each program becomes a wrapper script that runs the real binary with the packed shared
# libraries first on LD_LIBRARY_PATH (only for that program: the machine's own Python, which
# spawns posenc-server, keeps its own libraries). glibc and the CUDA driver are the machine's.
#
#   tests/bench/device_bundle.sh BUILD_DIR OUT_DIR
#   then, on the GPU machine:  POSENC_PREBUILT=1 BUILD_DIR=OUT_DIR/build tests/bench/run_cuda.sh
#
# BUILD_DIR must hold kernels_test, cuda_parity_test, cuda_ipc_test, cuda_ipc_exporter,
# cuda_shm_test, cuda_bench, posenc-server and the Python package (targets of run_cuda.sh). OUT_DIR is replaced.
#
# POSENC_BUNDLE_PROGRAMS (paths relative to BUILD_DIR, space-separated) packs other programs
# instead, e.g. "tests/cuda_ipc_test tests/cuda_ipc_exporter" (the CUDA IPC tests: run them with
# POSENC_IPC_EXPORTER=OUT_DIR/build/tests/cuda_ipc_exporter); the Python package is then copied
# only if it was built. POSENC_BUNDLE_STRIP=1 strips the copied programs and libraries (the tree
# that travels to the GPU machine is limited to 64 MiB).
set -euo pipefail
build=$(cd "$1" && pwd)
out=$2
rm -rf "$out"
mkdir -p "$out/lib" "$out/bin" "$out/build/tests"
programs=(posenc-server cuda_bench tests/kernels_test tests/cuda_parity_test tests/cuda_ipc_test
  tests/cuda_ipc_exporter tests/cuda_shm_test)
if [ -n "${POSENC_BUNDLE_PROGRAMS:-}" ]; then
  read -r -a programs <<<"$POSENC_BUNDLE_PROGRAMS"
fi
for p in "${programs[@]}"; do
  [ -x "$build/$p" ] || { echo "missing $build/$p" >&2; exit 1; }
  name=$(basename "$p")
  cp "$build/$p" "$out/bin/$name"
  # Every shared library except glibc's own, the dynamic loader and the CUDA driver.
  ldd "$build/$p" | awk '$3 ~ /^\// {print $3}' |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda)\.so' |
    while read -r lib; do cp -Lu "$lib" "$out/lib/"; done
  cat >"$out/build/$p" <<EOF
#!/usr/bin/env bash
here=\$(cd "\$(dirname "\$0")" && pwd)
bundle=\$(cd "\$here/$( [ "$p" = "$name" ] && echo .. || echo ../..)" && pwd)
LD_LIBRARY_PATH="\$bundle/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$bundle/bin/$name" "\$@"
EOF
  chmod +x "$out/build/$p"
done
if [ -z "${POSENC_BUNDLE_PROGRAMS:-}" ] || [ -d "$build/python" ]; then
  cp -r "$build/python" "$out/build/python"
fi
if [ "${POSENC_BUNDLE_STRIP:-0}" = 1 ]; then
  strip --strip-unneeded "$out"/bin/* "$out"/lib/* 2>/dev/null || true
fi
du -sh "$out"
