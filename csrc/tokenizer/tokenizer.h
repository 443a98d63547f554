// Tokenizer built from a GGUF file's tokenizer.ggml.* metadata, matching llama.cpp's llama_vocab:
// byte-level BPE ("gpt2") with the pre-tokenizer named by tokenizer.ggml.pre, and SentencePiece
// BPE ("llama": scores, U+2581 for spaces, <0xXX> byte fallback). Immutable after construction,
// so one instance can be shared by threads.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenize.h"

namespace pyllm {

class GGUFFile;

// Bad or unsupported tokenizer metadata (the message names the key and value).
struct TokenizerError : std::runtime_error { using std::runtime_error::runtime_error; };

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type)
enum TokenType : int32_t {
  TOKEN_TYPE_UNDEFINED = 0,
  TOKEN_TYPE_NORMAL = 1,
  TOKEN_TYPE_UNKNOWN = 2,
  TOKEN_TYPE_CONTROL = 3,
  TOKEN_TYPE_USER_DEFINED = 4,
  TOKEN_TYPE_UNUSED = 5,
  TOKEN_TYPE_BYTE = 6,
};

// per-token attribute bits (llama.cpp's llama_token_attr)
enum TokenAttr : uint32_t {
  ATTR_UNDEFINED = 0,
  ATTR_UNKNOWN = 1 << 0,
  ATTR_UNUSED = 1 << 1,
  ATTR_NORMAL = 1 << 2,
  ATTR_CONTROL = 1 << 3,
  ATTR_USER_DEFINED = 1 << 4,
  ATTR_BYTE = 1 << 5,
  ATTR_LSTRIP = 1 << 7,
  ATTR_RSTRIP = 1 << 8,
};

enum class VocabType { SPM, BPE };

class Tokenizer {
 public:
  static constexpr int32_t kNull = -1;

  // Throws std::runtime_error on an unknown tokenizer.ggml.model / tokenizer.ggml.pre value
  // (the message names it) or malformed tokenizer metadata.
  explicit Tokenizer(const GGUFFile& gguf);
  static std::unique_ptr<Tokenizer> from_gguf(const GGUFFile& gguf);

  // add_special: BOS/EOS as the model asks (tokenizer.ggml.add_bos_token / add_eos_token).
  // parse_special: control tokens in the text (e.g. "<|im_start|>") become their ids;
  // user-defined tokens are always matched as whole strings.
  std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special) const;
  // Raw bytes of one token (may be part of a UTF-8 character). Control/unknown tokens give ""
  // unless `special`.
  std::string token_to_piece(int32_t id, bool special) const;
  // Concatenated pieces (llama_detokenize with remove_special=false, unparse_special=special).
  std::string detokenize(const std::vector<int32_t>& ids, bool special) const;

  int32_t n_vocab() const { return (int32_t)tokens_.size(); }
  VocabType type() const { return type_; }
  PreType pre_type() const { return pre_type_; }
  const std::string& model_name() const { return model_; }
  const std::string& pre_name() const { return pre_; }

  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  int32_t eom() const { return eom_; }
  int32_t pad() const { return pad_; }
  int32_t unk() const { return unk_; }
  int32_t nl() const { return nl_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }

  bool is_eog(int32_t id) const { return id >= 0 && eog_.count(id) > 0; }
  const std::set<int32_t>& eog_ids() const { return eog_; }
  bool is_control(int32_t id) const { return valid(id) && (tokens_[id].attr & ATTR_CONTROL); }
  bool is_byte(int32_t id) const { return valid(id) && (tokens_[id].attr & ATTR_BYTE); }
  uint32_t token_attr(int32_t id) const { return valid(id) ? tokens_[id].attr : 0; }
  int32_t token_type(int32_t id) const { return valid(id) ? tokens_[id].type : TOKEN_TYPE_UNDEFINED; }
  const std::string& token_text(int32_t id) const;
  float token_score(int32_t id) const { return valid(id) ? tokens_[id].score : 0.0f; }
  // id of an exact token text, or kNull
  int32_t text_to_token(const std::string& text) const;

 private:
  struct TokenData {
    std::string text;
    float score = 0;
    int32_t type = TOKEN_TYPE_NORMAL;
    uint32_t attr = ATTR_NORMAL;
  };
  struct Fragment {
    int32_t token;  // kNull: raw text [offset, offset + length)
    size_t offset, length;
  };

  bool valid(int32_t id) const { return id >= 0 && id < (int32_t)tokens_.size(); }
  std::vector<Fragment> partition_special(const std::string& text, bool parse_special) const;
  void tokenize_spm(const std::string& text, std::vector<int32_t>& out) const;
  void tokenize_bpe(const std::string& text, std::vector<int32_t>& out) const;
  int32_t spm_byte_token(uint8_t b) const;
  int bpe_rank(const std::string& left, const std::string& right) const;
  std::string piece_uncached(int32_t id) const;

  VocabType type_ = VocabType::SPM;
  PreType pre_type_ = PreType::DEFAULT;
  std::string model_, pre_;

  std::vector<TokenData> tokens_;
  // std::unordered_map on purpose: llama.cpp auto-detects EOT/EOM by iterating its
  // unordered_map<string, id>, so building and walking the same container picks the same token
  // when several candidates exist (e.g. <|im_end|> vs <|endoftext|>).
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::unordered_map<std::string, int32_t> bpe_ranks_;  // "left\xffright" -> rank
  std::vector<int32_t> special_tokens_;  // control/user-defined/unknown, longest text first
  std::vector<std::string> piece_cache_;  // token_to_piece(id, special=true)

  int32_t bos_ = kNull, eos_ = kNull, eot_ = kNull, eom_ = kNull, unk_ = kNull, sep_ = kNull,
          pad_ = kNull, mask_ = kNull, nl_ = kNull;
  int32_t fim_pre_ = kNull, fim_suf_ = kNull, fim_mid_ = kNull, fim_pad_ = kNull, fim_rep_ = kNull,
          fim_sep_ = kNull;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  bool ignore_merges_ = false, clean_spaces_ = false;
  std::set<int32_t> eog_;
};

}  // namespace pyllm
