#!/usr/bin/env python3
"""Matmul kernel probe: GMAC/s of y = W x per weight type and batch size (B = 1 decode, 2-8 verification,
32-512 prefill), outside any model. Run it before and after a kernel change, on a quiet machine.

    python tools/bench_matmul.py --types q4_K,q8_0 -B 1,8,64,512 -N 2048 -K 2048 -t 2
"""
import argparse
import sys

import numpy as np

from pyllm import _core

TYPE_IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "q2_K": 10, "q3_K": 11,
            "q4_K": 12, "q5_K": 13, "q6_K": 14, "iq2_xxs": 16, "iq2_xs": 17, "iq3_xxs": 18, "iq1_s": 19, "iq4_nl": 20,
            "iq3_s": 21, "iq2_s": 22, "iq4_xs": 23, "iq1_m": 29, "bf16": 30, "mxfp4": 39}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default="q4_K,q5_0,q6_K,q8_0")
    ap.add_argument("-B", default="1,4,8,64,512", help="activation rows, comma list")
    ap.add_argument("-N", type=int, default=2048, help="weight rows")
    ap.add_argument("-K", type=int, default=2048, help="row length")
    ap.add_argument("-t", type=int, default=2, help="threads")
    ap.add_argument("-r", type=int, default=5, help="repetitions (best is kept)")
    ap.add_argument("-nr", "--no-repack", action="store_true",
                    help="keep the GGUF row layout (default: 16-row groups where a model's load makes them)")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    bs = [int(b) for b in a.B.split(",")]
    print(f"N={a.N} K={a.K} t={a.t} simd={_core.simd_level()}")
    print(f"{'type':>7} " + " ".join(f"{'B=' + str(b):>10}" for b in bs) + "   (GMAC/s)")
    for name in a.types.split(","):
        if name not in TYPE_IDS:
            sys.exit(f"bench_matmul: unknown type {name!r} (known: {', '.join(TYPE_IDS)})")
        tid = TYPE_IDS[name]
        w = _core.quantize_fast(tid, rng.standard_normal(a.N * a.K).astype(np.float32)) \
            if _core.type_traits(tid).get("has_quantize_fast") else \
            _core.quantize(tid, rng.standard_normal(a.N * a.K).astype(np.float32))
        cells = []
        for b in bs:
            sec = _core.bench_matmul(tid, w, a.N, a.K, b, a.t, a.r, grouped=not a.no_repack)
            cells.append(f"{a.N * a.K * b / sec / 1e9:10.2f}")
        print(f"{name:>7} " + " ".join(cells))


if __name__ == "__main__":
    main()
