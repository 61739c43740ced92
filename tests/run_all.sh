#!/usr/bin/env bash
# Runs every posenc test: installs what is missing, builds the release preset, checks the style
# gates (tests/check_style.sh: clang-format over C++ and CUDA, clang-tidy over kernels/, server/
# and client/), the shell gate (tests/check_shell.sh: shellcheck over every script CI runs) and
# the Python gates (tests/check_python.sh: flake8, mypy), runs ctest (with POSENC_REQUIRE_PYTHON_TOOLS=1: the
# Python wheel test fails rather than skips when venv, pip, setuptools, wheel or mypy is missing).
# With POSENC_SANITIZERS=1 (the default in CI) it also builds the asan-ubsan preset and runs the
# whole suite under AddressSanitizer + UndefinedBehaviorSanitizer (the client tests run the
# sanitized `posenc` and `posenc-server` binaries too), then builds the tsan preset and runs the
# concurrency, drain, deadline, thread-pool and client end-to-end tests under ThreadSanitizer
# (the test list is the tsan test preset's filter in CMakePresets.json; suppressions for the
# uninstrumented gRPC/Abseil/spdlog in tests/tsan.supp), and last runs each libFuzzer target for
# 20 s (tests/fuzz/run_smoke.sh; the asan-ubsan preset builds them with clang beside the tests).
# After the release tests it cross-compiles kernels/ for aarch64 (tests/deploy/cross_aarch64.sh)
# and runs the container test (tests/deploy/container_test.sh: the image, compose and Kubernetes
# files with podman); POSENC_CROSS_TEST=0 and POSENC_CONTAINER_TEST=0 skip them locally.
# Usage: tests/run_all.sh            (from anywhere; needs root or sudo for apt on first run)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=${POSENC_JOBS:-$(nproc)}
stage() { printf '\n=== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; stage_start=$SECONDS; }
done_stage() { printf '=== %s took %ds\n' "$1" $((SECONDS - stage_start)); }

stage "dependencies"
bash deploy/install-deps.sh
done_stage "dependencies"

# build PRESET / test PRESET: one configure + build, one ctest run, each a timed stage.
build_preset() {
  stage "configure + build ($1)"
  cmake --preset "$1" >/dev/null
  cmake --build --preset "$1" -j "$jobs"
  done_stage "configure + build ($1)"
}
test_preset() {
  stage "tests ($1)"
  ctest --preset "$1" -j "$jobs"
  done_stage "tests ($1)"
}

build_preset release
stage "style (clang-format, clang-tidy)"
bash tests/check_style.sh build/release
done_stage "style (clang-format, clang-tidy)"
stage "shell (shellcheck)"
bash tests/check_shell.sh
done_stage "shell (shellcheck)"
stage "python (flake8, mypy)"
bash tests/check_python.sh build/release
done_stage "python (flake8, mypy)"
export POSENC_REQUIRE_PYTHON_TOOLS=1
test_preset release

# Portability: kernels/ cross-compiled for aarch64 (Debian's g++-aarch64-linux-gnu, installed
# when missing), the x86 SIMD levels left out. POSENC_CROSS_TEST=0 skips it.
if [ "${POSENC_CROSS_TEST:-1}" = 1 ]; then
  stage "cross-compile kernels/ for aarch64"
  bash tests/deploy/cross_aarch64.sh build/aarch64
  done_stage "cross-compile kernels/ for aarch64"
fi

# The deployment files for real (podman): deploy/Dockerfile built and run, deploy/compose.yaml
# with two replicas, the Kubernetes base with `podman kube play` (tests/deploy/container_test.sh;
# installs podman when missing). POSENC_CONTAINER_TEST=0 skips it on a workstation; CI runs it.
if [ "${POSENC_CONTAINER_TEST:-1}" = 1 ]; then
  stage "containers (image, compose, kube play)"
  bash tests/deploy/container_test.sh build/release/posenc
  done_stage "containers (image, compose, kube play)"
fi

if [ "${POSENC_SANITIZERS:-0}" = 1 ]; then
  build_preset asan-ubsan
  test_preset asan-ubsan

  # ThreadSanitizer: its own tree (it cannot be mixed with ASan), only tsan_test (the tsan build
  # preset's target: the five test files with threads, tests/CMakeLists.txt) and the libraries and
  # posenc-server it needs. Not run under TSan:
  # the CLI tests (CliTest, CliTlsTest: the CLI has no threads of its own, so they would only
  # exercise the uninstrumented gRPC client) and the suites without threads.
  build_preset tsan
  test_preset tsan

  # libFuzzer smoke: every target (tests/fuzz) replays its regressions and fuzzes 20 s under
  # ASan + UBSan with RSS and malloc limits; any finding fails. The targets come from the
  # asan-ubsan tree (clang, -O0, built above with the tests): a tree of their own at -O2 runs ten
  # times more inputs a second but cost CI 460-600 s more to build; long runs use one
  # (tests/fuzz/README.md).
  stage "fuzz smoke"
  bash tests/fuzz/run_smoke.sh build/asan-ubsan 20
  done_stage "fuzz smoke"
fi
