// Group kernels (weights in 16-row groups, ggml/repack.h), included by quants_avx512.cpp.

// Q4_K: lane r of every vector is row r. A token's integer sums are dot_q4_K_rp's (exact, so their order is
// free): per sub-block, dpbusd of the low (high) nibbles with 4 broadcast activation bytes at a time, the
// high nibbles kept 16x (masked, not shifted) and shifted back before the scale; mins . bsums by dpwssd on
// (min, min) pairs. The float side is dot_q4_K_rp's fma(is, d * y.d, acc), fma(imin, dmin * y.d, accm) per
// lane and its acc - accm, so each row's bits are vec_dot_rp's for any k. Tokens go through a super-block
// KT <= 4 at a time (registers), so the group's nibbles are unpacked once per 4 tokens.
static inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
// pass(std::integral_constant<int, KT>, t) for the k tokens in runs of KT = Step (4 or 2), then the last
// k % Step (each KT its own unrolled pass: the accumulators stay in registers)
template <int Step = 4, class Pass>
static inline void token_passes(int k, Pass&& pass) {
  static_assert(Step == 2 || Step == 4, "token_passes: runs of 2 or 4");
  int t = 0;
  for (; t + Step <= k; t += Step) pass(std::integral_constant<int, Step>(), t);
  switch (k - t) {
    case 1: pass(std::integral_constant<int, 1>(), t); break;
    case 2: if constexpr (Step > 2) pass(std::integral_constant<int, 2>(), t); break;
    case 3: if constexpr (Step > 3) pass(std::integral_constant<int, 3>(), t); break;
    default: break;
  }
}
template <int KT>
static inline void q4_K_x16_pass(const block_q4_Kx16& b, const Q4KSb& s, const block_q8_K* const* y, __m512* acc,
                                 __m512* accm) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), mh = _mm512_set1_epi8((char)0xF0), mb = _mm512_set1_epi32(0xFF);
  __m512i is[KT];
  for (int t = 0; t < KT; t++) is[t] = _mm512_setzero_si512();
  for (int p = 0; p < 4; p++) {  // sub-blocks 2p (low nibbles) and 2p + 1 (high)
    __m512i al[KT], ah[KT];
    for (int t = 0; t < KT; t++) al[t] = ah[t] = _mm512_setzero_si512();
    for (int c = 0; c < 8; c++) {
      const __m512i v = _mm512_loadu_si512(b.qs[8 * p + c]);
      const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(v, mh);
      for (int t = 0; t < KT; t++) {
        al[t] = _mm512_dpbusd_epi32(al[t], lo, bcast4(y[t]->qs + 64 * p + 4 * c));
        ah[t] = _mm512_dpbusd_epi32(ah[t], hi, bcast4(y[t]->qs + 64 * p + 32 + 4 * c));
      }
    }
    const __m512i sv = p < 2 ? s.slo : s.shi;
    const int sh = 16 * (p % 2);
    const __m512i se = _mm512_and_si512(_mm512_srli_epi32(sv, sh), mb), so = _mm512_and_si512(_mm512_srli_epi32(sv, sh + 8), mb);
    for (int t = 0; t < KT; t++)
      is[t] = _mm512_add_epi32(is[t], _mm512_add_epi32(_mm512_mullo_epi32(al[t], se),
                                                       _mm512_mullo_epi32(_mm512_srai_epi32(ah[t], 4), so)));
  }
  for (int t = 0; t < KT; t++) {
    __m512i im = _mm512_dpwssd_epi32(_mm512_setzero_si512(), s.mp[0], _mm512_set1_epi32(ybs_pair(y[t], 0, 2)));
    im = _mm512_dpwssd_epi32(im, s.mp[1], _mm512_set1_epi32(ybs_pair(y[t], 1, 3)));
    im = _mm512_dpwssd_epi32(im, s.mp[2], _mm512_set1_epi32(ybs_pair(y[t], 4, 6)));
    im = _mm512_dpwssd_epi32(im, s.mp[3], _mm512_set1_epi32(ybs_pair(y[t], 5, 7)));
    const __m512 yd = _mm512_set1_ps(y[t]->d);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]), _mm512_mul_ps(s.d, yd), acc[t]);
    accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), _mm512_mul_ps(s.dm, yd), accm[t]);
  }
}
// Software prefetch of the stream X16_PF bytes ahead; without it the group kernels stream at about half the
// read bandwidth. The cache level is the machine's (bench_matmul A/B, B = 1, 188 MB Q4_K matrix): into L2 (T1)
// on Intel (SPR: T0 and other distances were worse) and Zen 4, into L1 (T0) on Zen 5 (T1 90 %, T0 103 % of
// the -t 1 probe; Zen 4 with T0: 27B-shaped Q4_K decode 9.8 t/s, T1 14.3). x16_prefetch_l1() picks the default
// at table setup; cpu/prefetch_tune.h measures the modes as the process runs and keeps the fastest.
#ifndef X16_PF
#define X16_PF 9216
#endif
static bool x16_prefetch_l1() {  // AMD family 26 (Zen 5) and later
  __builtin_cpu_init();
  if (!__builtin_cpu_is("amd")) return false;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const unsigned family = ((a >> 8) & 0xf) + ((a >> 20) & 0xff);
  return family >= 26;
}
template <int Hint>  // Hint < 0: none
static inline void x16_prefetch(const void* group, size_t bytes) {
  if constexpr (Hint >= 0)
    for (size_t l = 0; l < bytes / 64; l++) _mm_prefetch((const char*)group + X16_PF + 64 * l, (_mm_hint)Hint);
}
// bytes at p into L2, one prefetch per line (the batches' lookahead; the decode keeps x16_prefetch's mode)
static inline void x16_prefetch_l2(const void* p, size_t bytes) {
  for (size_t l = 0; l < (bytes + 63) / 64; l++) _mm_prefetch((const char*)p + 64 * l, _MM_HINT_T1);
}
template <int Hint>
static void x16_q4_K_512(int n, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc) {
  const block_q4_Kx16* g = (const block_q4_Kx16*)vg;
  __m512 acc[kMaxRowsK], accm[kMaxRowsK];
  for (int t = 0; t < k; t++) acc[t] = accm[t] = _mm512_setzero_ps();
  for (int i = 0; i < n / QK_K; i++) {
    // the stream PF bytes ahead (past the group's end: the next group, the same thread's next one mostly)
    x16_prefetch<Hint>(g + i, sizeof(block_q4_Kx16));
    const Q4KSb s = q4_K_x16_scales(g[i]);
    const block_q8_K* y[kMaxRowsK];
    for (int t = 0; t < k; t++) y[t] = (const block_q8_K*)((const uint8_t*)vy + t * by) + i;
    token_passes(k, [&](auto kt, int t) { q4_K_x16_pass<decltype(kt)::value>(g[i], s, y + t, acc + t, accm + t); });
  }
  for (int t = 0; t < k; t++) _mm512_storeu_ps(C + t * ldc, _mm512_sub_ps(acc[t], accm[t]));
}
// Up to 4 tokens, kX16Streams = 2 groups side by side (kX16PfStreams): each super-block index is read in two places
// at once, so the hardware prefetcher follows two streams per thread. On the 480 MiB-L3 Xeon VM, 27B-shaped Q4_K tg32 went
// from 9.8 / 17.2 t/s (one group, no prefetch) to 10.6 / 19.45 at -t 1 / 2 (95 / 92 % of the read probe);
// three or four groups were slower than one (10.1 / 17.9 and 9.5 / 17.5). Each group and token is
// x16_q4_K_512's chain, so the bits are the same.
template <int KT>
static void x16_q4_K_512_g(int n, const uint8_t* g, size_t gstride, const uint8_t* vy, size_t by, float* C, size_t ldc) {
  constexpr int G = kX16Streams;
  __m512 acc[G][KT], accm[G][KT];
  for (int j = 0; j < G; j++)
    for (int t = 0; t < KT; t++) acc[j][t] = accm[j][t] = _mm512_setzero_ps();
  for (int i = 0; i < n / QK_K; i++) {
    const block_q8_K* yi[KT];
    for (int t = 0; t < KT; t++) yi[t] = (const block_q8_K*)(vy + t * by) + i;
    // 2-4 tokens: each group's next super-block into L2 (27B-shaped Q4_K -t 2: pp2 / pp3 / pp4 +2 / +3 / +3.5 %,
    // two alternating runs). At one token it cost 18 % (tg 19.3 -> 15.9): the decode keeps no prefetch.
    if constexpr (KT >= 2)
      for (int j = 0; j < G; j++) x16_prefetch_l2((const block_q4_Kx16*)(g + j * gstride) + i + 1, sizeof(block_q4_Kx16));
    for (int j = 0; j < G; j++) {
      const block_q4_Kx16& b = ((const block_q4_Kx16*)(g + j * gstride))[i];
      q4_K_x16_pass<KT>(b, q4_K_x16_scales(b), yi, acc[j], accm[j]);
    }
  }
  for (int j = 0; j < G; j++)
    for (int t = 0; t < KT; t++) _mm512_storeu_ps(C + t * ldc + 16 * j, _mm512_sub_ps(acc[j][t], accm[j][t]));
}
static void x16_q4_K_512_streams(int n, const void* vg, size_t gstride, const void* vy, size_t by, int k, float* C,
                                 size_t ldc) {
  const uint8_t *g = (const uint8_t*)vg, *y = (const uint8_t*)vy;
  switch (k) {
    case 1: x16_q4_K_512_g<1>(n, g, gstride, y, by, C, ldc); break;
    case 2: x16_q4_K_512_g<2>(n, g, gstride, y, by, C, ldc); break;
    case 3: x16_q4_K_512_g<3>(n, g, gstride, y, by, C, ldc); break;
    default: x16_q4_K_512_g<4>(n, g, gstride, y, by, C, ldc); break;
  }
}

// IQ4_NL (rp form, see x16_iq4_nl_ref): the weights as signed bytes through the table (pshufb), the activations
// made unsigned (y ^ 0x80 = y + 128) for dpbusd, and 128 * sum(w) per row and block (one dpbusd of ones for all
// the tokens) taken off: the exact integer isum, then acc = fma(isum, d * y.d, acc) block after block.
template <int KT>
static inline void iq4_nl_x16_pass(const __m512i* w, __m512i wsum128, __m512 d, const block_q8_0* const* y, __m512* acc) {
  const __m512i c80 = _mm512_set1_epi8((char)0x80);
  for (int t = 0; t < KT; t++) {
    __m512i s = _mm512_setzero_si512();
    for (int v = 0; v < 4; v++) {
      s = _mm512_dpbusd_epi32(s, _mm512_xor_si512(bcast4(y[t]->qs + 4 * v), c80), w[2 * v]);
      s = _mm512_dpbusd_epi32(s, _mm512_xor_si512(bcast4(y[t]->qs + 16 + 4 * v), c80), w[2 * v + 1]);
    }
    const __m512 yd = _mm512_set1_ps(h2f(y[t]->d));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s, wsum128)), _mm512_mul_ps(d, yd), acc[t]);
  }
}
template <int Hint>
static void x16_iq4_nl_512(int n, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc) {
  const block_iq4_nlx16* g = (const block_iq4_nlx16*)vg;
  const __m512i tbl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)kvalues_iq4nl));
  const __m512i m4 = _mm512_set1_epi8(0x0F), ones = _mm512_set1_epi8(1);
  __m512 acc[kMaxRowsK];
  for (int t = 0; t < k; t++) acc[t] = _mm512_setzero_ps();
  for (int b = 0; b < n / QK4_NL; b++) {
    x16_prefetch<Hint>(g + b, sizeof(block_iq4_nlx16));
    __m512i w[8], ws = _mm512_setzero_si512();
    for (int v = 0; v < 4; v++) {  // word v: elements 4v.. (low nibbles) and 16 + 4v.. (high)
      const __m512i q = _mm512_loadu_si512(g[b].qs[v]);
      w[2 * v] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(q, m4));
      w[2 * v + 1] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
      ws = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ws, ones, w[2 * v]), ones, w[2 * v + 1]);
    }
    const __m512i ws128 = _mm512_slli_epi32(ws, 7);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)g[b].d));
    const block_q8_0* y[kMaxRowsK];
    for (int t = 0; t < k; t++) y[t] = (const block_q8_0*)((const uint8_t*)vy + t * by) + b;
    token_passes(k, [&](auto kt, int t) { iq4_nl_x16_pass<decltype(kt)::value>(w, ws128, d, y + t, acc + t); });
  }
  for (int t = 0; t < k; t++) _mm512_storeu_ps(C + t * ldc, acc[t]);
}

// Q8_0 (the SIMD vec_dot's arithmetic, see x16_q8_0_ref): lane r is row r, and each of vec_dot's 8 lanes (bytes
// 4l..4l+3 of a block) has its own accumulator vector, so a token takes 8 registers: the tokens go through the
// whole group 2 at a time, their accumulators in registers (blocks inside tokens: the group's blocks come from
// memory once, then from L2). Lane sums: dpbusd of the stored w + 128 with 4 broadcast activation bytes, from
// kMagicI - 128 * those bytes' sum (Q8Tok). The float of a lane sum p (|p| <= 4 * 128 * 128 < 2^22) is then
// as_float(kMagicI + p) - kMagicF: exact like a conversion, as a subtraction that either FMA port takes.
// Then fma(p, d * y.d, acc_l) per block and hsum8's tree at the end: each row's bits are vec_dot's. Per token
// and block: 8 dpbusd, 8 subtractions, 8 fmas, 16 broadcast loads (SPR, -t 1, K = 5120, B = 8 in L2: 77-80
// GMAC/s, 70 before Q8Tok; 27B-shaped Q8_0 pp8 -t 2 40.5-41.2 -> 43.0-43.4 t/s).
static inline __m512 q8_0_x16_hsum8(const __m512* a) {  // hsum8's tree: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
  return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                       _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
}
constexpr int32_t kMagicI = 0x4B400000;  // 1.5 * 2^23: as_float(kMagicI + p) = kMagicF + p for |p| < 2^22
constexpr float kMagicF = 12582912.0f;
// A token's block as the group kernel reads it: the 8 lane sums' starting values kMagicI - 128 * (sum of y's
// bytes 4l..4l+3) and y.d as a float, made for the whole row before the blocks (q8_0_x16_toks) so the block
// loop takes each as one broadcast load (a load-port uop). Made inside the loop, the compiler kept them in a
// register and extracted and broadcast each lane with two shuffle-port uops, the kernel's bottleneck at B = 8
// in L2 (perf annotate). Inside an X16ActsScope they are made once for all the run's groups (they were 11 % of
// 27B-shaped Q8_0 pp8's kernel time made per group, perf).
struct Q8Tok {
  int32_t corr[8];
  float d;
};
// the k token rows' (vy, by bytes apart) Q8Tok rows, nb blocks each, in a thread's scratch: [t][b]
static inline const Q8Tok* q8_0_x16_toks(const void* vy, size_t by, int k, int nb) {
  thread_local std::vector<Q8Tok> buf;
  thread_local struct { unsigned scope; const void* vy; size_t by; int k, nb; } made = {0, nullptr, 0, 0, 0};
  const unsigned scope = x16_acts_scope();
  if (scope && made.scope == scope && made.vy == vy && made.by == by && made.k == k && made.nb == nb) return buf.data();
  if (buf.size() < (size_t)k * nb) buf.resize((size_t)k * nb);
  const __m256i c80 = _mm256_set1_epi8((char)0x80), z = _mm256_setzero_si256(), mi = _mm256_set1_epi32(kMagicI);
  for (int t = 0; t < k; t++)
    for (int b = 0; b < nb; b++) {
      const block_q8_0& yb = ((const block_q8_0*)((const uint8_t*)vy + t * by))[b];
      Q8Tok& o = buf[(size_t)t * nb + b];
      const __m256i s = _mm256_dpbusd_epi32(z, c80, _mm256_loadu_si256((const __m256i*)yb.qs));
      _mm256_storeu_si256((__m256i*)o.corr, _mm256_sub_epi32(mi, s));
      o.d = h2f(yb.d);
    }
  made = {scope, vy, by, k, nb};
  return buf.data();
}
// one group block (w = its 8 lane vectors, d its row scales) against one token's block: acc[l] += lane l
static inline void q8_0_x16_block(const __m512i* w, __m512 d, const block_q8_0& yb, const Q8Tok& o, __m512* acc) {
  const __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(o.d)), mf = _mm512_set1_ps(kMagicF);
  for (int l = 0; l < 8; l++) {
    const __m512i p = _mm512_dpbusd_epi32(_mm512_set1_epi32(o.corr[l]), w[l], bcast4(yb.qs + 4 * l));
    acc[l] = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_castsi512_ps(p), mf), dd, acc[l]);
  }
}
static inline void q8_0_x16_load(const block_q8_0x16& gb, __m512i* w, __m512& d) {
  for (int l = 0; l < 8; l++) w[l] = _mm512_loadu_si512(gb.qs[l]);
  d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)gb.d));
}
// Batches (2+ tokens) without the read mode's prefetch: the first pass brings the block kQ8Ahead ahead into L2
// (27B-shaped Q8_0 -t 2, two alternating runs: pp2 17.2-17.6 -> 18.8-19.0, pp4 27.6-27.7 -> 29.9-30.2, pp8
// 40.8-40.9 -> 44.4-45.0 t/s; 2 ahead gained less, 12-16 less, into L1 less). The decode (one token) keeps none.
constexpr int kQ8Ahead = 6;
template <int KT, int Hint>
static inline void q8_0_x16_run(int nb, const block_q8_0x16* g, const block_q8_0* const* y, const Q8Tok* ot,
                                bool fetch, bool ahead, float* C, size_t ldc) {
  __m512 acc[KT][8];
  for (int t = 0; t < KT; t++)
    for (int l = 0; l < 8; l++) acc[t][l] = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    if (fetch) x16_prefetch<Hint>(g + b, sizeof(block_q8_0x16));
    if constexpr (Hint < 0)  // the batch's first pass, from memory: block b + 6 into L2 (kQ8Ahead)
      if (ahead) x16_prefetch_l2(g + b + kQ8Ahead, sizeof(block_q8_0x16));
    __m512i w[8];
    __m512 d;
    q8_0_x16_load(g[b], w, d);
    for (int t = 0; t < KT; t++) q8_0_x16_block(w, d, y[t][b], ot[(size_t)t * nb + b], acc[t]);
  }
  for (int t = 0; t < KT; t++) _mm512_storeu_ps(C + t * ldc, q8_0_x16_hsum8(acc[t]));
}
// One token, kX16Streams groups side by side (kX16PfStreams, as x16_q4_K_512_g): q8_0_x16_run's KT = 1 arithmetic
// per group.
static void x16_q8_0_512_streams(int n, const void* vg, size_t gstride, const void* vy, size_t, int, float* C,
                                 size_t) {  // one token (x16_streams_k 1)
  constexpr int G = kX16Streams;
  const int nb = n / QK8_0;
  const uint8_t* g = (const uint8_t*)vg;
  const block_q8_0* y = (const block_q8_0*)vy;
  __m512 acc[G][8];
  for (int j = 0; j < G; j++)
    for (int l = 0; l < 8; l++) acc[j][l] = _mm512_setzero_ps();
  const Q8Tok* ot = q8_0_x16_toks(vy, 0, 1, nb);  // the token's, once for both groups
  for (int b = 0; b < nb; b++) {
    for (int j = 0; j < G; j++) {
      __m512i w[8];
      __m512 d;
      q8_0_x16_load(((const block_q8_0x16*)(g + j * gstride))[b], w, d);
      q8_0_x16_block(w, d, y[b], ot[b], acc[j]);
    }
  }
  for (int j = 0; j < G; j++) _mm512_storeu_ps(C + 16 * j, q8_0_x16_hsum8(acc[j]));
}
template <int Hint>
static void x16_q8_0_512(int n, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc) {
  const block_q8_0* y[kMaxRowsK];
  for (int t = 0; t < k; t++) y[t] = (const block_q8_0*)((const uint8_t*)vy + t * by);
  const int nb = n / QK8_0;
  const Q8Tok* ot = q8_0_x16_toks(vy, by, k, nb);
  token_passes<2>(k, [&](auto kt, int t) {
    q8_0_x16_run<decltype(kt)::value, Hint>(nb, (const block_q8_0x16*)vg, y + t, ot + (size_t)t * nb, t == 0, t == 0 && k >= 2,
                                            C + t * ldc, ldc);
  });
}
