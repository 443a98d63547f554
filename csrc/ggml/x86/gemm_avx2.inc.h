// Prefill tiles at the AVX2 level (included by quants_avx2.cpp, inside namespace x86_avx2), for the
// 32-blocks: the signed weights against Q8_0 (Q8_0, Q4_0, Q5_0, IQ4_NL) and the unsigned ones with a min
// against Q8_1 (Q4_1, Q5_1).
//
// Panel of kGemmCols = 4 tokens, nb = K / 32 blocks: [nb][4 tokens][32] int8 y as they are, then
// [nb][4] float d converted from fp16 once, then (Q8_1 only) [nb][4] float s.
//
// A tile is 4 weight rows x 4 tokens, done as two halves of 2 rows: 16 accumulators would take all 16
// ymm registers, 8 leave room for the operands. Per (row, token) pair and block the operations are those
// of dot_signed_q8_0 / dot_unsigned_q8_1 (quants_simd.inc.h): the same 8 int32 lanes (sign trick and
// maddubs + madd, exact integers), the same fma with the scale product dx * dy (one rounding, whichever
// side multiplies) into the pair's own 8-lane accumulator, block after block, the same hsum8 and, for
// the unsigned weights, the same one-fma-per-block min chain: each pair's bits are vec_dot's. What the
// tile saves is the per-pair work that does not depend on the pair: a weight block is decoded once for 4
// tokens, a token's scale converted once for every weight row, and the scale products made 4 at a time.

static size_t panel_bytes_q8_0(int64_t K) { return (size_t)(K / 32) * kGemmCols * (32 + sizeof(float)); }
static size_t panel_bytes_q8_1(int64_t K) { return (size_t)(K / 32) * kGemmCols * (32 + 2 * sizeof(float)); }

// B = block_q8_0 or block_q8_1 (a missing token: zeros, so its pairs compute 0 and are not written)
template <class B>
static void gemm_pack_q8(const void* acts, size_t row_bytes, int n, int64_t K, void* panel) {
  const int nb = (int)(K / 32);
  int8_t* pq = (int8_t*)panel;
  float* pd = (float*)(pq + (size_t)nb * kGemmCols * 32);
  for (int j = 0; j < kGemmCols; j++) {
    const B* y = j < n ? (const B*)((const uint8_t*)acts + j * row_bytes) : nullptr;
    for (int b = 0; b < nb; b++) {
      int8_t* dst = pq + ((size_t)b * kGemmCols + j) * 32;
      if (y) std::memcpy(dst, y[b].qs, 32); else std::memset(dst, 0, 32);
      pd[b * kGemmCols + j] = y ? h2f(y[b].d) : 0.f;
      if constexpr (std::is_same<B, block_q8_1>::value) pd[(size_t)nb * kGemmCols + b * kGemmCols + j] = y ? h2f(y[b].s) : 0.f;
    }
  }
}

// Rows x0, x1 of a tile against the panel's first NC tokens; C[j * ldc + i] = row i . token j. The next
// two rows (the other half, or the next tile's first half) are prefetched, as the row kernels do.
template <class W, bool Signed, int NC>
static void gemm_half(int nb, const typename W::B* x0, size_t ldw, const int8_t* pq, const float* pd, float* C, size_t ldc) {
  const typename W::B* x[2] = {x0, (const typename W::B*)((const uint8_t*)x0 + ldw)};
  const float* ps = pd + (size_t)nb * kGemmCols;
  __m256 acc[2][NC];
  __m128 accm[2] = {_mm_setzero_ps(), _mm_setzero_ps()};  // Signed: unused
#pragma GCC unroll 2
  for (int i = 0; i < 2; i++)
#pragma GCC unroll 4
    for (int j = 0; j < NC; j++) acc[i][j] = _mm256_setzero_ps();
  alignas(16) float sc[2][4];  // dx_i * dy_j of this block: broadcast from memory (no registers held)
  for (int b = 0; b < nb; b++) {
    const __m128 dy = _mm_loadu_ps(pd + 4 * b);
    const __m256i* yb = (const __m256i*)(pq + (size_t)b * 128);
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
      _mm_prefetch((const char*)(x[i] + b) + 2 * ldw, _MM_HINT_T0);
      _mm_store_ps(sc[i], _mm_mul_ps(_mm_set1_ps(h2f(x[i][b].d)), dy));
      if constexpr (!Signed) accm[i] = _mm_fmadd_ps(_mm_set1_ps(h2f(x[i][b].m)), _mm_loadu_ps(ps + 4 * b), accm[i]);
      const __m256i w = W::load(x[i][b]);
      const __m256i u = Signed ? _mm256_sign_epi8(w, w) : w;
#pragma GCC unroll 4
      for (int j = 0; j < NC; j++) {
        const __m256i y = _mm256_loadu_si256(yb + j);
        const __m256i p = dot_u8s8(u, Signed ? _mm256_sign_epi8(y, w) : y);
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&sc[i][j]), acc[i][j]);
      }
    }
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; i++) {
    alignas(16) float m[4];
    _mm_store_ps(m, accm[i]);
#pragma GCC unroll 4
    for (int j = 0; j < NC; j++) C[j * ldc + i] = Signed ? hsum8(acc[i][j]) : hsum8(acc[i][j]) + m[j];
  }
}

template <class W, bool Signed>
static void gemm_tile2(int K, const void* vw, size_t ldw, const void* panel, float* C, size_t ldc, int nc) {
  static_assert(kGemmRows == 4 && kGemmCols == 4, "the tile below is written for 4 x 4");
  const int nb = K / 32;
  const int8_t* pq = (const int8_t*)panel;
  const float* pd = (const float*)(pq + (size_t)nb * kGemmCols * 32);
  for (int h = 0; h < 4; h += 2) {
    const typename W::B* x0 = (const typename W::B*)((const uint8_t*)vw + h * ldw);
    switch (nc) {
      case 1: gemm_half<W, Signed, 1>(nb, x0, ldw, pq, pd, C + h, ldc); break;
      case 2: gemm_half<W, Signed, 2>(nb, x0, ldw, pq, pd, C + h, ldc); break;
      case 3: gemm_half<W, Signed, 3>(nb, x0, ldw, pq, pd, C + h, ldc); break;
      default: gemm_half<W, Signed, 4>(nb, x0, ldw, pq, pd, C + h, ldc); break;
    }
  }
}

static void install_gemm_tiles(type_traits* t) {
  t[GGML_TYPE_Q8_0].gemm_pack = gemm_pack_q8<block_q8_0>;
  t[GGML_TYPE_Q8_0].gemm_panel_bytes = panel_bytes_q8_0;
  t[GGML_TYPE_Q8_1].gemm_pack = gemm_pack_q8<block_q8_1>;
  t[GGML_TYPE_Q8_1].gemm_panel_bytes = panel_bytes_q8_1;
  t[GGML_TYPE_Q8_0].gemm_tile = gemm_tile2<W_q8_0, true>;
  t[GGML_TYPE_Q4_0].gemm_tile = gemm_tile2<W_q4_0, true>;
  t[GGML_TYPE_Q5_0].gemm_tile = gemm_tile2<W_q5_0, true>;
  t[GGML_TYPE_IQ4_NL].gemm_tile = gemm_tile2<W_iq4_nl, true>;
  t[GGML_TYPE_Q4_1].gemm_tile = gemm_tile2<W_q4_1, false>;
  t[GGML_TYPE_Q5_1].gemm_tile = gemm_tile2<W_q5_1, false>;
}
