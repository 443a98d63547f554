"""Quant types: dequantize bit-exact with gguf-py, quantizers, vec_dot at every SIMD level, dispatch."""
import numpy as np
import pytest

from gguf import GGMLQuantizationType as QT
from gguf import quants as gq

from pyllm import _core as c

LEVELS = [lv for lv in ("scalar", "avx2", "avx512", "amx") if c.simd_level_supported(lv)]

# type -> offsets of fp16 fields that must hold finite values in random blocks
HALF_FIELDS = {
    QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0],
    QT.Q2_K: [80, 82], QT.Q3_K: [108], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208],
    QT.IQ4_NL: [0], QT.IQ4_XS: [0],
    QT.IQ2_XXS: [0], QT.IQ2_XS: [0], QT.IQ2_S: [0], QT.IQ3_XXS: [0], QT.IQ3_S: [0], QT.IQ1_S: [0],
    QT.IQ1_M: [], QT.MXFP4: [],  # fixed up in random_row: IQ1_M's d is spread over nibbles, MXFP4 has an exponent
}
LOWBIT = [QT.Q2_K, QT.Q3_K, QT.IQ1_S, QT.IQ1_M, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S, QT.MXFP4]
FLOAT_TYPES = [QT.F32, QT.F16, QT.BF16]
WEIGHT_TYPES = FLOAT_TYPES + list(HALF_FIELDS)
ALL_DEQUANT = WEIGHT_TYPES


@pytest.fixture(autouse=True)
def restore_level():
    yield
    c.set_simd_level("auto")


def random_row(t, n, rng):
    """Random weight row bytes of n elements (finite fp16 scale fields)."""
    if t == QT.F32:
        return rng.standard_normal(n).astype(np.float32).view(np.uint8)
    if t == QT.F16:
        return rng.standard_normal(n).astype(np.float16).view(np.uint8)
    if t == QT.BF16:
        return gq.quantize(rng.standard_normal(n).astype(np.float32), QT.BF16).reshape(-1)
    tr = c.type_traits(int(t))
    nb = n // tr["blck_size"]
    blocks = rng.integers(0, 256, size=(nb, tr["type_size"]), dtype=np.uint8)
    for off in HALF_FIELDS[t]:
        h = (rng.standard_normal(nb) * 0.05).astype(np.float16)
        blocks[:, off:off + 2] = h.view(np.uint8).reshape(nb, 2)
    if t == QT.IQ1_M:  # the fp16 d lives in the top nibble of each of the 4 scale words (bytes 48..55)
        h = (rng.standard_normal(nb) * 0.05).astype(np.float16).view(np.uint16)
        sc = blocks[:, 48:56].copy().view(np.uint16)
        for k in range(4):
            sc[:, k] = (sc[:, k] & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12)
        blocks[:, 48:56] = sc.view(np.uint8)
    if t == QT.MXFP4:  # E8M0 exponents around 2^0 (the full range overflows float products)
        blocks[:, 0] = rng.integers(110, 135, size=nb)
    return blocks.reshape(-1)


def bits(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("t", ALL_DEQUANT, ids=lambda t: t.name)
def test_dequantize_bit_exact_with_gguf_py(t, level):
    c.set_simd_level(level)
    rng = np.random.default_rng(int(t) + 100)
    n = 256 * 24
    w = random_row(t, n, rng)
    ours = c.dequantize(int(t), w, n)
    ref = gq.dequantize(w, t).reshape(-1).astype(np.float32)
    assert ours.shape == (n,)
    mism = np.nonzero(bits(ours) != bits(ref))[0]
    assert mism.size == 0, f"{t.name}@{level}: {mism.size} mismatches, first {mism[:5]} ours {ours[mism[:3]]} ref {ref[mism[:3]]}"


def test_block_sizes_match_gguf_py():
    for t in WEIGHT_TYPES + [QT.Q8_K]:
        tr = c.type_traits(int(t))
        assert (tr["blck_size"], tr["type_size"]) == tuple(gq.GGML_QUANT_SIZES[t]), t.name
    # gguf-py still lists the old 40-byte Q8_1 (float d, s); ggml's block_q8_1 is half2 ds + qs = 36
    assert (c.type_traits(int(QT.Q8_1))["type_size"]) == 36


VEC_DOT_TYPE = {
    QT.F32: QT.F32, QT.F16: QT.F16, QT.BF16: QT.BF16,
    QT.Q4_0: QT.Q8_0, QT.Q5_0: QT.Q8_0, QT.Q8_0: QT.Q8_0, QT.IQ4_NL: QT.Q8_0,
    QT.Q4_1: QT.Q8_1, QT.Q5_1: QT.Q8_1,
    QT.Q2_K: QT.Q8_K, QT.Q3_K: QT.Q8_K, QT.Q4_K: QT.Q8_K, QT.Q5_K: QT.Q8_K, QT.Q6_K: QT.Q8_K,
    QT.IQ4_XS: QT.Q8_K,
    QT.IQ2_XXS: QT.Q8_K, QT.IQ2_XS: QT.Q8_K, QT.IQ2_S: QT.Q8_K, QT.IQ3_XXS: QT.Q8_K, QT.IQ3_S: QT.Q8_K,
    QT.IQ1_S: QT.Q8_K, QT.IQ1_M: QT.Q8_K, QT.MXFP4: QT.Q8_0,  # ggml-cpu's vec_dot_type table
}


def test_traits_table():
    for t, vt in VEC_DOT_TYPE.items():
        tr = c.type_traits(int(t))
        assert tr["vec_dot_type"] == int(vt), t.name
        assert tr["compute"] and tr["has_to_float"] and tr["has_vec_dot"] and tr["has_from_float"], t.name
    for t in (QT.Q8_1, QT.Q8_K):
        tr = c.type_traits(int(t))
        assert tr["has_from_float"] and not tr["compute"]
    assert c.type_traits(int(QT.TQ1_0))["compute"] is False
    with pytest.raises(ValueError):
        c.type_traits(4)  # removed Q4_2


# ---------------------------------------------------------------- quantizers

GGUF_PY_QUANTIZABLE = [QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.BF16, QT.MXFP4]


def quant_inputs(rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    x[:32] = 0.0                       # an all-zero block
    x[32:64] = 0.5                     # a constant block
    x[64:96] *= 1e-3
    x[96:128] = np.abs(x[96:128])      # all positive
    x[128:160] = -np.abs(x[128:160])  # all negative
    return x


@pytest.mark.parametrize("t", GGUF_PY_QUANTIZABLE, ids=lambda t: t.name)
def test_quantize_bit_exact_with_gguf_py(t):
    rng = np.random.default_rng(7)
    x = quant_inputs(rng, 256 * 16)
    ours = c.quantize(int(t), x)
    ref = gq.quantize(x, t).reshape(-1)
    assert ours.dtype == np.uint8 and ours.shape == ref.shape
    bad = np.nonzero(ours != ref)[0]
    assert bad.size == 0, f"{t.name}: {bad.size} differing bytes, first at {bad[:5]}"


# relative RMS error bounds for N(0,1) data (measured values are ~2/3 of these)
RT_BOUND = {
    QT.F16: 1e-3, QT.BF16: 5e-3, QT.F32: 0.0,
    QT.Q8_0: 0.006, QT.Q4_0: 0.12, QT.Q4_1: 0.11, QT.Q5_0: 0.06, QT.Q5_1: 0.055,
    QT.Q2_K: 0.40, QT.Q3_K: 0.21, QT.Q4_K: 0.10, QT.Q5_K: 0.05, QT.Q6_K: 0.025,
    QT.IQ4_NL: 0.11, QT.IQ4_XS: 0.11, QT.Q8_1: 0.006, QT.Q8_K: 0.009,
    # our own lattice quantizers (quants_iq_quantize.cpp): measured values are ~0.8 of these
    QT.IQ1_S: 0.60, QT.IQ1_M: 0.55, QT.IQ2_XXS: 0.42, QT.IQ2_XS: 0.37, QT.IQ2_S: 0.31, QT.IQ3_XXS: 0.23,
    QT.IQ3_S: 0.17, QT.MXFP4: 0.14,
}
NO_ZERO_LEVEL = {QT.IQ1_S, QT.IQ1_M, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S}  # lattices without 0


@pytest.mark.parametrize("t", list(RT_BOUND), ids=lambda t: t.name)
def test_quantize_round_trip(t):
    rng = np.random.default_rng(11)
    n = 256 * 32
    x = rng.standard_normal(n).astype(np.float32)
    q = c.quantize(int(t), x)
    assert q.size == n // c.type_traits(int(t))["blck_size"] * c.type_traits(int(t))["type_size"]
    y = c.dequantize(int(t), q, n)
    rel = np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2))
    assert rel <= RT_BOUND[t], f"{t.name}: relative RMS error {rel:.4f}"
    # zeros stay zeros, and no NaN from degenerate blocks
    z = c.dequantize(int(t), c.quantize(int(t), np.zeros(n, np.float32)), n)
    assert np.all(z == 0)
    xc = quant_inputs(rng, n)
    yc = c.dequantize(int(t), c.quantize(int(t), xc), n)
    assert np.all(np.isfinite(yc))
    if t not in NO_ZERO_LEVEL:
        assert np.all(yc[:32] == 0)  # an all-zero block inside a non-zero row
    else:  # the smallest level of the sub-block, far below the row's scale
        assert np.max(np.abs(yc[:32])) <= 0.05 * np.max(np.abs(xc))


def test_q8_K_layout():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(512).astype(np.float32)
    q = c.quantize(int(QT.Q8_K), x).reshape(2, 292)
    for b in range(2):
        d = q[b, :4].view(np.float32)[0]
        qs = q[b, 4:260].view(np.int8).astype(np.int32)
        bsums = q[b, 260:].view(np.int16)
        xb = x[256 * b: 256 * (b + 1)]
        i = np.argmax(np.abs(xb))
        assert qs[i] == -127  # ggml: iscale = -127/max (signed max)
        np.testing.assert_array_equal(bsums, qs.reshape(16, 16).sum(axis=1))
        assert np.max(np.abs(d * qs - xb)) <= abs(d) * 0.5 + 1e-6


def test_q8_1_sum_field():
    rng = np.random.default_rng(4)
    x = rng.standard_normal(128).astype(np.float32)
    q = c.quantize(int(QT.Q8_1), x).reshape(4, 36)
    ref = gq.quantize(x, QT.Q8_0).reshape(4, 34)
    np.testing.assert_array_equal(q[:, 0:2], ref[:, 0:2])
    np.testing.assert_array_equal(q[:, 4:], ref[:, 2:])
    d = np.abs(x.reshape(4, 32)).max(axis=1) / np.float32(127)  # unrounded d, as ggml
    s = q[:, 2:4].copy().view(np.float16).reshape(-1)
    sums = q[:, 4:].view(np.int8).astype(np.int32).sum(axis=1)
    np.testing.assert_array_equal(s, (sums * d).astype(np.float16))


# ---------------------------------------------------------------- vec_dot

def float_reference(t, w, x):
    n = x.size
    vt = int(VEC_DOT_TYPE[t])
    xqb = c.quantize(vt, x)
    xq = c.dequantize(vt, xqb, n).astype(np.float64)
    wf = c.dequantize(int(t), w, n).astype(np.float64)
    ref = float(np.dot(wf, xq))
    if vt == int(QT.Q8_1):
        # the kernel uses the min times Q8_1's fp16 s (= d*sum(q)), not the exact block sum
        tsz = c.type_traits(int(t))["type_size"]
        m = w.reshape(-1, tsz)[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(-1)
        s = xqb.reshape(-1, 36)[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(-1)
        ref += float(np.dot(m, s - xq.reshape(-1, 32).sum(axis=1)))
    return ref, float(np.dot(np.abs(wf), np.abs(xq)))


@pytest.mark.parametrize("t", list(VEC_DOT_TYPE), ids=lambda t: t.name)
def test_vec_dot_all_levels(t):
    rng = np.random.default_rng(int(t) + 1)
    for n in (256, 256 * 11):
        w = random_row(t, n, rng)
        x = rng.standard_normal(n).astype(np.float32)
        ref, mag = float_reference(t, w, x)
        res = {}
        for lv in LEVELS:
            c.set_simd_level(lv)
            res[lv] = c.vec_dot(int(t), w, x)
            assert c.vec_dot(int(t), w, x) == res[lv]  # deterministic
        tol = 2e-5 * mag + 1e-6
        for lv, v in res.items():
            assert abs(v - ref) <= tol, f"{t.name}@{lv} n={n}: {v} vs float ref {ref} (tol {tol})"
            assert abs(v - res["scalar"]) <= tol, f"{t.name}@{lv} n={n}: {v} vs scalar {res['scalar']}"


@pytest.mark.parametrize("t", list(VEC_DOT_TYPE), ids=lambda t: t.name)
def test_vec_dot_quantized_weights(t):
    # realistic weights (from our quantizers) instead of random bytes
    rng = np.random.default_rng(int(t) + 2)
    n = 256 * 8
    w = c.quantize(int(t), rng.standard_normal(n).astype(np.float32))
    x = rng.standard_normal(n).astype(np.float32)
    ref, mag = float_reference(t, w, x)
    for lv in LEVELS:
        c.set_simd_level(lv)
        assert abs(c.vec_dot(int(t), w, x) - ref) <= 2e-5 * mag + 1e-6, (t.name, lv)


VEC_DOT_K_REQUIRED = [QT.Q8_0, QT.Q4_K, QT.Q6_K, QT.Q4_1, QT.Q5_0] + LOWBIT


@pytest.mark.parametrize("level", LEVELS)
def test_vec_dot_k_bit_identical(level):
    """k = 1..8 activation rows through one weight-row decode give each row's single-row bits."""
    c.set_simd_level(level)
    rng = np.random.default_rng(5)
    have = [t for t in VEC_DOT_TYPE if c.type_traits(int(t))["has_vec_dot_k"]]
    if level in ("avx512", "amx"):
        assert set(VEC_DOT_K_REQUIRED) <= set(have)
    for t in have:
        for n in (256, 256 * 7):
            w = random_row(t, n, rng)
            x8 = rng.standard_normal((8, n)).astype(np.float32)
            x8[2] *= 1e-3
            one = np.array([c.vec_dot(int(t), w, x8[r]) for r in range(8)], np.float32)
            for k in range(1, 9):
                got = c.vec_dot_k(int(t), w, x8[:k])
                assert np.array_equal(bits(got), bits(one[:k])), f"{t.name}@{level} n={n} k={k}: {got} vs {one[:k]}"
            if c.type_traits(int(t))["has_vec_dot_rp_k"]:  # the repacked-weight arithmetic (Q4_K)
                one_rp = np.concatenate([c.vec_dot_k(int(t), w, x8[r:r + 1], True) for r in range(8)])
                ref, mag = float_reference(t, w, x8[0])
                assert abs(one_rp[0] - ref) <= 2e-5 * mag + 1e-6
                for k in range(1, 9):
                    got = c.vec_dot_k(int(t), w, x8[:k], True)
                    assert np.array_equal(bits(got), bits(one_rp[:k])), f"{t.name}@{level} rp n={n} k={k}"
        with pytest.raises(ValueError):
            c.vec_dot_k(int(t), random_row(t, 256, rng), np.zeros((9, 256), np.float32))
    if not have:
        with pytest.raises(ValueError):
            c.vec_dot_k(int(QT.Q8_0), random_row(QT.Q8_0, 256, rng), np.zeros((4, 256), np.float32))


@pytest.mark.skipif(not {"avx2", "avx512"} <= set(LEVELS), reason="needs both x86 levels")
def test_simd_levels_bit_identical_on_quantized_kernels():
    """AVX2 (maddubs+madd) and AVX-512 (VNNI, 512-bit integer lanes) give the same integers and the
    same float order, so every quantized kernel agrees bit for bit between the two levels, for
    every k and for the repacked-Q4_K arithmetic too."""
    rng = np.random.default_rng(11)
    for t in VEC_DOT_TYPE:
        if t in (QT.F32, QT.F16, QT.BF16):
            continue
        blck = c.type_traits(int(t))["blck_size"]
        for n in (256, 256 * 5) + ((96,) if blck == 32 else ()):  # 96: an odd count of 32-blocks
            w = random_row(t, n, rng)
            x = rng.standard_normal((8, n)).astype(np.float32)
            for repacked in (False, True):
                res = {}
                for lv in ("avx2", "avx512"):
                    c.set_simd_level(lv)
                    tr = c.type_traits(int(t))
                    if not tr["has_vec_dot_rp_k" if repacked else "has_vec_dot_k"]:
                        continue
                    res[lv] = [bits(c.vec_dot_k(int(t), w, x[:k], repacked)) for k in (1, 3, 8)]
                if len(res) == 2:
                    for a, b in zip(res["avx2"], res["avx512"]):
                        assert np.array_equal(a, b), f"{t.name} n={n} repacked={repacked}"
    c.set_simd_level("auto")


# ---------------------------------------------------------------- dispatch

def test_dispatch_levels():
    assert c.simd_level() in ("scalar", "avx2", "avx512", "amx")
    c.set_simd_level("auto")
    best = c.simd_level()
    assert best == LEVELS[-1]
    for lv in LEVELS:
        c.set_simd_level(lv)
        assert c.simd_level() == lv
    for lv in ("avx2", "avx512", "amx"):
        if lv not in LEVELS:
            with pytest.raises(RuntimeError):
                c.set_simd_level(lv)
    with pytest.raises(ValueError):
        c.set_simd_level("sse9")
    c.set_simd_level("auto")
    assert c.simd_level() == best


def test_scalar_level_has_no_vec_dot_k_and_pointers_swap_back():
    c.set_simd_level("scalar")
    assert not any(c.type_traits(int(t))["has_vec_dot_k"] for t in VEC_DOT_TYPE)
    if "avx512" in LEVELS:
        c.set_simd_level("avx512")
        assert c.type_traits(int(QT.Q8_0))["has_vec_dot_k"]


def test_bad_arguments():
    with pytest.raises(ValueError):
        c.dequantize(int(QT.Q4_0), np.zeros(18, np.uint8), 31)
    with pytest.raises(ValueError):
        c.dequantize(int(QT.Q4_0), np.zeros(17, np.uint8), 32)
    with pytest.raises(ValueError):
        c.vec_dot(int(QT.Q4_K), np.zeros(144, np.uint8), np.zeros(512, np.float32))
    with pytest.raises(ValueError):
        c.quantize(int(QT.TQ1_0), np.zeros(256, np.float32))
    with pytest.raises(ValueError):
        c.quantize(int(QT.IQ2_XXS), np.zeros(255, np.float32))
    with pytest.raises(ValueError):
        c.dequantize(int(QT.IQ1_M), np.zeros(55, np.uint8), 256)


@pytest.mark.parametrize("t", FLOAT_TYPES, ids=lambda t: t.name)
def test_float_vec_dot_odd_lengths(t):
    rng = np.random.default_rng(9)
    for n in (1, 7, 15, 17, 33, 63, 65, 1001):
        w = random_row(t, n, rng)
        x = rng.standard_normal(n).astype(np.float32)
        ref, mag = float_reference(t, w, x)
        for lv in LEVELS:
            c.set_simd_level(lv)
            v = c.vec_dot(int(t), w, x)
            assert abs(v - ref) <= 2e-5 * mag + 1e-6, (t.name, lv, n, v, ref)
            assert bits(c.dequantize(int(t), w, n)).tolist() == bits(gq.dequantize(w, t).reshape(-1)).tolist()


# ---------------------------------------------------------------- low-bit kernels

@pytest.mark.parametrize("t", LOWBIT, ids=lambda t: t.name)
def test_lowbit_simd_levels_bit_identical(t):
    """AVX2 and AVX-512 run the same integer lanes and float steps (upstream's x86 order) for these types."""
    if not {"avx2", "avx512"} <= set(LEVELS):
        pytest.skip("needs both SIMD levels")
    rng = np.random.default_rng(int(t) + 40)
    for n in (256, 256 * 5, 256 * 13):
        w = random_row(t, n, rng)
        x = rng.standard_normal(n).astype(np.float32)
        got = {}
        for lv in ("avx2", "avx512"):
            c.set_simd_level(lv)
            got[lv] = c.vec_dot(int(t), w, x)
        assert bits([got["avx2"]]) == bits([got["avx512"]]), (t.name, n, got)


@pytest.mark.parametrize("t", LOWBIT, ids=lambda t: t.name)
def test_lowbit_dequantize_decodes_our_quantizer(t):
    """quantize -> gguf-py dequantize equals our dequantize (our quantizers write valid blocks)."""
    rng = np.random.default_rng(int(t) + 50)
    n = 256 * 4
    q = c.quantize(int(t), rng.standard_normal(n).astype(np.float32))
    ref = gq.dequantize(q, t).reshape(-1).astype(np.float32)
    assert np.array_equal(bits(c.dequantize(int(t), q, n)), bits(ref)), t.name


def ggml_avx512_dot(x: np.ndarray, y: np.ndarray, f16: bool) -> np.float32:
    """ggml_vec_dot_f32 / _f16 in the lanes and order of ggml's AVX-512 build (vec_dot_ggml.h): 4 x 16 float32
    accumulators over blocks of 64 with fma, (a0 + a2) + (a1 + a3), _mm512_reduce_add_ps's tree, then the
    tail. Inputs are f16 values, so each product is exact in float64 and, at these magnitudes, so is
    product + accumulator: rounding that once to float32 is the fma."""
    f32 = np.float32
    n = len(x)
    np_ = n & ~63
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    acc = np.zeros((4, 16), f32)
    for i in range(0, np_, 64):
        acc = (xd[i:i + 64].reshape(4, 16) * yd[i:i + 64].reshape(4, 16) + acc.astype(np.float64)).astype(f32)
    a = (acc[0] + acc[2]) + (acc[1] + acc[3])
    t = a[8:] + a[:8]
    u = t[4:] + t[:4]
    s = f32((u[0] + u[2]) + (u[1] + u[3]))
    if f16:  # ggml_float (double) tail of float products
        d = float(s)
        for i in range(np_, n):
            d += float(f32(x[i]) * f32(y[i]))
        return f32(d)
    for i in range(np_, n):
        s = f32(xd[i] * yd[i] + float(s))
    return s


@pytest.mark.parametrize("t", [QT.F32, QT.F16], ids=lambda t: t.name)
def test_float_vec_dot_is_ggml_avx512_order(t):
    """The F32 / F16 dot gives the bits of ggml's AVX-512 order on every CPU: AVX-512, AVX2 (two 8-lane halves
    per accumulator) and the scalar emulation alike (attention, delta-net and matmul rely on it for the
    fixtures' bits)."""
    rng = np.random.default_rng(5)
    for n in (64, 256, 320, 1000, 5120):
        x = rng.uniform(-1, 1, n).astype(np.float16)
        y = rng.uniform(-1, 1, n).astype(np.float16)
        w = x.astype(np.float32).view(np.uint8) if t == QT.F32 else x.view(np.uint8)
        want = ggml_avx512_dot(x.astype(np.float32), y.astype(np.float32), t == QT.F16)
        for lv in LEVELS:
            c.set_simd_level(lv)
            got = np.float32(c.vec_dot(int(t), w, y.astype(np.float32)))
            assert bits(np.array([got])) == bits(np.array([want])), f"{t.name}@{lv} n={n}: {got!r} vs {want!r}"
    c.set_simd_level("auto")
