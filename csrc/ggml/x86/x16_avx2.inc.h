// Group kernel for Q4_K at the AVX2 level (weights in 16-row groups, ggml/repack.h), included by
// quants_avx2.cpp inside namespace x86_avx2.
//
// A 256-bit vector is half of a group's 64-byte vector: 4 bytes of each of 8 rows (rows 8h..8h+7 of half
// h), so lane r is row r. A token's integers are dot_q4_K_rp's (exact, so their order is free): per
// sub-block, maddubs of the low (high) nibbles with 4 broadcast activation bytes, the 8 products of one
// sub-block summed as int16 (each at most 2 * 15 * 127 = 3810: 8 of them stay below 2^15), then one madd
// with the row's (scale, scale) pair; mins . bsums by madd on (min, min) pairs. One multiply per 32
// products plus one per 256, where the GGUF-row kernels (dot_q4_K_rp) take two per 32: a Zen 2 has one
// vector-multiply pipe, which bounds the AVX2 batches. The float side is dot_q4_K_rp's fma(is, d * y.d, acc),
// fma(imin, dmin * y.d, accm) per lane and its acc - accm, so each row's bits are vec_dot_rp's for any k.
// A Zen 3 has two multiply pipes, and there the bound is the loop's mix: asm loops of maddubs + paddw ran one
// maddubs a cycle with a 32-bit broadcast from memory per maddubs, with one per two, and with the activations
// as maddubs' memory operand (0.72 cycles with no load, 0.5 for maddubs alone); this kernel ran 88-93 GMAC/s
// at 4-8 tokens from L2 at -t 1, about 30 products a cycle at 3 GHz. A variant that shares each broadcast
// between the two halves (the low and high nibbles in two sweeps) ran 0.65-0.93x, as GCC compiled it.

// byte q of each 32-bit lane of v as the int16 pair (b, b): one byte shuffle
static inline __m256i scale_pair(__m256i v, int q) {
  const char z = (char)0x80;  // + q keeps the high bit: still a zero byte
  const __m256i base = _mm256_setr_epi8(0, z, 0, z, 4, z, 4, z, 8, z, 8, z, 12, z, 12, z,
                                        0, z, 0, z, 4, z, 4, z, 8, z, 8, z, 12, z, 12, z);
  return _mm256_shuffle_epi8(v, _mm256_add_epi8(base, _mm256_set1_epi8((char)q)));
}
struct Q4KSb8 {  // one super-block's scales for 8 rows, made once per half for all its tokens
  __m256 d, dm;
  __m256i sp[8], mp[4];  // sp[j]: (sc_j, sc_j); mp: (m0, m2), (m1, m3), (m4, m6), (m5, m7) as int16 pairs
};
static inline Q4KSb8 q4_K_x8_scales(const block_q4_Kx16& b, int h) {
  Q4KSb8 s;
  s.d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(b.d + 8 * h)));
  s.dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(b.dmin + 8 * h)));
  const __m256i w0 = _mm256_loadu_si256((const __m256i*)(b.scales[0] + 8 * h)),
                w1 = _mm256_loadu_si256((const __m256i*)(b.scales[1] + 8 * h)),
                w2 = _mm256_loadu_si256((const __m256i*)(b.scales[2] + 8 * h));
  const __m256i c3f = _mm256_set1_epi32(0x3F3F3F3F), c0f = _mm256_set1_epi32(0x0F0F0F0F),
                c30 = _mm256_set1_epi32(0x30303030), c00ff = _mm256_set1_epi32(0x00FF00FF);
  const __m256i slo = _mm256_and_si256(w0, c3f);  // sc_0..3 in bytes 0..3 of each lane, sc_4..7 in shi
  const __m256i shi = _mm256_or_si256(_mm256_and_si256(w2, c0f), _mm256_and_si256(_mm256_srli_epi32(w0, 2), c30));
  for (int j = 0; j < 4; j++) {
    s.sp[j] = scale_pair(slo, j);
    s.sp[4 + j] = scale_pair(shi, j);
  }
  const __m256i mlo = _mm256_and_si256(w1, c3f);
  const __m256i mhi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), c0f), _mm256_and_si256(_mm256_srli_epi32(w1, 2), c30));
  s.mp[0] = _mm256_and_si256(mlo, c00ff); s.mp[1] = _mm256_and_si256(_mm256_srli_epi32(mlo, 8), c00ff);
  s.mp[2] = _mm256_and_si256(mhi, c00ff); s.mp[3] = _mm256_and_si256(_mm256_srli_epi32(mhi, 8), c00ff);
  return s;
}
// A token's sub-block sums s_j (two bsums each, |s_j| <= 32 * 128 fits int16) as the broadcast int16 pairs the
// (min, min) pairs take: (s0, s2), (s1, s3), (s4, s6), (s5, s7). Made once per token and super-block for both
// halves, with vector ops (the scalar pairs it replaced were a fifth of an 8-token matmul's time on a Zen 3).
struct Q8KPairs {
  __m256i p[4];
  __m256 d;
};
static inline Q8KPairs q8_K_pairs(const block_q8_K* y) {
  const __m256i s = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)y->bsums), _mm256_set1_epi16(1));
  const __m256i s16 = _mm256_packs_epi32(s, s);  // per 128-bit lane: s0 s1 s2 s3 s0 s1 s2 s3 (s4.. in the high lane)
  const __m256i q = _mm256_shuffle_epi8(s16, _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5, 2, 3, 6, 7,
                                                              0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5, 2, 3, 6, 7));
  Q8KPairs r;
  r.p[0] = _mm256_permutevar8x32_epi32(q, _mm256_set1_epi32(0));
  r.p[1] = _mm256_permutevar8x32_epi32(q, _mm256_set1_epi32(1));
  r.p[2] = _mm256_permutevar8x32_epi32(q, _mm256_set1_epi32(4));
  r.p[3] = _mm256_permutevar8x32_epi32(q, _mm256_set1_epi32(5));
  r.d = _mm256_set1_ps(y->d);
  return r;
}
// Super-block i of k token rows (vy, by bytes apart): their blocks y[t] and sums yp[t]
static inline void q8_K_tokens(const void* vy, size_t by, int k, int i, const block_q8_K** y, Q8KPairs* yp) {
  for (int t = 0; t < k; t++) {
    y[t] = (const block_q8_K*)((const uint8_t*)vy + t * by) + i;
    yp[t] = q8_K_pairs(y[t]);
  }
}
static inline __m256i bcast4_8(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
// A token's super-block total: imin = mins . bsums (madd on the (min, min) pairs), then dot_q4_K_rp's
// fma(is, d * y.d, acc), fma(imin, dmin * y.d, accm) per lane
static inline void q4_K_x8_finish(const Q4KSb8& s, const Q8KPairs& y, __m256i is, __m256& acc, __m256& accm) {
  __m256i im = _mm256_madd_epi16(s.mp[0], y.p[0]);
  im = _mm256_add_epi32(im, _mm256_madd_epi16(s.mp[1], y.p[1]));
  im = _mm256_add_epi32(im, _mm256_madd_epi16(s.mp[2], y.p[2]));
  im = _mm256_add_epi32(im, _mm256_madd_epi16(s.mp[3], y.p[3]));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(s.d, y.d), acc);
  accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(im), _mm256_mul_ps(s.dm, y.d), accm);
}

// Halves h0 .. h0 + NH - 1 of super-block b against KT tokens (y[t]: their blocks of this super-block, yp[t]:
// their sums, acc[h][t0 + t]: their accumulators, s[hh]: half h0 + hh's scales). NH = 2 (KT <= 2: decode and
// 2-token steps) takes each 64-byte line of weights whole: the halves one after the other read every line twice,
// and ran 15 % slower from memory on a Zen 2. NH = 1 leaves the registers to 4 tokens' sums.
template <int NH, int KT>
static inline void q4_K_x8_pass(const block_q4_Kx16& b, int h0, const Q4KSb8* s, const block_q8_K* const* y,
                                const Q8KPairs* yp, int t0,
                                __m256 (*acc)[kMaxRowsK], __m256 (*accm)[kMaxRowsK]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i is[NH][KT];
  for (int hh = 0; hh < NH; hh++)
    for (int t = 0; t < KT; t++) is[hh][t] = _mm256_setzero_si256();
  for (int p = 0; p < 4; p++) {  // sub-blocks 2p (low nibbles) and 2p + 1 (high)
    __m256i al[NH][KT], ah[NH][KT];
    for (int hh = 0; hh < NH; hh++)
      for (int t = 0; t < KT; t++) al[hh][t] = ah[hh][t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++)
      for (int hh = 0; hh < NH; hh++) {
        const __m256i v = _mm256_loadu_si256((const __m256i*)(b.qs[8 * p + c] + 8 * (h0 + hh)));
        const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        for (int t = 0; t < KT; t++) {
          al[hh][t] = _mm256_add_epi16(al[hh][t], _mm256_maddubs_epi16(lo, bcast4_8(y[t]->qs + 64 * p + 4 * c)));
          ah[hh][t] = _mm256_add_epi16(ah[hh][t], _mm256_maddubs_epi16(hi, bcast4_8(y[t]->qs + 64 * p + 32 + 4 * c)));
          keep_chain(al[hh][t]);  // (quants_simd.inc.h) else every product went to the stack
          keep_chain(ah[hh][t]);
        }
      }
    for (int hh = 0; hh < NH; hh++) {
      const __m256i se = s[hh].sp[2 * p], so = s[hh].sp[2 * p + 1];
      for (int t = 0; t < KT; t++)
        is[hh][t] = _mm256_add_epi32(is[hh][t], _mm256_add_epi32(_mm256_madd_epi16(al[hh][t], se), _mm256_madd_epi16(ah[hh][t], so)));
    }
  }
  for (int hh = 0; hh < NH; hh++)
    for (int t = 0; t < KT; t++) q4_K_x8_finish(s[hh], yp[t], is[hh][t], acc[h0 + hh][t0 + t], accm[h0 + hh][t0 + t]);
}

// x16_tile_fn: the group's 16 rows against k <= 8 tokens, C[t * ldc + r]. Hint: the software prefetch of the
// stream X16_PF_AVX2 bytes ahead (< 0: none), as the AVX-512 group kernels do (cpu/prefetch_tune.h picks).
#ifndef X16_PF_AVX2
#define X16_PF_AVX2 9216
#endif
template <int Hint>
static void x16_q4_K_avx2(int n, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc) {
  const block_q4_Kx16* g = (const block_q4_Kx16*)vg;
  __m256 acc[2][kMaxRowsK], accm[2][kMaxRowsK];
  for (int h = 0; h < 2; h++)
    for (int t = 0; t < k; t++) acc[h][t] = accm[h][t] = _mm256_setzero_ps();
  for (int i = 0; i < n / QK_K; i++) {
    if constexpr (Hint >= 0)
      for (size_t l = 0; l < sizeof(block_q4_Kx16) / 64; l++) _mm_prefetch((const char*)(g + i) + X16_PF_AVX2 + 64 * l, (_mm_hint)Hint);
    const block_q8_K* y[kMaxRowsK];
    Q8KPairs yp[kMaxRowsK];
    q8_K_tokens(vy, by, k, i, y, yp);
    if (k <= 2) {  // whole lines
      const Q4KSb8 s[2] = {q4_K_x8_scales(g[i], 0), q4_K_x8_scales(g[i], 1)};
      if (k == 1) q4_K_x8_pass<2, 1>(g[i], 0, s, y, yp, 0, acc, accm); else q4_K_x8_pass<2, 2>(g[i], 0, s, y, yp, 0, acc, accm);
      continue;
    }
    for (int h = 0; h < 2; h++) {
      const Q4KSb8 s = q4_K_x8_scales(g[i], h);
      int t = 0;
      for (; t + 4 <= k; t += 4) q4_K_x8_pass<1, 4>(g[i], h, &s, y + t, yp + t, t, acc, accm);
      switch (k - t) {
        case 1: q4_K_x8_pass<1, 1>(g[i], h, &s, y + t, yp + t, t, acc, accm); break;
        case 2: q4_K_x8_pass<1, 2>(g[i], h, &s, y + t, yp + t, t, acc, accm); break;
        case 3: q4_K_x8_pass<1, 3>(g[i], h, &s, y + t, yp + t, t, acc, accm); break;
        default: break;
      }
    }
  }
  for (int h = 0; h < 2; h++)
    for (int t = 0; t < k; t++) _mm256_storeu_ps(C + t * ldc + 8 * h, _mm256_sub_ps(acc[h][t], accm[h][t]));
}

// kX16Streams groups side by side for up to 4 tokens (x16_streams_fn, the kX16PfStreams mode): each
// super-block index is read in two places at once, so the hardware prefetcher follows two streams per thread
// (the AVX-512 level's finding too). Each group and token is x16_q4_K_avx2's chain: the same bits.
template <int KT>
static void x16_q4_K_avx2_g(int n, const uint8_t* g, size_t gstride, const uint8_t* vy, size_t by, float* C, size_t ldc) {
  constexpr int G = kX16Streams;
  __m256 acc[G][2][kMaxRowsK], accm[G][2][kMaxRowsK];
  for (int j = 0; j < G; j++)
    for (int h = 0; h < 2; h++)
      for (int t = 0; t < KT; t++) acc[j][h][t] = accm[j][h][t] = _mm256_setzero_ps();
  for (int i = 0; i < n / QK_K; i++) {
    const block_q8_K* y[KT];
    Q8KPairs yp[KT];
    q8_K_tokens(vy, by, KT, i, y, yp);
    for (int j = 0; j < G; j++) {
      const block_q4_Kx16& b = ((const block_q4_Kx16*)(g + j * gstride))[i];
      if constexpr (KT <= 2) {
        const Q4KSb8 s[2] = {q4_K_x8_scales(b, 0), q4_K_x8_scales(b, 1)};
        q4_K_x8_pass<2, KT>(b, 0, s, y, yp, 0, acc[j], accm[j]);
      } else {
        for (int h = 0; h < 2; h++) {
          const Q4KSb8 s = q4_K_x8_scales(b, h);
          q4_K_x8_pass<1, KT>(b, h, &s, y, yp, 0, acc[j], accm[j]);
        }
      }
    }
  }
  for (int j = 0; j < G; j++)
    for (int h = 0; h < 2; h++)
      for (int t = 0; t < KT; t++) _mm256_storeu_ps(C + t * ldc + 16 * j + 8 * h, _mm256_sub_ps(acc[j][h][t], accm[j][h][t]));
}
static void x16_q4_K_avx2_streams(int n, const void* vg, size_t gstride, const void* vy, size_t by, int k, float* C,
                                  size_t ldc) {
  const uint8_t *g = (const uint8_t*)vg, *y = (const uint8_t*)vy;
  switch (k) {
    case 1: x16_q4_K_avx2_g<1>(n, g, gstride, y, by, C, ldc); break;
    case 2: x16_q4_K_avx2_g<2>(n, g, gstride, y, by, C, ldc); break;
    case 3: x16_q4_K_avx2_g<3>(n, g, gstride, y, by, C, ldc); break;
    default: x16_q4_K_avx2_g<4>(n, g, gstride, y, by, C, ldc); break;
  }
}

// The default reads without software prefetch: on a Zen 2 (bench_matmul, B = 1, 178 MB Q4_K, -t 1) every
// prefetch mode and distance tried (1-16 super-blocks ahead, T0 / T1 / NTA) was 10-30 % slower than none;
// cpu/prefetch_tune.h still measures the modes on the machine at hand and keeps the fastest.
// A group kernel's read modes (none also stands in for streams where the type has no x16_streams); the default
// reads without prefetch.
static void install_x16_modes(type_traits& q, x16_tile_fn none, x16_tile_fn l1, x16_tile_fn l2) {
  q.x16_tile_pf[kX16PfNone] = q.x16_tile_pf[kX16PfStreams] = none;
  q.x16_tile_pf[kX16PfL1] = l1;
  q.x16_tile_pf[kX16PfL2] = l2;
  q.x16_tile = none;
  q.x16_simd = true;
}
static void install_x16_kernels(type_traits* t) {
  type_traits& q = t[GGML_TYPE_Q4_K];
  install_x16_modes(q, x16_q4_K_avx2<-1>, x16_q4_K_avx2<_MM_HINT_T0>, x16_q4_K_avx2<_MM_HINT_T1>);
  q.x16_streams = x16_q4_K_avx2_streams;
  q.x16_streams_k = 4;
}
