#include "ggml/repack.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml/fp16.h"

namespace pyllm {

bool interleave_supported(ggml_type t) { return t == GGML_TYPE_Q4_K; }

static void check(ggml_type t, int64_t K) {
  if (!interleave_supported(t)) throw std::invalid_argument(std::string("no 16-row group layout for type ") + type_name(t));
  if (K % QK_K) throw std::invalid_argument("group layout: row length " + std::to_string(K) + " is not a multiple of 256");
}

// one group: 16 GGUF rows (rb bytes apart) -> its super-blocks
static void q4_K_group(const uint8_t* src, size_t rb, int64_t nsb, block_q4_Kx16* dst) {
  for (int64_t i = 0; i < nsb; i++) {
    block_q4_Kx16& o = dst[i];
    for (int r = 0; r < kGroupRows; r++) {
      const block_q4_K& b = ((const block_q4_K*)(src + r * rb))[i];
      o.d[r] = b.d; o.dmin[r] = b.dmin;
      for (int w = 0; w < 3; w++) std::memcpy(&o.scales[w][r], b.scales + 4 * w, 4);
      for (int v = 0; v < 32; v++) std::memcpy(&o.qs[v][r], b.qs + 4 * v, 4);
    }
  }
}

void interleave_rows(ggml_type t, const uint8_t* src, uint8_t* dst, int64_t n_rows, int64_t K) {
  check(t, K);
  if (n_rows % kGroupRows) throw std::invalid_argument("group layout: " + std::to_string(n_rows) + " rows are not a multiple of 16");
  const size_t rb = row_size(t, K), gb = kGroupRows * rb;
  std::vector<uint8_t> tmp(gb);  // a group's source rows (so that dst may be src)
  for (int64_t g = 0; g < n_rows / kGroupRows; g++) {
    std::memcpy(tmp.data(), src + g * gb, gb);
    q4_K_group(tmp.data(), rb, K / QK_K, (block_q4_Kx16*)(dst + g * gb));
  }
}

void deinterleave_row(ggml_type t, const uint8_t* g, int r, int64_t K, uint8_t* out) {
  check(t, K);
  const block_q4_Kx16* x = (const block_q4_Kx16*)g;
  for (int64_t i = 0; i < K / QK_K; i++) {
    block_q4_K& b = ((block_q4_K*)out)[i];
    b.d = x[i].d[r]; b.dmin = x[i].dmin[r];
    for (int w = 0; w < 3; w++) std::memcpy(b.scales + 4 * w, &x[i].scales[w][r], 4);
    for (int v = 0; v < 32; v++) std::memcpy(b.qs + 4 * v, &x[i].qs[v][r], 4);
  }
}

void x16_q4_K_ref(int K, const void* vg, const void* vy, size_t by, int k, float* C, size_t ldc) {
  const block_q4_Kx16* x = (const block_q4_Kx16*)vg;
  for (int t = 0; t < k; t++) {
    const block_q8_K* y = (const block_q8_K*)((const uint8_t*)vy + t * by);
    for (int r = 0; r < kGroupRows; r++) {
      float acc = 0.f, accm = 0.f;
      for (int i = 0; i < K / QK_K; i++) {
        uint8_t sc[12], qs[128], s[8], m[8];
        for (int w = 0; w < 3; w++) std::memcpy(sc + 4 * w, &x[i].scales[w][r], 4);
        for (int v = 0; v < 32; v++) std::memcpy(qs + 4 * v, &x[i].qs[v][r], 4);
        for (int j = 0; j < 8; j++) get_scale_min_k4(j, sc, &s[j], &m[j]);
        int is = 0, imin = 0;  // exact: the order of the integer sums does not matter
        for (int j = 0; j < 8; j++) {
          int p = 0;
          for (int l = 0; l < 32; l++) p += ((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15) * y[i].qs[32 * j + l];
          is += s[j] * p;
          imin += m[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        acc = std::fma((float)is, fp16_to_fp32(x[i].d[r]) * y[i].d, acc);
        accm = std::fma((float)imin, fp16_to_fp32(x[i].dmin[r]) * y[i].d, accm);
      }
      C[t * ldc + r] = acc - accm;
    }
  }
}

}  // namespace pyllm
