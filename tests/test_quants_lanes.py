"""quantize_fast (csrc/ggml/quants_lanes.cpp) writes exactly the reference quantizers' bytes."""
import numpy as np
import pytest

from pyllm import _core

Q4_K, Q5_K, Q6_K, Q8_0 = 12, 13, 14, 8


def _cases(rng):
    n = 256 * 64
    yield rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)
    yield (rng.standard_normal(n) * 300).astype(np.float32)
    yield 1 + 0.1 * rng.standard_normal(n, dtype=np.float32)              # all positive: min clamped to 0
    yield -np.abs(rng.standard_normal(n, dtype=np.float32))               # all negative
    yield rng.integers(-3, 4, n).astype(np.float32)                       # few distinct values, ties
    yield np.zeros(n, np.float32)
    x = np.repeat(rng.standard_normal(n // 32, dtype=np.float32), 32)     # constant sub-blocks (flat lanes)
    x[::97] = 0.5
    yield x
    x = rng.standard_normal(n, dtype=np.float32) * np.float32(1e-3)
    x[: n // 2] = -2.0                                                    # flat negative sub-blocks + normal ones
    yield x
    x = np.zeros(n, np.float32)
    x[::256] = 1.0                                                        # one value per super-block
    yield x
    yield rng.standard_normal(n, dtype=np.float32) * np.float32(1e-20)    # tiny scales (f16 underflow)


@pytest.mark.parametrize("t", [Q4_K, Q5_K])
def test_lanes_match_reference(t):
    rng = np.random.default_rng(11)
    for i, x in enumerate(_cases(rng)):
        assert np.asarray(_core.quantize_fast(t, x)).tobytes() == np.asarray(_core.quantize(t, x)).tobytes(), i


@pytest.mark.parametrize("t", [Q6_K, Q8_0])
def test_other_types_are_the_reference(t):
    x = np.random.default_rng(1).standard_normal(256 * 4, dtype=np.float32)
    assert np.asarray(_core.quantize_fast(t, x)).tobytes() == np.asarray(_core.quantize(t, x)).tobytes()


def test_bad_input():
    with pytest.raises(ValueError):
        _core.quantize_fast(Q4_K, np.zeros(100, np.float32))  # not whole blocks
    with pytest.raises(ValueError):
        _core.quantize_fast(9999, np.zeros(256, np.float32))
