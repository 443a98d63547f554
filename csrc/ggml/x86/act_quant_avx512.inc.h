// Activation quantizers at the AVX-512 level (included by quants_avx512.cpp, inside namespace
// x86_avx512). Each produces the scalar reference's bytes exactly: max and abs are exact, x * id is the
// same single multiply, and cvtps_epi32 rounds to nearest even as nearbyint / nearest_int do under the
// default rounding mode; the fp16 scales go through the same fp32_to_fp16.

static inline float block_amax32(const float* x, __m512* v0, __m512* v1) {
  *v0 = _mm512_loadu_ps(x); *v1 = _mm512_loadu_ps(x + 16);
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(*v0), _mm512_abs_ps(*v1)));
}
// 32 rounded values x * id as bytes; returns their sum (for Q8_1's s)
static inline int round_store32(__m512 v0, __m512 v1, float id, int8_t* qs) {
  const __m512 s = _mm512_set1_ps(id);
  const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, s)), i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, s));
  _mm_storeu_si128((__m128i*)qs, _mm512_cvtsepi32_epi8(i0));
  _mm_storeu_si128((__m128i*)(qs + 16), _mm512_cvtsepi32_epi8(i1));
  return _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
}

static void quantize_q8_0_act(const float* x, void* vy, int64_t n) {  // = ref quantize_row_q8_0_act
  block_q8_0* y = (block_q8_0*)vy;
  for (int64_t i = 0; i < n / 32; i++, x += 32) {
    __m512 v0, v1;
    const float amax = block_amax32(x, &v0, &v1);
    y[i].d = fp32_to_fp16(amax / 127.f);
    round_store32(v0, v1, amax != 0.0f ? 127.f / amax : 0.0f, y[i].qs);
  }
}

static void quantize_q8_1_act(const float* x, void* vy, int64_t n) {  // = ref quantize_row_q8_1_act
  block_q8_1* y = (block_q8_1*)vy;
  for (int64_t i = 0; i < n / 32; i++, x += 32) {
    __m512 v0, v1;
    const float amax = block_amax32(x, &v0, &v1);
    const float d = amax / 127.f;
    y[i].d = fp32_to_fp16(d);
    const int sum = round_store32(v0, v1, amax != 0.0f ? 127.f / amax : 0.0f, y[i].qs);
    y[i].s = fp32_to_fp16((float)sum * d);
  }
}

static void quantize_q8_K(const float* x, void* vy, int64_t n) {  // = ref quantize_row_q8_K
  block_q8_K* y = (block_q8_K*)vy;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    __m512 v[16];
    __m512 m = _mm512_setzero_ps();
    for (int k = 0; k < 16; k++) { v[k] = _mm512_loadu_ps(x + 16 * k); m = _mm512_max_ps(m, _mm512_abs_ps(v[k])); }
    const float amax = _mm512_reduce_max_ps(m);
    if (!amax) { std::memset(&y[i], 0, sizeof(block_q8_K)); continue; }
    float max = 0;  // the first element of largest magnitude, with its sign (the reference's strict >)
    for (int k = 0; k < 16; k++) {
      const __mmask16 hit = _mm512_cmpeq_ps_mask(_mm512_abs_ps(v[k]), _mm512_set1_ps(amax));
      if (hit) { max = x[16 * k + __builtin_ctz(hit)]; break; }
    }
    const float iscale = -127.f / max;
    const __m512 s = _mm512_set1_ps(iscale);
    for (int k = 0; k < 16; k++) {  // 16 values = one bsums group
      const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v[k], s)), _mm512_set1_epi32(127));
      _mm_storeu_si128((__m128i*)(y[i].qs + 16 * k), _mm512_cvtsepi32_epi8(q));
      y[i].bsums[k] = (int16_t)_mm512_reduce_add_epi32(q);
    }
    y[i].d = 1 / iscale;
  }
}

static void install_act_quantizers(type_traits* t) {
  t[GGML_TYPE_Q8_0].from_float_act = quantize_q8_0_act;
  t[GGML_TYPE_Q8_1].from_float_act = quantize_q8_1_act;
  t[GGML_TYPE_Q8_K].from_float = quantize_q8_K;
  t[GGML_TYPE_Q8_K].from_float_act = quantize_q8_K;
}
