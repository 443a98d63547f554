// The group kernels' software prefetch, chosen by measurement as the process runs. The best choice differs by
// machine, by weight type and by batch size, and the math is the same for every one (a prefetch changes no bit),
// so each (type, class, thread count) has its own tuner: class decode (one token) and class batch (2..kMaxRowsK
// tokens, a verification; longer batches take its mode untimed: their rate is the arithmetic's, near equal in
// every mode); the thread count, as the best mode at -t 1 need not be the best at -t 2 (Zen 4 VM, 27B-shaped
// Q4_K decode, medians of 5: -t 2 none 19.5, L2 18.0 t/s, where -t 1 had L2 14.3, none 11.4).
// A tuner runs its grouped products in blocks of about kBlockBytes of weights per mode, the modes in turn,
// kRounds times, and keeps the fastest by bytes per second over them. Blocks, not single calls: switching the
// mode at every call hid most of the difference (Zen 4, 27B-shaped Q4_K decode: none 21.5 vs L2 22.4 GB/s per
// call in turn, where whole runs gave 11.6-12.6 vs 13.9-14.1 t/s; the tuner kept none).
// Measured, 27B-shaped Q4_K decode: SPR best with L2 at 9 KiB, Zen 5 with L1 at 9 KiB (T1 90 %, T0 103 % of the
// -t 1 read probe), a Xeon VM with a 480 MiB L3 without (-t 1: 9.0 t/s none, 7.8 L2, 7.1 L1), Zen 4 with L2
// (decode +12-20 %, 4 and 8 tokens +40-80 % over none).
// The fourth mode, streams, reads two groups side by side without prefetch (x16_streams: Q4_K up to 4 tokens,
// Q8_0 one): on that VM -t 1 10.6 t/s, -t 2 19.45 (none 9.8 / 17.2), the hardware prefetcher then following two
// streams per thread.
// PYLLM_X16_PREFETCH=none|l1|l2|streams fixes it for every tuner (auto: measure).
#pragma once
#include <cstddef>
#include <string>

#include "ggml/types.h"

namespace pyllm {

enum X16PfClass { kX16Decode = 0, kX16Batch = 1, kX16Classes = 2 };
inline int x16_pf_class(int B) { return B <= 1 ? kX16Decode : kX16Batch; }

// the group kernel for a mode (kX16PfNone..), or the table's default (x16_tile) for -1 / a level without them
x16_tile_fn x16_kernel(const type_traits& t, int mode);
const char* x16_prefetch_name(int mode);  // "none", "l1", "l2", "streams"; "measuring" for -1
// The thread count of the pool whose products run now (matmul sets it before each; the workers' kernels read the
// mode of its tuners). A process running pools of other sizes at once only gets another tuner's mode: no bit changes.
void x16_prefetch_threads(int n_threads);
int x16_prefetch_running(ggml_type t, int B);  // the mode the group kernels take now for B tokens (-1: the default)
// What the tuners that ran hold (of n_threads' pools; 0: all): the forced mode; "measuring" while one measures
// or none ran; the one mode they all kept; else each one's, as "q4_K decode -t 2 l2, q4_K batch -t 2 none".
std::string x16_prefetch_summary(int n_threads = 0);
void x16_prefetch_force(int mode);  // tests and benchmarks: fix a mode for all, or -1 to measure again
// One grouped product of B tokens over `bytes` weight bytes of type t: begin returns the mode it runs with (-1:
// not timed), end takes its wall time.
int x16_prefetch_begin(ggml_type t, int B, size_t bytes);
void x16_prefetch_end(ggml_type t, int B, int mode, size_t bytes, double ns);

}  // namespace pyllm
