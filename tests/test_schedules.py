"""Kernel schedules that are an implementation choice give the same bits, end to end: the same logits, bit for bit,
for a long prompt in one batch (every row), for single-token decoding and for two sequences stepped together.
- attention: the many-query schedule (csrc/cpu/attention_tiles.cpp; its AVX2 half with PYLLM_FA_TILES=avx2) vs the
  per-row kernel (PYLLM_FA_ROWS=1); gemma3 runs past its 512-token sliding window;
- the AMX prefill kernels (Q4_K, Q2_K; dense and the MoE experts' routed rows) vs the AVX-512 ones (PYLLM_AMX=0)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from helpers_core import model_path
from pyllm import _core

FA_CASES = {"gemma3": 560, "smollm2": 200, "qwen35-Q8_0": 300}  # head sizes 256 / 64 / the tiny model's; GQA 4 / 3 / 2
AMX_CASES = {"qwen35-Q4_K_M": 300, "moe-fused-Q4_K_M": 300, "qwen35-Q2_K": 300, "gemma3": 200}


def _dump(key, n, env, out):
    subprocess.run([sys.executable, str(ROOT / "tests" / "schedule_dump.py"), key, str(n), str(out)],
                   env=dict(os.environ, **env), check=True, timeout=600)
    return np.load(out)


def _same(key, n, env_a, env_b, tmp_path, what):
    model_path(key)  # fails clearly when the model is missing
    a = _dump(key, n, env_a, tmp_path / "a.npz")
    b = _dump(key, n, env_b, tmp_path / "b.npz")
    for name in ("prefill", "steps", "tokens", "probs"):
        assert a[name].shape == b[name].shape, name
        assert np.array_equal(a[name], b[name]), f"{key}: {name} differs between the {what}"


@pytest.mark.parametrize("key", list(FA_CASES))
def test_attention_tiles_equal_rows(key, tmp_path):
    _same(key, FA_CASES[key], {"PYLLM_FA_ROWS": "1"}, {"PYLLM_FA_ROWS": "0"}, tmp_path, "attention schedules")


@pytest.mark.skipif(not _core.simd_level_supported("avx512"), reason="AVX2 machines run the AVX2 tiles in the test above")
@pytest.mark.parametrize("key", list(FA_CASES))
def test_attention_avx2_tiles_equal_rows(key, tmp_path):
    """The AVX2 half of the tiles (8-lane halves of the AVX-512 lanes) on an AVX-512 machine"""
    _same(key, FA_CASES[key], {"PYLLM_FA_ROWS": "1"}, {"PYLLM_FA_ROWS": "0", "PYLLM_FA_TILES": "avx2"}, tmp_path, "attention schedules")


@pytest.mark.skipif(not _core.amx_available(), reason="no AMX-INT8 here (CPU, or the OS does not grant the tile state)")
@pytest.mark.parametrize("key", list(AMX_CASES))
def test_amx_equals_avx512(key, tmp_path):
    _same(key, AMX_CASES[key], {"PYLLM_AMX": "0"}, {"PYLLM_AMX": "1"}, tmp_path, "AMX and AVX-512 kernels")
