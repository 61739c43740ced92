// A PNG file decoded with libpng for the tests of the CLI's pictures (heatmaps, error plots,
// line plots), and counts over its pixels.
#ifndef POSENC_TESTS_CLIENT_PNG_TEST_UTIL_H_
#define POSENC_TESTS_CLIENT_PNG_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <png.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace posenc::testing {

struct Picture {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;

  std::array<uint8_t, 3> At(int x, int y) const {
    const size_t i = (static_cast<size_t>(y) * width + x) * 3;
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
  // Pixels of a colour map (saturated: the channels differ by more than 40), i.e. neither the
  // white background, the black/grey text and frames, nor the grey of masked cells.
  int64_t Colourful() const {
    int64_t n = 0;
    for (size_t i = 0; i < rgb.size(); i += 3) {
      const int hi = std::max({rgb[i], rgb[i + 1], rgb[i + 2]});
      const int lo = std::min({rgb[i], rgb[i + 1], rgb[i + 2]});
      n += hi - lo > 40;
    }
    return n;
  }
  int64_t Count(std::array<uint8_t, 3> colour) const {
    int64_t n = 0;
    for (size_t i = 0; i < rgb.size(); i += 3) {
      n += rgb[i] == colour[0] && rgb[i + 1] == colour[1] && rgb[i + 2] == colour[2];
    }
    return n;
  }
  size_t DistinctColours() const {
    std::set<uint32_t> colours;
    for (size_t i = 0; i < rgb.size(); i += 3) {
      colours.insert(uint32_t{rgb[i]} << 16 | uint32_t{rgb[i + 1]} << 8 | rgb[i + 2]);
    }
    return colours.size();
  }
};

// Decodes a PNG file with libpng (any PNG, converted to 8-bit RGB).
inline Picture DecodePng(const std::string& path) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  Picture picture;
  if (png_image_begin_read_from_file(&image, path.c_str()) == 0) {
    ADD_FAILURE() << path << ": " << image.message;
    return picture;
  }
  image.format = PNG_FORMAT_RGB;
  picture.width = static_cast<int>(image.width);
  picture.height = static_cast<int>(image.height);
  picture.rgb.resize(PNG_IMAGE_SIZE(image));
  if (png_image_finish_read(&image, nullptr, picture.rgb.data(), 0, nullptr) == 0) {
    ADD_FAILURE() << path << ": " << image.message;
    picture = Picture();
  }
  return picture;
}

}  // namespace posenc::testing

#endif  // POSENC_TESTS_CLIENT_PNG_TEST_UTIL_H_
