// Machine read bandwidth, for `pyllm bench --bw`: the ceiling a memory-bound decode step can reach.
#pragma once
#include <cstddef>

namespace pyllm {

// n_threads threads each read their contiguous share of a `bytes` buffer (first touched by the same thread, so
// pages sit on its NUMA node), `passes` times per read pattern (streams side by side, software prefetch or
// not); returns the best pass in bytes per second.
double read_bandwidth(int n_threads, size_t bytes, int passes);

}  // namespace pyllm
