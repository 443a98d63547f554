#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <bitset>
#include <cctype>
#include <cstring>
#include <queue>
#include <string_view>

#include "gguf/gguf.h"
#include "tokenizer/unicode.h"

namespace pyllm {

namespace {

const std::string kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t m; (m = s.find(from, pos)) != std::string::npos; pos = m + from.size()) {
    out.append(s, pos, m - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// a numeric/bool GGUF key as int64, or `def` when absent
int64_t key_int(const GGUFFile& f, const std::string& key, int64_t def) {
  const GGUFValue* v = f.find(key);
  if (!v) return def;
  if (!v->is_num()) throw TokenizerError("GGUF key '" + key + "' is not numeric");
  return v->i;
}

// a string array the tokenizer needs (tokens, merges)
const GGUFValue* str_array(const GGUFFile& f, const std::string& key, bool required) {
  const GGUFValue* v = f.find(key);
  if (!v) {
    if (required) throw TokenizerError("GGUF '" + f.path() + "' has no '" + key + "'");
    return nullptr;
  }
  if (v->type != GGUF_TYPE_ARRAY || v->arr_type != GGUF_TYPE_STRING)
    throw TokenizerError("GGUF key '" + key + "' must be an array of strings");
  return v;
}

// llama.cpp's clean_up_tokenization_spaces for detokenized text (BPE vocabularies that ask for it)
std::string clean_spaces(const std::string& s) {
  if (s.empty()) return s;
  // " ?", " !", " .", " ,": drop the space
  std::string a(1, s[0]);
  for (size_t i = 1; i < s.size(); i++) {
    char x = s[i];
    if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a += x;
  }
  // " ' ": drop both spaces around a lone apostrophe (the dropped right space no longer counts as
  // a space for the next character)
  std::string b(1, a[0]);
  char prev = a[0];
  for (size_t i = 1; i < a.size(); i++) {
    char x = a[i];
    if (x == '\'' && i + 1 < a.size() && prev == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      b += x;
      prev = '\0';
      i++;  // skip the right space
      continue;
    }
    b += x;
    prev = x;
  }
  // " 's", " 'm", " 're", " 've": attach contractions
  std::string c(1, b[0]);
  for (size_t i = 1; i < b.size(); i++) {
    char x = b[i];
    if (b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      char x1 = b[i + 1];
      if (x1 == 's' || x1 == 'm') {
        c.pop_back();
      } else if (x1 != 't' && x1 != 'd' && i + 2 < b.size()) {
        char x2 = b[i + 2];
        if ((x1 == 'r' || x1 == 'v') && x2 == 'e') c.pop_back();
      }
    }
    c += x;
  }
  return c;
}

// Byte pairs present in a text: a cheap filter that rules out most special tokens before
// searching for them (Gemma has ~6400, nearly all "<unusedN>").
struct BigramSet {
  std::bitset<65536> bits;
  explicit BigramSet(const std::string& s) {
    for (size_t i = 0; i + 1 < s.size(); i++) bits.set((uint8_t)s[i] << 8 | (uint8_t)s[i + 1]);
  }
  bool may_contain(const std::string& t) const {
    for (size_t i = 0; i + 1 < t.size(); i++)
      if (!bits.test((uint8_t)t[i] << 8 | (uint8_t)t[i + 1])) return false;
    return true;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GGUFFile& gguf) {
  return std::make_unique<Tokenizer>(gguf);
}

Tokenizer::Tokenizer(const GGUFFile& f) {
  model_ = f.get_str("tokenizer.ggml.model", "");
  pre_ = f.get_str("tokenizer.ggml.pre", "");

  if (model_ == "llama") {
    type_ = VocabType::SPM;
    bos_ = 1;
    eos_ = 2;
    unk_ = 0;
    add_space_prefix_ = true;
    add_bos_ = true;
    add_eos_ = false;
    clean_spaces_ = false;
  } else if (model_ == "gpt2") {
    type_ = VocabType::BPE;
    bos_ = 11;
    eos_ = 11;
    unk_ = kNull;
    pre_type_ = pre_type_from_name(pre_);
    add_space_prefix_ = false;
    clean_spaces_ = true;
    static const char* no_clean[] = {"smollm", "command-r", "qwen2", "deepseek-r1-qwen", "kormo",
                                     "f2llmv2", "qwen35", "hunyuan", "solar-open"};
    for (const char* n : no_clean)
      if (pre_ == n) clean_spaces_ = false;
    static const char* llama3_names[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                         "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"};
    for (const char* n : llama3_names)
      if (pre_ == n) ignore_merges_ = add_bos_ = true;

    const GGUFValue* merges = str_array(f, "tokenizer.ggml.merges", true);
    bpe_ranks_.reserve(merges->arr_str.size());
    for (size_t i = 0; i < merges->arr_str.size(); i++) {
      std::string_view m = merges->arr_str[i];
      size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
      std::string key;
      if (sp != std::string_view::npos) {
        key.assign(m.substr(0, sp));
        key += '\xff';
        key.append(m.substr(sp + 1));
      } else {
        key = "\xff";
      }
      bpe_ranks_.emplace(std::move(key), (int)i);  // first occurrence wins
    }
  } else {
    throw TokenizerError("unsupported tokenizer model tokenizer.ggml.model = '" + model_ +
                         "' in '" + f.path() + "' (supported: 'gpt2' (BPE), 'llama' (SentencePiece))");
  }
  add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix", add_space_prefix_);

  // tokens, scores, types
  const GGUFValue* toks = str_array(f, "tokenizer.ggml.tokens", true);
  const size_t n = toks->arr_str.size();
  const GGUFValue* scores = f.find("tokenizer.ggml.scores");
  if (scores && (scores->type != GGUF_TYPE_ARRAY ||
                 (scores->arr_type != GGUF_TYPE_FLOAT32 && scores->arr_type != GGUF_TYPE_INT32) ||
                 scores->arr_n < n))
    throw TokenizerError("GGUF key 'tokenizer.ggml.scores' must be a float32/int32 array with one entry per token");
  const GGUFValue* types = f.find("tokenizer.ggml.token_type");
  if (types && (types->type != GGUF_TYPE_ARRAY || types->arr_type != GGUF_TYPE_INT32 || types->arr_n < n))
    throw TokenizerError("GGUF key 'tokenizer.ggml.token_type' must be an int32 array with one entry per token");

  tokens_.resize(n);
  for (size_t i = 0; i < n; i++) {
    TokenData& t = tokens_[i];
    t.text.assign(toks->arr_str[i]);
    if (t.text.empty()) t.text = "[EMPTY_" + std::to_string(i) + "]";
    token_to_id_[t.text] = (int32_t)i;
    t.score = scores ? (float)scores->arr_f(i) : 0.0f;
    t.type = types ? (int32_t)types->arr_i(i) : TOKEN_TYPE_NORMAL;
    switch (t.type) {
      case TOKEN_TYPE_UNKNOWN: t.attr = ATTR_UNKNOWN; break;
      case TOKEN_TYPE_UNUSED: t.attr = ATTR_UNUSED; break;
      case TOKEN_TYPE_NORMAL: t.attr = ATTR_NORMAL; break;
      case TOKEN_TYPE_CONTROL: t.attr = ATTR_CONTROL; break;
      case TOKEN_TYPE_USER_DEFINED: t.attr = ATTR_USER_DEFINED; break;
      case TOKEN_TYPE_BYTE: t.attr = ATTR_BYTE; break;
      default: t.attr = ATTR_UNDEFINED; break;
    }
  }

  // special ids: defaults above, out-of-range defaults disabled, in-range keys override
  struct Key { const char* name; int32_t* id; };
  const Key keys[] = {
      {"tokenizer.ggml.bos_token_id", &bos_},          {"tokenizer.ggml.eos_token_id", &eos_},
      {"tokenizer.ggml.eot_token_id", &eot_},          {"tokenizer.ggml.eom_token_id", &eom_},
      {"tokenizer.ggml.unknown_token_id", &unk_},      {"tokenizer.ggml.seperator_token_id", &sep_},
      {"tokenizer.ggml.padding_token_id", &pad_},      {"tokenizer.ggml.mask_token_id", &mask_},
      {"tokenizer.ggml.fim_pre_token_id", &fim_pre_},  {"tokenizer.ggml.fim_suf_token_id", &fim_suf_},
      {"tokenizer.ggml.fim_mid_token_id", &fim_mid_},  {"tokenizer.ggml.fim_pad_token_id", &fim_pad_},
      {"tokenizer.ggml.fim_rep_token_id", &fim_rep_},  {"tokenizer.ggml.fim_sep_token_id", &fim_sep_},
      {"tokenizer.ggml.prefix_token_id", &fim_pre_},   {"tokenizer.ggml.suffix_token_id", &fim_suf_},
      {"tokenizer.ggml.middle_token_id", &fim_mid_},
  };
  for (const Key& k : keys) {
    if (*k.id >= (int64_t)n) *k.id = kNull;
    int64_t v = key_int(f, k.name, -1);
    if (v >= 0 && v < (int64_t)n) *k.id = (int32_t)v;
  }
  add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token", add_bos_);
  add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token", add_eos_);

  // Special tokens found by their text, as llama.cpp does while converters don't record them.
  // The first match in token_to_id_'s iteration order wins, as in llama.cpp.
  auto mark_control = [&](int32_t id) { tokens_[id].attr |= ATTR_CONTROL; };
  auto any_of = [](const std::string& s, std::initializer_list<const char*> l) {
    for (const char* x : l)
      if (s == x) return true;
    return false;
  };
  for (const auto& [text, id] : token_to_id_) {
    if (eot_ == kNull &&
        any_of(text, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                      "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                      "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                      "<end_of_utterance>"})) {
      eot_ = id;
      mark_control(id);
    }
    if (eom_ == kNull && text == "<|eom_id|>") {
      eom_ = id;
      mark_control(id);
    }
    if (fim_pre_ == kNull &&
        any_of(text, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                      "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
                      "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"})) {
      fim_pre_ = id;
      mark_control(id);
    }
    if (fim_suf_ == kNull &&
        any_of(text, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                      "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
                      "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"})) {
      fim_suf_ = id;
      mark_control(id);
    }
    if (fim_mid_ == kNull &&
        any_of(text, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                      "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
                      "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"})) {
      fim_mid_ = id;
      mark_control(id);
    }
    if (fim_pad_ == kNull && any_of(text, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"})) {
      fim_pad_ = id;
      mark_control(id);
    }
    if (fim_rep_ == kNull &&
        any_of(text, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"})) {
      fim_rep_ = id;
      mark_control(id);
    }
    if (fim_sep_ == kNull && text == "<|file_sep|>") {
      fim_sep_ = id;
      mark_control(id);
    }
  }
  // control tokens named "unused..." are unused
  for (auto& t : tokens_)
    if ((t.attr & ATTR_CONTROL) && t.text.find("unused") != std::string::npos) t.attr |= ATTR_UNUSED;

  // end-of-generation set
  for (int32_t id : {fim_pad_, fim_rep_, fim_sep_})
    if (id != kNull) eog_.insert(id);
  for (const auto& [text, id] : token_to_id_) {
    if (any_of(text, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                      "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                      "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                      "<turn|>", "<|tool_response>",
                      "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~["})) {
      eog_.insert(id);
      mark_control(id);
    }
  }
  // gpt-oss: always rendered
  for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    int32_t id = text_to_token(t);
    if (id != kNull) tokens_[id].attr = ATTR_USER_DEFINED;
  }
  for (int32_t id : {eos_, eot_, eom_})
    if (id != kNull) eog_.insert(id);
  {
    // o200k_harmony / solar-open: <|end|> ends a message, not the generation
    bool has_return = false, has_call = false, has_flush = false;
    int32_t end_id = kNull;
    for (int32_t id : eog_) {
      const std::string& t = tokens_[id].text;
      if (t == "<|return|>") has_return = true;
      else if (t == "<|call|>" || t == "<|calls|>") has_call = true;
      else if (t == "<|flush|>") has_flush = true;
      else if (t == "<|end|>") end_id = id;
    }
    if (end_id != kNull && ((has_return && has_call) || (has_call && has_flush))) {
      eog_.erase(end_id);
      tokens_[end_id].attr = ATTR_USER_DEFINED;
    }
    // gemma4 / plamo: </s> is a normal token
    bool has_marker = false;
    int32_t s_id = kNull;
    for (int32_t id : eog_) {
      const std::string& t = tokens_[id].text;
      if (t == "<|tool_response>" || t == "<|plamo:eos|>") has_marker = true;
      else if (t == "</s>") s_id = id;
    }
    if (has_marker && s_id != kNull) {
      eog_.erase(s_id);
      tokens_[s_id].attr = ATTR_NORMAL;
    }
  }

  // tokens matched as whole strings before the model's tokenizer runs, longest first
  for (int32_t id = 0; id < (int32_t)n; id++)
    if (tokens_[id].attr & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)) special_tokens_.push_back(id);
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](int32_t a, int32_t b) {
    return tokens_[a].text.size() > tokens_[b].text.size();
  });

  // per-model strip attributes (llama.cpp sets them from general.name)
  {
    std::string name = f.get_str("general.name", "");
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
      for (int32_t id : special_tokens_) tokens_[id].attr |= ATTR_RSTRIP;
      auto set = [&](const char* t, bool on) {
        int32_t id = text_to_token(t);
        if (id == kNull) return;
        if (on) tokens_[id].attr |= ATTR_RSTRIP;
        else tokens_[id].attr &= ~(uint32_t)ATTR_RSTRIP;
      };
      set("</s>", true);
      for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, false);
    }
  }

  piece_cache_.resize(n);
  for (int32_t id = 0; id < (int32_t)n; id++) piece_cache_[id] = piece_uncached(id);

  if (type_ == VocabType::SPM) {
    nl_ = spm_byte_token('\n');
  } else {
    std::vector<int32_t> ids;
    tokenize_bpe("\n", ids);
    nl_ = ids.empty() ? pad_ : ids[0];
  }
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (!valid(id)) throw std::out_of_range("token id " + std::to_string(id) + " out of range [0, " +
                                          std::to_string(tokens_.size()) + ")");
  return tokens_[id].text;
}

int32_t Tokenizer::text_to_token(const std::string& text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? kNull : it->second;
}

int Tokenizer::bpe_rank(const std::string& left, const std::string& right) const {
  std::string key;
  key.reserve(left.size() + right.size() + 1);
  key += left;
  key += '\xff';
  key += right;
  auto it = bpe_ranks_.find(key);
  return it == bpe_ranks_.end() ? -1 : it->second;
}

int32_t Tokenizer::spm_byte_token(uint8_t b) const {
  static const char* hex = "0123456789ABCDEF";
  const char buf[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
  int32_t id = text_to_token(buf);
  if (id != kNull) return id;
  return text_to_token(std::string(1, (char)b));
}

// Split text on special tokens (llama.cpp's tokenizer_st_partition): for each special token,
// longest first, every raw fragment is cut at each occurrence.
std::vector<Tokenizer::Fragment> Tokenizer::partition_special(const std::string& text,
                                                               bool parse_special) const {
  std::vector<Fragment> frags{{kNull, 0, text.size()}};
  if (special_tokens_.empty()) return frags;
  const BigramSet present(text);
  std::vector<Fragment> next;
  for (int32_t id : special_tokens_) {
    const TokenData& td = tokens_[id];
    if (!parse_special && (td.attr & (ATTR_CONTROL | ATTR_UNKNOWN))) continue;
    const std::string& tok = td.text;
    if (tok.size() > text.size() || !present.may_contain(tok) || text.find(tok) == std::string::npos)
      continue;
    next.clear();
    for (const Fragment& fr : frags) {
      if (fr.token != kNull) {
        next.push_back(fr);
        continue;
      }
      size_t off = fr.offset, len = fr.length;
      while (true) {
        size_t m = std::string_view(text.data(), off + len).find(tok, off);
        if (m == std::string_view::npos) {
          if (len > 0) next.push_back({kNull, off, len});
          break;
        }
        size_t left = m - off;
        if (td.attr & ATTR_LSTRIP)
          while (left > 0 && std::isspace((unsigned char)text[off + left - 1])) left--;
        if (left > 0) next.push_back({kNull, off, left});
        next.push_back({id, 0, 0});
        size_t r_off = m + tok.size(), r_len = off + len - r_off;
        if (td.attr & ATTR_RSTRIP)
          while (r_len > 0 && std::isspace((unsigned char)text[r_off])) r_off++, r_len--;
        if (r_len == 0) break;
        off = r_off;
        len = r_len;
      }
    }
    frags.swap(next);
  }
  return frags;
}

std::vector<int32_t> Tokenizer::tokenize(const std::string& text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  std::vector<Fragment> frags;
  if (!text.empty()) frags = partition_special(text, parse_special);

  if (add_special && add_bos_) {
    if (bos_ == kNull) throw TokenizerError("the model asks for a BOS token but has none");
    out.push_back(bos_);
  }
  bool prev_special = true;  // SPM: a space prefix goes before text at the start or after a special token
  for (const Fragment& fr : frags) {
    if (fr.token != kNull) {
      out.push_back(fr.token);
      prev_special = true;
      continue;
    }
    if (type_ == VocabType::SPM) {
      std::string s;
      if (add_space_prefix_ && prev_special) s = " ";
      s.append(text, fr.offset, fr.length);
      replace_all(s, " ", kSpace);
      tokenize_spm(s, out);
    } else {
      tokenize_bpe(text.substr(fr.offset, fr.length), out);
    }
    prev_special = false;
  }
  if (add_special && add_eos_) {
    if (eos_ == kNull) throw TokenizerError("the model asks for an EOS token but has none");
    out.push_back(eos_);
  }
  return out;
}

std::string Tokenizer::piece_uncached(int32_t id) const {
  const TokenData& t = tokens_[id];
  if (t.attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED)) return t.text;
  if (t.attr & ATTR_NORMAL) {
    if (type_ == VocabType::SPM) {
      std::string s = t.text;
      replace_all(s, kSpace, " ");
      return s;
    }
    // byte-level BPE: every code point stands for one byte
    std::string s;
    for (uint32_t c : unicode::decode_utf8(t.text)) {
      int b = unicode::utf8_cpt_to_byte(c);
      if (b >= 0) s += (char)b;
      else unicode::append_utf8(s, c);  // not a byte stand-in: keep the character
    }
    return s;
  }
  if (t.attr & ATTR_BYTE) {
    if (t.text.size() == 6 && starts_with(t.text, "<0x"))
      return std::string(1, (char)std::strtol(t.text.substr(3, 2).c_str(), nullptr, 16));
    return t.text;
  }
  return "";
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  if (!valid(id)) throw std::out_of_range("token id " + std::to_string(id) + " out of range [0, " +
                                          std::to_string(tokens_.size()) + ")");
  if (!special && (tokens_[id].attr & (ATTR_UNKNOWN | ATTR_CONTROL))) return "";
  return piece_cache_[id];
}

std::string Tokenizer::detokenize(const std::vector<int32_t>& ids, bool special) const {
  std::string out;
  bool strip_space = add_space_prefix_;  // the space the tokenizer added in front
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, special);
    size_t skip = (strip_space && !piece.empty() && piece[0] == ' ') ? 1 : 0;
    out.append(piece, skip, std::string::npos);
    strip_space = false;
  }
  return clean_spaces_ ? clean_spaces(out) : out;
}

}  // namespace pyllm
