// The AMX tile configuration shared by the kernels that use tiles (quants_amx.cpp: decoded rows,
// amx_kquants.cpp: Q4_K / Q2_K, amx_b32.cpp: MXFP4, amx_x16.cpp: Q4_K in 16-row groups). Each kernel family has its own layout; a thread reloads the
// configuration only when the family changes (LDTILECFG + TILERELEASE on every call cost more than a
// small tile's work), and never releases it. Every matmul that uses tiles starts a new epoch
// (amx_new_epoch), so each thread reloads once per matmul: another library's tiles on the same thread
// between two matmuls cannot leave a stale configuration behind.
#pragma once
#include <immintrin.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pyllm {

enum AmxFamily { kAmxFamilyDec = 1, kAmxFamilyKQuants = 2, kAmxFamilyB32 = 3, kAmxFamilyX16 = 4 };

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline std::atomic<unsigned>& amx_epoch() {
  static std::atomic<unsigned> e{0};
  return e;
}

inline void amx_use_config(int family, const AmxTileConfig& cfg) {
  thread_local int current = -1;
  thread_local unsigned epoch = ~0u;
  const unsigned e = amx_epoch().load(std::memory_order_relaxed);
  if (current == family && epoch == e) return;
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg) : "memory");  // (GCC 12's _tile_loadconfig lets the stores to cfg be dropped)
  current = family;
  epoch = e;
}

// The activation side of TDPBxSD (the B operand, 16 tokens): row k4 holds bytes 4 k4 .. 4 k4 + 3 of each
// token (row_bytes apart from qs), one masked gather per row; tokens outside m read as zeros.
inline __m512i amx_token_offsets(size_t row_bytes) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32((int)row_bytes));
}
inline void amx_gather_b(const uint8_t* qs, __m512i tok, __mmask16 m, int rows, int8_t* out) {
  for (int k4 = 0; k4 < rows; k4++)
    _mm512_storeu_si512((void*)(out + (size_t)k4 * 64),
                        _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, tok, (const void*)(qs + 4 * k4), 1));
}

}  // namespace pyllm
