// AVX-512 kernels for the sign-magnitude types with 16-element int16 scales: the IQ2 / IQ3 lattices
// and Q3_K, in one form (DecSB: magnitudes, a 64-bit negative mask per 64 elements, the 16 scales, d).
// - Decode and verification (dot_lat512, the lattices): each GGUF block is decoded into that form in
//   registers (gathers for the grid, pdep for the sign bits) and used for all NR <= 8 rows.
// - Prefill: their decode costs more than several activation rows' dots, so matmul decodes a weight
//   row once per batch into DecSB blocks in memory (dec_row) and runs vec_dot_dec_k over all tokens.
//
// Bits: lane k of the 256-bit kernels' integer sum is sum over chunks c of sc(c, half) * (the 4
// products of bytes 4k..4k+3 of chunk c), with y's sign flipped where the weight is negative. Here a
// zmm holds chunks 2p and 2p+1 (64 contiguous bytes of y): y is negated under the mask, maddubs with
// the magnitudes, dpwssd with the scales; folding the halves gives the same 8 int32 lanes exactly
// (integers), and the float side (fma(d*y.d, lanes, acc), kFactor * hsum8) is dot_lattice's.
// Included by quants_avx512.cpp inside namespace x86_avx512, after the prefetch helpers and
// quants_lowbit_simd.inc.h (the 256-bit L_* decoders and dot_lattice, whose bits these keep).
#pragma once

static size_t dec_row_bytes(int64_t K) { return (size_t)(K / QK_K) * sizeof(DecSB); }

// Q3_K in the lattice form: magnitudes |q| (q = low2 - 4 where the high bit is clear), the sign
// source q itself, signed 6-bit scales minus 32 (dot_q3_K's decode).
struct L_q3_K {
  typedef block_q3_K B;
  static constexpr float kFactor = 1.f;
  static inline void decode(const B& b, __m256i* aq, __m256i* sg, __m256i* sc) {
    __m256i q[8];
    q2_decode(b.qs, q);
    const __m256i hm = _mm256_loadu_si256((const __m256i*)b.hmask);
    for (int c = 0; c < 8; c++) {
      const __m256i bit = _mm256_set1_epi8((char)(1 << c));
      const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), _mm256_setzero_si256());
      sg[c] = _mm256_sub_epi8(q[c], _mm256_and_si256(clear, _mm256_set1_epi8(4)));  // -4..3
      aq[c] = _mm256_sign_epi8(sg[c], sg[c]);
      sc[c] = sc16(q3k_scale(b.scales, 2 * c) - 32, q3k_scale(b.scales, 2 * c + 1) - 32);
    }
  }
};

// ---------------------------------------------------------------- the lattices in 512-bit form
// Dec512 is one super-block of DecSB in registers. The lattice decoders below fill it straight from
// the GGUF block: the grid entries of two chunks come in one gather, the sign bits go to a mask
// (no +-1 vectors), the 16 half-chunk scales in one ymm. The same Dec512 feeds the decode kernel
// (dot_lat512, each weight used once) and dec_row (prefill writes it to memory), so both carry the
// integer lanes of dot_lattice.
struct Dec512 {
  __m512i aw[4];   // |weight| of chunks 2p, 2p+1
  __mmask64 m[4];  // their negative elements
  __m256i sc;      // int16 scale of chunk c's half h at word 2c + h
};

// 56 packed sign bits (8 x 7, the IQ2_XXS / IQ2_XS / IQ3_XXS sign indices) -> 64: each byte gets the
// top bit that gives it even parity, as the ksigns_iq2xs table does.
static inline uint64_t ks_even(uint64_t packed7) {
  const uint64_t v = _pdep_u64(packed7, 0x7F7F7F7F7F7F7F7FULL);
  uint64_t p = v ^ (v >> 4);  // bit 0 of each byte ends as the parity of that byte
  p ^= p >> 2;
  p ^= p >> 1;
  return v | (p & 0x0101010101010101ULL) << 7;
}
static inline uint64_t ks_pair(uint32_t a0, uint32_t a1) {  // two chunks' 4x7 sign bits + 4-bit scale words
  return ks_even((a0 & 0x0FFFFFFFu) | (uint64_t)(a1 & 0x0FFFFFFFu) << 28);
}
// dword c = v_c (< 16), both halves of chunk c -> words 2c, 2c+1 = 2 v_c + 1
static inline __m256i sc_both(__m256i v) {
  v = _mm256_add_epi32(_mm256_add_epi32(v, v), _mm256_set1_epi32(1));
  return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}
// byte c = (hi << 4 | lo) of chunk c -> words 2c = 2 lo + 1, 2c + 1 = 2 hi + 1
static inline __m256i sc_nibbles(const uint8_t* scales8) {
  const __m128i b = _mm_loadl_epi64((const __m128i*)scales8), m = _mm_set1_epi8(0xF);
  const __m256i w = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m)));
  return _mm256_add_epi16(_mm256_add_epi16(w, w), _mm256_set1_epi16(1));
}
static inline uint64_t u64_at(const void* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }

static inline void dec512(const block_iq2_xxs& b, Dec512& o) {
  const uint8_t* q = (const uint8_t*)b.qs;  // chunk c: 4 grid bytes at 8c, sign/scale word at 8c + 4
  const __m128i pick = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int p = 0; p < 4; p++) {
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(q + 16 * p)), pick));
    o.aw[p] = _mm512_i32gather_epi64(idx, (const long long*)iq2xxs_grid, 8);
    o.m[p] = _cvtu64_mask64(ks_pair(u32_at(q + 16 * p + 4), u32_at(q + 16 * p + 12)));
  }
  const __m512i words = _mm512_srli_epi64(_mm512_loadu_si512((const void*)q), 60);  // top 4 bits of each sign word
  o.sc = sc_both(_mm512_cvtepi64_epi32(words));
}
static inline void dec512(const block_iq2_xs& b, Dec512& o) {
  for (int p = 0; p < 4; p++) {  // qs: 9-bit grid index | 7 sign bits, 4 per chunk
    const uint16_t* q = b.qs + 8 * p;
    const __m256i idx = _mm256_and_si256(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)q)), _mm256_set1_epi32(511));
    o.aw[p] = _mm512_i32gather_epi64(idx, (const long long*)iq2xs_grid, 8);
    const uint64_t s0 = _pext_u64(u64_at(q), 0xFE00FE00FE00FE00ULL), s1 = _pext_u64(u64_at(q + 4), 0xFE00FE00FE00FE00ULL);
    o.m[p] = _cvtu64_mask64(ks_even(s0 | s1 << 28));
  }
  o.sc = sc_nibbles(b.scales);
}
static inline void dec512(const block_iq2_s& b, Dec512& o) {
  const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  for (int p = 0; p < 4; p++) {  // index = qs byte | 2 bits of qh[c] << 8; signs are plain bits after the 32 grid bytes
    const int h = b.qh[2 * p] | b.qh[2 * p + 1] << 8;
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(h), sh), _mm256_set1_epi32(3));
    const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(b.qs + 8 * p))), _mm256_slli_epi32(hi, 8));
    o.aw[p] = _mm512_i32gather_epi64(idx, (const long long*)iq2s_grid, 8);
    o.m[p] = _cvtu64_mask64(u64_at(b.qs + QK_K / 8 + 8 * p));
  }
  o.sc = sc_nibbles(b.scales);
}
static inline void dec512(const block_iq3_xxs& b, Dec512& o) {
  const uint8_t* w = b.qs + QK_K / 4;  // after the 64 grid bytes: chunk c's sign/scale word at 4c
  for (int p = 0; p < 4; p++) {
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(b.qs + 16 * p)));
    o.aw[p] = _mm512_i32gather_epi32(idx, (const int*)iq3xxs_grid, 4);
    o.m[p] = _cvtu64_mask64(ks_pair(u32_at(w + 8 * p), u32_at(w + 8 * p + 4)));
  }
  o.sc = sc_both(_mm256_srli_epi32(_mm256_loadu_si256((const __m256i*)w), 28));
}
static inline void dec512(const block_iq3_s& b, Dec512& o) {
  for (int p = 0; p < 4; p++) {  // index = qs byte | bit k of qh[c] << 8; signs are plain bits
    const __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(b.qs + 16 * p)));
    const __mmask16 hb = (__mmask16)(b.qh[2 * p] | b.qh[2 * p + 1] << 8);
    const __m512i idx = _mm512_mask_or_epi32(lo, hb, lo, _mm512_set1_epi32(256));
    o.aw[p] = _mm512_i32gather_epi32(idx, (const int*)iq3s_grid, 4);
    o.m[p] = _cvtu64_mask64(u64_at(b.signs + 8 * p));
  }
  const __m256i nib = _mm256_srlv_epi32(_mm256_set1_epi32((int)u32_at(b.scales)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
  o.sc = sc_both(_mm256_and_si256(nib, _mm256_set1_epi32(0xF)));
}
// Q3_K (and any L with the 256-bit decode) through the lanes of L::decode
template <class L>
static inline void dec512_from_lanes(const typename L::B& b, Dec512& o) {
  __m256i aq[8], sg[8], sc[8];
  L::decode(b, aq, sg, sc);
  alignas(32) int16_t s16[16];
  for (int c = 0; c < 8; c++) {
    s16[2 * c] = (int16_t)_mm256_extract_epi16(sc[c], 0);
    s16[2 * c + 1] = (int16_t)_mm256_extract_epi16(sc[c], 8);
  }
  for (int p = 0; p < 4; p++) {
    o.aw[p] = _mm512_inserti64x4(_mm512_castsi256_si512(aq[2 * p]), aq[2 * p + 1], 1);
    o.m[p] = _cvtu64_mask64((uint64_t)(uint32_t)_mm256_movemask_epi8(sg[2 * p]) |
                            (uint64_t)(uint32_t)_mm256_movemask_epi8(sg[2 * p + 1]) << 32);
  }
  o.sc = _mm256_load_si256((const __m256i*)s16);
}
static inline void dec512(const block_q3_K& b, Dec512& o) { dec512_from_lanes<L_q3_K>(b, o); }

// Q5_K in this form: the magnitudes are dot_q45_K_512<true>'s own wq registers (load_q45_block), with no
// negatives, and each chunk's scale sits on both halves, so the lanes are that kernel's; the mins go
// beside (dec_mins).
struct L_q5_K {
  typedef block_q5_K B;
  static constexpr float kFactor = 1.f;
};
static inline void dec512(const block_q5_K& b, Dec512& o) {
  Q45Block q;
  load_q45_block<true>(&b, 0, q);
  for (int p = 0; p < 4; p++) {
    o.aw[p] = q.wq[p];
    o.m[p] = 0;
  }
  o.sc = _mm256_cvtepu16_epi32(_mm_cvtepu8_epi16(q4k_scales_mins(b.scales)));  // dword c = chunk c's scale
  o.sc = _mm256_or_si256(o.sc, _mm256_slli_epi32(o.sc, 16));
}
template <class B> static inline void dec_mins(const B& b, DecSB& o) {
  (void)b;
  o.dmin = 0.f;
  std::memset(o.mins, 0, sizeof o.mins);
}
static inline void dec_mins(const block_q5_K& b, DecSB& o) {
  o.dmin = h2f(b.dmin);
  _mm_storeu_si128((__m128i*)o.mins, _mm_cvtepu8_epi16(_mm_srli_si128(q4k_scales_mins(b.scales), 8)));
}

template <class L>
static void dec_row(int n, const void* vx, void* out) {
  const typename L::B* x = (const typename L::B*)vx;
  DecSB* o = (DecSB*)out;
  for (int i = 0; i < n / QK_K; i++) {
    Dec512 w;
    dec512(x[i], w);
    for (int p = 0; p < 4; p++) {
      _mm512_store_si512((void*)(o[i].aw + 64 * p), w.aw[p]);
      o[i].neg[p] = _cvtmask64_u64(w.m[p]);
    }
    _mm256_store_si256((__m256i*)o[i].sc, w.sc);
    o[i].d = h2f(x[i].d);
    dec_mins(x[i], o[i]);
  }
}

// Pair p's scale vector for maddubs' int16 word w (bytes 2w, 2w+1): scale 4p + w / 8, i.e. chunk 2p + w / 16,
// half (w % 16) / 8.
alignas(64) static const int16_t kDecScIdx[4][32] = {
#define PYLLM_ROW(P) {4*P,4*P,4*P,4*P,4*P,4*P,4*P,4*P, 4*P+1,4*P+1,4*P+1,4*P+1,4*P+1,4*P+1,4*P+1,4*P+1, \
                      4*P+2,4*P+2,4*P+2,4*P+2,4*P+2,4*P+2,4*P+2,4*P+2, 4*P+3,4*P+3,4*P+3,4*P+3,4*P+3,4*P+3,4*P+3,4*P+3}
    PYLLM_ROW(0), PYLLM_ROW(1), PYLLM_ROW(2), PYLLM_ROW(3)
#undef PYLLM_ROW
};

// One super-block of one activation row: the 8 int32 lanes of dot_lattice. A zmm holds chunks 2p
// and 2p+1 (64 contiguous bytes of y): y negated under the mask, maddubs with the magnitudes, dpwssd
// with the scales, then the two halves folded.
static inline __m256i dec_lanes(const __m512i* aw, const __mmask64* m, const __m512i* scv, const int8_t* yqs) {
  const __m512i zero = _mm512_setzero_si512();
  __m512i isum = _mm512_setzero_si512();
  for (int p = 0; p < 4; p++) {
    const __m512i yq = _mm512_loadu_si512((const void*)(yqs + 64 * p));
    isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(aw[p], _mm512_mask_sub_epi8(yq, m[p], zero, yq)), scv[p]);
  }
  return _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
}
static inline void dec_scales(__m256i sc, __m512i* scv) {
  const __m512i scw = _mm512_castsi256_si512(sc);
  for (int p = 0; p < 4; p++) scv[p] = _mm512_permutexvar_epi16(_mm512_load_si512((const void*)kDecScIdx[p]), scw);
}

// The float side per activation row: dot_lattice's (fma(d * y.d, lanes, acc) per super-block, then
// kFactor * hsum8), or for Q5_K dot_q45_K_512<true>'s (Q45Acc: the same fma plus the mins through the
// bsums, a scalar fma per super-block).
template <class L>
struct LatAcc {
  __m256 acc = _mm256_setzero_ps();
  inline void add(__m256i lanes, const DecSB*, const block_q8_K* y, float d) {
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(lanes), acc);
  }
  inline float total() const { return L::kFactor * hsum8(acc); }
};
template <>
struct LatAcc<L_q5_K> {
  Q45Acc<true> a;
  inline void add(__m256i lanes, const DecSB* b, const block_q8_K* y, float d) {
    const __m128i mins16 = _mm_loadu_si128((const __m128i*)b->mins);
    const __m256i bs = _mm256_loadu_si256((const __m256i*)y->bsums);
    const __m128i prod = _mm_madd_epi16(mins16, _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
    a.add(lanes, prod, y->d, d, b->dmin);
  }
  inline float total() const { return a.total(); }
};

// Decode (and the k <= 8 rows of verification) on the GGUF blocks: each block decoded once into
// registers for all NR rows; per row the float side is dot_lattice's, so the bits equal the 256-bit
// kernel's.
template <class L, int NR>
static void dot_lat512(int n, float* s, const void* vx, const void* vy, size_t by) {
  const typename L::B* x = (const typename L::B*)vx;
  LatAcc<L> acc[NR];
  for (int i = 0; i < n / QK_K; i++) {
    prefetch_next_row<typename L::B>(vx, n / QK_K, i);
    Dec512 w;
    dec512(x[i], w);
    __m512i scv[4];
    dec_scales(w.sc, scv);
    const float d = h2f(x[i].d);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      acc[r].add(dec_lanes(w.aw, w.m, scv, y->qs), nullptr, y, d);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = acc[r].total();
}

// Prefill: the same lanes and float side on rows dec_row wrote.
template <class L, int NR>
static void dot_dec(int n, float* s, const void* vx, const void* vy, size_t by) {
  const DecSB* x = (const DecSB*)vx;
  LatAcc<L> acc[NR];
  for (int i = 0; i < n / QK_K; i++) {
    const DecSB& b = x[i];
    __m512i aw[4], scv[4];
    __mmask64 m[4];
    for (int p = 0; p < 4; p++) {
      aw[p] = _mm512_load_si512((const void*)(b.aw + 64 * p));
      m[p] = _cvtu64_mask64(b.neg[p]);
    }
    dec_scales(_mm256_load_si256((const __m256i*)b.sc), scv);
    for (int r = 0; r < NR; r++) {
      const block_q8_K* y = (const block_q8_K*)row(vy, by, r) + i;
      acc[r].add(dec_lanes(aw, m, scv, y->qs), &b, y, b.d);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = acc[r].total();
}

template <class L> PYLLM_KERNEL_FAMILY(K_dec, (dot_dec<L, NR>(n, s, x, y, by)));
template <class L> PYLLM_KERNEL_FAMILY(K_lat512, (dot_lat512<L, NR>(n, s, x, y, by)));

static void install_dec_kernels(type_traits* t) {
  auto put = [&](ggml_type id, dec_row_fn f, vec_dot_k_fn fk) {
    t[id].dec_row = f; t[id].dec_row_bytes = dec_row_bytes; t[id].vec_dot_dec_k = fk;
  };
  put(GGML_TYPE_IQ2_XXS, dec_row<L_iq2_xxs>, vdk<K_dec<L_iq2_xxs>>);
  put(GGML_TYPE_IQ2_XS, dec_row<L_iq2_xs>, vdk<K_dec<L_iq2_xs>>);
  put(GGML_TYPE_IQ2_S, dec_row<L_iq2_s>, vdk<K_dec<L_iq2_s>>);
  put(GGML_TYPE_IQ3_XXS, dec_row<L_iq3_xxs>, vdk<K_dec<L_iq3_xxs>>);
  put(GGML_TYPE_IQ3_S, dec_row<L_iq3_s>, vdk<K_dec<L_iq3_s>>);
  put(GGML_TYPE_Q3_K, dec_row<L_q3_K>, vdk<K_dec<L_q3_K>>);
  put(GGML_TYPE_Q5_K, dec_row<L_q5_K>, vdk<K_dec<L_q5_K>>);
#define PYLLM_PUT(ID, L) (t[ID].vec_dot = vd1<K_lat512<L>>, t[ID].vec_dot_k = vdk<K_lat512<L>>)
  PYLLM_PUT(GGML_TYPE_IQ2_XXS, L_iq2_xxs);
  PYLLM_PUT(GGML_TYPE_IQ2_XS, L_iq2_xs);
  PYLLM_PUT(GGML_TYPE_IQ2_S, L_iq2_s);
  PYLLM_PUT(GGML_TYPE_IQ3_XXS, L_iq3_xxs);
  PYLLM_PUT(GGML_TYPE_IQ3_S, L_iq3_s);
#undef PYLLM_PUT
}

