// BPE pre-tokenizers: llama.cpp's per-`tokenizer.ggml.pre` regex chains, implemented as hand-written
// scanners over code points (no std::regex). Each regex of a chain splits every piece the previous
// one produced; the words then go through BPE merges independently.
#pragma once
#include <string>
#include <vector>

namespace pyllm {

enum class PreType {
  DEFAULT,  // "default" and a missing key: llama.cpp's fallback chain of four regexes
  GPT2,     // gpt-2 and friends
  SMOLLM,   // starcoder/smollm family: single digits, then the GPT-2 regex
  LLAMA3,
  QWEN2,
  QWEN35,   // Qwen2 + combining marks (\p{M}) join letter runs
};

// Resolve a `tokenizer.ggml.pre` value; throws TokenizerError naming an unsupported value.
PreType pre_type_from_name(const std::string& name);
const char* pre_type_name(PreType t);

// Split UTF-8 `text` into words. With byte_encode each word's bytes are mapped through GPT-2's
// bytes_to_unicode (the form byte-level BPE vocabularies store).
std::vector<std::string> pretokenize(PreType type, const std::string& text, bool byte_encode);

}  // namespace pyllm
