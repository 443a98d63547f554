// Quantizers for the IQ lattice types and MXFP4 (used by tools/make_tiny_gguf.py through
// _core.quantize). Our own search, not llama-quantize's: per scale unit (16 or 32 elements) the best of
// a few trial scales is refined by alternating grid picks with a weighted least-squares refit, then the
// super-block scale and the 4-bit (IQ1: 3-bit) unit scales are quantized, each unit's code is chosen
// among the rounded one and its two neighbours, and the grid entries picked again at the final scales.
// A grid pick takes the per-element nearest levels when they form a grid entry, else the best of
// that pattern's precomputed neighbour entries (the restriction llama.cpp's quantizer makes; ~10x
// faster than the exhaustive search this replaced, and lower error on random data). Weights are
// x^2 + 2*mean(x^2) of the super-block (no imatrix). The bytes differ from llama-quantize's, but
// every block is valid and decodes with the reference.
// MXFP4 follows gguf-py's quantizer exactly (tested byte for byte).
#include "ggml/quants_iq.h"
#include "ggml/fp16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace pyllm {
namespace ref {

namespace {

// Search breadth: neighbour lists keep the entries at the NEAR_* smallest distinct distances from a
// pattern; each unit scale starts from the best of SCALE_STEPS trials SCALE_LO + k * SCALE_STEP times
// max|t| / (largest level).
constexpr int NEAR_IQ2XXS = 4, NEAR_IQ2 = 2, NEAR_IQ3 = 2, NEAR_IQ1 = 2;  // IQ2_XXS: 256 of 6561 patterns
constexpr int SCALE_STEPS = 7;
constexpr float SCALE_LO = 0.70f, SCALE_STEP = 0.09f;

typedef float v4 __attribute__((vector_size(16)));  // GCC/Clang vector extension (SSE on x86)

// A grid decoded to floats: n entries of gs values (signed for IQ1). The weighted error is separable
// per element, so when the per-element nearest levels form a grid entry that entry is optimal: `code`
// maps level patterns (base = number of levels) to entries. Otherwise only the pattern's precomputed
// neighbours are searched: the entries at the NEAR smallest distinct (unweighted) distances from it.
// This is the restriction llama.cpp's quantizer makes too (its own tables; these are built here).
struct Lattice {
  int n = 0, gs = 0;
  std::vector<float> v, levels, mids;  // mids: midpoints between consecutive levels
  std::vector<int> code;                // pattern -> entry, -1 when not on the grid
  std::vector<uint32_t> nbr_off;        // pattern -> [nbr_off[c], nbr_off[c+1]) in nbr
  std::vector<uint16_t> nbr;
  template <class W> void init(const W* grid, int n_, int gs_, bool is_signed, int near) {
    n = n_; gs = gs_; v.resize((size_t)n * gs);
    for (int e = 0; e < n; e++)
      for (int j = 0; j < gs; j++) {
        const int b = (int)((grid[e] >> (8 * j)) & 0xFF);
        v[(size_t)e * gs + j] = (float)(is_signed ? (int8_t)b : b);
      }
    for (float x : v)
      if (std::find(levels.begin(), levels.end(), x) == levels.end()) levels.push_back(x);
    std::sort(levels.begin(), levels.end());
    if (!((gs == 8 && levels.size() == 3) || (gs == 4 && levels.size() == 8)))
      throw std::logic_error("iq lattice: unexpected shape (best() knows 8x3 and 4x8 levels)");
    for (size_t i = 0; i + 1 < levels.size(); i++) mids.push_back(0.5f * (levels[i] + levels[i + 1]));
    size_t ncode = 1;
    for (int j = 0; j < gs; j++) ncode *= levels.size();
    code.assign(ncode, -1);
    for (int e = 0; e < n; e++) code[code_of(&v[(size_t)e * gs])] = e;
    nbr_off.assign(ncode + 1, 0);
    std::vector<std::pair<float, int>> dist((size_t)n);
    float g[8];
    for (size_t c = 0; c < ncode; c++) {
      nbr_off[c] = (uint32_t)nbr.size();
      if (code[c] >= 0) continue;
      size_t r = c;
      for (int j = 0; j < gs; j++) { g[j] = levels[r % levels.size()]; r /= levels.size(); }
      for (int e = 0; e < n; e++) {
        float d2 = 0;
        for (int j = 0; j < gs; j++) { const float dd = v[(size_t)e * gs + j] - g[j]; d2 += dd * dd; }
        dist[(size_t)e] = {d2, e};
      }
      std::sort(dist.begin(), dist.end());
      int distinct = 0;
      for (size_t k = 0; k < dist.size(); k++) {
        if (k == 0 || dist[k].first != dist[k - 1].first) distinct++;
        if (distinct > near) break;
        nbr.push_back((uint16_t)dist[k].second);
      }
    }
    nbr_off[ncode] = (uint32_t)nbr.size();
  }
  size_t code_of(const float* g) const {
    size_t c = 0;
    for (int j = gs - 1; j >= 0; j--)
      c = c * levels.size() + (size_t)(std::lower_bound(levels.begin(), levels.end(), g[j]) - levels.begin());
    return c;
  }
  // entry minimizing sum w (t - s*g)^2 over the nearest-level pattern's entry or its neighbours (first
  // on ties); *dot / *nrm get sum w t g and sum w g^2. s > 0.
  int best(const float* t, const float* w, float s, float* dot, float* nrm) const {
    return gs == 8 ? best_n<8, 3>(t, w, s, dot, nrm) : best_n<4, 8>(t, w, s, dot, nrm);
  }
  // best() with the group size and level count known to the compiler (the two lattice shapes)
  template <int GS, int NL> int best_n(const float* t, const float* w, float s, float* dot, float* nrm) const {
    const float inv = 1.f / s;
    float md[NL - 1];
    for (int i = 0; i < NL - 1; i++) md[i] = mids[i];
    size_t c = 0;
    for (int j = GS - 1; j >= 0; j--) {
      const float y = t[j] * inv;
      int l = 0;
      for (int i = 0; i < NL - 1; i++) l += y > md[i];
      c = c * NL + l;
    }
    int bi = code[c];
    if (bi < 0) {
      // err = (s^2 sum w g^2 - 2 s sum w t g) / s = sum g (s w g - 2 w t), 4 elements per vector op
      constexpr int NV = GS / 4;
      v4 sw[NV], wt[NV];
      for (int q = 0; q < NV; q++)
        for (int j = 0; j < 4; j++) { sw[q][j] = s * w[4 * q + j]; wt[q][j] = 2 * w[4 * q + j] * t[4 * q + j]; }
      float be = INFINITY;
      for (uint32_t k = nbr_off[c]; k < nbr_off[c + 1]; k++) {
        const float* g = &v[(size_t)nbr[k] * GS];
        v4 e = {0, 0, 0, 0};
        for (int q = 0; q < NV; q++) {
          v4 gq;
          std::memcpy(&gq, g + 4 * q, sizeof gq);
          e += gq * (sw[q] * gq - wt[q]);
        }
        const float err = (e[0] + e[1]) + (e[2] + e[3]);
        if (err < be) { be = err; bi = nbr[k]; }
      }
    }
    const float* g = &v[(size_t)bi * GS];
    float d = 0, m = 0;
    for (int j = 0; j < GS; j++) { d += w[j] * t[j] * g[j]; m += w[j] * g[j] * g[j]; }
    *dot = d; *nrm = m;
    return bi;
  }
};

enum Grid { G_IQ2XXS, G_IQ2XS, G_IQ2S, G_IQ3XXS, G_IQ3S, G_IQ1S, G_COUNT };
const Lattice& lattice(Grid g) {  // built on first use (the neighbour lists take a few ms each)
  static Lattice L[G_COUNT];
  static std::once_flag once[G_COUNT];
  std::call_once(once[g], [g] {
    switch (g) {
      case G_IQ2XXS: L[g].init(iq2xxs_grid, 256, 8, false, NEAR_IQ2XXS); break;
      case G_IQ2XS: L[g].init(iq2xs_grid, 512, 8, false, NEAR_IQ2); break;
      case G_IQ2S: L[g].init(iq2s_grid, 1024, 8, false, NEAR_IQ2); break;
      case G_IQ3XXS: L[g].init(iq3xxs_grid, 256, 4, false, NEAR_IQ3); break;
      case G_IQ3S: L[g].init(iq3s_grid, 512, 4, false, NEAR_IQ3); break;
      default: L[g].init(iq1s_grid, 2048, 8, true, NEAR_IQ1); break;
    }
  });
  return L[g];
}

void weights_of(const float* x, float* w) {
  float s2 = 0;
  for (int j = 0; j < QK_K; j++) s2 += x[j] * x[j];
  const float sigma2 = 2 * s2 / QK_K;
  for (int j = 0; j < QK_K; j++) w[j] = x[j] * x[j] + sigma2;
}

// Entries for `len` targets (len / gs groups) at scale s; *sd / *sn get sum w t g and sum w g^2 (the
// LS scale for these entries is sd / sn, and the error at it is sum w t^2 - sd^2 / sn).
void pick(const Lattice& L, const float* t, const float* w, int len, float s, int* idx, float* sd, float* sn) {
  float a = 0, b = 0;
  for (int k = 0; k < len / L.gs; k++) {
    float d, m;
    idx[k] = L.best(t + k * L.gs, w + k * L.gs, s, &d, &m);
    a += d; b += m;
  }
  *sd = a; *sn = b;
}

// Best LS scale of one unit: pick entries at SCALE_STEPS trial scales around max|t|/gmax, keep the
// trial whose LS refit has the lowest error, then alternate pick and refit while the error drops.
float fit_unit(const Lattice& L, const float* t, const float* w, int len, int* idx) {
  float amax = 0, gmax = 0;
  for (int j = 0; j < len; j++) amax = std::fmax(amax, std::fabs(t[j]));
  for (float g : L.levels) gmax = std::fmax(gmax, std::fabs(g));
  if (amax == 0) return 0.f;
  int tmp[32];
  float best_score = 0, s = 0;  // score = sd^2 / sn, the error reduction of the LS fit
  auto trial = [&](float st) {
    float sd, sn;
    pick(L, t, w, len, st, tmp, &sd, &sn);
    if (!(sd > 0 && sn > 0) || sd * sd / sn <= best_score) return false;
    best_score = sd * sd / sn; s = sd / sn;
    std::memcpy(idx, tmp, sizeof(int) * (size_t)(len / L.gs));
    return true;
  };
  for (int k = 0; k < SCALE_STEPS; k++) trial(amax / gmax * (SCALE_LO + k * SCALE_STEP));
  for (int it = 0; it < 3 && s > 0; it++)
    if (!trial(s)) break;
  return s;
}
// Unsigned-grid types: magnitudes as targets, signs stored separately. With `parity`, each group of
// 8 must have an even number of negative signs: the element cheapest to flip gets its sign flipped
// (its target becomes -|x|). Returns the 8-bit sign masks per group of 8.
void signs_and_targets(const float* x, const float* w, int len, bool parity, float* t, uint8_t* sgn) {
  for (int k = 0; k < len / 8; k++) {
    uint8_t m = 0; int best = 0;
    for (int j = 0; j < 8; j++) {
      const int e = 8 * k + j;
      t[e] = std::fabs(x[e]);
      if (x[e] < 0) m |= (uint8_t)(1 << j);
      if (w[e] * t[e] < w[8 * k + best] * t[8 * k + best]) best = j;
    }
    if (parity && __builtin_popcount(m) % 2) { m ^= (uint8_t)(1 << best); t[8 * k + best] = -t[8 * k + best]; }
    sgn[k] = m;
  }
}

// Super-block scale d and unit codes ls[u] for value(u) = d * f(ls[u]); f(l) = a*l + b, l in [0, lmax].
float quantize_scales(const float* s, int nu, float a, float b, int lmax, int* ls) {
  float smax = 0;
  for (int u = 0; u < nu; u++) smax = std::fmax(smax, s[u]);
  if (smax == 0) { for (int u = 0; u < nu; u++) ls[u] = 0; return 0.f; }
  const float d = fp16_to_fp32(fp32_to_fp16(smax / (a * lmax + b)));
  for (int u = 0; u < nu; u++) {
    const int l = (int)std::lrint((s[u] / d - b) / a);
    ls[u] = l < 0 ? 0 : l > lmax ? lmax : l;
  }
  return d;
}

// With the super-block scale d fixed: the unit's code among ls-1, ls, ls+1 (rounding the LS scale
// is not always best once the entries are picked again) and its entries at that scale.
void refit_code(const Lattice& L, const float* t, const float* w, int len, float d, float a, float b, int lmax,
                int* ls, int* idx) {
  int tmp[32];
  const int l0 = *ls;
  float be = INFINITY;
  for (int l = std::max(0, l0 - 1); l <= std::min(lmax, l0 + 1); l++) {
    const float s = d * (a * l + b);
    float sd, sn;
    pick(L, t, w, len, s, tmp, &sd, &sn);
    const float err = s * s * sn - 2 * s * sd;
    if (err < be) { be = err; *ls = l; std::memcpy(idx, tmp, sizeof(int) * (size_t)(len / L.gs)); }
  }
}

// The shared flow for the unsigned lattices: units of `ulen` elements, scale f(l) = a*l + b.
struct UnsignedSpec { Grid grid; int ulen; bool parity; float a, b; };
void quantize_unsigned(const UnsignedSpec& sp, const float* x, float* w, float* t, uint8_t* sgn, int* idx,
                       int* ls, float* d_out) {
  const Lattice& L = lattice(sp.grid);
  weights_of(x, w);
  signs_and_targets(x, w, QK_K, sp.parity, t, sgn);
  const int nu = QK_K / sp.ulen, per = sp.ulen / L.gs;
  float s[16];
  for (int u = 0; u < nu; u++) s[u] = fit_unit(L, t + u * sp.ulen, w + u * sp.ulen, sp.ulen, idx + u * per);
  const float d = quantize_scales(s, nu, sp.a, sp.b, 15, ls);
  for (int u = 0; u < nu; u++)
    if (d > 0) refit_code(L, t + u * sp.ulen, w + u * sp.ulen, sp.ulen, d, sp.a, sp.b, 15, &ls[u], idx + u * per);
    else std::memset(idx + u * per, 0, per * sizeof(int));
  *d_out = d;
}

}  // namespace

void quantize_row_iq2_xxs(const float* x, void* vy, int64_t n) {
  block_iq2_xxs* y = (block_iq2_xxs*)vy;
  float w[QK_K], t[QK_K]; uint8_t sg[32]; int idx[32], ls[8]; float d;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    quantize_unsigned({G_IQ2XXS, 32, true, 0.25f, 0.125f}, x, w, t, sg, idx, ls, &d);
    y[i].d = fp32_to_fp16(d);
    for (int ib = 0; ib < 8; ib++) {
      uint32_t a0 = 0, a1 = (uint32_t)ls[ib] << 28;
      for (int l = 0; l < 4; l++) { a0 |= (uint32_t)idx[4 * ib + l] << (8 * l); a1 |= (uint32_t)(sg[4 * ib + l] & 127) << (7 * l); }
      std::memcpy(&y[i].qs[4 * ib], &a0, 4); std::memcpy(&y[i].qs[4 * ib + 2], &a1, 4);
    }
  }
}

void quantize_row_iq2_xs(const float* x, void* vy, int64_t n) {
  block_iq2_xs* y = (block_iq2_xs*)vy;
  float w[QK_K], t[QK_K]; uint8_t sg[32]; int idx[32], ls[16]; float d;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    quantize_unsigned({G_IQ2XS, 16, true, 0.25f, 0.125f}, x, w, t, sg, idx, ls, &d);
    y[i].d = fp32_to_fp16(d);
    for (int k = 0; k < 32; k++) y[i].qs[k] = (uint16_t)(idx[k] | ((sg[k] & 127) << 9));
    for (int ib = 0; ib < 8; ib++) y[i].scales[ib] = (uint8_t)(ls[2 * ib] | (ls[2 * ib + 1] << 4));
  }
}

void quantize_row_iq2_s(const float* x, void* vy, int64_t n) {
  block_iq2_s* y = (block_iq2_s*)vy;
  float w[QK_K], t[QK_K]; uint8_t sg[32]; int idx[32], ls[16]; float d;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    quantize_unsigned({G_IQ2S, 16, false, 0.25f, 0.125f}, x, w, t, sg, idx, ls, &d);
    std::memset(&y[i], 0, sizeof(block_iq2_s));
    y[i].d = fp32_to_fp16(d);
    for (int k = 0; k < 32; k++) {
      y[i].qs[k] = (uint8_t)(idx[k] & 255);
      y[i].qs[32 + k] = sg[k];
      y[i].qh[k / 4] |= (uint8_t)((idx[k] >> 8) << (2 * (k % 4)));
    }
    for (int ib = 0; ib < 8; ib++) y[i].scales[ib] = (uint8_t)(ls[2 * ib] | (ls[2 * ib + 1] << 4));
  }
}

void quantize_row_iq3_xxs(const float* x, void* vy, int64_t n) {
  block_iq3_xxs* y = (block_iq3_xxs*)vy;
  float w[QK_K], t[QK_K]; uint8_t sg[32]; int idx[64], ls[8]; float d;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    quantize_unsigned({G_IQ3XXS, 32, true, 0.5f, 0.25f}, x, w, t, sg, idx, ls, &d);
    y[i].d = fp32_to_fp16(d);
    for (int k = 0; k < 64; k++) y[i].qs[k] = (uint8_t)idx[k];
    for (int ib = 0; ib < 8; ib++) {
      uint32_t a = (uint32_t)ls[ib] << 28;
      for (int l = 0; l < 4; l++) a |= (uint32_t)(sg[4 * ib + l] & 127) << (7 * l);
      std::memcpy(y[i].qs + QK_K / 4 + 4 * ib, &a, 4);
    }
  }
}

void quantize_row_iq3_s(const float* x, void* vy, int64_t n) {
  block_iq3_s* y = (block_iq3_s*)vy;
  float w[QK_K], t[QK_K]; uint8_t sg[32]; int idx[64], ls[8]; float d;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    quantize_unsigned({G_IQ3S, 32, false, 2.f, 1.f}, x, w, t, sg, idx, ls, &d);
    std::memset(&y[i], 0, sizeof(block_iq3_s));
    y[i].d = fp32_to_fp16(d);
    for (int k = 0; k < 64; k++) {
      y[i].qs[k] = (uint8_t)(idx[k] & 255);
      y[i].qh[k / 8] |= (uint8_t)((idx[k] >> 8) << (k % 8));
    }
    for (int k = 0; k < 32; k++) y[i].signs[k] = sg[k];
    for (int ib = 0; ib < 8; ib++) y[i].scales[ib / 2] |= (uint8_t)(ls[ib] << (4 * (ib % 2)));
  }
}

// IQ1: value = dl * (g + delta), g in {-1, 0, 1}, delta = +-1/8 per unit (IQ1_S: 32) or per group
// of 8 (IQ1_M). For each delta choice the grid search runs on targets x/dl - delta (scaled back).
namespace {
// Per group of 8: grid entry and delta sign (0 = +, 1 = -) with the lowest weighted error at scale dl.
float iq1_groups(const float* x, const float* w, float dl, int ngroups, bool own_delta, int sgn0, int* idx, int* dsg) {
  const Lattice& L = lattice(G_IQ1S);
  float total = 0;
  for (int k = 0; k < ngroups; k++) {
    float best = INFINITY;
    for (int sgn = own_delta ? 0 : sgn0; sgn < (own_delta ? 2 : sgn0 + 1); sgn++) {
      const float delta = sgn ? -IQ1S_DELTA : IQ1S_DELTA;
      float tt[8], dd, mm;
      for (int j = 0; j < 8; j++) tt[j] = x[8 * k + j] - dl * delta;
      const int e = L.best(tt, w + 8 * k, dl, &dd, &mm);
      float err = 0;
      for (int j = 0; j < 8; j++) { const float r = x[8 * k + j] - dl * (L.v[(size_t)e * 8 + j] + delta); err += w[8 * k + j] * r * r; }
      if (err < best) { best = err; idx[k] = e; dsg[k] = sgn; }
    }
    total += best;
  }
  return total;
}
// LS unit scale for IQ1: the best of SCALE_STEPS trial scales (grid/delta picks per group of 8, then
// the LS refit), then alternate picks and refits while the error drops.
float iq1_unit_scale(const float* x, const float* w, int len) {
  const Lattice& L = lattice(G_IQ1S);
  float amax = 0;
  for (int j = 0; j < len; j++) amax = std::fmax(amax, std::fabs(x[j]));
  if (amax == 0) return 0.f;
  float best_score = 0, s = 0;
  auto trial = [&](float st) {
    int idx[4], dsg[4];
    iq1_groups(x, w, st, len / 8, true, 0, idx, dsg);
    float num = 0, den = 0;
    for (int k = 0; k < len / 8; k++)
      for (int j = 0; j < 8; j++) {
        const float v = L.v[(size_t)idx[k] * 8 + j] + (dsg[k] ? -IQ1S_DELTA : IQ1S_DELTA);
        num += w[8 * k + j] * x[8 * k + j] * v; den += w[8 * k + j] * v * v;
      }
    if (!(den > 0 && num > 0) || num * num / den <= best_score) return false;
    best_score = num * num / den; s = num / den;
    return true;
  };
  for (int k = 0; k < SCALE_STEPS; k++) trial(amax / 1.125f * (SCALE_LO + k * SCALE_STEP));
  for (int it = 0; it < 3 && s > 0; it++)
    if (!trial(s)) break;
  return s;
}
}  // namespace

void quantize_row_iq1_s(const float* x, void* vy, int64_t n) {
  block_iq1_s* y = (block_iq1_s*)vy;
  float w[QK_K], s[8]; int ls[8];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    weights_of(x, w);
    for (int ib = 0; ib < 8; ib++) s[ib] = iq1_unit_scale(x + 32 * ib, w + 32 * ib, 32);
    const float d = quantize_scales(s, 8, 2.f, 1.f, 7, ls);
    y[i].d = fp32_to_fp16(d);
    const float dd = fp16_to_fp32(y[i].d);
    for (int ib = 0; ib < 8; ib++) {
      int idx[4] = {0, 0, 0, 0}, dsg[4], best_sgn = 0;
      if (dd > 0) {  // the code among ls-1..ls+1 and one delta sign for the whole 32: the lowest error
        const int l0 = ls[ib];
        float be = INFINITY;
        for (int l = std::max(0, l0 - 1); l <= std::min(7, l0 + 1); l++)
          for (int sg = 0; sg < 2; sg++) {
            int id[4];
            const float e = iq1_groups(x + 32 * ib, w + 32 * ib, dd * (2 * l + 1), 4, false, sg, id, dsg);
            if (e < be) { be = e; best_sgn = sg; ls[ib] = l; std::memcpy(idx, id, sizeof id); }
          }
      }
      uint16_t qh = (uint16_t)((ls[ib] << 12) | (best_sgn ? 0x8000 : 0));
      for (int k = 0; k < 4; k++) { y[i].qs[4 * ib + k] = (uint8_t)(idx[k] & 255); qh |= (uint16_t)((idx[k] >> 8) << (3 * k)); }
      y[i].qh[ib] = qh;
    }
  }
}

void quantize_row_iq1_m(const float* x, void* vy, int64_t n) {
  block_iq1_m* y = (block_iq1_m*)vy;
  float w[QK_K], s[16]; int ls[16], idx[32], dsg[32];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    weights_of(x, w);
    for (int u = 0; u < 16; u++) s[u] = iq1_unit_scale(x + 16 * u, w + 16 * u, 16);
    const float d = quantize_scales(s, 16, 2.f, 1.f, 7, ls);
    const uint16_t dh = fp32_to_fp16(d);
    const float dd = fp16_to_fp32(dh);
    std::memset(idx, 0, sizeof idx); std::memset(dsg, 0, sizeof dsg);
    for (int u = 0; u < 16 && dd > 0; u++) {  // the code among ls-1..ls+1 with the lowest error
      const int l0 = ls[u];
      float be = INFINITY;
      for (int l = std::max(0, l0 - 1); l <= std::min(7, l0 + 1); l++) {
        int id[2], ds[2];
        const float e = iq1_groups(x + 16 * u, w + 16 * u, dd * (2 * l + 1), 2, true, 0, id, ds);
        if (e < be) {
          be = e; ls[u] = l;
          std::memcpy(idx + 2 * u, id, sizeof id); std::memcpy(dsg + 2 * u, ds, sizeof ds);
        }
      }
    }
    std::memset(&y[i], 0, sizeof(block_iq1_m));
    uint16_t sc[4] = {0, 0, 0, 0};
    for (int u = 0; u < 16; u++) sc[u / 4] |= (uint16_t)(ls[u] << (3 * (u % 4)));
    for (int k = 0; k < 4; k++) sc[k] |= (uint16_t)(((dh >> (4 * k)) & 0xF) << 12);
    std::memcpy(y[i].scales, sc, 8);
    for (int g = 0; g < 32; g++) {  // groups of 8 within the super-block
      y[i].qs[g] = (uint8_t)(idx[g] & 255);
      y[i].qh[g / 2] |= (uint8_t)((((idx[g] >> 8) & 7) | (dsg[g] ? 8 : 0)) << (4 * (g % 2)));
    }
  }
}

// gguf-py's MXFP4 quantizer: e = floor(log2(max|x|)) - 2 + 127, nearest doubled E2M1 value (first on ties).
void quantize_row_mxfp4(const float* x, void* vy, int64_t n) {
  block_mxfp4* y = (block_mxfp4*)vy;
  for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
    float amax = 0;
    for (int j = 0; j < QK_MXFP4; j++) amax = std::fmax(amax, std::fabs(x[j]));
    const uint8_t e = amax > 0 ? (uint8_t)(int)(std::floor(std::log2(amax)) - 2 + 127) : 0;
    y[i].e = e;
    const float d = e8m0_to_fp32_half(e);
    uint8_t q[QK_MXFP4];
    for (int j = 0; j < QK_MXFP4; j++) {
      int best = 0; float be = INFINITY;
      for (int k = 0; k < 16; k++) {
        const float err = std::fabs(d * (float)kvalues_mxfp4[k] - x[j]);
        if (err < be) { be = err; best = k; }
      }
      q[j] = (uint8_t)best;
    }
    for (int j = 0; j < 16; j++) y[i].qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
  }
}

}  // namespace ref
}  // namespace pyllm
