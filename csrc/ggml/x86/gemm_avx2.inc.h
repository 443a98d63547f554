// Prefill tiles at the AVX2 level (included by quants_avx2.cpp, inside namespace x86_avx2), for the
// 32-blocks: the signed weights against Q8_0 (Q8_0, Q4_0, Q5_0, IQ4_NL) and the unsigned ones with a min
// against Q8_1 (Q4_1, Q5_1).
//
// Panel of kGemmCols = 4 tokens, nb = K / 32 blocks: [nb][4 tokens][32] int8 y as they are, then (Q8_0)
// [nb][4][8] float: the sums of y's 4-element lanes, then [nb][4][8] float: d converted from fp16 once, in
// all 8 lanes (a pair's scale dx * dy is then one multiply, with no broadcast from a stored product), then
// (Q8_1) [nb][4] float s.
//
// A tile is 4 weight rows x 4 tokens. Up to 2 tokens it is one pass of the 4 rows, the tokens' blocks held in
// registers; with 3-4 tokens two passes of 2 rows (16 accumulators would take all 16 ymm registers, 8 leave room
// for the operands). A pass keeps 6-8 pair chains in flight: at 2 rows x 2 tokens the 4 chains of fma were
// latency-bound (4 rows: 1.2-1.4x on a Zen 3 at 1-2 tokens). Per (row, token) pair and block the result is that
// of dot_signed_q8_0 / dot_unsigned_q8_1 (quants_simd.inc.h): the same 8 int32 lanes (exact integers), the same
// fma with the scale product dx * dy (one rounding, whichever side multiplies) into the pair's own 8-lane
// accumulator, block after block, the same hsum8 and, for the unsigned weights, the same one-fma-per-block min
// chain: each pair's bits are vec_dot's. What the tile saves is the per-pair work that does not depend on the
// pair: a weight block is decoded once for every token, a token's block loaded and its scale converted once for
// every weight row.
// Q4_0 / Q5_0 take their lanes without the sign trick: the weights as the unsigned w + o (o = 8 / 16: the
// nibbles as stored), maddubs + madd give lane + o * (y's lane sum), and the float lane minus o * that
// sum is the lane exactly (integers below 2^24). On a Zen 2 a vpsignb per pair cost 0.8 cycles of the
// 2.3 the pair's maddubs + madd + cvt + fma take, a float fnmadd 0.2.

static size_t panel_bytes_q8_0(int64_t K) { return (size_t)(K / 32) * kGemmCols * (32 + 16 * sizeof(float)); }
static size_t panel_bytes_q8_1(int64_t K) { return (size_t)(K / 32) * kGemmCols * (32 + 9 * sizeof(float)); }

// B = block_q8_0 or block_q8_1 (a missing token: zeros, so its pairs compute 0 and are not written)
template <class B>
static void gemm_pack_q8(const void* acts, size_t row_bytes, int n, int64_t K, void* panel) {
  constexpr bool Q8_0 = std::is_same<B, block_q8_0>::value;
  const int nb = (int)(K / 32);
  int8_t* pq = (int8_t*)panel;
  float* pl = (float*)(pq + (size_t)nb * kGemmCols * 32);  // Q8_0: lane sums [nb][4][8]
  float* pd = Q8_0 ? pl + (size_t)nb * kGemmCols * 8 : pl;
  for (int j = 0; j < kGemmCols; j++) {
    const B* y = j < n ? (const B*)((const uint8_t*)acts + j * row_bytes) : nullptr;
    for (int b = 0; b < nb; b++) {
      const size_t o = (size_t)b * kGemmCols + j;
      const __m256i q = y ? _mm256_loadu_si256((const __m256i*)y[b].qs) : _mm256_setzero_si256();
      _mm256_storeu_si256((__m256i*)(pq + o * 32), q);
      if constexpr (Q8_0)
        _mm256_storeu_ps(pl + o * 8, _mm256_cvtepi32_ps(dot_u8s8(_mm256_set1_epi8(1), q)));
      _mm256_storeu_ps(pd + o * 8, _mm256_set1_ps(y ? h2f(y[b].d) : 0.f));
      if constexpr (!Q8_0) pd[(size_t)nb * kGemmCols * 8 + o] = y ? h2f(y[b].s) : 0.f;
    }
  }
}

// Weight loaders for the offset lanes: w + O as unsigned bytes (O = 8: Q4_0's nibbles; 16: Q5_0's five bits)
struct U_q4_0 {
  typedef block_q4_0 B;
  static constexpr float O = 8.f;
  static inline __m256i load(const B& b) { return unpack_nibbles16(b.qs); }
};
struct U_q5_0 {
  typedef block_q5_0 B;
  static constexpr float O = 16.f;
  static inline __m256i load(const B& b) {
    uint32_t qh; std::memcpy(&qh, b.qh, 4);
    return _mm256_or_si256(unpack_nibbles16(b.qs), bits_to_0x10(qh));
  }
};

enum class Lanes { Signed, Offset, Unsigned };

// R rows (ldw bytes apart) from x0 against the panel's first NC tokens; C[j * ldc + i] = row i . token j.
// The next R rows (the other pass, or the next tile) are prefetched, as the row kernels do.
template <class W, Lanes L, int R, int NC>
static void gemm_pass(int nb, const typename W::B* x0, size_t ldw, const int8_t* pq, float* C, size_t ldc) {
  constexpr bool Signed = L == Lanes::Signed, Unsigned = L == Lanes::Unsigned;
  static_assert((R == 4 && NC <= 2) || (R == 2 && NC <= 4), "gemm_tile2's passes: 4 rows x 1-2 tokens, 2 rows x 3-4");
  constexpr bool kHoldY = R == 4;  // the 4-row pass holds its 1-2 tokens' blocks in registers
  const typename W::B* x[R];
  for (int i = 0; i < R; i++) x[i] = (const typename W::B*)((const uint8_t*)x0 + i * ldw);
  const float* pl = (const float*)(pq + (size_t)nb * kGemmCols * 32);  // Q8_0: lane sums [nb][4][8]
  const float* pd = Unsigned ? pl : pl + (size_t)nb * kGemmCols * 8;    // d [nb][4][8]
  const float* ps = pd + (size_t)nb * kGemmCols * 8;                     // Q8_1: s [nb][4]
  __m256 acc[R][NC];
  __m128 accm[R];  // Unsigned only: the min chain, lane j for token j
#pragma GCC unroll 4
  for (int i = 0; i < R; i++) {
    accm[i] = _mm_setzero_ps();
#pragma GCC unroll 4
    for (int j = 0; j < NC; j++) acc[i][j] = _mm256_setzero_ps();
  }
  for (int b = 0; b < nb; b++) {
    const __m256i* yb = (const __m256i*)(pq + (size_t)b * 128);
    const float* db = pd + (size_t)b * kGemmCols * 8;
    __m256i yh[NC];
    if constexpr (kHoldY)
#pragma GCC unroll 4
      for (int j = 0; j < NC; j++) yh[j] = _mm256_loadu_si256(yb + j);
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) {
      _mm_prefetch((const char*)(x[i] + b) + R * ldw, _MM_HINT_T0);
      const __m256 dx = h2f8(x[i][b].d);
      if constexpr (Unsigned) accm[i] = _mm_fmadd_ps(_mm_set1_ps(h2f(x[i][b].m)), _mm_loadu_ps(ps + 4 * b), accm[i]);
      const __m256i w = W::load(x[i][b]);
      const __m256i u = Signed ? _mm256_sign_epi8(w, w) : w;
#pragma GCC unroll 4
      for (int j = 0; j < NC; j++) {
        const __m256i y = kHoldY ? yh[j] : _mm256_loadu_si256(yb + j);
        __m256 p = _mm256_cvtepi32_ps(dot_u8s8(u, Signed ? _mm256_sign_epi8(y, w) : y));
        if constexpr (L == Lanes::Offset) p = _mm256_fnmadd_ps(_mm256_loadu_ps(pl + ((size_t)b * kGemmCols + j) * 8), _mm256_set1_ps(W::O), p);
        acc[i][j] = _mm256_fmadd_ps(p, _mm256_mul_ps(dx, _mm256_loadu_ps(db + 8 * j)), acc[i][j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; i++) {
    alignas(16) float m[4];
    _mm_store_ps(m, accm[i]);
#pragma GCC unroll 4
    for (int j = 0; j < NC; j++) C[j * ldc + i] = Unsigned ? hsum8(acc[i][j]) + m[j] : hsum8(acc[i][j]);
  }
}

template <class W, Lanes L>
static void gemm_tile2(int K, const void* vw, size_t ldw, const void* panel, float* C, size_t ldc, int nc) {
  static_assert(kGemmRows == 4 && kGemmCols == 4, "the tile below is written for 4 x 4");
  const int nb = K / 32;
  const int8_t* pq = (const int8_t*)panel;
  const typename W::B* x0 = (const typename W::B*)vw;
  if (nc == 1) return gemm_pass<W, L, 4, 1>(nb, x0, ldw, pq, C, ldc);
  if (nc == 2) return gemm_pass<W, L, 4, 2>(nb, x0, ldw, pq, C, ldc);
  for (int h = 0; h < 4; h += 2) {
    const typename W::B* xh = (const typename W::B*)((const uint8_t*)vw + h * ldw);
    if (nc == 3) gemm_pass<W, L, 2, 3>(nb, xh, ldw, pq, C + h, ldc);
    else gemm_pass<W, L, 2, 4>(nb, xh, ldw, pq, C + h, ldc);
  }
}

static void install_gemm_tiles(type_traits* t) {
  t[GGML_TYPE_Q8_0].gemm_pack = gemm_pack_q8<block_q8_0>;
  t[GGML_TYPE_Q8_0].gemm_panel_bytes = panel_bytes_q8_0;
  t[GGML_TYPE_Q8_1].gemm_pack = gemm_pack_q8<block_q8_1>;
  t[GGML_TYPE_Q8_1].gemm_panel_bytes = panel_bytes_q8_1;
  t[GGML_TYPE_Q8_0].gemm_tile = gemm_tile2<W_q8_0, Lanes::Signed>;  // |w| up to 127: maddubs would saturate
  t[GGML_TYPE_Q4_0].gemm_tile = gemm_tile2<U_q4_0, Lanes::Offset>;
  t[GGML_TYPE_Q5_0].gemm_tile = gemm_tile2<U_q5_0, Lanes::Offset>;
  t[GGML_TYPE_IQ4_NL].gemm_tile = gemm_tile2<W_iq4_nl, Lanes::Signed>;  // the table reaches -127
  t[GGML_TYPE_Q4_1].gemm_tile = gemm_tile2<W_q4_1, Lanes::Unsigned>;
  t[GGML_TYPE_Q5_1].gemm_tile = gemm_tile2<W_q5_1, Lanes::Unsigned>;
}
