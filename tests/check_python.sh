#!/usr/bin/env bash
# Python gates of CI: flake8 (setup.cfg) over every Python file of the repository, then mypy
# (Debian's, setup.cfg) over the posenc package as the build generated it (BUILD_DIR/python:
# the sources, the generated wire code and its .pyi files) and over client/python/generate.py.
# The wheel (built with pip, installed offline into a fresh venv, used against a server, its
# types checked by mypy from a user's file) is ctest's python_install (tests/python/test_install.py).
#
#   tests/check_python.sh [BUILD_DIR]        (tests/run_all.sh runs it; default build/release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build/release}
mapfile -t files < <(git ls-files '*.py' 2>/dev/null ||
                     find . -path ./build -prune -o -name '*.py' -print)
echo "python: flake8 $(flake8 --version | head -1 | cut -d' ' -f1) over ${#files[@]} files"
flake8 "${files[@]}"
if [ ! -f "$build/python/posenc/_enums.pyi" ]; then
  echo "python: $build/python has no generated package (build the posenc_python target)" >&2
  exit 1
fi
echo "python: mypy $(mypy --version | cut -d' ' -f2) over the posenc package and generate.py"
cache=$(cd "$build" && pwd)/mypy-cache
(cd "$build/python" && mypy --config-file "$root/setup.cfg" --cache-dir "$cache" -p posenc)
mypy --config-file setup.cfg --cache-dir "$cache" client/python/generate.py
echo "python: clean"
