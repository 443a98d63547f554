"""Replay a llama-server fixture the way llama-server schedules it, to tell numerics from scheduling.

For models with sliding-window attention (or recurrent state) llama-server evaluates the last 4 prompt tokens as a
batch of their own (a context checkpoint goes before them), then decodes one token per step. Upstream's repacked-Q4_K
matmul rounds rows in complete groups of 4 of a batch (gemm) differently from the others (gemv), so the split changes
its results; run with PYLLM_Q4K_GEMM_EMU=1 to compute the same way (not batch invariant, diagnostic only).

usage: PYLLM_Q4K_GEMM_EMU=1 python3 tools/server_split_check.py MODEL.gguf FIXTURE.json [split=1]
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pyllm import _core  # noqa: E402


def logprobs(lg):
    lg = np.asarray(lg, dtype=np.float64)
    return lg - lg.max() - np.log(np.exp(lg - lg.max()).sum())


def main(model, fixture, split=True):
    d = json.load(open(fixture))
    m = _core.Model(model)
    worst = 0.0
    for c in d["complete"]:
        ids = m.tokenize(c["prompt"], True, True)
        n = len(ids)
        ctx = _core.Context(m, 512, 1, n_threads=2)
        if split and n > 4:
            ctx.eval(0, ids[:n - 4], False)
            lg = ctx.eval(0, ids[n - 4:], False)[-1]
        else:
            lg = ctx.eval(0, ids, False)[-1]
        maxd, same, step = 0.0, True, 0
        for step, (tok, top) in enumerate(zip(c["tokens"], c["top_logprobs"])):
            lp = logprobs(lg)
            maxd = max(maxd, max(abs(lp[t] - v) for t, v in top))
            if int(np.argmax(lg)) != tok:
                same = False
                break
            lg = ctx.eval(0, [tok], False)[-1]
        worst = max(worst, maxd)
        print(f"{c['prompt'][:25]!r}: n_prompt={n} greedy_same={same} steps={step + 1} max|dlogprob|={maxd:.5f}")
    print("MAX", round(worst, 5))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], len(sys.argv) < 4 or sys.argv[3] != "0")
