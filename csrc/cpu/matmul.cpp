#include "cpu/matmul.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "ggml/fp16.h"
#include "ggml/quants.h"
#include "cpu/prefetch_tune.h"
#include "ggml/repack.h"

namespace pyllm {

void quantize_acts(ThreadPool& tp, const float* X, int64_t ldx, int B, int64_t K, ggml_type vdt, QuantActs& out) {
  const auto& tr = get_type_traits(vdt);
  if (!tr.from_float_act) throw std::runtime_error(std::string("no activation quantizer for ") + tr.name);
  out.type = vdt; out.K = K; out.B = B;
  out.row_bytes = row_size(vdt, K);
  out.buf.resize((size_t)B * out.row_bytes);
  auto body = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; b++) tr.from_float_act(X + b * ldx, out.buf.data() + b * out.row_bytes, K);
  };
  if (B * K >= 16384) tp.parallel_for(B, body); else body(0, B);
}

// Diagnostic, OFF by default, NOT batch invariant: PYLLM_Q4K_GEMM_EMU=1 computes the activation
// rows that lie in a complete group of 4 of the batch with the arithmetic of llama.cpp's repacked
// Q4_K gemm (ggml_gemm_q4_K_8x8_q8_K: per 64 elements, acc = fma(isum, d*y.d, acc) and
// accm = fma(imin, dmin*y.d, accm)), the other rows with its gemv (dot_q4_K_rp, our default for
// every row). Together with llama-server's prompt split (for SWA / recurrent models it evaluates
// the last 4 prompt tokens as their own batch, to place a context checkpoint) this reproduces the
// gemma3 fixture bit for bit (tools/server_split_check.py). Integer sums are exact, so a plain
// scalar loop gives upstream's bits. Dense matmul only (not matmul_q_st / MoE).
static void dot_q4_K_gemm_order(int n, float* s, const void* vx, const void* vy) {
  float acc = 0.f, accm = 0.f;
  const block_q4_K* x = (const block_q4_K*)vx;
  const block_q8_K* y = (const block_q8_K*)vy;
  for (int i = 0; i < n / QK_K; i++) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) get_scale_min_k4(j, x[i].scales, &sc[j], &mn[j]);
    uint16_t dh, mh; std::memcpy(&dh, &x[i].d, 2); std::memcpy(&mh, &x[i].dmin, 2);
    const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
    for (int sb = 0; sb < 4; sb++) {
      int is = 0, im = 0;
      for (int h = 0; h < 2; h++) {
        const int j = 2 * sb + h;
        int p = 0;
        for (int l = 0; l < 32; l++) {
          const uint8_t q = x[i].qs[32 * sb + l];
          p += (h ? (q >> 4) : (q & 15)) * y[i].qs[64 * sb + 32 * h + l];
        }
        is += p * sc[j];
        im += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
      }
      acc = std::fma((float)is, d * y[i].d, acc);
      accm = std::fma((float)im, dmin * y[i].d, accm);
    }
  }
  *s = acc - accm;
}
static const bool kGemmEmu = std::getenv("PYLLM_Q4K_GEMM_EMU") != nullptr;
// Same diagnostic for repacked Q2_K (AVX-512 builds, ggml_gemm_q2_K_8x8_q8_K): one fma per 128 elements.
static void dot_q2_K_gemm_order(int n, float* s, const void* vx, const void* vy) {
  float acc = 0.f, accm = 0.f;
  const block_q2_K* x = (const block_q2_K*)vx;
  const block_q8_K* y = (const block_q8_K*)vy;
  for (int i = 0; i < n / QK_K; i++) {
    uint16_t dh, mh; std::memcpy(&dh, &x[i].d, 2); std::memcpy(&mh, &x[i].dmin, 2);
    const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
    for (int h = 0; h < 2; h++) {
      int is = 0, im = 0;
      for (int j = 8 * h; j < 8 * h + 8; j++) {  // 16-element sub-blocks of this 128
        int p = 0;
        for (int k = 16 * j; k < 16 * j + 16; k++)
          p += ((x[i].qs[32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3) * y[i].qs[k];
        is += (x[i].scales[j] & 0xF) * p;
        im += (x[i].scales[j] >> 4) * y[i].bsums[j];
      }
      acc = std::fma((float)is, d * y[i].d, acc);
      accm = std::fma((float)im, dmin * y[i].d, accm);
    }
  }
  *s = acc - accm;
}

// The row kernels for W: llama.cpp's repacked-weight arithmetic where it would repack W.
struct RowKernels {
  vec_dot_fn one;
  vec_dot_k_fn k;  // may be null: `one` per row
  vec_dot_rows_fn rows;  // decode, several weight rows per call; may be null: `one` per row
  bool rp;
};
static RowKernels row_kernels(const Weight& W) {
  const auto& tr = get_type_traits(W.type);
  if (tr.vec_dot_rp && W.ne[1] % 8 == 0) return {tr.vec_dot_rp, tr.vec_dot_rp_k, tr.vec_dot_rp_rows, true};
  return {tr.vec_dot, tr.vec_dot_k, tr.vec_dot_rows, false};
}

// One weight row against activation rows [t0, t1): groups of up to kMaxRowsK rows share one decode
// of the weight row. Y[t * ldy] receives row t's result.
static inline void row_times_acts(const RowKernels& rk, int K, const uint8_t* wr, const QuantActs& qa, int t0, int t1,
                                  float* Y, int64_t ldy) {
  int t = t0;
  if (rk.k) {
    float s[kMaxRowsK];
    for (; t < t1; t += kMaxRowsK) {
      const int k = std::min(kMaxRowsK, t1 - t);
      rk.k(K, s, wr, qa.row(t), qa.row_bytes, k);
      for (int j = 0; j < k; j++) Y[(t + j) * ldy] = s[j];
    }
  }
  for (; t < t1; t++) rk.one(K, &Y[t * ldy], wr, qa.row(t));
}

// A thread's scratch of at least `bytes`, 64-byte aligned (decoded rows, AMX weight panels).
static uint8_t* aligned_scratch(std::vector<uint8_t>& buf, size_t bytes) {
  if (buf.size() < bytes + 64) buf.resize(bytes + 64);
  return buf.data() + (64 - (uintptr_t)buf.data() % 64) % 64;
}

// Prefill for the types whose decode costs more than several dots (dec_row: grid lookups): rows
// [n0, n1) are decoded once into a thread-local buffer (in L2), then each group of kMaxRowsK tokens
// meets every decoded row (each decoded block is loaded once per group). vec_dot_dec_k has
// vec_dot_k's bits, so the path is free to choose.
constexpr int kDecMinRows = 8;
static void mm_rows_decoded(const Weight& W, const QuantActs& qa, float* Y, int64_t ldy, int64_t n0, int64_t n1) {
  const type_traits& tr = get_type_traits(W.type);
  const int K = (int)W.ne[0];
  const size_t rb = tr.dec_row_bytes(K);
  thread_local std::vector<uint8_t> buf;
  uint8_t* dec = aligned_scratch(buf, (size_t)(n1 - n0) * rb);
  for (int64_t r = n0; r < n1; r++) tr.dec_row(K, W.data + r * W.nb1, dec + (r - n0) * rb);
  constexpr int G = kMaxRowsK;  // vs L1-sized groups: no slower at K = 5120, faster at K = 17408 (noisy box)
  float s[kMaxRowsK];
  for (int t0 = 0; t0 < qa.B; t0 += G) {
    const int k = std::min(G, qa.B - t0);
    for (int64_t r = n0; r < n1; r++) {
      tr.vec_dot_dec_k(K, s, dec + (r - n0) * rb, qa.row(t0), qa.row_bytes, k);
      for (int j = 0; j < k; j++) Y[(t0 + j) * ldy + r] = s[j];
    }
  }
}

// Weights in 16-row groups: each group meets the tokens kMaxRowsK at a time (x16_tile), so its blocks are
// decoded once per 8 tokens for 16 rows, and each row's bits are vec_dot_rp's whatever B is. [n0, n1) may
// cut a group: its rows outside are computed and dropped.
static void mm_groups_tile(const Weight& W, const QuantActs& qa, x16_tile_fn tile, float* Y, int64_t ldy, int64_t n0,
                           int64_t n1) {
  const int K = (int)W.ne[0];
  float c[kMaxRowsK][kGroupRows];
  const X16ActsScope scope;  // the same rows for every group below
  for (int64_t g = n0 / kGroupRows * kGroupRows; g < n1; g += kGroupRows) {
    const uint8_t* wg = W.data + g * W.nb1;
    const int64_t a = std::max(n0, g), e = std::min(n1, g + kGroupRows);
    for (int t0 = 0; t0 < qa.B; t0 += kMaxRowsK) {
      const int k = std::min(kMaxRowsK, qa.B - t0);
      if (a == g && e == g + kGroupRows) {
        tile(K, wg, qa.row(t0), qa.row_bytes, k, Y + t0 * ldy + g, ldy);
        continue;
      }
      tile(K, wg, qa.row(t0), qa.row_bytes, k, &c[0][0], kGroupRows);
      for (int j = 0; j < k; j++) std::memcpy(Y + (t0 + j) * ldy + a, &c[j][a - g], (e - a) * sizeof(float));
    }
  }
}
// The read mode of cpu/prefetch_tune.h picks the kernel; in the streams mode a decode or short batch (B <= the
// type's x16_streams_k) takes the range's whole groups kX16Streams at a time, side by side (x16_streams); the
// groups left over (cut at the range's ends, or too few for a set) go through x16_tile.
static void mm_groups(const Weight& W, const QuantActs& qa, float* Y, int64_t ldy, int64_t n0, int64_t n1) {
  const type_traits& tt = get_type_traits(W.type);
  const int mode = x16_prefetch_running(W.type, qa.B);
  const x16_tile_fn tile = x16_kernel(tt, mode);
  if (mode != kX16PfStreams || !tt.x16_streams || qa.B > tt.x16_streams_k)
    return mm_groups_tile(W, qa, tile, Y, ldy, n0, n1);
  constexpr int64_t kSet = kX16Streams * kGroupRows;
  int64_t g = (n0 + kGroupRows - 1) / kGroupRows * kGroupRows;  // the first whole group
  if (g > n0) mm_groups_tile(W, qa, tile, Y, ldy, n0, std::min(n1, g));
  for (; g + kSet <= n1; g += kSet)
    tt.x16_streams((int)W.ne[0], W.data + g * W.nb1, kGroupRows * W.nb1, qa.row(0), qa.row_bytes, qa.B, Y + g, ldy);
  if (g < n1) mm_groups_tile(W, qa, tile, Y, ldy, g, n1);
}

// Rows [n0, n1) of W against all B activation rows, tiled so a block of weight rows stays in
// L1/L2 while it meets every token of a token block.
static void mm_rows(const Weight& W, const QuantActs& qa, float* Y, int64_t ldy, int64_t n0, int64_t n1) {
  if (W.grouped) {
    mm_groups(W, qa, Y, ldy, n0, n1);
    return;
  }
  const RowKernels rk = row_kernels(W);
  const int K = (int)W.ne[0];
  const int B = qa.B;
  const bool emu = kGemmEmu && (W.type == GGML_TYPE_Q4_K || W.type == GGML_TYPE_Q2_K) && rk.rp;
  const int t_gemm = emu ? B - B % 4 : 0;
  const vec_dot_fn gemm_order = W.type == GGML_TYPE_Q2_K ? dot_q2_K_gemm_order : dot_q4_K_gemm_order;
  // One activation row (decode): several weight rows per call, so their accumulator chains overlap;
  // else one vec_dot per row without the tiling below (its loops cost as much as a 256-element dot)
  if (B == 1) {
    if (rk.rows)
      for (int64_t r = n0; r < n1; r += kMaxWeightRows)
        rk.rows(K, Y + r, W.data + r * W.nb1, W.nb1, qa.row(0), (int)std::min<int64_t>(kMaxWeightRows, n1 - r));
    else
      for (int64_t r = n0; r < n1; r++) rk.one(K, Y + r, W.data + r * W.nb1, qa.row(0));
    return;
  }
  if (B >= kDecMinRows && !rk.rp && get_type_traits(W.type).vec_dot_dec_k) {
    mm_rows_decoded(W, qa, Y, ldy, n0, n1);
    return;
  }
  // Long rows (8 activation rows over ~32 KiB): groups of 4 tokens stay in L1 while the chunk's weight
  // rows (in L2) pass by, instead of 8 tokens streamed from L2 for every weight row (measured: Q4_K with
  // K = 5120 ran at half the speed of K = 512 before).
  if (B >= 16 && !emu && rk.k && 8 * qa.row_bytes > 32768) {
    float s[4];
    for (int t0 = 0; t0 + 4 <= B; t0 += 4)
      for (int64_t r = n0; r < n1; r++) {
        rk.k(K, s, W.data + r * W.nb1, qa.row(t0), qa.row_bytes, 4);
        for (int j = 0; j < 4; j++) Y[(t0 + j) * ldy + r] = s[j];
      }
    const int tr = B - B % 4;  // the last B % 4 tokens
    if (tr < B)
      for (int64_t r = n0; r < n1; r++) row_times_acts(rk, K, W.data + r * W.nb1, qa, tr, B, Y + r, ldy);
    return;
  }
  constexpr int64_t RB = 8;   // weight rows per tile
  constexpr int TB = 32;      // tokens per tile (a multiple of kMaxRowsK)
  for (int64_t r0 = n0; r0 < n1; r0 += RB) {
    const int64_t r1 = std::min(n1, r0 + RB);
    for (int t0 = 0; t0 < B; t0 += TB) {
      const int t1 = std::min(B, t0 + TB);
      for (int64_t r = r0; r < r1; r++) {
        const uint8_t* wr = W.data + r * W.nb1;
        int t = t0;
        for (; t < std::min(t1, t_gemm); t++) gemm_order(K, &Y[t * ldy + r], wr, qa.row(t));
        row_times_acts(rk, K, wr, qa, t, t1, Y + r, ldy);
      }
    }
  }
}

// Prefill and verification (2+ rows): activations repacked into panels of kGemmCols tokens (ggml/types.h), each panel met by
// kGemmRows weight rows at a time. Same per-pair arithmetic as mm_rows, so the path is free to choose.
struct Panels {
  std::vector<uint8_t> buf;  // [n][bytes]
  size_t bytes = 0;
  int n = 0;
  const uint8_t* at(int p) const { return buf.data() + (size_t)p * bytes; }
};
constexpr int kGemmMinRows = 2;  // from 2 rows the tile beats vec_dot_k (16 chains in flight; measured 2x at 4 rows)
static bool use_tiles(const Weight& W, const QuantActs& qa) {
  return get_type_traits(W.type).gemm_tile && qa.B >= kGemmMinRows && !row_kernels(W).rp &&
         get_type_traits(qa.type).gemm_pack;
}
// The batch's activation rows repacked into panels of `cols` tokens by a type's pack function (a last
// panel's missing rows are zeros); tp null: on this thread.
static void pack_into(ThreadPool* tp, const QuantActs& qa, Panels& P, int cols, gemm_pack_fn pack, size_t bytes,
                      int min_parallel) {
  P.n = (qa.B + cols - 1) / cols;
  P.bytes = bytes;
  P.buf.resize((size_t)P.n * P.bytes);
  auto body = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++)
      pack(qa.row((int)p * cols), qa.row_bytes, std::min(cols, qa.B - (int)p * cols), qa.K, P.buf.data() + (size_t)p * P.bytes);
  };
  if (tp && P.n >= min_parallel) tp->parallel_for(P.n, body); else body(0, P.n);
}
// AMX tiles on decoded rows (level amx): activations packed once per matmul into panels of kDecTileCols
// tokens; each chunk decodes kDecTileRows weight rows at a time into one tile, which meets every panel.
// dec_tile has vec_dot_dec_k's bits, so the path is free to choose.
constexpr int kDecTileMinRows = 64;  // below, the tile's decode and its stores cost more than they save (measured: even at 32)
static bool use_dec_tiles(const Weight& W, const QuantActs& qa) {
  const type_traits& tr = get_type_traits(W.type);
  return tr.dec_tile && qa.B >= kDecTileMinRows && W.ne[1] >= kDecTileRows && !row_kernels(W).rp &&
         get_type_traits(qa.type).dec_panel_pack;
}
static void mm_rows_dec_tiles(const Weight& W, const QuantActs& qa, const Panels& P, float* Y, int64_t ldy, int64_t n0,
                              int64_t n1) {
  const type_traits& tr = get_type_traits(W.type);
  const int K = (int)W.ne[0];
  thread_local std::vector<uint8_t> dbuf, tbuf;
  uint8_t* dec = aligned_scratch(dbuf, tr.dec_row_bytes(K));
  if (tbuf.size() < tr.dec_tile_bytes(K)) tbuf.resize(tr.dec_tile_bytes(K));
  const int64_t q1 = n0 + (n1 - n0) / kDecTileRows * kDecTileRows;
  for (int64_t r0 = n0; r0 < q1; r0 += kDecTileRows) {
    for (int i = 0; i < kDecTileRows; i++) {
      tr.dec_row(K, W.data + (r0 + i) * W.nb1, dec);
      tr.dec_tile_pack(K, dec, i, tbuf.data());
    }
    for (int p = 0; p < P.n; p++) {
      const int t0 = p * kDecTileCols;
      tr.dec_tile(K, tbuf.data(), P.at(p), Y + t0 * ldy + r0, ldy, std::min(kDecTileCols, qa.B - t0));
    }
  }
  if (q1 < n1) mm_rows_decoded(W, qa, Y, ldy, q1, n1);  // the last rows short of a tile
}

// Weight rows per chunk: about 32 KiB of W, 16..64 rows (a multiple of kGemmRows). Every chunk reads
// all panels once, so short rows get more of them per chunk (measured: 16-row chunks of 440-byte Q5_0
// rows ran at 2/3 the speed of 64-row chunks at 512 tokens).
constexpr int64_t kTileChunkMax = 64;
static int64_t tile_chunk(const Weight& W) {
  return std::max<int64_t>(16, std::min<int64_t>(kTileChunkMax, (int64_t)(32768 / W.nb1) / kGemmRows * kGemmRows));
}
// Rows [n0, n1) (at most kTileChunkMax) of W against every panel.
static void mm_rows_tiled(const Weight& W, const QuantActs& qa, const Panels& P, float* Y, int64_t ldy, int64_t n0,
                          int64_t n1) {
  const gemm_tile_fn tile = get_type_traits(W.type).gemm_tile;
  const int K = (int)W.ne[0];
  const int B = qa.B;
  const int64_t q1 = n0 + (n1 - n0) / kGemmRows * kGemmRows;
  const int nr = (int)(q1 - n0);
  // panels outer: the chunk's weight rows stay in cache while each panel is read once per chunk; a
  // panel's results leave as one contiguous run per token
  float c[kGemmCols][kTileChunkMax];
  for (int p = 0; p < P.n; p++) {
    const int t0 = p * kGemmCols, nt = std::min(kGemmCols, B - t0);
    for (int r = 0; r < nr; r += kGemmRows) tile(K, W.data + (n0 + r) * W.nb1, W.nb1, P.at(p), &c[0][r], kTileChunkMax, nt);
    for (int j = 0; j < nt; j++) std::memcpy(&Y[(t0 + j) * ldy + n0], c[j], nr * sizeof(float));
  }
  if (q1 < n1) mm_rows(W, qa, Y, ldy, q1, n1);  // the last rows short of a tile
}

// AMX prefill: activations packed once into 16-token panels; each chunk decodes 16 weight rows once and
// meets every panel with amx_tile (the same bits as the row kernels, so the path is free to choose).
// From amx_min_rows tokens (16, a full token tile, where the row kernels are fast: below it the tile
// computes mostly padding).
// Grouped weights: below 64 tokens the group kernel beats the tile, which pays for the rows' return to GGUF
// layout (measured: Q4_K, K = 5120, -t 1: 88 vs 40 GMAC/s at 16 tokens, 86 vs 86-91 at 64, 74 vs 100 at 512).
constexpr int kGroupedAmxMinRows = 64;
static bool use_amx(const Weight& W, const QuantActs& qa) {
  const auto& t = get_type_traits(W.type);
  return t.amx_tile && qa.B >= (W.grouped ? kGroupedAmxMinRows : t.amx_min_rows) && W.ne[1] >= kAmxRows && (W.grouped || row_kernels(W).rp) &&
         get_type_traits(qa.type).amx_pack;
}
static void pack_amx(ThreadPool* tp, const QuantActs& qa, Panels& P) {
  const auto& vt = get_type_traits(qa.type);
  pack_into(tp, qa, P, kAmxCols, vt.amx_pack, vt.amx_a_bytes(qa.K), 2);
}
// weight rows [r0, r0 + kAmxRows) against every panel
static void mm_rows_amx(const Weight& W, const QuantActs& qa, const Panels& P, float* Y, int64_t ldy, int64_t r0) {
  const type_traits& tr = get_type_traits(W.type);
  const int K = (int)W.ne[0];
  thread_local std::vector<uint8_t> wbuf;
  uint8_t* w = aligned_scratch(wbuf, tr.amx_w_bytes(K));
  const uint8_t* rows = W.data + r0 * W.nb1;
  if (W.grouped) {  // the group's 16 rows back in GGUF layout for amx_dec (r0 % 16 == 0)
    thread_local std::vector<uint8_t> rbuf;
    uint8_t* rb = aligned_scratch(rbuf, kAmxRows * W.nb1);
    for (int i = 0; i < kAmxRows; i++) deinterleave_row(W.type, rows, i, K, rb + i * W.nb1);
    rows = rb;
  }
  tr.amx_dec(K, rows, W.nb1, w);
  float c[kAmxCols][kAmxRows];
  for (int p = 0; p < P.n; p++) {
    const int t0 = p * kAmxCols, nt = std::min(kAmxCols, qa.B - t0);
    tr.amx_tile(K, w, P.at(p), &c[0][0], kAmxRows, nt);
    for (int j = 0; j < nt; j++) std::memcpy(&Y[(t0 + j) * ldy + r0], c[j], kAmxRows * sizeof(float));
  }
}

// AMX tiles on 16-row groups (x16_amx) for verification batches and prompts: each super-block of a group is
// decoded once per 32 tokens, straight from the group. Measured (Q4_K, K = 5120, GMAC/s, group kernel / these
// tiles / amx_tile on rows back in GGUF layout): -t 1 B = 4 109 / 100, 5 110 / 120, 8 137 / 170, 64 - / 355 / 163,
// 256 - / 250 / 243, 512 - / 217 / 224; -t 2 B = 4 189 / 187, 5 189 / 217. Past kX16AmxMaxRows amx_tile's one
// decode per matmul wins.
constexpr int kX16AmxMinRows = 5, kX16AmxMaxRows = 256;
static bool use_amx_groups(const Weight& W, const QuantActs& qa) {
  return W.grouped && get_type_traits(W.type).x16_amx && qa.B >= kX16AmxMinRows && qa.B < kX16AmxMaxRows &&
         get_type_traits(qa.type).x16_amx_pack;
}
// the groups in [n0, n1) (multiples of 16) against every panel of kAmxCols tokens
static void mm_groups_amx(const Weight& W, const QuantActs& qa, const Panels& P, float* Y, int64_t ldy, int64_t n0,
                          int64_t n1) {
  const x16_amx_fn tile = get_type_traits(W.type).x16_amx;
  const int K = (int)W.ne[0];
  for (int64_t g = n0; g < n1; g += kGroupRows)
    for (int p = 0; p < P.n; p++) {
      const int t0 = p * kAmxCols;
      tile(K, W.data + g * W.nb1, P.at(p), Y + t0 * ldy + g, ldy, std::min(kAmxCols, qa.B - t0));
    }
}

// The paths a weight's product can take; each gives every pair the row kernels' bits, so the choice is free.
enum class MmPath { Rows, Tiles, DecTiles, Amx, AmxGroups };
constexpr int kMmPaths = 5;
static MmPath choose_path(const Weight& W, const QuantActs& qa) {
  if (use_amx_groups(W, qa)) return MmPath::AmxGroups;
  if (use_amx(W, qa)) return MmPath::Amx;
  if (W.grouped) return MmPath::Rows;  // the tiles read GGUF rows
  if (use_dec_tiles(W, qa)) return MmPath::DecTiles;
  if (use_tiles(W, qa)) return MmPath::Tiles;
  return MmPath::Rows;
}
// The activation panels a path reads (none for Rows); tp null: packed on this thread.
static void pack_for(MmPath path, ThreadPool* tp, const QuantActs& qa, Panels& P) {
  const auto& vt = get_type_traits(qa.type);
  if (path == MmPath::Amx || path == MmPath::DecTiles || path == MmPath::AmxGroups) amx_new_epoch();
  switch (path) {
    case MmPath::Tiles: pack_into(tp, qa, P, kGemmCols, vt.gemm_pack, vt.gemm_panel_bytes(qa.K), 8); break;
    case MmPath::DecTiles: pack_into(tp, qa, P, kDecTileCols, vt.dec_panel_pack, vt.dec_panel_bytes(qa.K), 4); break;
    case MmPath::Amx: pack_amx(tp, qa, P); break;
    case MmPath::AmxGroups: pack_into(tp, qa, P, kAmxCols, vt.x16_amx_pack, vt.x16_amx_panel_bytes(qa.K), 2); break;
    case MmPath::Rows: break;
  }
}

// One weight's part of a dispatch: its output rows in chunks, each chunk computed by its path.
struct MatmulJob {
  const Weight* W;
  const QuantActs* qa;
  const Panels* P;  // the path's panels (Rows: unused)
  MmPath path;
  float* Y;
  int64_t ldy, ch;  // ch: rows per chunk
  int64_t n_chunks() const { return (W->ne[1] + ch - 1) / ch; }
  void run(int64_t c) const {
    const int64_t r0 = c * ch, r1 = std::min(W->ne[1], r0 + ch);
    switch (path) {
      case MmPath::Tiles: mm_rows_tiled(*W, *qa, *P, Y, ldy, r0, r1); break;
      case MmPath::DecTiles: mm_rows_dec_tiles(*W, *qa, *P, Y, ldy, r0, r1); break;
      case MmPath::Amx:  // 16-row tiles; the last rows short of one by the row kernels
        if (r1 - r0 == kAmxRows) mm_rows_amx(*W, *qa, *P, Y, ldy, r0); else mm_rows(*W, *qa, Y, ldy, r0, r1);
        break;
      case MmPath::AmxGroups: mm_groups_amx(*W, *qa, *P, Y, ldy, r0, r1); break;
      case MmPath::Rows: mm_rows(*W, *qa, Y, ldy, r0, r1); break;
    }
  }
};
static MatmulJob plan_job(const Weight& W, const QuantActs& qa, MmPath path, const Panels* P, float* Y, int64_t ldy,
                          int n_threads) {
  const int64_t N = W.ne[1];
  int64_t ch;
  switch (path) {
    case MmPath::Tiles: ch = tile_chunk(W); break;
    case MmPath::DecTiles: ch = std::max<int64_t>(kDecTileRows, N / (8 * n_threads) / kDecTileRows * kDecTileRows); break;
    case MmPath::Amx: ch = kAmxRows; break;
    default: {
      // small chunks keep threads balanced when N is small; ~64 per thread when N is large (an output matrix of
      // 262144 rows was 16384 chunks, each a fetch_add on the shared counter's cache line). Grouped weights:
      // whole sets of kX16Streams groups, so the streams mode reads every group of a chunk side by side (with
      // 16-row units, 6144 rows made chunks of 3 groups and 1024 rows of 1, their odd group read alone at
      // about 2/3 of the speed: 4 % of 27B-shaped Q4_K decode time on 3 % of its bytes, perf)
      const int64_t unit = W.grouped ? kX16Streams * kGroupRows : 16;
      ch = std::max<int64_t>(unit, N / (64 * n_threads) / unit * unit);
    }
  }
  return MatmulJob{&W, &qa, P, path, Y, ldy, ch};
}
// tiny matrices (per-head norms, routers: < ~20 us) are not worth a dispatch, on either path
constexpr int64_t kMinDispatchMacs = 262144;

// A grouped product of up to kMaxRowsK tokens (one pass of the group kernels over the weights) is timed for
// cpu/prefetch_tune.h while its tuner measures.
static bool prefetch_timed(const Weight& W, const QuantActs& qa, MmPath path) {
  return W.grouped && qa.B <= kMaxRowsK && path == MmPath::Rows;
}
static double ns_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

void matmul_q(ThreadPool& tp, const Weight& W, const QuantActs& qa, float* Y, int64_t ldy) {
  x16_prefetch_threads(tp.n_threads());
  const bool inline_ = W.ne[1] * W.ne[0] * qa.B < kMinDispatchMacs || tp.n_threads() == 1;
  thread_local Panels tl_panels;  // the caller's; the workers see it through the job (a thread_local is not captured)
  const MmPath path = choose_path(W, qa);
  pack_for(path, inline_ ? nullptr : &tp, qa, tl_panels);
  const MatmulJob job = plan_job(W, qa, path, &tl_panels, Y, ldy, tp.n_threads());
  const size_t bytes = (size_t)W.ne[1] * W.nb1;
  const int pf = prefetch_timed(W, qa, path) ? x16_prefetch_begin(W.type, qa.B, bytes) : -1;
  const auto t0 = std::chrono::steady_clock::now();
  if (inline_) for (int64_t c = 0; c < job.n_chunks(); c++) job.run(c);
  else tp.for_chunks(job.n_chunks(), [&](int64_t c) { job.run(c); });
  if (pf >= 0) x16_prefetch_end(W.type, qa.B, pf, bytes, ns_since(t0));
}

void matmul_multi(ThreadPool& tp, const MatmulOut* outs, int n_out, const float* X, int64_t ldx, int B) {
  x16_prefetch_threads(tp.n_threads());
  if (n_out < 1 || n_out > kMaxMatmulMulti) throw std::invalid_argument("matmul_multi: 1.." + std::to_string(kMaxMatmulMulti) + " outputs");
  const int64_t K = outs[0].W->ne[0];
  // activations once per vec_dot_type (and panels once per type and path), all outputs' chunks in one dispatch
  thread_local QuantActs qa[kMaxMatmulMulti];
  thread_local Panels panels[kMaxMatmulMulti][kMmPaths];
  ggml_type vdt[kMaxMatmulMulti];
  bool packed[kMaxMatmulMulti][kMmPaths] = {};
  int n_vdt = 0;
  int64_t macs = 0;
  for (int i = 0; i < n_out; i++) macs += outs[i].W->ne[1] * K * B;
  const bool inline_ = macs < kMinDispatchMacs || tp.n_threads() == 1;
  MatmulJob jobs[kMaxMatmulMulti];
  int64_t first[kMaxMatmulMulti + 1] = {0};
  bool timed = true;  // every output a timed grouped product of one type
  size_t bytes = 0;
  for (int i = 0; i < n_out; i++) {
    const Weight& W = *outs[i].W;
    const auto& tr = get_type_traits(W.type);
    if (!tr.compute) throw std::runtime_error("tensor '" + W.name + "': type " + tr.name + " has no matmul kernel");
    if (W.ne[0] != K) throw std::invalid_argument("matmul_multi: tensor '" + W.name + "' has K = " + std::to_string(W.ne[0]) + ", the first has " + std::to_string(K));
    int v = 0;
    while (v < n_vdt && vdt[v] != tr.vec_dot_type) v++;
    if (v == n_vdt) { vdt[n_vdt++] = tr.vec_dot_type; quantize_acts(tp, X, ldx, B, K, tr.vec_dot_type, qa[v]); }
    const MmPath path = choose_path(W, qa[v]);
    Panels& P = panels[v][(int)path];
    if (!packed[v][(int)path]) { pack_for(path, inline_ ? nullptr : &tp, qa[v], P); packed[v][(int)path] = true; }
    jobs[i] = plan_job(W, qa[v], path, &P, outs[i].Y, outs[i].ldy, tp.n_threads());
    first[i + 1] = first[i] + jobs[i].n_chunks();
    timed = timed && prefetch_timed(W, qa[v], path) && W.type == outs[0].W->type;
    bytes += (size_t)W.ne[1] * W.nb1;
  }
  const ggml_type t0_type = outs[0].W->type;
  const int pf = timed ? x16_prefetch_begin(t0_type, B, bytes) : -1;
  const auto t0 = std::chrono::steady_clock::now();
  auto run = [&](int64_t c) {
    int i = 0;
    while (c >= first[i + 1]) i++;
    jobs[i].run(c - first[i]);
  };
  if (inline_) for (int64_t c = 0; c < first[n_out]; c++) run(c);
  else tp.for_chunks(first[n_out], run);
  if (pf >= 0) x16_prefetch_end(t0_type, B, pf, bytes, ns_since(t0));
}

void matmul_q_st(const Weight& W, const QuantActs& qa, float* Y, int64_t ldy, int64_t n0, int64_t n1) {
  if (qa.B == 1) {  // an expert's one token (decode): mm_rows' decode loop (rows kernels where the type has them)
    mm_rows(W, qa, Y, ldy, n0, n1);
    return;
  }
  int64_t r = n0;
  if (use_amx_groups(W, qa)) {  // an expert's routed tokens on tiles: its own panels; rows outside whole groups by the group kernel
    thread_local Panels tl_groups;
    pack_for(MmPath::AmxGroups, nullptr, qa, tl_groups);
    const int64_t g0 = std::min(n1, (n0 + kGroupRows - 1) / kGroupRows * kGroupRows), g1 = std::max(g0, n1 / kGroupRows * kGroupRows);
    if (n0 < g0) mm_groups(W, qa, Y, ldy, n0, g0);
    mm_groups_amx(W, qa, tl_groups, Y, ldy, g0, g1);
    if (g1 < n1) mm_groups(W, qa, Y, ldy, g1, n1);
    return;
  }
  if (use_amx(W, qa) && n1 - n0 >= kAmxRows) {  // an expert's routed rows: 16-row tiles, each thread packs its own panels
    thread_local Panels tl_panels;
    pack_for(MmPath::Amx, nullptr, qa, tl_panels);
    if (W.grouped && r % kAmxRows) {  // groups start at multiples of 16
      r = std::min(n1, (r / kAmxRows + 1) * kAmxRows);
      mm_groups(W, qa, Y, ldy, n0, r);
    }
    for (; r + kAmxRows <= n1; r += kAmxRows) mm_rows_amx(W, qa, tl_panels, Y, ldy, r);
  }
  if (W.grouped) {
    if (r < n1) mm_groups(W, qa, Y, ldy, r, n1);
    return;
  }
  const RowKernels rk = row_kernels(W);
  const int K = (int)W.ne[0];
  for (; r < n1; r++) row_times_acts(rk, K, W.data + r * W.nb1, qa, 0, qa.B, Y + r, ldy);
}

void gather_acts(const QuantActs& qa, const int* rows, int m, QuantActs& out) {
  out.type = qa.type; out.K = qa.K; out.B = m; out.row_bytes = qa.row_bytes;
  out.buf.resize((size_t)m * qa.row_bytes);
  for (int i = 0; i < m; i++) std::memcpy(out.buf.data() + (size_t)i * qa.row_bytes, qa.row(rows[i]), qa.row_bytes);
}

void matmul(ThreadPool& tp, const Weight& W, const float* X, int64_t ldx, int B, float* Y, int64_t ldy) {
  thread_local QuantActs qa;
  const auto& tr = get_type_traits(W.type);
  if (!tr.compute) throw std::runtime_error("tensor '" + W.name + "': type " + tr.name + " has no matmul kernel");
  quantize_acts(tp, X, ldx, B, W.ne[0], tr.vec_dot_type, qa);
  matmul_q(tp, W, qa, Y, ldy);
}

void copy_row(const Weight& W, int64_t id, uint8_t* out) {
  if (W.grouped) deinterleave_row(W.type, W.data + id / kGroupRows * kGroupRows * W.nb1, (int)(id % kGroupRows), W.ne[0], out);
  else std::memcpy(out, W.data + id * W.nb1, W.nb1);
}

void get_row(const Weight& W, int64_t id, float* out) {
  const auto& tr = get_type_traits(W.type);
  if (!W.grouped) {
    tr.to_float(W.data + id * W.nb1, out, W.ne[0]);
    return;
  }
  thread_local std::vector<uint8_t> row;
  row.resize(W.nb1);
  copy_row(W, id, row.data());
  tr.to_float(row.data(), out, W.ne[0]);
}

bool can_group(const Weight& W) {
  const type_traits& t = get_type_traits(W.type);
  return interleave_supported(W.type) && t.x16_simd && W.ne[1] % kGroupRows == 0 && W.ne[0] % t.blck_size == 0;
}

void group_rows(Weight& W, uint8_t* data) {
  interleave_rows(W.type, W.data, data, W.ne[1] * W.ne[2] * W.ne[3], W.ne[0]);
  W.data = data;
  W.grouped = true;
}

}  // namespace pyllm
