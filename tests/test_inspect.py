"""`pyllm inspect`: GGUF dump CLI (pyllm/cli/inspect.py)."""
import json
import subprocess
import sys

import pytest

import pyllm
from conftest import ROOT, SHARED_MODELS
from pyllm.cli.inspect import main

DENSE = SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf"
FUSED = SHARED_MODELS / "tiny-qwen35moe-mtp-random-fused-Q4_K_M.gguf"


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_text_output(capsys):
    rc, out, err = run(capsys, DENSE)
    assert rc == 0 and err == ""
    assert "version: 3  alignment: 32" in out
    assert "metadata keys: 37" in out and "tensors: 124" in out
    assert 'general.architecture                     string         "qwen35"' in out
    assert "qwen35.attention.layer_norm_rms_epsilon  float32        1e-06" in out
    assert "array[int32]   [4] [3, 3, 2, 0]" in out
    # arrays abbreviated
    tok_line = next(l for l in out.splitlines() if "tokenizer.ggml.tokens" in l)
    assert "array[string]" in tok_line and "[8192]" in tok_line and "(8184 more)" in tok_line
    tmpl = next(l for l in out.splitlines() if "tokenizer.chat_template" in l)
    assert "(207 chars)" in tmpl
    # tensor table and totals
    f = pyllm.GGUFFile(str(DENSE))
    t0 = f.tensors()[0]
    row = next(l for l in out.splitlines() if " output.weight " in l)
    assert row.split() == ["0", "output.weight", "q8_0", "{256,", "8192}", str(t0["nbytes"]),
                           str(f.data_offset + t0["offset"])]
    assert "12024112 parameters" in out
    assert any(l.split()[:2] == ["q8_0", "72"] for l in out.splitlines())
    assert any(l.split()[:2] == ["f32", "52"] for l in out.splitlines())


def test_full_and_no_tensors(capsys):
    rc, out, _ = run(capsys, DENSE, "--full", "--no-tensors")
    assert rc == 0
    assert "more)" not in out and "chars)" not in out
    assert "* tensors" not in out and "blk.0.attn_qkv.weight" not in out
    assert "<|im_end|>" in out


def test_json(capsys):
    rc, out, _ = run(capsys, FUSED, "--json")
    assert rc == 0
    d = json.loads(out)
    f = pyllm.GGUFFile(str(FUSED))
    assert d["version"] == 3 and d["alignment"] == f.alignment and d["file_size"] == FUSED.stat().st_size
    assert d["kv_count"] == len(f.metadata()) == len(d["metadata"])
    md = {e["key"]: e for e in d["metadata"]}
    assert md["qwen35moe.block_count"] == {"key": "qwen35moe.block_count", "type": "uint32", "value": 5}
    assert len(md["tokenizer.ggml.tokens"]["value"]) == 8192  # full, not abbreviated
    assert md["tokenizer.ggml.tokens"]["type"] == "array[string]"
    ts = {t["name"]: t for t in d["tensors"]}
    assert ts["blk.0.ffn_gate_up_exps.weight"]["shape"] == [256, 512, 8]
    assert ts["blk.0.ffn_gate_up_exps.weight"]["type"] == "q4_K"
    assert d["tensor_count"] == len(d["tensors"]) == 87
    assert d["totals"]["parameters"] == 14511320
    assert d["totals"]["by_type"]["q4_K"]["tensors"] == 35
    assert sum(v["bytes"] for v in d["totals"]["by_type"].values()) == d["totals"]["bytes"]
    rc, out, _ = run(capsys, FUSED, "--json", "--no-tensors")
    assert "tensors" not in json.loads(out)


@pytest.mark.parametrize("size", [0, 10, 100_000, 5_000_000])
def test_truncated_file(tmp_path, capsys, size):
    bad = tmp_path / "trunc.gguf"
    with open(DENSE, "rb") as src:
        bad.write_bytes(src.read(size))
    rc, out, err = run(capsys, bad)
    assert rc == 1 and out == ""
    assert err.startswith("pyllm inspect: ") and "Traceback" not in err
    with pytest.raises(pyllm.GGUFError) as ei:
        pyllm.GGUFFile(str(bad))
    assert str(ei.value) in err


def test_missing_file(tmp_path, capsys):
    rc, out, err = run(capsys, tmp_path / "nope.gguf")
    assert rc == 1 and "nope.gguf" in err


def test_module_entry_point(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pyllm.cli.inspect", "--no-tensors", str(DENSE)], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0 and "qwen35.block_count" in r.stdout
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + b"\0" * 40)
    r = subprocess.run([sys.executable, "-m", "pyllm.cli.inspect", str(bad)], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 1 and "bad magic" in r.stderr and "Traceback" not in r.stderr
