// Scalar reference dot products (the spec for the SIMD kernels). Integer products are summed
// exactly per block (or per super-block); only the per-block float scaling is rounded, in block
// order. SIMD versions may reorder the float part only.
#include "ggml/quants.h"
#include "ggml/fp16.h"

#include <cstring>

namespace pyllm {
namespace ref {

static inline float h2f(half h) { return fp16_to_fp32(h); }

void vec_dot_q8_0_q8_0(int n, float* s, const void* vx, const void* vy) {
  const block_q8_0* x = (const block_q8_0*)vx;
  const block_q8_0* y = (const block_q8_0*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK8_0; i++) {
    int sumi = 0;
    for (int j = 0; j < QK8_0; j++) sumi += x[i].qs[j] * y[i].qs[j];
    sumf += (float)sumi * (h2f(x[i].d) * h2f(y[i].d));
  }
  *s = sumf;
}

void vec_dot_q4_0_q8_0(int n, float* s, const void* vx, const void* vy) {
  const block_q4_0* x = (const block_q4_0*)vx;
  const block_q8_0* y = (const block_q8_0*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK4_0; i++) {
    int sumi = 0;
    for (int j = 0; j < 16; j++)
      sumi += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
    sumf += (float)sumi * (h2f(x[i].d) * h2f(y[i].d));
  }
  *s = sumf;
}

void vec_dot_iq4_nl_q8_0(int n, float* s, const void* vx, const void* vy) {
  const block_iq4_nl* x = (const block_iq4_nl*)vx;
  const block_q8_0* y = (const block_q8_0*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK4_NL; i++) {
    int sumi = 0;
    for (int j = 0; j < 16; j++)
      sumi += kvalues_iq4nl[x[i].qs[j] & 0xF] * y[i].qs[j] + kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + 16];
    sumf += (float)sumi * (h2f(x[i].d) * h2f(y[i].d));
  }
  *s = sumf;
}

void vec_dot_q4_1_q8_1(int n, float* s, const void* vx, const void* vy) {
  const block_q4_1* x = (const block_q4_1*)vx;
  const block_q8_1* y = (const block_q8_1*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK4_1; i++) {
    int sumi = 0;
    for (int j = 0; j < 16; j++)
      sumi += (x[i].qs[j] & 0xF) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
    sumf += (float)sumi * (h2f(x[i].d) * h2f(y[i].d)) + h2f(x[i].m) * h2f(y[i].s);
  }
  *s = sumf;
}

static inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

void vec_dot_q5_0_q8_0(int n, float* s, const void* vx, const void* vy) {
  const block_q5_0* x = (const block_q5_0*)vx;
  const block_q8_0* y = (const block_q8_0*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK5_0; i++) {
    const uint32_t qh = load_u32(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
      const int q0 = ((x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
      const int q1 = ((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
    }
    sumf += (float)sumi * (h2f(x[i].d) * h2f(y[i].d));
  }
  *s = sumf;
}

void vec_dot_q5_1_q8_1(int n, float* s, const void* vx, const void* vy) {
  const block_q5_1* x = (const block_q5_1*)vx;
  const block_q8_1* y = (const block_q8_1*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK5_1; i++) {
    const uint32_t qh = load_u32(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
      const int q0 = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
    }
    sumf += (float)sumi * (h2f(x[i].d) * h2f(y[i].d)) + h2f(x[i].m) * h2f(y[i].s);
  }
  *s = sumf;
}

// ---- K-quants against Q8_K: per super-block, integer sums of scale * sum(q*y); mins through bsums.

void vec_dot_q2_K_q8_K(int n, float* s, const void* vx, const void* vy) {
  const block_q2_K* x = (const block_q2_K*)vx;
  const block_q8_K* y = (const block_q8_K*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK_K; i++) {
    int isum = 0, msum = 0;
    for (int e = 0; e < QK_K; e += 16) {
      const uint8_t sc = x[i].scales[e / 16];
      int si = 0;
      for (int k = e; k < e + 16; k++) {
        const int h = k / 128, g = (k % 128) / 32, l = k % 32;
        si += ((x[i].qs[32 * h + l] >> (2 * g)) & 3) * y[i].qs[k];
      }
      isum += (sc & 0xF) * si;
      msum += (sc >> 4) * y[i].bsums[e / 16];
    }
    const float d = y[i].d * h2f(x[i].d), dmin = y[i].d * h2f(x[i].dmin);
    sumf += d * (float)isum - dmin * (float)msum;
  }
  *s = sumf;
}

void vec_dot_q3_K_q8_K(int n, float* s, const void* vx, const void* vy) {
  const block_q3_K* x = (const block_q3_K*)vx;
  const block_q8_K* y = (const block_q8_K*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK_K; i++) {
    int isum = 0;
    for (int e = 0; e < QK_K; e += 16) {
      int si = 0;
      for (int k = e; k < e + 16; k++) {
        const int h = k / 128, g = (k % 128) / 32, l = k % 32;
        const int lo = (x[i].qs[32 * h + l] >> (2 * g)) & 3;
        const int hb = (x[i].hmask[l] >> (4 * h + g)) & 1;
        si += (lo - (hb ? 0 : 4)) * y[i].qs[k];
      }
      isum += (q3k_scale(x[i].scales, e / 16) - 32) * si;
    }
    sumf += (y[i].d * h2f(x[i].d)) * (float)isum;
  }
  *s = sumf;
}

void vec_dot_q4_K_q8_K(int n, float* s, const void* vx, const void* vy) {
  const block_q4_K* x = (const block_q4_K*)vx;
  const block_q8_K* y = (const block_q8_K*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK_K; i++) {
    int isum = 0, msum = 0;
    for (int j = 0; j < 8; j++) {
      uint8_t sc, m;
      get_scale_min_k4(j, x[i].scales, &sc, &m);
      const uint8_t* q = x[i].qs + 32 * (j / 2);
      const int8_t* q8 = y[i].qs + 32 * j;
      int si = 0;
      for (int l = 0; l < 32; l++) si += ((q[l] >> (4 * (j % 2))) & 0xF) * q8[l];
      isum += sc * si;
      msum += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    const float d = y[i].d * h2f(x[i].d), dmin = y[i].d * h2f(x[i].dmin);
    sumf += d * (float)isum - dmin * (float)msum;
  }
  *s = sumf;
}

void vec_dot_q5_K_q8_K(int n, float* s, const void* vx, const void* vy) {
  const block_q5_K* x = (const block_q5_K*)vx;
  const block_q8_K* y = (const block_q8_K*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK_K; i++) {
    int isum = 0, msum = 0;
    for (int j = 0; j < 8; j++) {
      uint8_t sc, m;
      get_scale_min_k4(j, x[i].scales, &sc, &m);
      const uint8_t* q = x[i].qs + 32 * (j / 2);
      const int8_t* q8 = y[i].qs + 32 * j;
      int si = 0;
      for (int l = 0; l < 32; l++)
        si += (((q[l] >> (4 * (j % 2))) & 0xF) | (((x[i].qh[l] >> j) & 1) << 4)) * q8[l];
      isum += sc * si;
      msum += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    const float d = y[i].d * h2f(x[i].d), dmin = y[i].d * h2f(x[i].dmin);
    sumf += d * (float)isum - dmin * (float)msum;
  }
  *s = sumf;
}

void vec_dot_q6_K_q8_K(int n, float* s, const void* vx, const void* vy) {
  const block_q6_K* x = (const block_q6_K*)vx;
  const block_q8_K* y = (const block_q8_K*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK_K; i++) {
    int isum = 0;
    for (int e = 0; e < QK_K; e += 16) {
      int si = 0;
      for (int k = e; k < e + 16; k++) {
        const int h = k / 128, g = (k % 128) / 32, l = k % 32;
        const uint8_t* ql = x[i].ql + 64 * h;
        const uint8_t* qh = x[i].qh + 32 * h;
        const int lo = (ql[l + 32 * (g & 1)] >> (4 * (g >> 1))) & 0xF;
        const int hi = (qh[l] >> (2 * g)) & 3;
        si += ((lo | (hi << 4)) - 32) * y[i].qs[k];
      }
      isum += x[i].scales[e / 16] * si;
    }
    sumf += (y[i].d * h2f(x[i].d)) * (float)isum;
  }
  *s = sumf;
}

void vec_dot_iq4_xs_q8_K(int n, float* s, const void* vx, const void* vy) {
  const block_iq4_xs* x = (const block_iq4_xs*)vx;
  const block_q8_K* y = (const block_q8_K*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK_K; i++) {
    int isum = 0;
    for (int ib = 0; ib < 8; ib++) {
      const uint8_t* q = x[i].qs + 16 * ib;
      const int8_t* q8 = y[i].qs + 32 * ib;
      int si = 0;
      for (int j = 0; j < 16; j++)
        si += kvalues_iq4nl[q[j] & 0xF] * q8[j] + kvalues_iq4nl[q[j] >> 4] * q8[j + 16];
      isum += (iq4xs_scale(x[i], ib) - 32) * si;
    }
    sumf += (y[i].d * h2f(x[i].d)) * (float)isum;
  }
  *s = sumf;
}

}  // namespace ref
}  // namespace pyllm
