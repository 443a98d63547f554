// Prefill tiles at the AVX-512 level (included by quants_avx512.cpp, inside namespace x86_avx512).
//
// Panel of Q8_0 activations (gemm_pack_q8_0), kGemmCols = 4 tokens, nb = K / 32 blocks:
//   [nb][4 tokens][32] int8   y as it is
//   [nb][4 tokens][8]  int32  -128 * (the sum of each 4-element lane of y)
//   [nb][4 tokens]     float  the block scales, converted from fp16 once
// gemm_signed_tile: 4 weight rows x 4 tokens. The weights enter dpbusd as unsigned w + 128 and the
// accumulation starts from the token's -128 * lane sums, so every (row, token) pair gets exactly
// dot_signed_q8_0's 8 int32 lanes (exact integers), then the same fma with the scale product dx * dy
// into its own 8-lane accumulator, block after block, and the same hsum8: each pair's bits are vec_dot's.
// The tiles prefetch the next call's weight rows (pf_distance: the software-prefetch note in quants_avx512.cpp).
constexpr size_t kPanelQ8_0Block = kGemmCols * (32 + 8 * sizeof(int32_t) + sizeof(float));
static size_t panel_bytes_q8_0(int64_t K) { return (size_t)(K / 32) * kPanelQ8_0Block; }

static void gemm_pack_q8_0(const void* acts, size_t row_bytes, int n, int64_t K, void* panel) {
  const int nb = (int)(K / 32);
  int8_t* pq = (int8_t*)panel;
  int32_t* pc = (int32_t*)(pq + (size_t)nb * kGemmCols * 32);
  float* pd = (float*)(pc + (size_t)nb * kGemmCols * 8);
  const __m256i c128 = _mm256_set1_epi8((char)0x80);
  for (int j = 0; j < kGemmCols; j++) {
    const block_q8_0* y = j < n ? (const block_q8_0*)((const uint8_t*)acts + j * row_bytes) : nullptr;
    for (int b = 0; b < nb; b++) {
      const size_t o = (size_t)b * kGemmCols + j;
      const __m256i q = y ? _mm256_loadu_si256((const __m256i*)y[b].qs) : _mm256_setzero_si256();  // padding: zeros
      _mm256_storeu_si256((__m256i*)(pq + o * 32), q);
      const __m256i ls = _mm256_dpbusd_epi32(_mm256_setzero_si256(), c128, q);  // 128 * lane sums
      _mm256_storeu_si256((__m256i*)(pc + o * 8), _mm256_sub_epi32(_mm256_setzero_si256(), ls));
      pd[o] = y ? h2f(y[b].d) : 0.f;
    }
  }
}

// Weight loaders for the tiles: the signed bytes of W_*::load plus 128, as unsigned.
struct T_q8_0 {
  typedef block_q8_0 B;
  static inline __m256i load(const B& b) {
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)b.qs), _mm256_set1_epi8((char)0x80));
  }
};
struct T_q4_0 {  // (nibble - 8) + 128
  typedef block_q4_0 B;
  static inline __m256i load(const B& b) { return _mm256_add_epi8(unpack_nibbles16(b.qs), _mm256_set1_epi8(120)); }
};
struct T_q5_0 {  // (nibble | bit << 4) - 16 + 128 = nibble + 112, + 16 where the fifth bit is set
  typedef block_q5_0 B;
  static inline __m256i load(const B& b) {
    uint32_t qh; std::memcpy(&qh, b.qh, 4);
    const __m256i v = _mm256_add_epi8(unpack_nibbles16(b.qs), _mm256_set1_epi8(112));
    return _mm256_mask_add_epi8(v, (__mmask32)qh, v, _mm256_set1_epi8(16));
  }
};
struct T_iq4_nl {  // the non-linear table shifted by 128
  typedef block_iq4_nl B;
  static inline __m256i load(const B& b) {
    const __m256i tbl = _mm256_xor_si256(_mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)kvalues_iq4nl)),
                                         _mm256_set1_epi8((char)0x80));
    return _mm256_shuffle_epi8(tbl, unpack_nibbles16(b.qs));
  }
};

// NC = the panel's tokens in use (a last partial panel, a 2- or 3-row verification): only those pairs are
// computed, each with the same operations as in a full tile.
template <class W, int NC>
static void gemm_signed_tile_nc(int K, const void* vw, size_t ldw, const void* panel, float* C, size_t ldc) {
  static_assert(kGemmRows == 4 && kGemmCols == 4 && NC >= 1 && NC <= 4, "the tile below is written for 4 x 4");
  const int nb = K / 32;
  const int8_t* pq = (const int8_t*)panel;
  const int32_t* pc = (const int32_t*)(pq + (size_t)nb * kGemmCols * 32);
  const float* pd = (const float*)(pc + (size_t)nb * kGemmCols * 8);
  const typename W::B* x[4];
  for (int i = 0; i < 4; i++) x[i] = (const typename W::B*)((const uint8_t*)vw + i * ldw);
  __m256 acc[4][4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) acc[i][j] = _mm256_setzero_ps();
  alignas(16) float sc[4][4];  // dx_i * dy_j of this block: broadcast from memory (no registers held)
  for (int b = 0; b < nb; b++) {
    const __m128 dy = _mm_loadu_ps(pd + 4 * b);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) _mm_store_ps(sc[i], _mm_mul_ps(_mm_set1_ps(h2f(x[i][b].d)), dy));
    const __m256i* yb = (const __m256i*)(pq + (size_t)b * 128);
    const __m256i* cb = (const __m256i*)(pc + (size_t)b * 32);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      _mm_prefetch((const char*)(x[i] + b) + pf_distance(ldw, 4), _MM_HINT_T0);
      const __m256i w = W::load(x[i][b]);
#pragma GCC unroll 4
      for (int j = 0; j < NC; j++) {
        const __m256i p = _mm256_dpbusd_epi32(_mm256_loadu_si256(cb + j), w, _mm256_loadu_si256(yb + j));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&sc[i][j]), acc[i][j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
    for (int j = 0; j < NC; j++) C[j * ldc + i] = hsum8(acc[i][j]);
}

// Panel of Q8_1 activations (gemm_pack_q8_1): [nb][4][32] int8 y as they are, then [nb][4] float d and
// [nb][4] float s. gemm_unsigned_tile: per pair, dot_unsigned_q8_1's 8 lanes (dpbusd of the unsigned
// weights and y), its fma into the 8-lane accumulator, and its min term m * s as one scalar fma chain per
// pair (here the 4 tokens' chains side by side in one xmm: the same per-lane operations).
static size_t panel_bytes_q8_1(int64_t K) { return (size_t)(K / 32) * (kGemmCols * 32 + 2 * kGemmCols * sizeof(float)); }

static void gemm_pack_q8_1(const void* acts, size_t row_bytes, int n, int64_t K, void* panel) {
  const int nb = (int)(K / 32);
  int8_t* pq = (int8_t*)panel;
  float* pd = (float*)(pq + (size_t)nb * kGemmCols * 32);
  float* ps = pd + (size_t)nb * kGemmCols;
  for (int j = 0; j < kGemmCols; j++) {
    const block_q8_1* y = j < n ? (const block_q8_1*)((const uint8_t*)acts + j * row_bytes) : nullptr;
    for (int b = 0; b < nb; b++) {
      int8_t* dst = pq + ((size_t)b * kGemmCols + j) * 32;
      if (y) std::memcpy(dst, y[b].qs, 32); else std::memset(dst, 0, 32);
      pd[b * kGemmCols + j] = y ? h2f(y[b].d) : 0.f;
      ps[b * kGemmCols + j] = y ? h2f(y[b].s) : 0.f;
    }
  }
}

typedef W_q4_1 T_q4_1;  // the nibbles as they are
struct T_q5_1 {
  typedef block_q5_1 B;
  static inline __m256i load(const B& b) {
    uint32_t qh; std::memcpy(&qh, b.qh, 4);
    const __m256i nib = unpack_nibbles16(b.qs);  // nibble + 16 where the fifth bit is set (= nibble | 16)
    return _mm256_mask_add_epi8(nib, (__mmask32)qh, nib, _mm256_set1_epi8(16));
  }
};

template <class W, int NC>
static void gemm_unsigned_tile_nc(int K, const void* vw, size_t ldw, const void* panel, float* C, size_t ldc) {
  static_assert(kGemmRows == 4 && kGemmCols == 4 && NC >= 1 && NC <= 4, "the tile below is written for 4 x 4");
  const int nb = K / 32;
  const uint8_t* pq = (const uint8_t*)panel;
  const float* pd = (const float*)(pq + (size_t)nb * kGemmCols * 32);
  const float* ps = pd + (size_t)nb * kGemmCols;
  const typename W::B* x[4];
  for (int i = 0; i < 4; i++) x[i] = (const typename W::B*)((const uint8_t*)vw + i * ldw);
  __m256 acc[4][4];
  __m128 accm[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    accm[i] = _mm_setzero_ps();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) acc[i][j] = _mm256_setzero_ps();
  }
  alignas(16) float sc[4][4];
  for (int b = 0; b < nb; b++) {
    const __m128 dy = _mm_loadu_ps(pd + 4 * b), sy = _mm_loadu_ps(ps + 4 * b);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      _mm_store_ps(sc[i], _mm_mul_ps(_mm_set1_ps(h2f(x[i][b].d)), dy));
      accm[i] = _mm_fmadd_ps(_mm_set1_ps(h2f(x[i][b].m)), sy, accm[i]);
    }
    const uint8_t* yb = pq + (size_t)b * 128;
    __m256i y[4];
#pragma GCC unroll 4
    for (int j = 0; j < NC; j++) y[j] = _mm256_loadu_si256((const __m256i*)(yb + 32 * j));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      _mm_prefetch((const char*)(x[i] + b) + pf_distance(ldw, 4), _MM_HINT_T0);
      const __m256i q = W::load(x[i][b]);
      const __m256i z = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int j = 0; j < NC; j++)
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_dpbusd_epi32(z, q, y[j])), _mm256_broadcast_ss(&sc[i][j]), acc[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    alignas(16) float m[4];
    _mm_store_ps(m, accm[i]);
#pragma GCC unroll 4
    for (int j = 0; j < NC; j++) C[j * ldc + i] = hsum8(acc[i][j]) + m[j];
  }
}

// gemm_tile_fn for a body templated on the tokens in use (NC = nc, 1..kGemmCols)
#define PYLLM_GEMM_TILE(NAME, BODY)                                                                   \
  template <class W>                                                                                  \
  static void NAME(int K, const void* vw, size_t ldw, const void* panel, float* C, size_t ldc, int nc) { \
    switch (nc) {                                                                                     \
      case 1: BODY<W, 1>(K, vw, ldw, panel, C, ldc); break;                                           \
      case 2: BODY<W, 2>(K, vw, ldw, panel, C, ldc); break;                                           \
      case 3: BODY<W, 3>(K, vw, ldw, panel, C, ldc); break;                                           \
      default: BODY<W, 4>(K, vw, ldw, panel, C, ldc); break;                                          \
    }                                                                                                 \
  }
PYLLM_GEMM_TILE(gemm_signed_tile, gemm_signed_tile_nc)
PYLLM_GEMM_TILE(gemm_unsigned_tile, gemm_unsigned_tile_nc)
#undef PYLLM_GEMM_TILE

static void install_gemm_tiles(type_traits* t) {
  t[GGML_TYPE_Q8_1].gemm_pack = gemm_pack_q8_1;
  t[GGML_TYPE_Q8_1].gemm_panel_bytes = panel_bytes_q8_1;
  t[GGML_TYPE_Q4_1].gemm_tile = gemm_unsigned_tile<T_q4_1>;
  t[GGML_TYPE_Q5_1].gemm_tile = gemm_unsigned_tile<T_q5_1>;
  t[GGML_TYPE_Q8_0].gemm_pack = gemm_pack_q8_0;
  t[GGML_TYPE_Q8_0].gemm_panel_bytes = panel_bytes_q8_0;
  t[GGML_TYPE_Q8_0].gemm_tile = gemm_signed_tile<T_q8_0>;
  t[GGML_TYPE_Q4_0].gemm_tile = gemm_signed_tile<T_q4_0>;
  t[GGML_TYPE_Q5_0].gemm_tile = gemm_signed_tile<T_q5_0>;
  t[GGML_TYPE_IQ4_NL].gemm_tile = gemm_signed_tile<T_iq4_nl>;
}
