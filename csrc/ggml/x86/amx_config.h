// The AMX tile configuration shared by the kernels that use tiles (quants_amx.cpp: decoded rows,
// amx_kquants.cpp: Q4_K / Q2_K). Each kernel family has its own layout; a thread reloads the
// configuration only when the family changes (LDTILECFG + TILERELEASE on every call cost more than a
// small tile's work), and never releases it. This assumes no other library configures tiles on our
// threads (the pool's workers, or the caller's thread between two of our kernels).
#pragma once
#include <cstdint>

namespace pyllm {

enum AmxFamily { kAmxFamilyDec = 1, kAmxFamilyKQuants = 2 };

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline void amx_use_config(int family, const AmxTileConfig& cfg) {
  thread_local int current = -1;
  if (current == family) return;
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg) : "memory");  // (GCC 12's _tile_loadconfig lets the stores to cfg be dropped)
  current = family;
}

}  // namespace pyllm
