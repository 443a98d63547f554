// The total orders the sampler sorts candidates by, shared by the chain (sampler.cpp) and its steps
// (sampler_steps.cpp): ties go to the lower id, so every algorithm gives the same order.
#pragma once
#include "sampling/sampler.h"

namespace pyllm {

inline bool by_logit(const TokenData& a, const TokenData& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}
inline bool by_prob(const TokenData& a, const TokenData& b) {
  return a.p > b.p || (a.p == b.p && a.id < b.id);
}

}  // namespace pyllm
