// Group kernels for the 32-element nibble types Q4_0 and Q4_1 at the AVX2 level (weights in 16-row groups,
// ggml/repack.h), included by quants_avx2.cpp inside namespace x86_avx2 after x16_avx2.inc.h. The AVX-512 level
// keeps them for grouped matmuls but does not group these types at load (quants_avx512.cpp).
//
// The GGUF rows' vec_dot (quants_simd.inc.h) keeps 8 lanes per row: lane l sums the products of a block's
// elements 4l..4l+3 exactly, does fma(p_l, dx * dy, acc_l) block after block, and hsum8's tree joins the lanes
// at the end (Q4_1 then adds its min chain fma(m, y.s, accm)). A group's 256-bit vector holds word v (4 bytes)
// of 8 rows, so lane l of 8 rows is one vector and each row's 8 chains are 8 accumulator vectors: the same
// integers (maddubs + madd of the unsigned nibbles, exact; Q4_0's -8 as the token's lane correction
// -8 * (sum of its 4 bytes), made once per matmul chunk), the same fmas and the same tree, so a grouped row
// has its GGUF row's bits for any k. Those 8 accumulators (plus the min chain) per half-group and token leave
// no registers for a second token, so each (half, token) pass runs over the group's blocks: the first from
// memory, the others from L1/L2, each redoing the 2-op decode per lane.
// Against the GGUF-row kernels this drops per (row, block) the unpack, the d and m conversions and the
// horizontal sums (Zen 3, -t 1, medians of 7, groups / rows: Q4_1 in cache B = 1 25.3 / 10.0 GMAC/s, B = 8
// 1.13x, streaming B = 1 1.44x; Q4_0 in cache B = 1 2.24x, batches 0.98-1.14x).

struct B32Q4_0 {
  typedef block_q4_0x16 G;
  typedef block_q8_0 Y;
  static constexpr bool kMin = false;  // its - 8 comes as the lane correction
};
struct B32Q4_1 {
  typedef block_q4_1x16 G;
  typedef block_q8_1 Y;
  static constexpr bool kMin = true;  // the min chain fma(m, y.s, accm)
};
// (Q8_0 stays on its GGUF rows at this level: its weights need sign(y, w) on |w| per lane and token; that group
// kernel was 1.78x the rows at B = 1 in cache but no faster from B = 4, and slower from memory (0.86x at B = 1,
// 0.75x at B = 4), where the rows prefetch the next row. The AVX-512 level has its own.)

// acc += p * dd for one lane of 8 rows, p = the exact sum of the 4 products nibble * y (pairs at most
// 15 * 127 * 2 < 2^15) plus corr (Q4_0's -8 * sum(y), else 0)
template <bool Corr>
static inline void b32_lane(__m256i u, const int8_t* y4, const int32_t* corr, __m256 dd, __m256& acc) {
  __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, bcast4_8(y4)), _mm256_set1_epi16(1));
  if constexpr (Corr) p = _mm256_add_epi32(p, _mm256_set1_epi32(*corr));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dd, acc);
}
// Q4_0's lane corrections of the k token rows (vy, by bytes apart), [t][b][l] = -8 * (sum of block b's bytes
// 4l..4l+3), in a thread's scratch; inside an X16ActsScope made once for the run's groups (as the AVX-512 Q8_0
// kernel's Q8Tok)
static inline const int32_t* q4_0_x16_corr(const void* vy, size_t by, int k, int nb) {
  thread_local std::vector<int32_t> buf;
  thread_local struct { unsigned scope; const void* vy; size_t by; int k, nb; } made = {0, nullptr, 0, 0, 0};
  const unsigned scope = x16_acts_scope();
  if (scope && made.scope == scope && made.vy == vy && made.by == by && made.k == k && made.nb == nb) return buf.data();
  if (buf.size() < (size_t)k * nb * 8) buf.resize((size_t)k * nb * 8);
  const __m256i ones = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int t = 0; t < k; t++)
    for (int b = 0; b < nb; b++) {
      const block_q8_0& yb = ((const block_q8_0*)((const uint8_t*)vy + t * by))[b];
      const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, _mm256_loadu_si256((const __m256i*)yb.qs)), ones16);
      _mm256_storeu_si256((__m256i*)(buf.data() + ((size_t)t * nb + b) * 8), _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s, 3)));
    }
  made = {scope, vy, by, k, nb};
  return buf.data();
}
static inline __m256 b32_hsum8(const __m256* a) {  // hsum8's tree per row: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
  return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
                       _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])));
}

// Half h (rows 8h..8h+7) of the group g (nb blocks) against one token's blocks y: out[r] = row 8h + r . token.
// fetch: this pass reads from memory (the software prefetch of the read mode Hint goes with it). corr: the
// token's Q4_0 lane corrections, [b][l].
template <class X, int Hint>
static void b32_x8_pass(int nb, const typename X::G* g, int h, const typename X::Y* y, const int32_t* corr, bool fetch,
                        float* out) {
  constexpr bool kCorr = !X::kMin;
  __m256 acc[8], accm = _mm256_setzero_ps();
  for (int l = 0; l < 8; l++) acc[l] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int b = 0; b < nb; b++) {
    if constexpr (Hint >= 0)
      if (fetch)
        for (size_t o = 0; o < sizeof(typename X::G); o += 64) _mm_prefetch((const char*)(g + b) + X16_PF_AVX2 + o, (_mm_hint)Hint);
    const typename X::G& gb = g[b];
    const int8_t* yq = y[b].qs;
    const int32_t* cb = kCorr ? corr + 8 * b : nullptr;  // this block's lane corrections (Q4_0)
    const __m256 dd = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(gb.d + 8 * h))), h2f8(y[b].d));
    for (int v = 0; v < 4; v++) {  // word v: lane v (low nibbles, elements 4v..) and lane v + 4 (high, 16 + 4v..)
      const __m256i w = _mm256_loadu_si256((const __m256i*)(gb.qs[v] + 8 * h));
      b32_lane<kCorr>(_mm256_and_si256(w, m4), yq + 4 * v, cb + v, dd, acc[v]);
      b32_lane<kCorr>(_mm256_and_si256(_mm256_srli_epi16(w, 4), m4), yq + 16 + 4 * v, cb + v + 4, dd, acc[v + 4]);
    }
    if constexpr (X::kMin)
      accm = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(gb.m + 8 * h))), h2f8(y[b].s), accm);
  }
  const __m256 s = b32_hsum8(acc);
  _mm256_storeu_ps(out, X::kMin ? _mm256_add_ps(s, accm) : s);
}

// x16_tile_fn: the group's 16 rows against k <= 8 tokens, C[t * ldc + r]
template <class X, int Hint>
static void x16_b32_avx2(int n, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc) {
  const typename X::G* g = (const typename X::G*)vg;
  const int nb = n / 32;
  const int32_t* corr = X::kMin ? nullptr : q4_0_x16_corr(vy, by, k, nb);
  for (int h = 0; h < 2; h++)
    for (int t = 0; t < k; t++)
      b32_x8_pass<X, Hint>(nb, g, h, (const typename X::Y*)((const uint8_t*)vy + t * by), corr ? corr + (size_t)t * nb * 8 : nullptr,
                           h == 0 && t == 0, C + t * ldc + 8 * h);
}

template <class X>
static void install_x16_b32(type_traits& q) {
  install_x16_modes(q, x16_b32_avx2<X, -1>, x16_b32_avx2<X, _MM_HINT_T0>, x16_b32_avx2<X, _MM_HINT_T1>);
}
static void install_x16_b32_kernels(type_traits* t) {
  install_x16_b32<B32Q4_0>(t[GGML_TYPE_Q4_0]);
  install_x16_b32<B32Q4_1>(t[GGML_TYPE_Q4_1]);
}
