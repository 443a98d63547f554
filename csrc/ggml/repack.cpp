#include "ggml/repack.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml/fp16.h"

namespace pyllm {

static thread_local unsigned tl_scope = 0, tl_scopes = 0;
X16ActsScope::X16ActsScope() {
  if (++tl_scopes == 0) ++tl_scopes;  // ids are never 0
  tl_scope = tl_scopes;
}
X16ActsScope::~X16ActsScope() { tl_scope = 0; }
unsigned x16_acts_scope() { return tl_scope; }

bool interleave_supported(ggml_type t) {
  return t == GGML_TYPE_Q4_K || t == GGML_TYPE_IQ4_NL || t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1;
}

static void check(ggml_type t, int64_t K) {
  if (!interleave_supported(t)) throw std::invalid_argument(std::string("no 16-row group layout for type ") + type_name(t));
  const int64_t bs = get_type_traits(t).blck_size;
  if (K % bs) throw std::invalid_argument("group layout: row length " + std::to_string(K) + " is not a multiple of " + std::to_string(bs));
}

// One block of 16 rows <-> the group's block: the fields as 16-row arrays (a field of n bytes: n / 4 words per
// row when n > 2, else one half per row; mv's flip: bytes stored ^ flip). Both layouts are listed once here.
template <class Fn>
static void q4_K_fields(block_q4_K& b, block_q4_Kx16& o, int r, Fn&& mv) {
  mv(&b.d, &o.d[r], 2); mv(&b.dmin, &o.dmin[r], 2);
  for (int w = 0; w < 3; w++) mv(b.scales + 4 * w, &o.scales[w][r], 4);
  for (int v = 0; v < 32; v++) mv(b.qs + 4 * v, &o.qs[v][r], 4);
}
template <class B, class G, class Fn>  // IQ4_NL and Q4_0: d, then 16 qs bytes
static void d_qs16_fields(B& b, G& o, int r, Fn&& mv) {
  mv(&b.d, &o.d[r], 2);
  for (int v = 0; v < 4; v++) mv(b.qs + 4 * v, &o.qs[v][r], 4);
}
template <class Fn>
static void q8_0_fields(block_q8_0& b, block_q8_0x16& o, int r, Fn&& mv) {
  mv(&b.d, &o.d[r], 2);
  for (int v = 0; v < 8; v++) mv(b.qs + 4 * v, &o.qs[v][r], 4, 0x80);  // + 128: the xor is its own inverse
}
template <class Fn>
static void q4_1_fields(block_q4_1& b, block_q4_1x16& o, int r, Fn&& mv) {
  mv(&b.d, &o.d[r], 2); mv(&b.m, &o.m[r], 2);
  for (int v = 0; v < 4; v++) mv(b.qs + 4 * v, &o.qs[v][r], 4);
}
// group <- rows (to_group) or row r <- group, block by block
template <class B, class G, class F>
static void convert(const uint8_t* rows, size_t rb, uint8_t* grp, int64_t nb, int r0, int r1, bool to_group, F fields) {
  for (int64_t i = 0; i < nb; i++)
    for (int r = r0; r < r1; r++) {
      B& b = ((B*)(rows + (to_group ? r * rb : 0)))[i];
      G& o = ((G*)grp)[i];
      fields(b, o, r, [&](void* row_f, void* grp_f, size_t n, uint8_t flip = 0) {  // a field's n bytes, ^ flip
        uint8_t* dst = (uint8_t*)(to_group ? grp_f : row_f);
        const uint8_t* src = (const uint8_t*)(to_group ? row_f : grp_f);
        for (size_t j = 0; j < n; j++) dst[j] = src[j] ^ flip;
      });
    }
}
static void convert_any(ggml_type t, const uint8_t* rows, size_t rb, uint8_t* grp, int64_t K, int r0, int r1, bool to_group) {
  uint8_t* rw = const_cast<uint8_t*>(rows);  // written only when !to_group
  if (t == GGML_TYPE_Q4_K)
    convert<block_q4_K, block_q4_Kx16>(rw, rb, grp, K / QK_K, r0, r1, to_group, [](auto& b, auto& o, int r, auto&& mv) { q4_K_fields(b, o, r, mv); });
  else if (t == GGML_TYPE_IQ4_NL)
    convert<block_iq4_nl, block_iq4_nlx16>(rw, rb, grp, K / QK4_NL, r0, r1, to_group, [](auto& b, auto& o, int r, auto&& mv) { d_qs16_fields(b, o, r, mv); });
  else if (t == GGML_TYPE_Q4_0)
    convert<block_q4_0, block_q4_0x16>(rw, rb, grp, K / QK4_0, r0, r1, to_group, [](auto& b, auto& o, int r, auto&& mv) { d_qs16_fields(b, o, r, mv); });
  else if (t == GGML_TYPE_Q4_1)
    convert<block_q4_1, block_q4_1x16>(rw, rb, grp, K / QK4_1, r0, r1, to_group, [](auto& b, auto& o, int r, auto&& mv) { q4_1_fields(b, o, r, mv); });
  else
    convert<block_q8_0, block_q8_0x16>(rw, rb, grp, K / QK8_0, r0, r1, to_group, [](auto& b, auto& o, int r, auto&& mv) { q8_0_fields(b, o, r, mv); });
}

void interleave_rows(ggml_type t, const uint8_t* src, uint8_t* dst, int64_t n_rows, int64_t K) {
  check(t, K);
  if (n_rows % kGroupRows) throw std::invalid_argument("group layout: " + std::to_string(n_rows) + " rows are not a multiple of 16");
  const size_t rb = row_size(t, K), gb = kGroupRows * rb;
  std::vector<uint8_t> tmp(gb);  // a group's source rows (so that dst may be src)
  for (int64_t g = 0; g < n_rows / kGroupRows; g++) {
    std::memcpy(tmp.data(), src + g * gb, gb);
    convert_any(t, tmp.data(), rb, dst + g * gb, K, 0, kGroupRows, true);
  }
}

void deinterleave_row(ggml_type t, const uint8_t* g, int r, int64_t K, uint8_t* out) {
  check(t, K);
  convert_any(t, out, 0, const_cast<uint8_t*>(g), K, r, r + 1, false);
}

// The references read each row back in GGUF layout (deinterleave_row: the group layout is written down only in
// convert_any's field lists) and compute on its blocks: C[t * ldc + r] = dot(row r's blocks, token t's blocks).
template <class B, class Y, class Dot>
static void ref_rows(ggml_type t, int K, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc, Dot dot) {
  std::vector<B> row(K / get_type_traits(t).blck_size);
  for (int r = 0; r < kGroupRows; r++) {
    deinterleave_row(t, (const uint8_t*)vg, r, K, (uint8_t*)row.data());
    for (int j = 0; j < k; j++) C[j * ldc + r] = dot(row.data(), (const Y*)((const uint8_t*)vy + j * by));
  }
}

void x16_q4_K_ref(int K, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc) {
  ref_rows<block_q4_K, block_q8_K>(GGML_TYPE_Q4_K, K, vg, vy, by, k, C, ldc, [K](const block_q4_K* x, const block_q8_K* y) {
    float acc = 0.f, accm = 0.f;
    for (int i = 0; i < K / QK_K; i++) {
      int is = 0, imin = 0;  // exact: the order of the integer sums does not matter
      for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        get_scale_min_k4(j, x[i].scales, &sc, &mn);
        int p = 0;
        for (int l = 0; l < 32; l++) p += ((x[i].qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15) * y[i].qs[32 * j + l];
        is += sc * p;
        imin += mn * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
      }
      acc = std::fma((float)is, fp16_to_fp32(x[i].d) * y[i].d, acc);
      accm = std::fma((float)imin, fp16_to_fp32(x[i].dmin) * y[i].d, accm);
    }
    return acc - accm;
  });
}

void x16_iq4_nl_ref(int K, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc) {
  ref_rows<block_iq4_nl, block_q8_0>(GGML_TYPE_IQ4_NL, K, vg, vy, by, k, C, ldc, [K](const block_iq4_nl* x, const block_q8_0* y) {
    float acc = 0.f;
    for (int b = 0; b < K / QK4_NL; b++) {
      int isum = 0;
      for (int l = 0; l < 16; l++)
        isum += kvalues_iq4nl[x[b].qs[l] & 15] * y[b].qs[l] + kvalues_iq4nl[x[b].qs[l] >> 4] * y[b].qs[l + 16];
      acc = std::fma((float)isum, fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d), acc);
    }
    return acc;
  });
}

// The SIMD vec_dot's arithmetic for 32-blocks (quants_simd.inc.h): lane l sums the products of elements
// 4l..4l+3 exactly, a_l = fma(p_l, dx * dy, a_l) block after block, then hsum8's tree. w(x, j): element j of x.
template <class B, class Y, class W>
static float lanes8(const B* x, const Y* y, int nb, W w) {
  float a[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int b = 0; b < nb; b++) {
    const float dd = fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
    for (int l = 0; l < 8; l++) {
      int p = 0;
      for (int j = 4 * l; j < 4 * l + 4; j++) p += w(x[b], j) * y[b].qs[j];
      a[l] = std::fma((float)p, dd, a[l]);
    }
  }
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));  // hsum8
}
static int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

void x16_q8_0_ref(int K, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc) {
  ref_rows<block_q8_0, block_q8_0>(GGML_TYPE_Q8_0, K, vg, vy, by, k, C, ldc, [K](const block_q8_0* x, const block_q8_0* y) {
    return lanes8(x, y, K / QK8_0, [](const block_q8_0& b, int j) { return (int)b.qs[j]; });
  });
}
void x16_q4_0_ref(int K, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc) {
  ref_rows<block_q4_0, block_q8_0>(GGML_TYPE_Q4_0, K, vg, vy, by, k, C, ldc, [K](const block_q4_0* x, const block_q8_0* y) {
    return lanes8(x, y, K / QK4_0, [](const block_q4_0& b, int j) { return nibble(b.qs, j) - 8; });
  });
}
void x16_q4_1_ref(int K, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc) {
  ref_rows<block_q4_1, block_q8_1>(GGML_TYPE_Q4_1, K, vg, vy, by, k, C, ldc, [K](const block_q4_1* x, const block_q8_1* y) {
    float accm = 0.f;  // the min chain, m * y.s block after block
    for (int b = 0; b < K / QK4_1; b++) accm = std::fma(fp16_to_fp32(x[b].m), fp16_to_fp32(y[b].s), accm);
    return lanes8(x, y, K / QK4_1, [](const block_q4_1& b, int j) { return nibble(b.qs, j); }) + accm;
  });
}

}  // namespace pyllm
