// Whether this test binary is built with a sanitizer (POSENC_SANITIZE or POSENC_SANITIZE_THREAD;
// tests/CMakeLists.txt defines POSENC_TEST_SANITIZED for every test target). The heaviest numeric
// cases run smaller there: ASan at -O0 makes them ten times slower, and their full sizes add no
// code path the sanitizer would see (the smaller cases keep the tails, partial groups, anchors
// and thread splits). The release tests run them at full size.
#ifndef POSENC_TESTS_COMMON_SANITIZED_H_
#define POSENC_TESTS_COMMON_SANITIZED_H_

#ifndef POSENC_TEST_SANITIZED
#error "POSENC_TEST_SANITIZED is defined by tests/CMakeLists.txt (posenc_testutil)"
#endif

namespace posenc::testing {

inline constexpr bool kSanitizedBuild = POSENC_TEST_SANITIZED != 0;

}  // namespace posenc::testing

#endif  // POSENC_TESTS_COMMON_SANITIZED_H_
