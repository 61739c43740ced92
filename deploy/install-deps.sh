#!/usr/bin/env bash
# Installs posenc's build and test dependencies from Debian 12's packages (needs root).
# Idempotent: does nothing when every package is already installed.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev nlohmann-json3-dev prometheus-cpp-dev libpng-dev
  openssl clang-format clang-tidy shellcheck python3
  clang libclang-rt-14-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-grpcio python3-protobuf python3-numpy python3-pip python3-venv
  python3-setuptools python3-wheel flake8 mypy
  python3-dev  # the Python client's native transport (client/python/native/wirecall.cc)
  python3-torch  # the Python client's torch tests (tests/python/test_tensors.py, test_shared_memory.py)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
