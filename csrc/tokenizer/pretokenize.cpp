#include "tokenizer/pretokenize.h"

#include <stdexcept>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pyllm {

using namespace unicode;

PreType pre_type_from_name(const std::string& n) {
  if (n.empty() || n == "default") return PreType::DEFAULT;
  if (n == "gpt-2" || n == "gpt2" || n == "phi-2" || n == "jina-es" || n == "jina-de" ||
      n == "gigachat" || n == "jina-v2-es" || n == "jina-v2-de" || n == "a.x-4.0" ||
      n == "mellum" || n == "modern-bert" || n == "mpt" || n == "olmo" || n == "jais" ||
      n == "trillion" || n == "granite-docling" || n == "exaone4")
    return PreType::GPT2;
  if (n == "smollm" || n == "starcoder" || n == "refact" || n == "command-r" ||
      n == "codeshell" || n == "exaone" || n == "minerva-7b" || n == "mellum2")
    return PreType::SMOLLM;
  if (n == "llama3" || n == "llama-v3" || n == "llama-bpe" || n == "falcon3" ||
      n == "falcon-h1" || n == "pixtral" || n == "midm-2.0" || n == "lfm2" ||
      n == "jina-v5-nano" || n == "dbrx" || n == "smaug-bpe")
    return PreType::LLAMA3;
  if (n == "qwen2" || n == "deepseek-r1-qwen" || n == "kormo" || n == "f2llmv2" ||
      n == "megrez" || n == "stablelm2" || n == "hunyuan" || n == "solar-open")
    return PreType::QWEN2;
  if (n == "qwen35") return PreType::QWEN35;
  throw TokenizerError("unsupported tokenizer pre-tokenizer type tokenizer.ggml.pre = '" + n +
                           "' (supported: default, gpt2, smollm, llama3, qwen2, qwen35 and aliases)");
}

const char* pre_type_name(PreType t) {
  switch (t) {
    case PreType::DEFAULT: return "default";
    case PreType::GPT2: return "gpt2";
    case PreType::SMOLLM: return "smollm";
    case PreType::LLAMA3: return "llama3";
    case PreType::QWEN2: return "qwen2";
    case PreType::QWEN35: return "qwen35";
  }
  return "?";
}

namespace {

constexpr uint32_t kOutOfRange = 0xFFFFFFFF;
constexpr uint16_t F_WS = 0x100;

// A splitter sees the whole code point array but only the piece [ini, end): characters outside
// read as "nothing" (flags 0), which is how lookaheads like \s+(?!\S) behave at a piece's end.
struct Piece {
  const std::vector<uint32_t>& cpts;
  size_t ini, end;
  std::vector<size_t>& out;  // lengths of the new pieces
  size_t prev_end;

  Piece(const std::vector<uint32_t>& c, size_t i, size_t e, std::vector<size_t>& o)
      : cpts(c), ini(i), end(e), out(o), prev_end(i) {}
  uint32_t cpt(size_t p) const { return p >= ini && p < end ? cpts[p] : kOutOfRange; }
  uint16_t flags(size_t p) const {
    if (p < ini || p >= end) return 0;
    uint32_t c = cpts[p];
    return category(c) | (is_whitespace(c) ? F_WS : 0);
  }
  // close the current word at `p`; returns its length
  size_t add(size_t p) {
    size_t len = p - prev_end;
    if (len) out.push_back(len);
    prev_end = p;
    return len;
  }
};

inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d (optionally case-insensitive); returns the match length or 0
size_t match_contraction(const Piece& w, size_t pos, bool icase) {
  if (w.cpt(pos) != '\'' || pos + 1 >= w.end) return 0;
  auto low = [&](uint32_t c) { return icase ? ascii_lower(c) : c; };
  uint32_t a = low(w.cpt(pos + 1));
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 < w.end) {
    uint32_t b = low(w.cpt(pos + 2));
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(Piece w) {
  for (size_t pos = w.ini; pos < w.end;) {
    if (size_t n = match_contraction(w, pos, false)) {
      pos += w.add(pos + n);
      continue;
    }
    const uint32_t c = w.cpt(pos);
    const uint16_t f2 = c == ' ' ? w.flags(pos + 1) : w.flags(pos);
    if (f2 & CAT_LETTER) {
      pos += (c == ' ');
      while (w.flags(pos) & CAT_LETTER) pos++;
      w.add(pos);
      continue;
    }
    if (f2 & CAT_NUMBER) {
      pos += (c == ' ');
      while (w.flags(pos) & CAT_NUMBER) pos++;
      w.add(pos);
      continue;
    }
    auto other = [](uint16_t f) { return f && !(f & (F_WS | CAT_LETTER | CAT_NUMBER)); };
    if (other(f2)) {
      pos += (c == ' ');
      while (other(w.flags(pos))) pos++;
      w.add(pos);
      continue;
    }
    size_t n_ws = 0;
    while (w.flags(pos + n_ws) & F_WS) n_ws++;
    if (n_ws > 1 && w.cpt(pos + n_ws) != kOutOfRange) {  // \s+(?!\S): leave the last one
      pos += n_ws - 1;
      w.add(pos);
      continue;
    }
    if (n_ws > 0) {
      pos += n_ws;
      w.add(pos);
      continue;
    }
    w.add(++pos);
  }
}

// llama3 / qwen2 / qwen35:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?L+|\p{N}{1,max_digits}| ?[^\s L \p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// where L is \p{L} (llama3, qwen2) or [\p{L}\p{M}] (qwen35)
void split_llama3_family(Piece w, size_t max_digits, bool marks_join_letters) {
  const uint16_t L = CAT_LETTER | (marks_join_letters ? CAT_MARK : 0);
  for (size_t pos = w.ini; pos < w.end;) {
    if (size_t n = match_contraction(w, pos, true)) {
      pos += w.add(pos + n);
      continue;
    }
    const uint32_t c = w.cpt(pos);
    const uint16_t f = w.flags(pos);
    if (!(c == '\r' || c == '\n' || (f & CAT_NUMBER))) {
      if ((f & L) || (w.flags(pos + 1) & L)) {
        pos++;
        while (w.flags(pos) & L) pos++;
        w.add(pos);
        continue;
      }
    }
    if (f & CAT_NUMBER) {
      size_t ini = pos;
      while (w.flags(pos) & CAT_NUMBER) {
        if (++pos - ini >= max_digits) {
          w.add(pos);
          ini = pos;
        }
      }
      w.add(pos);
      continue;
    }
    const uint16_t f2 = c == ' ' ? w.flags(pos + 1) : f;
    const uint16_t stop = F_WS | L | CAT_NUMBER;
    if (!(f2 & stop) && f) {
      pos += (c == ' ');
      while (true) {
        uint16_t g = w.flags(pos);
        if ((g & stop) || !g) break;
        pos++;
      }
      while (w.cpt(pos) == '\r' || w.cpt(pos) == '\n') pos++;
      w.add(pos);
      continue;
    }
    size_t n_ws = 0, last_nl_end = 0;
    while (w.flags(pos + n_ws) & F_WS) {
      uint32_t c2 = w.cpt(pos + n_ws);
      if (c2 == '\r' || c2 == '\n') last_nl_end = pos + n_ws + 1;
      n_ws++;
    }
    if (last_nl_end > 0) {  // \s*[\r\n]+
      pos = last_nl_end;
      w.add(pos);
      continue;
    }
    if (n_ws > 1 && w.cpt(pos + n_ws) != kOutOfRange) {
      pos += n_ws - 1;
      w.add(pos);
      continue;
    }
    if (n_ws > 0) {
      pos += n_ws;
      w.add(pos);
      continue;
    }
    w.add(++pos);
  }
}

// X+ for a character class: maximal runs of X and the gaps between them are pieces
template <class Pred>
void split_runs(Piece w, Pred in_class) {
  for (size_t pos = w.ini; pos < w.end;) {
    bool m = in_class(w.cpts[pos]);
    while (pos < w.end && in_class(w.cpts[pos]) == m) pos++;
    w.add(pos);
  }
}

// X (single character): every X alone, gaps between them are pieces
template <class Pred>
void split_single(Piece w, Pred in_class) {
  for (size_t pos = w.ini; pos < w.end;) {
    if (in_class(w.cpts[pos])) {
      w.add(pos);
      w.add(++pos);
    } else {
      pos++;
    }
  }
  w.add(w.end);
}

// [0-9][0-9][0-9]: non-overlapping triples of ASCII digits, left to right
void split_digit_triples(Piece w) {
  auto dig = [&](size_t p) { return p < w.end && w.cpts[p] >= '0' && w.cpts[p] <= '9'; };
  for (size_t pos = w.ini; pos < w.end;) {
    if (dig(pos) && dig(pos + 1) && dig(pos + 2)) {
      w.add(pos);
      pos += 3;
      w.add(pos);
    } else {
      pos++;
    }
  }
  w.add(w.end);
}

// \p{N} as llama.cpp's std::regex fallback sees it (ASCII digits, or a non-ASCII number)
bool is_number(uint32_t c) {
  if (c < 128) return c >= '0' && c <= '9';
  return !is_whitespace(c) && category(c) == CAT_NUMBER;
}

// [\p{P}\$\+<=>\^~\|] as llama.cpp's collapsed std::regex sees it
bool is_default_punct(uint32_t c) {
  if (c < 128) {
    return (c >= '!' && c <= '#') || (c >= '%' && c <= '*') || (c >= ',' && c <= '/') ||
           c == ':' || c == ';' || c == '?' || c == '@' || (c >= '[' && c <= ']') || c == '_' ||
           c == '{' || c == '}' || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
           c == '^' || c == '~' || c == '|';
  }
  return !is_whitespace(c) && category(c) == CAT_PUNCT;
}

template <class F>
std::vector<size_t> apply(const std::vector<uint32_t>& cpts, const std::vector<size_t>& pieces, F f) {
  std::vector<size_t> out;
  out.reserve(pieces.size() * 2);
  size_t start = 0;
  for (size_t len : pieces) {
    f(Piece(cpts, start, start + len, out));
    start += len;
  }
  return out;
}

}  // namespace

std::vector<std::string> pretokenize(PreType type, const std::string& text, bool byte_encode) {
  const std::vector<uint32_t> cpts = decode_utf8(text);
  std::vector<size_t> pieces{cpts.size()};
  if (cpts.empty()) return {};
  switch (type) {
    case PreType::DEFAULT:
      pieces = apply(cpts, pieces, [](Piece w) { split_runs(w, is_default_punct); });
      pieces = apply(cpts, pieces, split_gpt2);
      pieces = apply(cpts, pieces, [](Piece w) { split_runs(w, is_number); });
      pieces = apply(cpts, pieces, split_digit_triples);
      break;
    case PreType::GPT2:
      pieces = apply(cpts, pieces, split_gpt2);
      break;
    case PreType::SMOLLM:
      pieces = apply(cpts, pieces, [](Piece w) { split_single(w, is_number); });
      pieces = apply(cpts, pieces, split_gpt2);
      break;
    case PreType::LLAMA3:
      pieces = apply(cpts, pieces, [](Piece w) { split_llama3_family(w, 3, false); });
      break;
    case PreType::QWEN2:
      pieces = apply(cpts, pieces, [](Piece w) { split_llama3_family(w, 1, false); });
      break;
    case PreType::QWEN35:
      pieces = apply(cpts, pieces, [](Piece w) { split_llama3_family(w, 1, true); });
      break;
  }

  std::vector<std::string> words;
  words.reserve(pieces.size());
  size_t start = 0;
  std::string utf8;
  for (size_t len : pieces) {
    utf8.clear();
    for (size_t i = start; i < start + len; i++) append_utf8(utf8, cpts[i]);
    start += len;
    if (!byte_encode) {
      words.push_back(utf8);
      continue;
    }
    std::string enc;
    enc.reserve(utf8.size() * 2);
    for (unsigned char b : utf8) enc += byte_to_utf8(b);
    words.push_back(std::move(enc));
  }
  return words;
}

}  // namespace pyllm
