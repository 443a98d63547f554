// The group kernels' software prefetch at decode, chosen by measurement as the process runs. The best choice
// differs by machine and the math is the same for every one (a prefetch changes no bit), so the first grouped
// decode products take the modes in turn, timed, and the fastest by bytes per second over them is kept.
// Measured, 27B-shaped Q4_K decode: SPR best with L2 at 9 KiB, Zen 5 with L1 at 9 KiB (T1 90 %, T0 103 % of the
// -t 1 read probe), a Xeon VM with a 480 MiB L3 without (-t 1: 9.0 t/s none, 7.8 L2, 7.1 L1).
// The fourth mode, streams, reads two groups side by side without prefetch (x16_streams: Q4_K up to 4 tokens,
// Q8_0 one): on that VM -t 1 10.6 t/s, -t 2 19.45 (none 9.8 / 17.2), the hardware prefetcher then following two
// streams per thread.
// PYLLM_X16_PREFETCH=none|l1|l2|streams fixes it (auto: measure).
#pragma once
#include <cstddef>

#include "ggml/types.h"

namespace pyllm {

// the group kernel for a mode (kX16PfNone..), or the table's default (x16_tile) for -1 / a level without them
x16_tile_fn x16_kernel(const type_traits& t, int mode);
const char* x16_prefetch_name(int mode);  // "none", "l1", "l2", "streams"; "measuring" for -1
int x16_prefetch_running();  // the mode the group kernels take now (-1: the table's default)
int x16_prefetch_chosen();   // the kept mode, -1 while measuring
void x16_prefetch_force(int mode);  // tests and benchmarks: fix a mode, or -1 to measure again
// One grouped decode product of `bytes` weight bytes: begin returns the mode it runs with (-1: not timed),
// end takes its wall time.
int x16_prefetch_begin(size_t bytes);
void x16_prefetch_end(int mode, size_t bytes, double ns);

}  // namespace pyllm
