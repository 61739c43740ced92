// The CLI's bitmap font: 5 columns x 8 rows per glyph, ASCII 32..126 (rows 0..6 for capitals
// and digits, row 7 for the descenders of g j p q y , _), one byte per row, bit 4 the leftmost
// column. Canvas::Text draws with it.
//
// Thread-safety: immutable data.
#ifndef POSENC_CLIENT_CLI_FONT_H_
#define POSENC_CLIENT_CLI_FONT_H_

#include <cstdint>

namespace posenc::cli {

struct Glyph {
  char c;
  uint8_t rows[8];
};

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphHeight = 8;
inline constexpr int kGlyphAdvance = 6;  // one blank column between characters

// The glyph of `c`; '?' for characters the font does not have.
const Glyph& GlyphOf(char c);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_FONT_H_
