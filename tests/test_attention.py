"""The many-query attention schedule (csrc/cpu/attention_tiles.cpp) gives the per-row kernel's bits: the same
logits, bit for bit, for a long prompt in one batch (every row; gemma3's past its 512-token sliding window), for
single-token decoding and for two sequences stepped together. PYLLM_FA_ROWS=1 selects the per-row kernel."""
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from helpers_core import model_path

CASES = {"gemma3": 560, "smollm2": 200, "qwen35-Q8_0": 300}  # head sizes 256 / 64 / the tiny model's; GQA 4 / 3 / 2


def _dump(key, n, rows, out):
    env = dict(os.environ, PYLLM_FA_ROWS="1" if rows else "0")
    subprocess.run([sys.executable, str(ROOT / "tests" / "attn_dump.py"), key, str(n), str(out)], env=env, check=True,
                   timeout=600)
    return np.load(out)


@pytest.mark.parametrize("key", list(CASES))
def test_tiles_equal_rows(key, tmp_path):
    model_path(key)  # skips when the model is missing
    a = _dump(key, CASES[key], True, tmp_path / "rows.npz")
    b = _dump(key, CASES[key], False, tmp_path / "tiles.npz")
    for name in ("prefill", "steps", "tokens", "probs"):
        assert a[name].shape == b[name].shape, name
        assert np.array_equal(a[name], b[name]), f"{key}: {name} differs between the attention schedules"
