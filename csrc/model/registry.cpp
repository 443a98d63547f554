// general.architecture -> builder. One line per architecture.
#include "model/model.h"

namespace pyllm {

std::unique_ptr<Model> build_llama(std::unique_ptr<GGUFFile>, const LoadOptions&);
std::unique_ptr<Model> build_gemma3(std::unique_ptr<GGUFFile>, const LoadOptions&);
std::unique_ptr<Model> build_qwen35(std::unique_ptr<GGUFFile>, const LoadOptions&);
std::unique_ptr<Model> build_qwen35moe(std::unique_ptr<GGUFFile>, const LoadOptions&);

const std::map<std::string, ModelBuilder>& model_registry() {
  static const std::map<std::string, ModelBuilder> reg = {
      {"llama", build_llama},
      {"gemma3", build_gemma3},
      {"qwen35", build_qwen35},
      {"qwen35moe", build_qwen35moe},
  };
  return reg;
}

}  // namespace pyllm
