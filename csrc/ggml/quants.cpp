// Scalar reference dequantize for every supported block type (quantizers: quants_quantize.cpp).
// This file is the spec: bit-exact with ggml's dequantize_row_* and gguf-py's numpy dequantize (same
// float operations in the same order, no FMA: this file gets no ISA flags).
#include "ggml/quants.h"
#include "ggml/quants_ref_util.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

namespace pyllm {

alignas(16) const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                               1,    13,   25,  38,  53,  69,  89,  113};

namespace ref {


// ---------------------------------------------------------------- dequantize

void dequantize_row_q4_0(const void* vx, float* y, int64_t n) {
  const block_q4_0* x = (const block_q4_0*)vx;
  for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < 16; j++) {
      y[j] = (float)((x[i].qs[j] & 0xF) - 8) * d;
      y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_1(const void* vx, float* y, int64_t n) {
  const block_q4_1* x = (const block_q4_1*)vx;
  for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
    const float d = h2f(x[i].d), m = h2f(x[i].m);
    for (int j = 0; j < 16; j++) {
      y[j] = (float)(x[i].qs[j] & 0xF) * d + m;
      y[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
    }
  }
}


void dequantize_row_q5_0(const void* vx, float* y, int64_t n) {
  const block_q5_0* x = (const block_q5_0*)vx;
  for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
    const float d = h2f(x[i].d);
    const uint32_t qh = load_u32(x[i].qh);
    for (int j = 0; j < 16; j++) {
      const int q0 = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = (float)(q0 - 16) * d;
      y[j + 16] = (float)(q1 - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const void* vx, float* y, int64_t n) {
  const block_q5_1* x = (const block_q5_1*)vx;
  for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
    const float d = h2f(x[i].d), m = h2f(x[i].m);
    const uint32_t qh = load_u32(x[i].qh);
    for (int j = 0; j < 16; j++) {
      const int q0 = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = (float)q0 * d + m;
      y[j + 16] = (float)q1 * d + m;
    }
  }
}

void dequantize_row_q8_0(const void* vx, float* y, int64_t n) {
  const block_q8_0* x = (const block_q8_0*)vx;
  for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < QK8_0; j++) y[j] = (float)x[i].qs[j] * d;
  }
}

void dequantize_row_q8_1(const void* vx, float* y, int64_t n) {
  const block_q8_1* x = (const block_q8_1*)vx;
  for (int64_t i = 0; i < n / QK8_1; i++, y += QK8_1) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < QK8_1; j++) y[j] = (float)x[i].qs[j] * d;
  }
}

// Q2_K/Q3_K element e of a super-block: half h = e/128, within it shift group g = (e%128)/32 and
// lane l = e%32; its 2 bits are (qs[32h + l] >> 2g) & 3; the scale is sub-block e/16.
void dequantize_row_q2_K(const void* vx, float* y, int64_t n) {
  const block_q2_K* x = (const block_q2_K*)vx;
  for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
    const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
    for (int e = 0; e < QK_K; e++) {
      const int h = e / 128, g = (e % 128) / 32, l = e % 32;
      const uint8_t sc = x[i].scales[e / 16];
      const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
      const int q = (x[i].qs[32 * h + l] >> (2 * g)) & 3;
      y[e] = dl * (float)q - ml;
    }
  }
}

void dequantize_row_q3_K(const void* vx, float* y, int64_t n) {
  const block_q3_K* x = (const block_q3_K*)vx;
  for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
    const float d = h2f(x[i].d);
    for (int e = 0; e < QK_K; e++) {
      const int h = e / 128, g = (e % 128) / 32, l = e % 32;
      const float dl = d * (float)(q3k_scale(x[i].scales, e / 16) - 32);
      const int lo = (x[i].qs[32 * h + l] >> (2 * g)) & 3;
      const int hbit = (x[i].hmask[l] >> (4 * h + g)) & 1;
      y[e] = dl * (float)(lo - (hbit ? 0 : 4));
    }
  }
}

// Q4_K/Q5_K element e: chunk c = e/64 uses qs[32c .. 32c+31]; low nibbles are elements 64c + l,
// high nibbles 64c + 32 + l; sub-block (scale/min index) is e/32; Q5_K's 5th bit is qh[l] bit e/32.
void dequantize_row_q4_K(const void* vx, float* y, int64_t n) {
  const block_q4_K* x = (const block_q4_K*)vx;
  for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
    const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
    for (int j = 0; j < 8; j++) {
      uint8_t sc, m;
      get_scale_min_k4(j, x[i].scales, &sc, &m);
      const float d1 = d * (float)sc, m1 = dmin * (float)m;
      const uint8_t* q = x[i].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; l++) y[32 * j + l] = d1 * (float)((q[l] >> shift) & 0xF) - m1;
    }
  }
}

void dequantize_row_q5_K(const void* vx, float* y, int64_t n) {
  const block_q5_K* x = (const block_q5_K*)vx;
  for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
    const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
    for (int j = 0; j < 8; j++) {
      uint8_t sc, m;
      get_scale_min_k4(j, x[i].scales, &sc, &m);
      const float d1 = d * (float)sc, m1 = dmin * (float)m;
      const uint8_t* q = x[i].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; l++) {
        const int v = ((q[l] >> shift) & 0xF) | (((x[i].qh[l] >> j) & 1) << 4);
        y[32 * j + l] = d1 * (float)v - m1;
      }
    }
  }
}

// Q6_K element e: half h = e/128 (ql += 64h, qh += 32h), quarter g = (e%128)/32, lane l = e%32:
// low 4 bits from ql[l + 32*(g&1)] (nibble g>>1), high 2 bits (qh[l] >> 2g) & 3; scale e/16.
void dequantize_row_q6_K(const void* vx, float* y, int64_t n) {
  const block_q6_K* x = (const block_q6_K*)vx;
  for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
    const float d = h2f(x[i].d);
    for (int e = 0; e < QK_K; e++) {
      const int h = e / 128, g = (e % 128) / 32, l = e % 32;
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      const int lo = (ql[l + 32 * (g & 1)] >> (4 * (g >> 1))) & 0xF;
      const int hi = (qh[l] >> (2 * g)) & 3;
      const float dl = d * (float)x[i].scales[e / 16];
      y[e] = dl * (float)((lo | (hi << 4)) - 32);
    }
  }
}

void dequantize_row_q8_K(const void* vx, float* y, int64_t n) {
  const block_q8_K* x = (const block_q8_K*)vx;
  for (int64_t i = 0; i < n / QK_K; i++, y += QK_K)
    for (int j = 0; j < QK_K; j++) y[j] = x[i].d * (float)x[i].qs[j];
}

void dequantize_row_iq4_nl(const void* vx, float* y, int64_t n) {
  const block_iq4_nl* x = (const block_iq4_nl*)vx;
  for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < 16; j++) {
      y[j] = d * (float)kvalues_iq4nl[x[i].qs[j] & 0xF];
      y[j + 16] = d * (float)kvalues_iq4nl[x[i].qs[j] >> 4];
    }
  }
}

void dequantize_row_iq4_xs(const void* vx, float* y, int64_t n) {
  const block_iq4_xs* x = (const block_iq4_xs*)vx;
  for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
    const float d = h2f(x[i].d);
    for (int ib = 0; ib < 8; ib++) {
      const float dl = d * (float)(iq4xs_scale(x[i], ib) - 32);
      const uint8_t* q = x[i].qs + 16 * ib;
      for (int j = 0; j < 16; j++) {
        y[32 * ib + j] = dl * (float)kvalues_iq4nl[q[j] & 0xF];
        y[32 * ib + 16 + j] = dl * (float)kvalues_iq4nl[q[j] >> 4];
      }
    }
  }
}

}  // namespace ref
}  // namespace pyllm
