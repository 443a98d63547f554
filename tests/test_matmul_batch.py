"""Batch invariance at the matmul level: whatever path matmul takes for a batch (vec_dot per row, vec_dot_k
groups, prefill tiles over repacked activation panels), every (weight row, activation row) result is the
single-row bits. Run for every weight type, at every SIMD level, with the row and token counts that leave
partial tiles and partial panels."""
import os
import re

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from pyllm import _core as c
from test_quants import HALF_FIELDS, LEVELS, bits, random_row

TYPES = [QT.F32, QT.F16, QT.BF16] + [t for t in HALF_FIELDS if t not in (QT.IQ1_M,)] + [QT.IQ1_M]
TILE_REQUIRED_AVX512 = {QT.Q8_0, QT.Q4_0, QT.Q5_0, QT.IQ4_NL, QT.Q4_1, QT.Q5_1}
# prefill on decoded rows (matmul from kDecMinRows = 8 tokens): the batch tests below cover its bits
# (Q5_K: its mins chain beside the lanes)
DEC_REQUIRED_AVX512 = {QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S, QT.Q3_K, QT.Q5_K}


@pytest.fixture(autouse=True)
def restore_level():
    yield
    c.set_simd_level("auto")


def weights(t, n_rows, k, rng):
    return np.concatenate([random_row(t, k, rng) for _ in range(n_rows)])


@pytest.mark.parametrize("level", LEVELS)
def test_tiles_present_where_expected(level):
    c.set_simd_level(level)
    for key in ("has_gemm_tile", "has_vec_dot_rows", "has_vec_dot_dec", "has_dec_tile"):
        have = {t for t in TYPES if c.type_traits(int(t))[key]}
        if level == "amx" or (level == "avx512" and key != "has_dec_tile"):
            assert (TILE_REQUIRED_AVX512 if key in ("has_gemm_tile", "has_vec_dot_rows") else DEC_REQUIRED_AVX512) <= have, key
        elif level == "avx2" and key == "has_gemm_tile":
            assert have == TILE_REQUIRED_AVX512, key  # the 32-block tiles (gemm_avx2.inc.h)
        else:
            assert not have, key  # none below AVX-512 (AMX) yet: they would need their own bit-identity test here


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_decode_rows_equal_vec_dot(level, t):
    """One activation row (decode: several weight rows per kernel call) == vec_dot per row, bit for bit."""
    c.set_simd_level(level)
    rng = np.random.default_rng(int(t) + 5)
    bk = c.type_traits(int(t))["blck_size"]
    # odd and even block counts; 37 blocks of 32: the decode kernel's scale segments (16 blocks) twice and a tail
    for k in (max(bk, 32) * (7 if bk < 256 else 2), max(bk, 32) * 8) + ((32 * 37,) if bk == 32 else ()):
        n_rows = 11  # two groups of 4 and a group of 3
        w = weights(t, n_rows, k, rng)
        x = rng.standard_normal(k).astype(np.float32)
        row_bytes = len(w) // n_rows
        one = np.array([c.vec_dot(int(t), w[r * row_bytes:(r + 1) * row_bytes], x, act=True)
                        for r in range(n_rows)], np.float32)
        for nt in (1, 2):
            got = c.matmul(int(t), w, n_rows, x[None, :], nt)[0]
            assert np.array_equal(bits(got), bits(one)), f"{t.name}@{level} K={k} threads={nt}"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_batch_rows_equal_single_rows(level, t):
    c.set_simd_level(level)
    rng = np.random.default_rng(int(t) + 17)
    bk = c.type_traits(int(t))["blck_size"]
    k = max(bk, 32) * (7 if bk < 256 else 2)  # an odd block count where the block is small
    x = rng.standard_normal((37, k)).astype(np.float32)  # 9 full panels of 4 + 1 partial
    x[3] *= 1e-3
    # 22 rows: tiles + 2 rows short of a tile in one chunk; 150: several chunks over 2 threads, a short last one
    for n_rows in (22, 150):
        assert_batches_equal_single_rows(t, weights(t, n_rows, k, rng), n_rows, x, (2, 3, 5, 8, 16, 19, 37), level)


def assert_batches_equal_single_rows(t, w, n_rows, x, batches, what):
    single = np.concatenate([c.matmul(int(t), w, n_rows, x[b:b + 1]) for b in range(len(x))])
    for b in batches:
        for nt in (1, 2):
            got = c.matmul(int(t), w, n_rows, x[:b], nt)
            assert np.array_equal(bits(got), bits(single[:b])), f"{t.name}@{what} N={n_rows} B={b} threads={nt}"


@pytest.mark.skipif("amx" not in LEVELS, reason="needs AMX-INT8 and the OS's permission for the tile state")
@pytest.mark.parametrize("t", sorted(DEC_REQUIRED_AVX512), ids=lambda t: t.name)
def test_amx_dec_tiles_equal_single_rows(t):
    """The AMX tiles on decoded rows (matmul from 64 tokens): every (row, token) result is the single-row
    bits of the AVX-512 level (full and partial tiles of 16 rows, full and partial panels of 16 tokens,
    one and two threads), and it is W x."""
    rng = np.random.default_rng(int(t) + 29)
    k, n_rows = 256 * 5, 45  # 2 tiles + 13 rows short of one
    w = weights(t, n_rows, k, rng)
    x = rng.standard_normal((100, k)).astype(np.float32)
    x[5] *= 1e-3
    x[70] = 0.0
    c.set_simd_level("avx512")
    single = np.concatenate([c.matmul(int(t), w, n_rows, x[b:b + 1]) for b in range(len(x))])
    c.set_simd_level("amx")
    assert c.type_traits(int(t))["has_dec_tile"]
    for b in (64, 77, 100):
        for nt in (1, 2):
            got = c.matmul(int(t), w, n_rows, x[:b], nt)
            assert np.array_equal(bits(got), bits(single[:b])), f"{t.name} B={b} threads={nt}"
    wf = c.dequantize(int(t), w, n_rows * k).reshape(n_rows, k)
    ref = x @ wf.T
    assert np.abs(got - ref).max() <= 0.02 * np.abs(ref).max(), t.name


def test_tile_results_are_the_dot_products():
    """The tile path computes W x (against the dequantized weights), not only something batch invariant."""
    rng = np.random.default_rng(3)
    for t in sorted(TILE_REQUIRED_AVX512):
        k, n_rows = 32 * 9, 8
        w = weights(t, n_rows, k, rng)
        x = rng.standard_normal((24, k)).astype(np.float32)
        got = c.matmul(int(t), w, n_rows, x)
        wf = c.dequantize(int(t), w, n_rows * k).reshape(n_rows, k)
        ref = x @ wf.T
        assert np.abs(got - ref).max() <= 0.02 * np.abs(ref).max(), t.name


def test_matmul_binding_errors():
    rng = np.random.default_rng(0)
    w = weights(QT.Q8_0, 4, 64, rng)
    with pytest.raises(ValueError, match="rows"):
        c.matmul(int(QT.Q8_0), w, 5, np.zeros((2, 64), np.float32))
    with pytest.raises(ValueError):
        c.matmul(int(QT.Q8_0), w, 4, np.zeros((2, 48), np.float32))  # not a multiple of the block size


@pytest.mark.parametrize("t", [QT.Q8_0, QT.Q8_1, QT.Q8_K], ids=lambda t: t.name)
def test_activation_quantizers_equal_scalar(t):
    """The SIMD activation quantizers give the scalar reference's bytes (zeros, ties, sign of the largest)."""
    rng = np.random.default_rng(int(t))
    n = 256 * 6
    x = rng.standard_normal(n).astype(np.float32)
    x[:256] = 0.0  # an all-zero block
    x[256:512] = np.round(rng.standard_normal(256) * 4) / 2  # many exact halves after scaling
    x[512] = -np.abs(x[512:768]).max() * 1.5  # the largest magnitude is negative ...
    x[600] = -x[512]  # ... and appears again positive later: the first one decides
    x[1024:1280] *= 1e-30  # tiny values
    ref = {}
    for lv in LEVELS:
        c.set_simd_level(lv)
        ref[lv] = (c.quantize(int(t), x, act=True).tobytes(), c.quantize(int(t), x).tobytes())
    assert len({v for v in ref.values()}) == 1, {lv: [len(a) for a in v] for lv, v in ref.items()}


AMX = c.amx_available()


@pytest.mark.skipif(not AMX, reason="no AMX-INT8 here (CPU, or the OS does not grant the tile state)")
@pytest.mark.parametrize("t", [QT.Q4_K, QT.Q2_K, QT.MXFP4], ids=lambda t: t.name)
def test_amx_equals_single_rows(t):
    """The AMX prefill (rows in groups of 16 x 32 tokens, from 16 tokens; MXFP4 from 2) gives every
    pair the single-row bits of the repacked kernel (weights with a multiple of 8 rows), including a last tile of 8 rows and partial token
    tiles."""
    c.set_simd_level("amx")
    assert c.type_traits(int(t))["has_amx"]
    rng = np.random.default_rng(23)
    for k in (256, 1280):
        x = rng.standard_normal((70, k)).astype(np.float32)
        x[5] *= 1e-3
        for n_rows in (16, 40, 64):
            assert_batches_equal_single_rows(t, weights(t, n_rows, k, rng), n_rows, x, (2, 5, 8, 16, 17, 31, 32, 33, 64, 70),
                                             f"amx K={k}")


def test_amx_switch():
    """PYLLM_AMX=0 turns the amx level off (auto picks avx512 then), and only the amx level has the AMX tiles."""
    import subprocess
    import sys
    code = "from pyllm import _core as c; print(c.amx_available(), c.type_traits(12)['has_amx'], c.simd_level())"
    env = dict(__import__("os").environ, PYLLM_AMX="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out[:2] == ["False", "False"], out
    if AMX:
        assert out[2] == "avx512"
        assert c.type_traits(12)["has_amx"] and c.simd_level() == "amx"
        c.set_simd_level("avx512")
        assert not c.type_traits(12)["has_amx"]


@pytest.mark.parametrize("level", LEVELS)
def test_decode_rows_repacked_q4_K(level):
    """Q4_K matrices with a multiple of 8 rows use llama.cpp's repacked-weight arithmetic (vec_dot_rp):
    decode (several weight rows per kernel call where the level has them) gives each row's vec_dot_rp bits,
    and a batch gives the same rows."""
    c.set_simd_level(level)
    rng = np.random.default_rng(3)
    t = QT.Q4_K
    for k in (256, 256 * 3):
        n_rows = 40  # chunks of 16 rows over 2 threads, a short last one
        w = weights(t, n_rows, k, rng)
        x = rng.standard_normal((3, k)).astype(np.float32)
        rb = len(w) // n_rows
        rp = c.type_traits(int(t))["has_vec_dot_rp_k"]  # (no repacked arithmetic at the scalar level)
        one = np.array([c.vec_dot_k(int(t), w[r * rb:(r + 1) * rb], x[:1], True)[0] if rp else
                        c.vec_dot(int(t), w[r * rb:(r + 1) * rb], x[0], act=True) for r in range(n_rows)], np.float32)
        for nt in (1, 2):
            got = c.matmul(int(t), w, n_rows, x[:1], nt)[0]
            assert np.array_equal(bits(got), bits(one)), f"{level} K={k} threads={nt}"
            assert np.array_equal(bits(c.matmul(int(t), w, n_rows, x, nt)[0]), bits(one)), f"{level} K={k} batch"


def assert_grouped_gives(level, t, w, n_rows, x, want, batches=(1, 2, 3, 5, 8, 9, 17, 64, 70)):
    """The grouped matmul at `level` gives want's bits for decode, verification batches 2..8, their remainders
    past 8 and prefill batches (at amx: Q4_K's group tiles from 5 tokens, one or two token tiles and a last
    partial panel; the tiles on rows back in GGUF layout from 64, Q4_K's from 256), on 1 and 2 threads."""
    c.set_simd_level(level)
    for b in batches:
        for nt in (1, 2):
            got = c.matmul(int(t), w, n_rows, x[:b], nt, grouped=True)
            assert np.array_equal(bits(got), bits(want[:b])), f"{level} K={x.shape[1]} B={b} threads={nt}"


@pytest.mark.parametrize("level", LEVELS)
def test_grouped_q4_K_equals_rows(level):
    """Q4_K in 16-row groups (a model's load at avx2/avx512/amx; ggml/repack.h): every (row, token) result is the
    GGUF layout's vec_dot_rp bits (the avx2 level's rp kernels at the scalar level, which has none), for decode,
    verification batches of 2..8, their remainders past 8, the AMX group tiles (5..255 tokens: one and two token
    tiles, partial panels) and the tiles on GGUF rows (256 on), 1 and 2 threads, and rows
    whose scales and mins take their extreme values."""
    rng = np.random.default_rng(41)
    t = QT.Q4_K
    ref_level = "avx2" if level == "scalar" else level
    for k, n_rows in ((256, 48), (256 * 5, 32)):
        w = weights(t, n_rows, k, rng)
        n_x = 70 if k == 256 else 262
        blk = w.reshape(n_rows, k // 256, 144)
        blk[0, :, 4:16] = 0xFF       # row 0: every 6-bit scale and min 63
        blk[1, :, 16:] = 0xFF        # row 1: every nibble 15
        blk[2, :, 4:16] = 0x00       # row 2: scales and mins 0
        blk[3, :, 4:] = 0xFF         # row 3: both at their maximum: with x[4] the largest sums (the float fmas' bound)
        x = rng.standard_normal((n_x, k)).astype(np.float32)
        x[3] *= 1e-3
        x[4] = 127.0                 # one activation row at a constant (its q8 all 127)
        c.set_simd_level(ref_level)
        want = np.concatenate([c.matmul(int(t), w, n_rows, x[b:b + 1]) for b in range(len(x))])
        assert_grouped_gives(level, t, w, n_rows, x, want, (1, 2, 3, 4, 5, 8, 9, 16, 17, 31, 32, 33, 64, 70)
                             + ((255, 256, 262) if n_x > 70 else ()))
    with pytest.raises(ValueError, match="16-row groups"):
        c.matmul(int(t), weights(t, 24, 256, rng), 24, x[:1, :256], grouped=True)
    with pytest.raises(ValueError, match="16-row groups"):
        c.matmul(int(QT.Q6_K), weights(QT.Q6_K, 16, 256, rng), 16, x[:1, :256], grouped=True)


# per type: block bytes, offset of its weight bytes, and two fills of them at the extremes
B32_EXTREMES = {QT.Q8_0: (34, 2, 0x80, 0x7F),   # every weight -128 / 127
                QT.Q4_0: (18, 2, 0xFF, 0x00),   # every nibble 15 / 0
                QT.Q4_1: (20, 4, 0xFF, 0x00)}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("t", list(B32_EXTREMES))
def test_grouped_b32_equals_rows(level, t):
    """Q8_0 (weights stored + 128), Q4_0 and Q4_1 in 16-row groups keep the SIMD vec_dot's arithmetic (8 lane
    chains per row, then hsum8's tree; Q4_1's min chain after it, Q4_0's -8 as the token's lane correction at
    avx2): every path (the group kernel for 1..8 tokens and the rest past 8, the AMX tiles from 64 tokens, 1 and 2
    threads; at the scalar level the reference) gives each pair the bits of the GGUF rows at the SIMD levels
    (avx2's, which are avx512's), including rows whose weights all sit at either extreme against activations at
    theirs."""
    rng = np.random.default_rng(47)
    bs, off, lo, hi = B32_EXTREMES[t]
    for k, n_rows in ((32 * 9, 48), (1024, 32), (32 * 163, 16)):
        w = weights(t, n_rows, k, rng)
        blk = w.reshape(n_rows, k // 32, bs)
        blk[0, :, off:] = lo
        blk[1, :, off:] = hi
        x = rng.standard_normal((70, k)).astype(np.float32)
        x[3] *= 1e-3
        x[4] = 127.0                  # q8 all 127
        x[5] = -127.0
        c.set_simd_level("avx2")
        want = np.concatenate([c.matmul(int(t), w, n_rows, x[b:b + 1]) for b in range(len(x))])
        assert_grouped_gives(level, t, w, n_rows, x, want)


@pytest.mark.parametrize("level,t", [(lv, QT.Q8_0) for lv in LEVELS if lv in ("avx512", "amx")]
                         + [(lv, QT.Q4_0) for lv in LEVELS if lv != "scalar"])
def test_grouped_keeps_nothing_across_matmuls(level, t):
    """The Q8_0 (AVX-512) and Q4_0 (AVX2) group kernels keep what they derive from each activation block (lane-sum
    starts, lane corrections) for the groups of one matmul chunk (X16ActsScope): a second matmul whose rows sit in
    the same buffer (the matmul's own quantized activations) with other values must not meet the first one's."""
    rng = np.random.default_rng(53)
    w = weights(t, 64, 1024, rng)
    xs = [rng.standard_normal((8, 1024)).astype(np.float32) for _ in range(3)]
    c.set_simd_level("avx2")
    want = [np.concatenate([c.matmul(int(t), w, 64, x[b:b + 1]) for b in range(8)]) for x in xs]
    c.set_simd_level(level)
    for b in (3, 8):
        for nt in (1, 2):
            for x, wx in zip(xs, want):
                got = c.matmul(int(t), w, 64, x[:b], nt, grouped=True)
                assert np.array_equal(bits(got), bits(wx[:b])), f"{level} B={b} threads={nt}"


@pytest.mark.parametrize("level", LEVELS)
def test_grouped_iq4_nl_equals_reference(level):
    """IQ4_NL in 16-row groups has llama.cpp's repacked-IQ4_NL arithmetic (one exact integer per 32-block, then
    fma(isum, d * y.d, acc) block after block): every path (the group kernel for 1..8 tokens and the rest past 8,
    the AMX tiles from 64 tokens, 1 and 2 threads) gives each pair the scalar reference's bits, which are W x
    within float rounding (and vec_dot's result on the GGUF rows within its reassociation)."""
    rng = np.random.default_rng(43)
    t = QT.IQ4_NL
    for k, n_rows in ((32 * 9, 48), (1024, 32)):
        w = weights(t, n_rows, k, rng)
        w.reshape(n_rows, k // 32, 18)[0, :, 2:] = 0xF0  # row 0: table entries 15 (113) and 0 (-127)
        x = rng.standard_normal((70, k)).astype(np.float32)
        x[3] *= 1e-3
        c.set_simd_level("scalar")
        want = np.concatenate([c.matmul(int(t), w, n_rows, x[b:b + 1], grouped=True) for b in range(len(x))])
        plain = c.matmul(int(t), w, n_rows, x)
        assert np.allclose(want, plain, rtol=1e-5, atol=1e-5 * np.abs(plain).max())
        assert_grouped_gives(level, t, w, n_rows, x, want)


@pytest.mark.parametrize("level", LEVELS)
def test_matmul_multi_equals_matmul(level):
    """Q/K/V (or gate/up) in one dispatch: each output is matmul's, bit for bit, with mixed weight types (two
    activation quantizations), for decode, verification and prefill batches and 1 or 2 threads."""
    c.set_simd_level(level)
    rng = np.random.default_rng(23)
    k = 256 * 3
    spec = [(QT.Q4_1, 200), (QT.Q8_0, 97), (QT.Q4_K, 64), (QT.Q6_K, 48)]  # > 262144 MACs at B = 1: one dispatch
    ws = [(int(t), weights(t, n, k, rng), n) for t, n in spec]
    x = rng.standard_normal((37, k)).astype(np.float32)
    for b in (1, 3, 37):
        for nt in (1, 2):
            got = c.matmul_multi(ws, x[:b], nt)
            want = np.concatenate([c.matmul(t, w, n, x[:b], nt) for t, w, n in ws], axis=1)
            assert np.array_equal(bits(got), bits(want)), f"{level} B={b} threads={nt}"
    with pytest.raises(ValueError):
        c.matmul_multi(ws + ws[:1], x[:1])
    with pytest.raises(ValueError):
        c.matmul_multi([(int(QT.Q8_0), ws[1][1][:-1], 24)], x[:1])


def test_threads_that_start_late_change_nothing():
    """A pool's workers may start after the caller has taken every chunk (fresh threads, more threads than
    cores): they skip the job (ThreadPool::run_any), and the results are the single-thread bits every time."""
    rng = np.random.default_rng(31)
    k, n_rows = 512, 1024  # 512K MACs: dispatched
    w = weights(QT.Q4_0, n_rows, k, rng)
    x = rng.standard_normal((2, k)).astype(np.float32)
    for b in (1, 2):
        want = bits(c.matmul(int(QT.Q4_0), w, n_rows, x[:b], 1))
        for nt in (2, 3, 8):
            for _ in range(10):
                assert np.array_equal(bits(c.matmul(int(QT.Q4_0), w, n_rows, x[:b], nt)), want), f"B={b} threads={nt}"


@pytest.mark.skipif(not {"avx512", "amx"} & set(LEVELS), reason="the group kernels' SIMD prefetch variants need AVX-512")
def test_x16_prefetch_modes_change_no_bit_and_get_measured():
    """The group kernels' decode read modes (none, l1, l2, streams; cpu/prefetch_tune.h) change no bit at any
    thread count (streams pairs a chunk's groups, an odd one alone); on 'auto' the process times the modes on its
    grouped decode products (>= 1 MiB of weights) and keeps the fastest."""
    c.set_simd_level("avx512")
    rng = np.random.default_rng(53)
    n_rows, k = 4112, 512  # >= 1.2 MiB of weights (a timed product) in 257 groups; chunks of 4 / 2 / 1 groups
    xs = rng.standard_normal((5, k)).astype(np.float32)
    for t in (QT.Q8_0, QT.Q4_K):  # the types with a streams kernel (Q8_0 at one token, Q4_K at 1..4)
        w = weights(t, n_rows, k, rng)
        for b in (1, 2, 3, 4, 5):
            want = bits(c.matmul(int(t), w, n_rows, xs[:b], 1, grouped=False))
            for mode in ("none", "l1", "l2", "streams"):
                c.x16_prefetch_force(mode)
                assert c.x16_prefetch() == mode
                for nt in (1, 2, 3, 5):
                    got = bits(c.matmul(int(t), w, n_rows, xs[:b], nt, grouped=True))
                    assert np.array_equal(got, want), (t, b, mode, nt)
    # a tuner per weight type and class (one token; batches of 2..8), each settling on its own products
    c.x16_prefetch_force("auto")
    assert c.x16_prefetch() == "measuring"
    for b in (1, 4):
        want = bits(c.matmul(int(QT.Q4_K), w, n_rows, xs[:b], 1, grouped=False))
        for _ in range(5000):  # 12 blocks of 256 MiB: ~2600 products of 1.2 MiB
            assert np.array_equal(bits(c.matmul(int(QT.Q4_K), w, n_rows, xs[:b], 1, grouped=True)), want)
            if c.x16_prefetch() != "measuring":
                break
        kept = c.x16_prefetch()
        assert kept in ("none", "l1", "l2", "streams") or (
            b == 4 and re.fullmatch(r"q4_K decode -t 1 (none|l1|l2|streams), q4_K batch -t 1 (none|l1|l2|streams)", kept)), kept
    # and per thread count: a 2-thread pool's products start their own tuner, which the 1-thread ones' choice leaves
    # measuring (the bench's warm-up asks for its own pool size)
    assert c.x16_prefetch(1) != "measuring" and c.x16_prefetch(2) == "measuring"
    want = bits(c.matmul(int(QT.Q4_K), w, n_rows, xs[:1], 1, grouped=False))
    assert np.array_equal(bits(c.matmul(int(QT.Q4_K), w, n_rows, xs[:1], 2, grouped=True)), want)
    assert c.x16_prefetch() == "measuring" and c.x16_prefetch(1) != "measuring"
    with pytest.raises(ValueError, match="l3"):
        c.x16_prefetch_force("l3")


def test_x16_prefetch_env():
    """PYLLM_X16_PREFETCH fixes the mode; a value it does not know is an error that names it."""
    import subprocess
    import sys
    code = "from pyllm import _core as c; print(c.x16_prefetch())"
    env = dict(os.environ, PYLLM_X16_PREFETCH="l1")
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip() == "l1"
    env["PYLLM_X16_PREFETCH"] = "sometimes"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "PYLLM_X16_PREFETCH=sometimes" in r.stderr
