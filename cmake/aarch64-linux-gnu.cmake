# Cross-compiling for 64-bit ARM with Debian's cross compiler (package g++-aarch64-linux-gnu).
#   cmake -S . -B build/aarch64 -G Ninja --toolchain cmake/aarch64-linux-gnu.cmake \
#     -DPOSENC_KERNELS_ONLY=ON -Dabsl_DIR=/usr/lib/x86_64-linux-gnu/cmake/absl
#   cmake --build build/aarch64 --target posenc_kernels
# Debian's cross compiler searches /usr/include after its own headers, so the build machine's
# Abseil headers (architecture-independent) serve; the kernels library is compiled, never linked
# here. A full build for aarch64 is a native one (deploy/Dockerfile on an arm64 machine).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
