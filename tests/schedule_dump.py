"""Helper of test_schedules.py: logits of a long prompt (one batch, every row), single-token decode steps and two
sequences stepped together, saved to an .npz; the environment picks the kernels (PYLLM_FA_ROWS, PYLLM_AMX)."""
import sys

import numpy as np

sys.path.insert(0, sys.argv[0].rsplit("/", 1)[0])
from helpers_core import get_model, greedy_params, new_context, run_seqs  # noqa: E402

TEXT = ("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
        "The quick brown fox jumps over the lazy dog. ")


def main(key: str, n: int, out: str) -> None:
    m = get_model(key)
    ids = m.tokenize(TEXT * 80, True, False)[:n]
    c = new_context(m, n + 64)
    prefill = c.eval(0, ids, True)
    steps = np.concatenate([c.eval(0, [t], False) for t in ids[:3]])
    jobs = {0: (ids[:40], greedy_params(6, n_probs=4)), 1: (ids[7:30], greedy_params(4, n_probs=4))}
    two = run_seqs(new_context(m, 256, n_seq=2), m, jobs)
    probs = [[p for step in two[s]["probs"] for _, p in step["top"]] for s in (0, 1)]
    np.savez(out, prefill=prefill, steps=steps, tokens=np.array(two[0]["tokens"] + two[1]["tokens"]),
             probs=np.array(probs[0] + probs[1]))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
