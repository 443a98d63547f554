"""tools/make_tiny_gguf.py writes files in exactly llama.cpp's qwen35/qwen35moe layout (checked against shared/models)."""
import hashlib
import importlib.util
import subprocess
import sys

import numpy as np
import pytest

import pyllm
from conftest import ROOT, SHARED_MODELS

gguf = pytest.importorskip("gguf")

spec = importlib.util.spec_from_file_location("make_tiny_gguf", ROOT / "tools" / "make_tiny_gguf.py")
mtg = importlib.util.module_from_spec(spec)
sys.modules["make_tiny_gguf"] = mtg
spec.loader.exec_module(mtg)

DENSE_REF = SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf"
DENSE_F16 = SHARED_MODELS / "qwen35-tiny-mtp-F16.gguf"     # converter output: converter tensor order
MOE_REF = SHARED_MODELS / "tiny-qwen35moe-mtp-random-Q8_0.gguf"
MOE_FUSED_REF = SHARED_MODELS / "tiny-qwen35moe-mtp-random-fused-Q4_K_M.gguf"

# general.name is free text; everything else must match
IGNORE_VALUES = {"general.name"}


def make(tmp_path, *args, name="t.gguf"):
    out = tmp_path / name
    assert mtg.main([str(out), *map(str, args)]) == 0
    return out


def keys(path):
    """{key: (value types, value)} via gguf-py (independent of pyllm's reader)."""
    r = gguf.GGUFReader(str(path))
    out = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        v = f.contents()
        out[k] = (tuple(int(t) for t in f.types), v)
    return out


def tensors(path):
    return [(t["name"], tuple(t["shape"]), t["type_name"]) for t in pyllm.GGUFFile(str(path)).tensors()]


def assert_same_keys(a, b):
    ka, kb = keys(a), keys(b)
    assert list(ka) == list(kb) or set(ka) == set(kb)
    assert set(ka) == set(kb)
    for k in ka:
        assert ka[k][0] == kb[k][0], k
        if k not in IGNORE_VALUES:
            assert ka[k][1] == kb[k][1], k


def test_dense_matches_shipped(tmp_path):
    out = make(tmp_path, "--arch", "qwen35", "--n-layer", 8)
    assert_same_keys(out, DENSE_REF)
    assert sorted(tensors(out)) == sorted(tensors(DENSE_REF))
    # the default order is the converter's: exactly the F16 converter output's order
    assert [t[0] for t in tensors(out)] == [t[0] for t in tensors(DENSE_F16)]
    # and keys in the converter's order
    assert list(keys(out)) == list(keys(DENSE_F16))
    assert out.stat().st_size == DENSE_REF.stat().st_size


def test_dense_f16_matches_converter_output(tmp_path):
    out = make(tmp_path, "--arch", "qwen35", "--n-layer", 8, "--type", "f16")
    assert tensors(out) == tensors(DENSE_F16)
    assert_same_keys(out, DENSE_F16)


def test_moe_matches_shipped_quantize_order(tmp_path):
    out = make(tmp_path, "--arch", "qwen35moe", "--order", "quantize")
    assert_same_keys(out, MOE_REF)
    assert tensors(out) == tensors(MOE_REF)  # order too
    assert list(keys(out)) == list(keys(MOE_REF))
    assert out.stat().st_size == MOE_REF.stat().st_size


def test_moe_converter_order(tmp_path):
    out = make(tmp_path, "--arch", "qwen35moe")
    names = [t[0] for t in tensors(out)]
    assert sorted(tensors(out)) == sorted(tensors(MOE_REF))
    assert names[:2] == ["output.weight", "token_embd.weight"]
    blk0 = [n for n in names if n.startswith("blk.0.")]
    assert blk0.index("blk.0.ffn_down_exps.weight") + 1 == blk0.index("blk.0.ffn_gate_exps.weight")
    assert blk0.index("blk.0.ffn_gate_exps.weight") < blk0.index("blk.0.ffn_gate_inp.weight")
    assert names.index("output_norm.weight") < names.index("blk.4.nextn.eh_proj.weight")


def test_moe_fused_names_shapes(tmp_path):
    out = make(tmp_path, "--arch", "qwen35moe", "--fused", "--type", "q4_0")
    got = {n: s for n, s, _ in tensors(out)}
    ref = {n: s for n, s, _ in tensors(MOE_FUSED_REF)}
    assert got == ref
    assert got["blk.0.ffn_gate_up_exps.weight"] == (256, 512, 8)
    assert got["blk.3.attn_qkv.weight"] == (256, 768)
    types = {n: t for n, _, t in tensors(out)}
    assert types["blk.0.ffn_gate_inp.weight"] == "f32" and types["blk.0.ssm_conv1d.weight"] == "f32"
    assert types["blk.0.ffn_gate_up_exps.weight"] == "q4_0"


@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
def test_no_mtp(tmp_path, arch):
    out = make(tmp_path, "--arch", arch, "--no-mtp")
    f = pyllm.GGUFFile(str(out))
    assert f.get(f"{arch}.block_count") == 4
    assert f"{arch}.nextn_predict_layers" not in f.metadata()
    assert f.get(f"{arch}.attention.recurrent_layers") == [True, True, True, False]
    names = [t["name"] for t in f.tensors()]
    assert not any(n.startswith("blk.4.") or ".nextn." in n for n in names)
    with_mtp = make(tmp_path, "--arch", arch, name="m.gguf")
    g = pyllm.GGUFFile(str(with_mtp))
    assert g.get(f"{arch}.block_count") == 5 and g.get(f"{arch}.nextn_predict_layers") == 1
    assert set(names) == {t["name"] for t in g.tensors() if not t["name"].startswith("blk.4.")}


def test_deterministic_by_seed(tmp_path):
    a = make(tmp_path, "--n-layer", 2, "--n-embd", 64, "--head-dim", 32, "--n-ff", 128, "--ssm-d-state", 32,
             "--vocab", 1024, "--seed", 7, name="a.gguf")
    b = make(tmp_path, "--n-layer", 2, "--n-embd", 64, "--head-dim", 32, "--n-ff", 128, "--ssm-d-state", 32,
             "--vocab", 1024, "--seed", 7, name="b.gguf")
    c = make(tmp_path, "--n-layer", 2, "--n-embd", 64, "--head-dim", 32, "--n-ff", 128, "--ssm-d-state", 32,
             "--vocab", 1024, "--seed", 8, name="c.gguf")
    h = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert h(a) == h(b) != h(c)


def test_chunking_does_not_change_output(tmp_path, monkeypatch):
    args = ["--n-layer", 1, "--n-embd", 64, "--head-dim", 32, "--n-ff", 128, "--ssm-d-state", 32, "--vocab", 1024]
    a = make(tmp_path, *args, name="a.gguf")
    monkeypatch.setattr(mtg, "CHUNK_VALUES", 1000)
    b = make(tmp_path, *args, name="b.gguf")
    assert a.read_bytes() == b.read_bytes()


def test_weights_sane(tmp_path):
    out = make(tmp_path, "--arch", "qwen35moe", "--n-embd", 128, "--head-dim", 32, "--ssm-d-state", 32,
               "--n-ff-exp", 64, "--n-ff-shexp", 64, "--vocab", 2048, "--type", "q8_0")
    r = gguf.GGUFReader(str(out))
    w = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        assert np.isfinite(a).all(), t.name
        w[t.name] = a
    assert np.all(w["blk.0.ssm_a"] < 0)
    assert abs(w["output_norm.weight"].mean() - 1) < 0.05
    eh = w["blk.4.nextn.eh_proj.weight"]  # numpy (n, 2n): [3I | ~0]
    assert np.allclose(np.diag(eh[:, :128]), 3, atol=0.3)
    assert abs(w["blk.0.ffn_down_exps.weight"].std() - 0.2 / np.sqrt(64)) < 0.005


def test_vocab_resize(tmp_path):
    big = make(tmp_path, "--n-layer", 1, "--n-embd", 64, "--head-dim", 32, "--n-ff", 128, "--ssm-d-state", 32,
               "--vocab", 9000, name="big.gguf")
    f = pyllm.GGUFFile(str(big))
    toks = f.get("tokenizer.ggml.tokens")
    ref = pyllm.GGUFFile(str(DENSE_REF))
    ref_toks = ref.get("tokenizer.ggml.tokens")
    assert len(toks) == 9000 and toks[:8192] == ref_toks and len(set(toks)) == 9000
    assert f.get("tokenizer.ggml.eos_token_id") == 8191
    merges = f.get("tokenizer.ggml.merges")
    assert len(merges) == len(ref.get("tokenizer.ggml.merges")) + 808
    have = set(toks)
    for m in merges[-808:]:
        a, b = m.split(" ")
        assert a in have and b in have and a + b in have
    shapes = {t["name"]: t["shape"] for t in f.tensors()}
    assert shapes["token_embd.weight"] == [64, 9000] and shapes["output.weight"] == [64, 9000]

    small = make(tmp_path, "--n-layer", 1, "--n-embd", 64, "--head-dim", 32, "--n-ff", 128, "--ssm-d-state", 32,
                 "--vocab", 1000, name="small.gguf")
    g = pyllm.GGUFFile(str(small))
    toks = g.get("tokenizer.ggml.tokens")
    assert len(toks) == 1000 and toks[-3:] == ref_toks[-3:]
    assert g.get("tokenizer.ggml.eos_token_id") == 999 and g.get("tokenizer.ggml.bos_token_id") == 997


def test_block_size_fallback(tmp_path):
    # n_embd 96 is a multiple of 32 but not of 256: q4_k would fall back to q5_0; q8_0 stays
    plan = mtg._tensor_plan(mtg.Config(n_embd=96, type="q4_k"))
    types = {s.name: s.ggml_type.name for s in plan}
    assert types["blk.0.attn_qkv.weight"] == "Q5_0"
    assert mtg._pick_type(mtg.QT.Q6_K, 96) == mtg.QT.Q8_0
    assert mtg._pick_type(mtg.QT.Q3_K, 96) == mtg.QT.Q4_0
    assert mtg._pick_type(mtg.QT.Q8_0, 48) == mtg.QT.F16


def test_kquant_path(tmp_path):
    if mtg._core_quantize() is None:
        with pytest.raises(RuntimeError, match="K-quant output needs pyllm._core.quantize"):
            mtg.write_gguf(mtg.Config(type="q4_k"), tmp_path / "k.gguf")
        pytest.skip("K-quant output needs pyllm._core.quantize")
    out = make(tmp_path, "--arch", "qwen35moe", "--fused", "--type", "q4_k")
    got = {n: (s, t) for n, s, t in tensors(out)}
    assert got["blk.0.ffn_gate_up_exps.weight"][0] == (256, 512, 8)
    assert got["blk.0.ffn_gate_up_exps.weight"][1].lower() == "q4_k"
    r = gguf.GGUFReader(str(out))
    for t in r.tensors:
        assert np.isfinite(gguf.quants.dequantize(t.data, t.tensor_type)).all(), t.name


def test_cli_runs(tmp_path):
    out = tmp_path / "cli.gguf"
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "make_tiny_gguf.py"), "--arch", "qwen35", str(out),
                        "--n-layer", "1", "--n-embd", "64", "--head-dim", "32", "--n-ff", "128", "--ssm-d-state",
                        "32", "--vocab", "1024", "--type", "bf16"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    f = pyllm.GGUFFile(str(out))
    assert f.get("general.file_type") == 32
    assert {t["type_name"] for t in f.tensors()} == {"bf16", "f32"}


# ---------------------------------------------------------------------------------------------------------------
# C++ quantizers, parallel writer, --mix

CORE_VS_GGUFPY = [mtg.QT.F16, mtg.QT.BF16, mtg.QT.Q8_0, mtg.QT.Q4_0, mtg.QT.Q4_1, mtg.QT.Q5_0, mtg.QT.Q5_1,
                  mtg.QT.MXFP4]


@pytest.mark.parametrize("qt", CORE_VS_GGUFPY, ids=lambda t: t.name)
def test_core_quantizers_match_gguf_py(qt):
    # the C++ path must write the bytes gguf-py (the old path) writes, for every type both have
    rng = np.random.default_rng(3)
    cases = [rng.standard_normal((8, 256), dtype=np.float32) * np.float32(s) for s in (1e-8, 0.02, 1.0, 5e3)]
    cases += [1 + 0.1 * rng.standard_normal((8, 256), dtype=np.float32), np.zeros((2, 256), np.float32),
              (rng.integers(-64, 64, (8, 256)) / 2).astype(np.float32)]
    for x in cases:
        a = np.asarray(mtg.tgw.encode(x, qt, "core")).tobytes()
        b = np.asarray(mtg.tgw.encode(x, qt, "gguf")).tobytes()
        assert a == b, (qt.name, float(np.abs(x).max()))


@pytest.mark.parametrize("typ", ["q8_0", "q5_1", "bf16", "f16"])
def test_core_path_writes_gguf_py_bytes(tmp_path, monkeypatch, typ):
    args = ["--arch", "qwen35moe", "--n-layer", 2, "--n-embd", 64, "--head-dim", 32, "--ssm-d-state", 32,
            "--n-ff-exp", 64, "--n-ff-shexp", 64, "--vocab", 1024, "--type", typ]
    core = make(tmp_path, *args, "-j", 3, name="core.gguf")
    monkeypatch.setattr(mtg, "QUANT_BACKEND", "gguf")
    ref = make(tmp_path, *args, "-j", 1, name="ref.gguf")
    assert core.read_bytes() == ref.read_bytes()


def test_threads_do_not_change_output(tmp_path):
    args = ["--arch", "qwen35", "--n-layer", 2, "--n-embd", 64, "--head-dim", 32, "--n-ff", 256, "--ssm-d-state",
            32, "--vocab", 1024, "--type", "q4_k"]
    a = make(tmp_path, *args, "-j", 1, name="a.gguf")
    b = make(tmp_path, *args, "-j", 4, name="b.gguf")
    assert a.read_bytes() == b.read_bytes()


def test_writer_error_leaves_no_file(tmp_path, monkeypatch):
    def boom(data, t, backend="core"):
        raise RuntimeError("quantizer failed")
    monkeypatch.setattr(mtg.tgw, "encode", boom)
    out = tmp_path / "x.gguf"
    assert mtg.main([str(out), "--n-layer", "1", "--n-embd", "64", "--head-dim", "32", "--n-ff", "128",
                     "--ssm-d-state", "32", "--vocab", "1024"]) == 1
    assert not out.exists() and not (tmp_path / "x.gguf.part").exists()


def _types(path):
    return {n: t.upper() for n, _, t in tensors(path)}


def test_mix_ud_q4_k_xl_dense(tmp_path):
    out = make(tmp_path, "--arch", "qwen35", "--n-layer", 8, "--mix", "ud-q4_k_xl")
    t = _types(out)
    assert pyllm.GGUFFile(str(out)).get("general.file_type") == 15  # MOSTLY_Q4_K_M
    assert t["blk.1.ffn_gate.weight"] == t["blk.1.ffn_up.weight"] == "Q4_K"
    # down: Q6_K in llama-quantize's use_more_bits layers (first/last eighth, every third), else Q5_K
    assert t["blk.0.ffn_down.weight"] == "Q6_K" and t["blk.7.ffn_down.weight"] == "Q6_K"
    assert t["blk.3.ffn_down.weight"] == "Q6_K" and t["blk.1.ffn_down.weight"] == "Q5_K"
    for name in ("blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.0.ssm_out.weight", "blk.0.ssm_alpha.weight",
                 "blk.3.attn_q.weight", "blk.3.attn_output.weight", "output.weight", "token_embd.weight",
                 "blk.8.nextn.eh_proj.weight", "blk.8.ffn_down.weight", "blk.8.attn_q.weight"):
        assert t[name] == "Q8_0", name
    assert t["blk.0.ssm_conv1d.weight"] == "F32" and t["blk.0.attn_norm.weight"] == "F32"
    # the core loads it and decodes
    m = pyllm._core.Model(str(out))
    ctx = pyllm._core.Context(m, 64, n_threads=1)
    assert np.isfinite(ctx.eval(0, [1, 2, 3], False)).all()


def test_mix_moe_and_other_mixes(tmp_path):
    out = make(tmp_path, "--arch", "qwen35moe", "--mix", "ud-q4_k_xl")
    t = _types(out)
    assert t["blk.1.ffn_gate_exps.weight"] == t["blk.1.ffn_up_exps.weight"] == "Q4_K"
    assert t["blk.1.ffn_down_exps.weight"] == "Q5_K" and t["blk.2.ffn_down_exps.weight"] == "Q6_K"
    assert t["blk.0.ffn_gate_inp.weight"] == "BF16" and t["blk.0.ffn_gate_inp_shexp.weight"] == "F32"
    assert t["blk.0.ffn_up_shexp.weight"] == "Q8_0"
    assert t["blk.4.ffn_gate_exps.weight"] == "Q4_K" and t["blk.4.attn_q.weight"] == "Q8_0"  # MTP block
    want = {"ud-q5_k_xl": ("Q5_K", "Q6_K", 17), "ud-q6_k_xl": ("Q6_K", "Q6_K", 18), "ud-q8_k_xl": ("Q8_0", "Q8_0", 7)}
    for mix, (gate_up, down, ftype) in want.items():
        p = make(tmp_path, "--arch", "qwen35moe", "--mix", mix, name=f"{mix}.gguf")
        t = _types(p)
        assert t["blk.1.ffn_gate_exps.weight"] == gate_up and t["blk.1.ffn_down_exps.weight"] == down, mix
        assert t["blk.0.attn_qkv.weight"] == "Q8_0" and t["output.weight"] == "Q8_0"
        assert t["blk.0.ssm_out.weight"] == ("BF16" if mix == "ud-q8_k_xl" else "Q8_0")
        assert pyllm.GGUFFile(str(p)).get("general.file_type") == ftype
        m = pyllm._core.Model(str(p))
        assert np.isfinite(pyllm._core.Context(m, 64, n_threads=1).eval(0, [5, 6], False)).all()


def test_mix_bad_usage(tmp_path, capsys):
    with pytest.raises(SystemExit):
        mtg.main([str(tmp_path / "x.gguf"), "--mix", "ud-q4_k_xl", "--type", "q8_0"])
    assert "exclusive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        mtg.main([str(tmp_path / "x.gguf"), "--mix", "ud-q9_k_xl"])
    with pytest.raises(SystemExit):
        mtg.main([str(tmp_path / "x.gguf"), "-j", "0"])

# ---------------------------------------------------------------- low-bit types and UD mixes (issue 15)

SMALL = ["--n-layer", "2", "--full-attn-interval", "2", "--n-ff", "256", "--vocab", "512"]


# every type's quantizer is checked in test_quants; here the file path for a few (IQ1 files take ~20 s)
@pytest.mark.parametrize("t", ["iq2_xxs", "iq3_s", "mxfp4"])
def test_lowbit_type_path(tmp_path, t):
    if mtg._core_quantize() is None:
        pytest.skip("needs pyllm._core.quantize")
    out = make(tmp_path, "--arch", "qwen35", *SMALL, "--type", t)
    f = pyllm.GGUFFile(str(out))
    assert f.get("general.file_type") == int(mtg.LOWBIT_FILE_TYPES[t])
    assert {ty for _, _, ty in tensors(out)} == {t, "f32"}
    r = gguf.GGUFReader(str(out))
    for ten in r.tensors:  # gguf-py decodes what our quantizers wrote
        assert np.isfinite(gguf.quants.dequantize(ten.data, ten.tensor_type)).all(), ten.name
    m = pyllm._core.Model(str(out))
    ctx = pyllm._core.Context(m, 64, 1, n_threads=1)
    assert np.isfinite(ctx.eval(0, [1, 2, 3], False)[-1]).all()


def test_lowbit_mix_plans():
    """--mix follows the doc's observed UD rows (shared/docs/quants-and-models.md 1.2)."""
    types = {s.name: s.ggml_type.name for s in mtg._tensor_plan(mtg.Config(mix="ud-iq2_xxs"))}
    assert types["blk.0.attn_qkv.weight"] == "IQ2_XXS"
    assert types["blk.0.ffn_gate.weight"] == types["blk.0.ffn_up.weight"] == "IQ2_XXS"
    assert types["blk.0.attn_gate.weight"] == "IQ3_XXS"
    assert types["blk.0.ffn_down.weight"] == "IQ3_S"
    assert types["blk.0.ssm_out.weight"] == "Q4_K"
    assert types["blk.0.ssm_alpha.weight"] == types["blk.0.ssm_beta.weight"] == "Q8_0"
    assert types["blk.4.nextn.eh_proj.weight"] == "Q8_0"
    assert types["blk.0.ssm_a"] == types["blk.0.attn_norm.weight"] == types["blk.0.ssm_conv1d.weight"] == "F32"
    moe = {s.name: s.ggml_type.name for s in mtg._tensor_plan(mtg.Config(arch="qwen35moe", mix="ud-iq2_m"))}
    assert moe["blk.0.ffn_gate_exps.weight"] == moe["blk.0.ffn_up_exps.weight"] == "Q2_K"
    assert moe["blk.0.ffn_down_exps.weight"] == "Q3_K"
    assert moe["blk.0.ffn_down_shexp.weight"] == "Q5_K"
    assert moe["blk.0.ffn_gate_inp.weight"] == "F32"
    for mix in mtg.LOWBIT_MIXES:  # every mix plans every tensor, with the block-size fallback
        for s in mtg._tensor_plan(mtg.Config(n_embd=96, mix=mix)):
            assert s.ne[0] % gguf.GGML_QUANT_SIZES[s.ggml_type][0] == 0, (mix, s.name, s.ggml_type)
    assert mtg._pick_type(mtg.QT.IQ2_XXS, 96) == mtg.QT.IQ4_NL  # llama-quantize's fallback
    with pytest.raises(ValueError, match="unknown mix"):
        mtg.write_gguf(mtg.Config(mix="ud-q9"), "/nonexistent/x.gguf")


def test_lowbit_mix_writes_and_runs(tmp_path):
    if mtg._core_quantize() is None:
        pytest.skip("needs pyllm._core.quantize")
    out = make(tmp_path, "--arch", "qwen35moe", *SMALL, "--mix", "ud-iq2_m")
    f = pyllm.GGUFFile(str(out))
    assert f.get("general.file_type") == int(mtg.FT.MOSTLY_IQ2_S)
    got = {n: t for n, _, t in tensors(out)}
    assert got["blk.0.ffn_gate_exps.weight"] == "q2_K" and got["blk.0.ffn_down_exps.weight"] == "q3_K"
    assert got["blk.2.nextn.eh_proj.weight"] == "q8_0"
    m = pyllm._core.Model(str(out))
    ctx = pyllm._core.Context(m, 64, 1, n_threads=1)
    assert np.isfinite(ctx.eval(0, [1, 2, 3], False)[-1]).all()
