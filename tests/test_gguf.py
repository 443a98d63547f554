import struct

import pytest

import pyllm
from conftest import SHARED_MODELS


def test_reads_qwen35_metadata():
    f = pyllm.GGUFFile(str(SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf"))
    assert f.version == 3
    assert f.get("general.architecture") == "qwen35"
    assert f.get("qwen35.block_count") == 9
    assert f.get("qwen35.attention.recurrent_layers") == [True] * 3 + [False] + [True] * 3 + [False, False]
    names = {t["name"]: t for t in f.tensors()}
    assert names["blk.8.nextn.eh_proj.weight"]["shape"] == [512, 256]
    assert names["token_embd.weight"]["type_name"] == "q8_0"
    assert len(f.tensor_bytes("output_norm.weight")) == 256 * 4


def _str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _gguf(kvs=b"", n_kv=0, tensors=b"", n_tensors=0, version=3, magic=b"GGUF", data=b""):
    head = magic + struct.pack("<IQQ", version, n_tensors, n_kv) + kvs + tensors
    pad = (-len(head)) % 32
    return head + b"\0" * pad + data


def _tensor_info(name, shape, ttype, offset):
    return _str(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<q", d) for d in shape) + struct.pack("<IQ", ttype, offset)


def _write(tmp_path, blob):
    p = tmp_path / "bad.gguf"
    p.write_bytes(blob)
    return str(p)


GOOD_KV = _str("general.architecture") + struct.pack("<I", 8) + _str("llama")


@pytest.mark.parametrize("blob,msg", [
    (b"", "truncated header"),
    (b"GGML" + b"\0" * 20, "bad magic"),
    (_gguf(version=1), "unsupported GGUF version 1"),
    (_gguf(version=7), "unsupported GGUF version 7"),
    (b"GGUF" + struct.pack("<I", 3) + b"\0\0", "truncated header"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + GOOD_KV, "truncated KV section"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + GOOD_KV[:-3], "runs past the end"),
    (_gguf(kvs=_str("k") + struct.pack("<I", 8) + struct.pack("<Q", 1 << 40), n_kv=1), "string length"),
    (_gguf(kvs=_str("k") + struct.pack("<I", 99), n_kv=1), "unknown value type 99"),
    (_gguf(tensors=_tensor_info("w", [32, 2], 8, 0), n_tensors=1), "beyond file size"),
    (_gguf(tensors=_tensor_info("w", [32], 77, 0), n_tensors=1, data=b"\0" * 256), "unknown tensor type 77"),
    (_gguf(tensors=_tensor_info("w", [4], 0, 0) + _tensor_info("w", [4], 0, 32), n_tensors=2, data=b"\0" * 64),
     "duplicate tensor name 'w'"),
    (_gguf(tensors=_tensor_info("w", [33], 8, 0), n_tensors=1, data=b"\0" * 64), "not a multiple"),
    (_gguf(tensors=_tensor_info("w", [4], 0, 3), n_tensors=1, data=b"\0" * 64), "not aligned"),
])
def test_bad_files_raise_clear_errors(tmp_path, blob, msg):
    path = _write(tmp_path, blob)
    with pytest.raises(pyllm.GGUFError) as e:
        pyllm.GGUFFile(path)
    assert msg in str(e.value)
    assert path in str(e.value)


def test_missing_file():
    with pytest.raises(pyllm.GGUFError, match="cannot open"):
        pyllm.GGUFFile("/nonexistent/x.gguf")


def test_truncated_real_file(tmp_path):
    src = (SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf").read_bytes()
    for cut in (10, 3000, len(src) // 2, len(src) - 1):
        with pytest.raises(pyllm.GGUFError):
            pyllm.GGUFFile(_write(tmp_path, src[:cut]))



def test_weights_read_into_memory_or_mapped_give_the_same_model():
    """--no-mmap / --mmap / neither: the weights in anonymous memory or mapped from the file are the same bytes,
    so the same logits; the choice is reported."""
    from pyllm.generation import Generator, Request
    from pyllm.model import Model
    path = str(SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf")
    out = {}
    for mmap in (True, False, None):
        m = Model(path, mmap=mmap)
        assert m.weights_copied == (mmap is not True)  # a 20 MB file is under half of any CI machine's memory
        gen = Generator(m, 256, 1)
        req = Request(prompt=m.tokenize("The quick brown fox"), sampling={"temperature": 0}, n_predict=12, n_probs=3)
        out[mmap] = [(ev.tokens, ev.probs) for ev in gen.run(req) if ev.kind == "token"]
    assert out[True] and out[True] == out[False] == out[None]
