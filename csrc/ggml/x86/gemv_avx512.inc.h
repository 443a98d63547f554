// Decode (one activation row) at the AVX-512 level, included by quants_avx512.cpp after the prefill tiles
// (it uses their T_* loaders). vec_dot_rows runs NR <= 4 weight rows against the same activation row so
// NR fma chains overlap. Everything here is 256-bit: with a 512-bit op in flight the core shuts port 1's
// vector unit, and this loop is bound by vector uops, not by the chains (measured: Q4_1 12 -> 21 GMAC/s
// in cache, see the commit). Per (row, block) the integers are vec_dot's (dpbusd of the unsigned weights
// T::load, signed types starting from y's -128 * lane sums: exact) and so is the float chain
// acc = fma(float(p), dx * dy, acc), block after block, with Q4_1/Q5_1's min term m * s on its own chain
// (lane r of one xmm is row r's chain: the same scalar fma), and the same hsum8: each row's bits are
// vec_dot's. The scale products of a segment of blocks are made ahead of its dot loop, 4 rows x 2 blocks
// per gather of the blocks' first words (d, and m where there is one) and one conversion, and enter the
// fmas as memory broadcasts.
template <class T, bool UNS, int NR>
static void gemv_rows_256(int n, float* s, const void* vx, size_t bx, const void* vy) {
  typedef typename T::B XB;
  typedef typename std::conditional<UNS, block_q8_1, block_q8_0>::type YB;
  const YB* y = (const YB*)vy;
  const uint8_t* x0 = (const uint8_t*)vx;
  const int nb = n / 32;
  constexpr int SEG = 16;  // blocks per segment (measured: 16 and 32 beat 64 and 8)
  alignas(32) float sc[SEG * 4 + 8], mx[UNS ? SEG * 4 + 8 : 8], dy4[SEG * 4 + 32], sy[SEG + 8];
  __m256 acc[NR];
  for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
  __m128 accm = _mm_setzero_ps();
  const __m256i zero = _mm256_setzero_si256();
  // word p of an x gather: block p / 4 of the pair, row p % 4 (rows past NR repeat the last one)
  alignas(32) int off[8];
  for (int p = 0; p < 8; p++) off[p] = (int)((p / 4) * sizeof(XB) + (size_t)std::min(p % 4, NR - 1) * bx);
  const __m256i xidx = _mm256_load_si256((const __m256i*)off);
  const __m256i yidx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)sizeof(YB)));
  const __m256i c128 = _mm256_set1_epi8((char)0x80);
  for (int i0 = 0; i0 < nb; i0 += SEG) {
    const int ns = std::min(SEG, nb - i0);
    // y's d (and s): 8 blocks per gather; dy4[4 j + r] = dy of block j (for the 4 rows)
    for (int j = 0; j < ns; j += 8) {
      const __mmask8 m = ns - j >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (ns - j)) - 1);
      const __m256i w = _mm256_mmask_i32gather_epi32(zero, m, yidx, (const void*)(y + i0 + j), 1);
      const __m256 d = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(w));
      if (UNS) _mm256_store_ps(sy + j, _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(w, 16))));
      for (int q = 0; q < 4; q++) {
        const __m256i sel = _mm256_setr_epi32(2 * q, 2 * q, 2 * q, 2 * q, 2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1);
        _mm256_store_ps(dy4 + 4 * (j + 2 * q), _mm256_permutevar8x32_ps(d, sel));
      }
    }
    // sc[4 j + r] = dx * dy of row r's block j; mx[4 j + r] = its m
    for (int j = 0; j < ns; j += 2) {
      const __mmask8 m = j + 1 < ns ? (__mmask8)0xFF : (__mmask8)0x0F;
      const __m256i w = _mm256_mmask_i32gather_epi32(zero, m, xidx, (const void*)(x0 + (size_t)(i0 + j) * sizeof(XB)), 1);
      _mm256_store_ps(sc + 4 * j, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_cvtepi32_epi16(w)), _mm256_load_ps(dy4 + 4 * j)));
      if (UNS) _mm256_store_ps(mx + 4 * j, _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(w, 16))));
    }
    const XB* xr[NR];
    for (int r = 0; r < NR; r++) xr[r] = (const XB*)(x0 + r * bx) + i0;
    for (int j = 0; j < ns; j++) {
      for (int r = 0; r < NR; r++) _mm_prefetch((const char*)(xr[r] + j) + pf_distance(bx, NR), _MM_HINT_T0);
      const __m256i yq = _mm256_loadu_si256((const __m256i*)y[i0 + j].qs);
      const __m256i init = UNS ? zero : _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, c128, yq));
      for (int r = 0; r < NR; r++) {
        const __m256i p = _mm256_dpbusd_epi32(init, T::load(xr[r][j]), yq);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(sc + 4 * j + r), acc[r]);
      }
      if (UNS) accm = _mm_fmadd_ps(_mm_load_ps(mx + 4 * j), _mm_broadcast_ss(sy + j), accm);
    }
  }
  alignas(16) float m4[4];
  _mm_store_ps(m4, accm);
  for (int r = 0; r < NR; r++) s[r] = UNS ? hsum8(acc[r]) + m4[r] : hsum8(acc[r]);
}

#define PYLLM_GEMV_ROWS(NAME, UNS)                                                          \
  template <class T>                                                                        \
  static void NAME(int n, float* s, const void* vx, size_t bx, const void* vy, int nr) {    \
    switch (nr) {                                                                           \
      case 1: gemv_rows_256<T, UNS, 1>(n, s, vx, bx, vy); break;                            \
      case 2: gemv_rows_256<T, UNS, 2>(n, s, vx, bx, vy); break;                            \
      case 3: gemv_rows_256<T, UNS, 3>(n, s, vx, bx, vy); break;                            \
      case 4: gemv_rows_256<T, UNS, 4>(n, s, vx, bx, vy); break;                            \
      default: __builtin_trap(); /* callers pass at most kMaxWeightRows */                  \
    }                                                                                       \
  }
PYLLM_GEMV_ROWS(rows_signed, false)
PYLLM_GEMV_ROWS(rows_unsigned, true)
#undef PYLLM_GEMV_ROWS

// Repacked Q4_K (dot_q4_K_rp's arithmetic), NR <= 4 weight rows against one activation row: per row
// the super-block's integer totals (sums and mins . bsums, reduced through rowsum4: exact in any order)
// are dot_q4_K_rp_512_rows', and float lane r does its scalar fma(is, d * y.d, acc),
// fma(imin, dmin * y.d, accm), acc - accm for row r, so each row's bits are vec_dot_rp's. One call per
// 4 rows instead of one per row, and one reduction tree for the 4.
template <int NR>
static void gemv_q4_K_rp(int n, float* s, const void* vx, size_t bx, const void* vy) {
  const block_q8_K* y = (const block_q8_K*)vy;
  __m128 acc = _mm_setzero_ps(), accm = _mm_setzero_ps();
  Q45Block b;
  for (int i = 0; i < n / QK_K; i++) {
    __m512i z[4];
    __m256i g[4];
    alignas(16) float d[4] = {0.f, 0.f, 0.f, 0.f}, dmin[4] = {0.f, 0.f, 0.f, 0.f};
    const __m256i bs = _mm256_loadu_si256((const __m256i*)y[i].bsums);
    for (int r = 0; r < NR; r++)
      prefetch_block<block_q4_K>((const char*)vx + r * bx + i * sizeof(block_q4_K) + pf_distance(bx, NR));
    for (int r = 0; r < 4; r++) {
      if (r < NR) {
        load_q45_block<false>((const uint8_t*)vx + r * bx, i, b);
        z[r] = q45_isum(b, y + i);
        g[r] = _mm256_madd_epi16(b.mins16x2, bs);
        d[r] = b.d; dmin[r] = b.dmin;
      } else {
        z[r] = _mm512_setzero_si512(); g[r] = _mm256_setzero_si256();
      }
    }
    const __m128 yd = _mm_set1_ps(y[i].d);
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_512(z)), _mm_mul_ps(_mm_load_ps(d), yd), acc);
    accm = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_256(g)), _mm_mul_ps(_mm_load_ps(dmin), yd), accm);
  }
  alignas(16) float o[4];
  _mm_store_ps(o, _mm_sub_ps(acc, accm));
  for (int r = 0; r < NR; r++) s[r] = o[r];
}
static void rows_q4_K_rp(int n, float* s, const void* vx, size_t bx, const void* vy, int nr) {
  switch (nr) {
    case 1: gemv_q4_K_rp<1>(n, s, vx, bx, vy); break;
    case 2: gemv_q4_K_rp<2>(n, s, vx, bx, vy); break;
    case 3: gemv_q4_K_rp<3>(n, s, vx, bx, vy); break;
    case 4: gemv_q4_K_rp<4>(n, s, vx, bx, vy); break;
    default: __builtin_trap();
  }
}

// Repacked MXFP4 (dot_b32_rp's arithmetic), NR <= 4 weight rows against one activation row: per (row,
// block) the integer is dot_b32_rp's (dpbusd of T::load's w + 128 from y's -128 * lane sums, reduced through
// rowsum4_256: exact in any order) and float lane r does its fma(isum, dx * y.d, acc): each row's bits are
// vec_dot_rp's, with 4 chains in flight instead of one.
struct T_mxfp4 : W_mxfp4 {  // the E2M1 table (2x) shifted by 128
  static inline __m256i load(const B& b) { return _mm256_xor_si256(W_mxfp4::load(b), _mm256_set1_epi8((char)0x80)); }
};
template <class T, int NR>
static void gemv_b32_rp(int n, float* s, const void* vx, size_t bx, const void* vy) {
  const block_q8_0* y = (const block_q8_0*)vy;
  const typename T::B* xr[NR];
  for (int r = 0; r < NR; r++) xr[r] = (const typename T::B*)((const uint8_t*)vx + r * bx);
  const __m256i zero = _mm256_setzero_si256(), c128 = _mm256_set1_epi8((char)0x80);
  __m128 acc = _mm_setzero_ps();
  for (int b = 0; b < n / 32; b++) {
    const __m256i yq = _mm256_loadu_si256((const __m256i*)y[b].qs);
    const __m256i init = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, c128, yq));
    __m256i g[4] = {zero, zero, zero, zero};
    alignas(16) float dx[4] = {0.f, 0.f, 0.f, 0.f};
    for (int r = 0; r < NR; r++) {
      _mm_prefetch((const char*)(xr[r] + b) + pf_distance(bx, NR), _MM_HINT_T0);
      g[r] = _mm256_dpbusd_epi32(init, T::load(xr[r][b]), yq);
      dx[r] = T::scale(xr[r][b]);
    }
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(rowsum4_256(g)), _mm_mul_ps(_mm_load_ps(dx), _mm_set1_ps(h2f(y[b].d))), acc);
  }
  alignas(16) float o[4];
  _mm_store_ps(o, acc);
  for (int r = 0; r < NR; r++) s[r] = o[r];
}
template <class T>
static void rows_b32_rp(int n, float* s, const void* vx, size_t bx, const void* vy, int nr) {
  switch (nr) {
    case 1: gemv_b32_rp<T, 1>(n, s, vx, bx, vy); break;
    case 2: gemv_b32_rp<T, 2>(n, s, vx, bx, vy); break;
    case 3: gemv_b32_rp<T, 3>(n, s, vx, bx, vy); break;
    case 4: gemv_b32_rp<T, 4>(n, s, vx, bx, vy); break;
    default: __builtin_trap();
  }
}

static void install_gemv_rows(type_traits* t) {
  t[GGML_TYPE_Q4_K].vec_dot_rp_rows = rows_q4_K_rp;
  t[GGML_TYPE_MXFP4].vec_dot_rp_rows = rows_b32_rp<T_mxfp4>;
  t[GGML_TYPE_Q8_0].vec_dot_rows = rows_signed<T_q8_0>;
  t[GGML_TYPE_Q4_0].vec_dot_rows = rows_signed<T_q4_0>;
  t[GGML_TYPE_Q5_0].vec_dot_rows = rows_signed<T_q5_0>;
  t[GGML_TYPE_IQ4_NL].vec_dot_rows = rows_signed<T_iq4_nl>;
  t[GGML_TYPE_Q4_1].vec_dot_rows = rows_unsigned<T_q4_1>;
  t[GGML_TYPE_Q5_1].vec_dot_rows = rows_unsigned<T_q5_1>;
}
