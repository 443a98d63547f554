// Scalar reference for the IQ lattice types and MXFP4: dequantize (bit-exact with ggml's
// dequantize_row_* and gguf-py: same float operations in the same order, no FMA) and vec_dot
// (exact integer sums per 32 elements, one float step per super-block). This file is the spec.
#include "ggml/quants_iq.h"
#include "ggml/fp16.h"

#include <cstring>

namespace pyllm {

alignas(16) const int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

namespace ref {

static inline float h2f(half h) { return fp16_to_fp32(h); }
static inline uint32_t u32_at(const void* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
static inline int grid_byte(uint64_t g, int j) { return (int)((g >> (8 * j)) & 0xFF); }
static inline int sgn(uint8_t signs, int j) { return (signs >> j) & 1 ? -1 : 1; }

// ---- the decoded form shared by dequantize and vec_dot: per 32-element group ib, the signed
// integer levels q[32] (value = scale(ib, half) * q) and the two 16-element scales.
struct Group { int q[32]; int sc[2]; };

static void decode_iq2_xxs(const block_iq2_xxs& b, int ib, Group& g) {
  const uint32_t grid = u32_at(b.qs + 4 * ib), aux = u32_at(b.qs + 4 * ib + 2);
  for (int l = 0; l < 4; l++) {
    const uint64_t gr = iq2xxs_grid[(grid >> (8 * l)) & 0xFF];
    const uint8_t s = ksigns_iq2xs[(aux >> (7 * l)) & 127];
    for (int j = 0; j < 8; j++) g.q[8 * l + j] = grid_byte(gr, j) * sgn(s, j);
  }
  g.sc[0] = g.sc[1] = (int)(aux >> 28);
}
static void decode_iq2_xs(const block_iq2_xs& b, int ib, Group& g) {
  for (int l = 0; l < 4; l++) {
    const uint16_t v = b.qs[4 * ib + l];
    const uint64_t gr = iq2xs_grid[v & 511];
    const uint8_t s = ksigns_iq2xs[v >> 9];
    for (int j = 0; j < 8; j++) g.q[8 * l + j] = grid_byte(gr, j) * sgn(s, j);
  }
  g.sc[0] = b.scales[ib] & 0xF; g.sc[1] = b.scales[ib] >> 4;
}
static void decode_iq2_s(const block_iq2_s& b, int ib, Group& g) {
  const uint8_t* signs = b.qs + QK_K / 8;
  for (int l = 0; l < 4; l++) {
    const uint64_t gr = iq2s_grid[b.qs[4 * ib + l] | ((b.qh[ib] << (8 - 2 * l)) & 0x300)];
    for (int j = 0; j < 8; j++) g.q[8 * l + j] = grid_byte(gr, j) * sgn(signs[4 * ib + l], j);
  }
  g.sc[0] = b.scales[ib] & 0xF; g.sc[1] = b.scales[ib] >> 4;
}
static void decode_iq3_xxs(const block_iq3_xxs& b, int ib, Group& g) {
  const uint8_t* q3 = b.qs + 8 * ib;
  const uint32_t aux = u32_at(b.qs + QK_K / 4 + 4 * ib);
  for (int l = 0; l < 4; l++) {
    const uint8_t s = ksigns_iq2xs[(aux >> (7 * l)) & 127];
    const uint32_t g1 = iq3xxs_grid[q3[2 * l]], g2 = iq3xxs_grid[q3[2 * l + 1]];
    for (int j = 0; j < 4; j++) {
      g.q[8 * l + j] = grid_byte(g1, j) * sgn(s, j);
      g.q[8 * l + 4 + j] = grid_byte(g2, j) * sgn(s, j + 4);
    }
  }
  g.sc[0] = g.sc[1] = (int)(aux >> 28);
}
static void decode_iq3_s(const block_iq3_s& b, int ib, Group& g) {
  const uint8_t* qs = b.qs + 8 * ib;
  const uint8_t qh = b.qh[ib];
  for (int l = 0; l < 4; l++) {
    const uint32_t g1 = iq3s_grid[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)];
    const uint32_t g2 = iq3s_grid[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)];
    const uint8_t s = b.signs[4 * ib + l];
    for (int j = 0; j < 4; j++) {
      g.q[8 * l + j] = grid_byte(g1, j) * sgn(s, j);
      g.q[8 * l + 4 + j] = grid_byte(g2, j) * sgn(s, j + 4);
    }
  }
  g.sc[0] = g.sc[1] = (b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
}
// IQ1: q = grid value (-1, 0, 1); the delta (+-1/8 per 32 or 16 elements) is returned separately.
static void decode_iq1_s(const block_iq1_s& b, int ib, Group& g, int dsign[2]) {
  const uint16_t qh = b.qh[ib];
  for (int l = 0; l < 4; l++) {
    const uint64_t gr = iq1s_grid[b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)];
    for (int j = 0; j < 8; j++) g.q[8 * l + j] = (int8_t)grid_byte(gr, j);
  }
  g.sc[0] = g.sc[1] = (qh >> 12) & 7;
  dsign[0] = dsign[1] = qh & 0x8000 ? -1 : 1;
}
static void decode_iq1_m(const block_iq1_m& b, int ib, Group& g, int dsign[4]) {
  const uint8_t* qh = b.qh + 2 * ib;
  for (int l = 0; l < 4; l++) {
    const int h = qh[l / 2] >> (4 * (l % 2));
    const uint64_t gr = iq1s_grid[b.qs[4 * ib + l] | ((h & 7) << 8)];
    for (int j = 0; j < 8; j++) g.q[8 * l + j] = (int8_t)grid_byte(gr, j);
    dsign[l] = h & 8 ? -1 : 1;
  }
  g.sc[0] = iq1m_scale(b, 2 * ib); g.sc[1] = iq1m_scale(b, 2 * ib + 1);
}

// ---------------------------------------------------------------- dequantize

// db per 16 elements; y = db * |grid| * sign (the sign multiply is exact, as in ggml)
template <class B, void (*DEC)(const B&, int, Group&)>
static void dequant_lattice(const void* vx, float* y, int64_t n, float (*db_of)(float d, int sc)) {
  const B* x = (const B*)vx;
  Group g;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = h2f(x[i].d);
    for (int ib = 0; ib < 8; ib++, y += 32) {
      DEC(x[i], ib, g);
      for (int h = 0; h < 2; h++) {
        const float db = db_of(d, g.sc[h]);
        for (int j = 16 * h; j < 16 * h + 16; j++) {
          const int a = g.q[j] < 0 ? -g.q[j] : g.q[j];
          y[j] = db * (float)a * (g.q[j] < 0 ? -1.f : 1.f);
        }
      }
    }
  }
}
static float db_quarter(float d, int sc) { return d * (0.5f + (float)sc) * 0.25f; }
static float db_half(float d, int sc) { return d * (0.5f + (float)sc) * 0.5f; }
static float db_odd(float d, int sc) { return d * (float)(1 + 2 * sc); }

void dequantize_row_iq2_xxs(const void* x, float* y, int64_t n) { dequant_lattice<block_iq2_xxs, decode_iq2_xxs>(x, y, n, db_quarter); }
void dequantize_row_iq2_xs(const void* x, float* y, int64_t n) { dequant_lattice<block_iq2_xs, decode_iq2_xs>(x, y, n, db_quarter); }
void dequantize_row_iq2_s(const void* x, float* y, int64_t n) { dequant_lattice<block_iq2_s, decode_iq2_s>(x, y, n, db_quarter); }
void dequantize_row_iq3_xxs(const void* x, float* y, int64_t n) { dequant_lattice<block_iq3_xxs, decode_iq3_xxs>(x, y, n, db_half); }
void dequantize_row_iq3_s(const void* x, float* y, int64_t n) { dequant_lattice<block_iq3_s, decode_iq3_s>(x, y, n, db_odd); }

void dequantize_row_iq1_s(const void* vx, float* y, int64_t n) {
  const block_iq1_s* x = (const block_iq1_s*)vx;
  Group g; int ds[2];
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = h2f(x[i].d);
    for (int ib = 0; ib < 8; ib++, y += 32) {
      decode_iq1_s(x[i], ib, g, ds);
      const float dl = d * (float)(2 * g.sc[0] + 1), delta = ds[0] < 0 ? -IQ1S_DELTA : IQ1S_DELTA;
      for (int j = 0; j < 32; j++) y[j] = dl * ((float)g.q[j] + delta);
    }
  }
}

void dequantize_row_iq1_m(const void* vx, float* y, int64_t n) {
  const block_iq1_m* x = (const block_iq1_m*)vx;
  Group g; int ds[4];
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = h2f(iq1m_d(x[i]));
    for (int ib = 0; ib < 8; ib++, y += 32) {
      decode_iq1_m(x[i], ib, g, ds);
      for (int j = 0; j < 32; j++) {
        const float dl = d * (float)(2 * g.sc[j / 16] + 1), delta = ds[j / 8] < 0 ? -IQ1M_DELTA : IQ1M_DELTA;
        y[j] = dl * ((float)g.q[j] + delta);
      }
    }
  }
}

void dequantize_row_mxfp4(const void* vx, float* y, int64_t n) {
  const block_mxfp4* x = (const block_mxfp4*)vx;
  for (int64_t i = 0; i < n / QK_MXFP4; i++, y += QK_MXFP4) {
    const float d = e8m0_to_fp32_half(x[i].e);
    for (int j = 0; j < 16; j++) {
      y[j] = (float)kvalues_mxfp4[x[i].qs[j] & 0xF] * d;
      y[j + 16] = (float)kvalues_mxfp4[x[i].qs[j] >> 4] * d;
    }
  }
}

// ---------------------------------------------------------------- vec_dot . Q8_K

// Per super-block: isum = sum over 16-element halves of (2*sc + 1) * sum(q * y), then
// sumf += (d * y.d) * isum; the result is factor * sumf (1/8 for IQ2, 1/4 for IQ3_XXS, 1 for IQ3_S).
template <class B, void (*DEC)(const B&, int, Group&)>
static float dot_lattice(int n, const void* vx, const void* vy) {
  const B* x = (const B*)vx;
  const block_q8_K* y = (const block_q8_K*)vy;
  Group g;
  float sumf = 0;
  for (int i = 0; i < n / QK_K; i++) {
    int isum = 0;
    for (int ib = 0; ib < 8; ib++) {
      DEC(x[i], ib, g);
      const int8_t* q8 = y[i].qs + 32 * ib;
      for (int h = 0; h < 2; h++) {
        int si = 0;
        for (int j = 16 * h; j < 16 * h + 16; j++) si += g.q[j] * q8[j];
        isum += (2 * g.sc[h] + 1) * si;
      }
    }
    sumf += (h2f(x[i].d) * y[i].d) * (float)isum;
  }
  return sumf;
}

void vec_dot_iq2_xxs_q8_K(int n, float* s, const void* x, const void* y) { *s = 0.125f * dot_lattice<block_iq2_xxs, decode_iq2_xxs>(n, x, y); }
void vec_dot_iq2_xs_q8_K(int n, float* s, const void* x, const void* y) { *s = 0.125f * dot_lattice<block_iq2_xs, decode_iq2_xs>(n, x, y); }
void vec_dot_iq2_s_q8_K(int n, float* s, const void* x, const void* y) { *s = 0.125f * dot_lattice<block_iq2_s, decode_iq2_s>(n, x, y); }
void vec_dot_iq3_xxs_q8_K(int n, float* s, const void* x, const void* y) { *s = 0.25f * dot_lattice<block_iq3_xxs, decode_iq3_xxs>(n, x, y); }
void vec_dot_iq3_s_q8_K(int n, float* s, const void* x, const void* y) { *s = dot_lattice<block_iq3_s, decode_iq3_s>(n, x, y); }

// IQ1: value = (2*sc + 1) * (q + delta/8) -> integer part sum((2sc+1) q y), delta part sum((2sc+1) sign y).
void vec_dot_iq1_s_q8_K(int n, float* s, const void* vx, const void* vy) {
  const block_iq1_s* x = (const block_iq1_s*)vx;
  const block_q8_K* y = (const block_q8_K*)vy;
  Group g; int ds[2];
  float sumf = 0, sumd = 0;
  for (int i = 0; i < n / QK_K; i++) {
    int isum = 0, dsum = 0;
    for (int ib = 0; ib < 8; ib++) {
      decode_iq1_s(x[i], ib, g, ds);
      const int8_t* q8 = y[i].qs + 32 * ib;
      int si = 0;
      for (int j = 0; j < 32; j++) si += g.q[j] * q8[j];
      const int ls = 2 * g.sc[0] + 1;
      isum += ls * si;
      dsum += ls * ds[0] * (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]);
    }
    const float d = y[i].d * h2f(x[i].d);
    sumf += d * (float)isum;
    sumd += d * (float)dsum;
  }
  *s = sumf + IQ1S_DELTA * sumd;
}

void vec_dot_iq1_m_q8_K(int n, float* s, const void* vx, const void* vy) {
  const block_iq1_m* x = (const block_iq1_m*)vx;
  const block_q8_K* y = (const block_q8_K*)vy;
  Group g; int ds[4];
  float sumf = 0, sumd = 0;
  for (int i = 0; i < n / QK_K; i++) {
    int isum = 0, dsum = 0;
    for (int ib = 0; ib < 8; ib++) {
      decode_iq1_m(x[i], ib, g, ds);
      const int8_t* q8 = y[i].qs + 32 * ib;
      for (int h = 0; h < 2; h++) {
        int si = 0, sd = 0;
        for (int j = 16 * h; j < 16 * h + 16; j++) { si += g.q[j] * q8[j]; sd += ds[j / 8] * q8[j]; }
        isum += (2 * g.sc[h] + 1) * si;
        dsum += (2 * g.sc[h] + 1) * sd;
      }
    }
    const float d = y[i].d * h2f(iq1m_d(x[i]));
    sumf += d * (float)isum;
    sumd += d * (float)dsum;
  }
  *s = sumf + IQ1M_DELTA * sumd;
}

void vec_dot_mxfp4_q8_0(int n, float* s, const void* vx, const void* vy) {
  const block_mxfp4* x = (const block_mxfp4*)vx;
  const block_q8_0* y = (const block_q8_0*)vy;
  float sumf = 0;
  for (int i = 0; i < n / QK_MXFP4; i++) {
    int sumi = 0;
    for (int j = 0; j < 16; j++)
      sumi += kvalues_mxfp4[x[i].qs[j] & 0xF] * y[i].qs[j] + kvalues_mxfp4[x[i].qs[j] >> 4] * y[i].qs[j + 16];
    sumf += (h2f(y[i].d) * e8m0_to_fp32_half(x[i].e)) * (float)sumi;
  }
  *s = sumf;
}

}  // namespace ref

void register_iq_types(type_traits* t) {
  using namespace ref;
  auto set = [&](ggml_type id, to_float_fn tf, from_float_fn ff, vec_dot_fn vd, ggml_type vdt) {
    t[id].to_float = tf; t[id].from_float = ff; t[id].vec_dot = vd; t[id].vec_dot_type = vdt;
    t[id].compute = tf && vd;
  };
  set(GGML_TYPE_IQ2_XXS, dequantize_row_iq2_xxs, quantize_row_iq2_xxs, vec_dot_iq2_xxs_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_IQ2_XS, dequantize_row_iq2_xs, quantize_row_iq2_xs, vec_dot_iq2_xs_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_IQ2_S, dequantize_row_iq2_s, quantize_row_iq2_s, vec_dot_iq2_s_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_IQ3_XXS, dequantize_row_iq3_xxs, quantize_row_iq3_xxs, vec_dot_iq3_xxs_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_IQ3_S, dequantize_row_iq3_s, quantize_row_iq3_s, vec_dot_iq3_s_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_IQ1_S, dequantize_row_iq1_s, quantize_row_iq1_s, vec_dot_iq1_s_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_IQ1_M, dequantize_row_iq1_m, quantize_row_iq1_m, vec_dot_iq1_m_q8_K, GGML_TYPE_Q8_K);
  set(GGML_TYPE_MXFP4, dequantize_row_mxfp4, quantize_row_mxfp4, vec_dot_mxfp4_q8_0, GGML_TYPE_Q8_0);
}

}  // namespace pyllm
