#include "tokenizer/unicode.h"

#include <array>

#include "tokenizer/unicode_tables.h"

namespace pyllm::unicode {

namespace {

// One byte per code point (1.1 MB), built once: category lookups sit on the hot path of every
// pre-tokenizer, a binary search per character would dominate tokenization time.
const std::vector<uint8_t>& category_table() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(kMaxCodepoint, CAT_UNDEFINED);
    using unicode_data::kCategoryRanges;
    using unicode_data::kNumCategoryRanges;
    for (uint32_t i = 0; i < kNumCategoryRanges; i++) {
      uint32_t end = i + 1 < kNumCategoryRanges ? kCategoryRanges[i + 1].start : kMaxCodepoint;
      for (uint32_t c = kCategoryRanges[i].start; c < end; c++) t[c] = kCategoryRanges[i].cat;
    }
    return t;
  }();
  return table;
}

struct ByteMaps {
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 512> from_cpt;  // stand-ins are all < 0x144
  ByteMaps() {
    from_cpt.fill(-1);
    std::array<uint32_t, 256> cpt{};
    std::array<bool, 256> direct{};
    // printable Latin-1 bytes stand for themselves; the rest map to 256, 257, ... in byte order
    for (int b = 0; b < 256; b++)
      direct[b] = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) cpt[b] = direct[b] ? (uint32_t)b : next++;
    for (int b = 0; b < 256; b++) {
      to_utf8[b] = encode_utf8(cpt[b]);
      from_cpt[cpt[b]] = (int16_t)b;
    }
  }
};

const ByteMaps& byte_maps() {
  static const ByteMaps m;
  return m;
}

}  // namespace

uint8_t category(uint32_t cpt) {
  return cpt < kMaxCodepoint ? category_table()[cpt] : CAT_UNDEFINED;
}

bool is_whitespace(uint32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0x85) return false;
  switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::vector<uint32_t> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t n = s.size(), i = 0;
  auto cont = [&](size_t k) { return k < n && (p[k] & 0xC0) == 0x80; };
  while (i < n) {
    uint8_t c = p[i];
    if (c < 0x80) {
      out.push_back(c);
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && cont(i + 1)) {
      out.push_back(((c & 0x1F) << 6) | (p[i + 1] & 0x3F));
      i += 2;
    } else if ((c & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      out.push_back(((c & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F));
      i += 3;
    } else if ((c & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      out.push_back(((c & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6) |
                    (p[i + 3] & 0x3F));
      i += 4;
    } else {
      out.push_back(0xFFFD);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += (char)c;
  } else if (c < 0x800) {
    out += (char)(0xC0 | (c >> 6));
    out += (char)(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += (char)(0xE0 | (c >> 12));
    out += (char)(0x80 | ((c >> 6) & 0x3F));
    out += (char)(0x80 | (c & 0x3F));
  } else {
    out += (char)(0xF0 | (c >> 18));
    out += (char)(0x80 | ((c >> 12) & 0x3F));
    out += (char)(0x80 | ((c >> 6) & 0x3F));
    out += (char)(0x80 | (c & 0x3F));
  }
}

std::string encode_utf8(uint32_t cpt) {
  std::string s;
  append_utf8(s, cpt);
  return s;
}

const std::string& byte_to_utf8(uint8_t b) { return byte_maps().to_utf8[b]; }

int utf8_cpt_to_byte(uint32_t cpt) { return cpt < 512 ? byte_maps().from_cpt[cpt] : -1; }

}  // namespace pyllm::unicode
