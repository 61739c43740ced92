// ResizeUninitialized: exact sizes whatever the previous capacity (libstdc++ 12 reports a grown
// capacity to resize_and_overwrite's callback; the size must still be the one asked for).
#include <string>

#include "gtest/gtest.h"
#include "proto/posenc/v1/byte_buffer.h"

namespace posenc::v1 {
namespace {

TEST(ResizeUninitializedTest, SizesAreExactFromAnyStart) {
  for (size_t start : {0u, 3u, 15u, 16u, 40u}) {
    for (size_t n : {0u, 1u, 15u, 16u, 24u, 29u, 31u, 100u, 4096u, 1000000u}) {
      std::string s(start, 'x');
      ResizeUninitialized(&s, n);
      ASSERT_EQ(s.size(), n) << "from " << start;
      ASSERT_EQ(s.c_str()[n], '\0');
      // The bytes kept from before survive.
      for (size_t i = 0; i < std::min(start, n); ++i) ASSERT_EQ(s[i], 'x');
    }
  }
}

}  // namespace
}  // namespace posenc::v1
