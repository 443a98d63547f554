// The merge loops of the two vocabulary kinds (tokenize_spm, tokenize_bpe); the vocabulary, special
// tokens and detokenization are in tokenizer.cpp.
#include <algorithm>
#include <cstring>
#include <queue>
#include <string_view>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pyllm {

namespace {
struct Symbol {
  size_t start, n;  // byte range in the word; n == 0 once merged into the left neighbour
  int prev, next;
};
std::vector<Symbol> split_chars(const std::string& s) {
  std::vector<Symbol> syms;
  syms.reserve(s.size());
  for (size_t off = 0; off < s.size();) {
    size_t len = std::min(unicode::utf8_len((uint8_t)s[off]), s.size() - off);
    int idx = (int)syms.size();
    syms.push_back({off, len, idx - 1, off + len == s.size() ? -1 : idx + 1});
    off += len;
  }
  return syms;
}
void merge_into_left(std::vector<Symbol>& syms, int l, int r) {
  syms[l].n += syms[r].n;
  syms[r].n = 0;
  syms[l].next = syms[r].next;
  if (syms[r].next >= 0) syms[syms[r].next].prev = l;
}
}  // namespace

// SentencePiece BPE: repeatedly merge the adjacent pair whose concatenation is the
// highest-scoring vocabulary token (leftmost on ties); characters no token covers fall back to
// <0xXX> byte tokens.
void Tokenizer::tokenize_spm(const std::string& text, std::vector<int32_t>& out) const {
  std::vector<Symbol> syms = split_chars(text);
  struct Bigram {
    float score;
    int left, right;
    size_t size;
  };
  auto cmp = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(cmp)> queue(cmp);
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    int32_t id = text_to_token(text.substr(syms[l].start, syms[l].n + syms[r].n));
    if (id == kNull) return;
    queue.push({tokens_[id].score, l, r, syms[l].n + syms[r].n});
  };
  for (int i = 1; i < (int)syms.size(); i++) try_add(i - 1, i);
  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Symbol &l = syms[b.left], &r = syms[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
    merge_into_left(syms, b.left, b.right);
    try_add(syms[b.left].prev, b.left);
    try_add(b.left, syms[b.left].next);
  }
  for (int i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
    std::string piece = text.substr(syms[i].start, syms[i].n);
    int32_t id = text_to_token(piece);
    if (id != kNull) {
      out.push_back(id);
      continue;
    }
    for (unsigned char c : piece) {
      int32_t b = spm_byte_token(c);
      if (b == kNull) b = unk_;
      if (b != kNull) out.push_back(b);
    }
  }
}

// Byte-level BPE: pre-tokenize into words, then in each word repeatedly merge the adjacent pair
// with the lowest merge rank (leftmost on ties).
void Tokenizer::tokenize_bpe(const std::string& text, std::vector<int32_t>& out) const {
  const std::vector<std::string> words = pretokenize(pre_type_, text, /*byte_encode=*/true);
  struct Bigram {
    int rank;
    int left, right;
    std::string text;
  };
  auto cmp = [](const Bigram& a, const Bigram& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  for (const std::string& word : words) {
    if (ignore_merges_) {
      int32_t id = text_to_token(word);
      if (id != kNull) {
        out.push_back(id);
        continue;
      }
    }
    std::vector<Symbol> syms = split_chars(word);
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(cmp)> queue(cmp);
    auto sym_text = [&](int i) { return word.substr(syms[i].start, syms[i].n); };
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      std::string a = sym_text(l), b = sym_text(r);
      int rank = bpe_rank(a, b);
      if (rank < 0) return;
      queue.push({rank, l, r, a + b});
    };
    for (int i = 1; i < (int)syms.size(); i++) try_add(i - 1, i);
    while (!queue.empty()) {
      Bigram b = queue.top();
      queue.pop();
      Symbol &l = syms[b.left], &r = syms[b.right];
      if (l.n == 0 || r.n == 0) continue;
      if (l.n + r.n != b.text.size() || word.compare(l.start, b.text.size(), b.text) != 0) continue;
      merge_into_left(syms, b.left, b.right);
      try_add(syms[b.left].prev, b.left);
      try_add(b.left, syms[b.left].next);
    }
    for (int i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
      std::string piece = sym_text(i);
      int32_t id = text_to_token(piece);
      if (id != kNull) {
        out.push_back(id);
        continue;
      }
      for (char c : piece) {  // no token: single-byte tokens where they exist (as llama.cpp)
        int32_t b = text_to_token(std::string(1, c));
        if (b != kNull) out.push_back(b);
      }
    }
  }
}

}  // namespace pyllm
