// Decode (one activation row) at the AVX-512 level, included by quants_avx512.cpp after the prefill tiles
// (it uses their T_* loaders). A 32-element-block dot is bound by its accumulator's fma latency, one fma per
// block in a fixed order; vec_dot_rows runs NR <= 4 weight rows against the same activation row so NR such
// chains overlap. Each row keeps dot_*_512's integers (per block pair: dpbusd, here of w + 128 from the
// activation pair's -128 * lane sums: exact) and its float chain (block i, then i + 1, same products, same
// odd-block tail and hsum8), so each row's bits are vec_dot's.

static inline uint32_t fp16_bits(half h) { uint16_t u; std::memcpy(&u, &h, 2); return u; }

template <class T, int NR>
static void gemv_signed_512(int n, float* s, const void* vx, size_t bx, const void* vy) {
  const block_q8_0* y = (const block_q8_0*)vy;
  const int nb = n / 32;
  const typename T::B* x[NR];
  __m256 acc[NR];
  for (int r = 0; r < NR; r++) { x[r] = (const typename T::B*)((const uint8_t*)vx + r * bx); acc[r] = _mm256_setzero_ps(); }
  const __m512i c128 = _mm512_set1_epi8((char)0x80);
  int i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m512i yq = pair512(_mm256_loadu_si256((const __m256i*)y[i].qs), _mm256_loadu_si256((const __m256i*)y[i + 1].qs));
    const __m512i nc = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, yq));
    // the pair's two scale products dx * dy in one conversion and one mul (lanes 0, 1: the scalar products' bits)
    const __m128 dyv = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(fp16_bits(y[i].d) | (uint32_t)fp16_bits(y[i + 1].d) << 16)));
    for (int r = 0; r < NR; r++) {
      const __m512i w = pair512(T::load(x[r][i]), T::load(x[r][i + 1]));
      const __m512 pf = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nc, w, yq));
      const __m128 dxv = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(fp16_bits(x[r][i].d) | (uint32_t)fp16_bits(x[r][i + 1].d) << 16)));
      const __m128 sc = _mm_mul_ps(dxv, dyv);
      acc[r] = _mm256_fmadd_ps(_mm512_castps512_ps256(pf), _mm256_broadcastss_ps(sc), acc[r]);
      acc[r] = _mm256_fmadd_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pf), 1)),
                               _mm256_broadcastss_ps(_mm_movehdup_ps(sc)), acc[r]);
    }
  }
  if (i < nb) {  // odd block count: dot_signed_q8_0's 256-bit body
    const __m256i yq = _mm256_loadu_si256((const __m256i*)y[i].qs);
    const __m256i nc = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(c128), yq));
    const float dy = h2f(y[i].d);
    for (int r = 0; r < NR; r++) {
      const __m256i p = _mm256_dpbusd_epi32(nc, T::load(x[r][i]), yq);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[r][i].d) * dy), acc[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]);
}

// dot_unsigned_q8_1_512 row by row: dpbusd of the unsigned weights and y, its fma chain, and the min term
// m * s as a chain on lane 0 (the reference's other lanes stay 0).
template <class T, int NR>
static void gemv_unsigned_512(int n, float* s, const void* vx, size_t bx, const void* vy) {
  const block_q8_1* y = (const block_q8_1*)vy;
  const int nb = n / 32;
  const typename T::B* x[NR];
  __m256 acc[NR];
  __m128 accm[NR];
  for (int r = 0; r < NR; r++) {
    x[r] = (const typename T::B*)((const uint8_t*)vx + r * bx);
    acc[r] = _mm256_setzero_ps(); accm[r] = _mm_setzero_ps();
  }
  int i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m512i yq = pair512(_mm256_loadu_si256((const __m256i*)y[i].qs), _mm256_loadu_si256((const __m256i*)y[i + 1].qs));
    // y's scales of the pair [dy0, 0, dy1, 0] and sums; each row's [d0, m0, d1, m1] in one conversion, its two
    // scale products dx * dy in one mul (lanes 0 and 2: the scalar products' bits)
    const __m128 dyv = _mm_setr_ps(h2f(y[i].d), 0.f, h2f(y[i + 1].d), 0.f);
    const __m128 s0 = _mm_set_ss(h2f(y[i].s)), s1 = _mm_set_ss(h2f(y[i + 1].s));
    for (int r = 0; r < NR; r++) {
      const __m512i w = pair512(T::load(x[r][i]), T::load(x[r][i + 1]));
      const __m512 pf = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w, yq));
      uint32_t dm0, dm1;  // d and m are the blocks' first 4 bytes (block_q4_1 / block_q5_1)
      std::memcpy(&dm0, &x[r][i], 4); std::memcpy(&dm1, &x[r][i + 1], 4);
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)(((uint64_t)dm1 << 32) | dm0)));
      const __m128 sc = _mm_mul_ps(dm, dyv);
      acc[r] = _mm256_fmadd_ps(_mm512_castps512_ps256(pf), _mm256_broadcastss_ps(sc), acc[r]);
      accm[r] = _mm_fmadd_ss(_mm_movehdup_ps(dm), s0, accm[r]);  // lane 0 only is the chain
      acc[r] = _mm256_fmadd_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pf), 1)),
                               _mm256_broadcastss_ps(_mm_movehl_ps(sc, sc)), acc[r]);
      accm[r] = _mm_fmadd_ss(_mm_shuffle_ps(dm, dm, 3), s1, accm[r]);
    }
  }
  if (i < nb) {
    const __m256i yq = _mm256_loadu_si256((const __m256i*)y[i].qs);
    const float dy = h2f(y[i].d);
    const __m128 s0 = _mm_set_ss(h2f(y[i].s));
    for (int r = 0; r < NR; r++) {
      const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), T::load(x[r][i]), yq);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[r][i].d) * dy), acc[r]);
      accm[r] = _mm_fmadd_ss(_mm_set_ss(h2f(x[r][i].m)), s0, accm[r]);
    }
  }
  for (int r = 0; r < NR; r++) s[r] = hsum8(acc[r]) + _mm_cvtss_f32(accm[r]);
}

#define PYLLM_GEMV_ROWS(NAME, BODY)                                                         \
  template <class T>                                                                        \
  static void NAME(int n, float* s, const void* vx, size_t bx, const void* vy, int nr) {    \
    switch (nr) {                                                                           \
      case 1: BODY<T, 1>(n, s, vx, bx, vy); break;                                          \
      case 2: BODY<T, 2>(n, s, vx, bx, vy); break;                                          \
      case 3: BODY<T, 3>(n, s, vx, bx, vy); break;                                          \
      case 4: BODY<T, 4>(n, s, vx, bx, vy); break;                                          \
      default: __builtin_trap(); /* callers pass at most kMaxWeightRows */                  \
    }                                                                                       \
  }
PYLLM_GEMV_ROWS(rows_signed, gemv_signed_512)
PYLLM_GEMV_ROWS(rows_unsigned, gemv_unsigned_512)
#undef PYLLM_GEMV_ROWS

static void install_gemv_rows(type_traits* t) {
  t[GGML_TYPE_Q8_0].vec_dot_rows = rows_signed<T_q8_0>;
  t[GGML_TYPE_Q4_0].vec_dot_rows = rows_signed<T_q4_0>;
  t[GGML_TYPE_Q5_0].vec_dot_rows = rows_signed<T_q5_0>;
  t[GGML_TYPE_IQ4_NL].vec_dot_rows = rows_signed<T_iq4_nl>;
  t[GGML_TYPE_Q4_1].vec_dot_rows = rows_unsigned<T_q4_1>;
  t[GGML_TYPE_Q5_1].vec_dot_rows = rows_unsigned<T_q5_1>;
}
