"""Tokenizer tests: llama-server /tokenize fixtures (exact), detokenization, special tokens, byte
tokens, the BPE pre-tokenizer regexes, incremental detokenization, errors, speed."""
import json
import time

import pytest

from pyllm import _core
from pyllm.detok import IncrementalDetokenizer, complete_utf8_prefix_len
from conftest import FIXTURES, SHARED_MODELS, gemma3_path, smollm2_path

FIXTURE_FILES = sorted(p.name for p in FIXTURES.glob("*.llamacpp.json"))


def _model_path(fixture_name):
    name = fixture_name.replace(".llamacpp.json", "")
    if name.startswith("smollm2"):
        return smollm2_path()
    if name.startswith("gemma3"):
        return gemma3_path()
    model = json.loads((FIXTURES / fixture_name).read_text())["model"]
    p = SHARED_MODELS / model
    return p if p.exists() else None


_cache = {}


def _tok_for(path):
    if path is None:
        pytest.skip("model file not installed (tools/get_test_models.sh)")
    key = str(path)
    if key not in _cache:
        _cache[key] = _core.Tokenizer.from_file(key)
    return _cache[key]


@pytest.fixture(scope="module")
def qwen():
    return _tok_for(SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf")


@pytest.fixture(scope="module")
def gemma():
    return _tok_for(gemma3_path())


@pytest.fixture(scope="module")
def smol():
    return _tok_for(smollm2_path())


# ---------------------------------------------------------------------------------------------
# llama-server fixtures: /tokenize (parse_special=true) and the generated tokens of /completion

@pytest.mark.parametrize("fixture", FIXTURE_FILES)
def test_fixture_tokenize(fixture):
    tok = _tok_for(_model_path(fixture))
    data = json.loads((FIXTURES / fixture).read_text())
    assert data["tokenize"]
    for case in data["tokenize"]:
        assert tok.tokenize(case["text"], False, True) == case["tokens"], case["text"]
        assert tok.tokenize(case["text"], True, True) == case["tokens_add_special"], case["text"]


@pytest.mark.parametrize("fixture", FIXTURE_FILES)
def test_fixture_completion_detokenize(fixture):
    tok = _tok_for(_model_path(fixture))
    data = json.loads((FIXTURES / fixture).read_text())
    for c in data["complete"]:
        assert tok.detokenize(c["tokens"], False) == c["content"]
        # streamed piece by piece it is the same text
        d = IncrementalDetokenizer(tok)
        streamed = "".join(d.feed(t) for t in c["tokens"]) + d.flush()
        assert streamed == c["content"]
        assert len(tok.tokenize(c["prompt"], True, True)) == c["prompt_tokens"]


# ---------------------------------------------------------------------------------------------
# metadata

def test_qwen35_vocab(qwen):
    assert qwen.n_vocab == 8192 and len(qwen) == 8192
    assert qwen.vocab_type == "bpe" and qwen.pre == "qwen35"
    assert (qwen.bos, qwen.eos, qwen.pad) == (8189, 8191, 8189)
    assert qwen.eot == 8191  # auto-detected <|im_end|>
    assert not qwen.add_bos and not qwen.add_eos
    assert qwen.token_text(8190) == "<|im_start|>"
    assert qwen.token_type(8190) == 3 and qwen.token_type(100) == 1
    assert qwen.is_control(8191) and not qwen.is_control(100)
    assert qwen.is_eog(8191) and qwen.is_eog(8189) and not qwen.is_eog(8190) and not qwen.is_eog(-1)
    assert qwen.eog_ids == [8189, 8191]
    assert qwen.nl == 198


def test_gemma3_vocab(gemma):
    assert gemma.vocab_type == "spm" and gemma.n_vocab == 262144
    assert (gemma.bos, gemma.eos, gemma.pad) == (2, 1, 0)
    assert gemma.add_bos and not gemma.add_eos and not gemma.add_space_prefix
    assert gemma.eot == 106 and gemma.token_text(106) == "<end_of_turn>"
    assert gemma.is_eog(1) and gemma.is_eog(106) and not gemma.is_eog(105)
    assert gemma.token_type(gemma.text_to_token("<0x41>")) == 6
    assert gemma.token_type(107) == 4  # "\n" is user-defined
    assert gemma.tokenize("", True) == [2] and gemma.tokenize("", False) == []


def test_smollm2_vocab(smol):
    assert smol.pre == "smollm" and smol.n_vocab == 49152
    assert (smol.bos, smol.eos) == (1, 2)
    assert smol.is_eog(2) and smol.is_eog(0)
    assert not smol.add_bos


def test_constructor_from_gguffile(qwen):
    import pyllm
    t = _core.Tokenizer(pyllm.GGUFFile(str(SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf")))
    assert t.n_vocab == qwen.n_vocab
    assert t.tokenize("Hello, world!") == qwen.tokenize("Hello, world!")


# ---------------------------------------------------------------------------------------------
# special tokens

def test_parse_special_on_off_bpe(qwen):
    text = "<|im_start|>user\nHi<|im_end|>"
    on = qwen.tokenize(text, False, True)
    off = qwen.tokenize(text, False, False)
    assert on[0] == 8190 and on[-1] == 8191
    assert 8190 not in off and 8191 not in off
    assert qwen.detokenize(off) == text           # literal text survives
    assert qwen.detokenize(on) == "user\nHi"       # control tokens hidden without special
    assert qwen.detokenize(on, True) == text
    assert qwen.tokenize(text) == off              # defaults: add_special=True, parse_special=False


def test_parse_special_on_off_spm(gemma):
    text = "<start_of_turn>user\nhi<end_of_turn>"
    on = gemma.tokenize(text, False, True)
    off = gemma.tokenize(text, False, False)
    assert on == [105, 2364, 107, 2202, 106]
    assert 105 not in off and 106 not in off
    assert 107 in off  # user-defined tokens ("\n") are matched whatever parse_special says
    assert gemma.detokenize(off) == text
    assert gemma.detokenize([2] + on, True) == "<bos>" + text
    assert gemma.detokenize([2] + on) == "user\nhi"


def test_control_piece(qwen):
    assert qwen.token_to_piece(8191, False) == b""
    assert qwen.token_to_piece(8191, True) == b"<|im_end|>"
    assert qwen.token_to_piece(8191) == b"<|im_end|>"  # default special=True
    with pytest.raises(IndexError):
        qwen.token_to_piece(8192)
    with pytest.raises(IndexError):
        qwen.token_to_piece(-1)


# ---------------------------------------------------------------------------------------------
# byte tokens and round trips

def test_spm_byte_tokens(gemma):
    for b in (0x00, 0x41, 0x0A, 0x9F, 0xF0, 0xFF):
        tid = gemma.text_to_token(f"<0x{b:02X}>")
        assert gemma.is_byte(tid)
        assert gemma.token_to_piece(tid) == bytes([b])
    # a character missing from the vocab falls back to its UTF-8 bytes
    ch = "\u2fd5"  # a Kangxi radical Gemma has no token for
    ids = gemma.tokenize(ch, False)
    assert all(gemma.is_byte(i) for i in ids) and len(ids) == 3
    assert b"".join(gemma.token_to_piece(i) for i in ids) == ch.encode()
    assert gemma.detokenize(ids) == ch


def test_spm_space_escaping(gemma):
    ids = gemma.tokenize("a b", False)
    assert any("\u2581" in gemma.token_text(i) for i in ids)
    assert gemma.detokenize(ids) == "a b"
    assert gemma.token_to_piece(gemma.text_to_token("\u2581the")) == b" the"


def test_bpe_byte_level_pieces(qwen):
    # GPT-2 byte-level: 'Ġ' stands for a space, 'ð' for byte 0xF0
    assert qwen.token_to_piece(qwen.text_to_token("\u0120")) == b" "
    assert qwen.token_to_piece(qwen.text_to_token("\u00f0")) == b"\xf0"
    assert qwen.token_to_piece(qwen.text_to_token("\u010a")) == b"\n"


ROUND_TRIP = [
    "Hello, world!",
    "  leading spaces and\ttabs\nnewlines\r\n",
    "Zürich, München, 東京, Москва: naïve café 😀 ≈ π; ½ × 3 — ünïcödé",
    "def f(x):\n    return x ** 2  # it's 5 o'clock, we've got 1234567\n\n\n",
    "e\u0301 combining, \u00a0nbsp\u3000ideographic space, emoji 👩‍👩‍👧 flags 🇫🇷",
    "",
]


@pytest.mark.parametrize("which", ["qwen", "gemma", "smol"])
def test_round_trip(which, request):
    tok = request.getfixturevalue(which)
    for text in ROUND_TRIP:
        ids = tok.tokenize(text, False, False)
        assert tok.detokenize(ids) == text
        assert b"".join(tok.token_to_piece(i) for i in ids) == text.encode()


# ---------------------------------------------------------------------------------------------
# pre-tokenizers against the original regexes (third-party `regex` module)

_REGEXES = {
    "gpt2": [r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"],
    "llama3": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen2": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen35": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "smollm": [r"\p{N}", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
                r"\p{N}+", r"[0-9][0-9][0-9]"],
}


def _regex_split(regex, exprs, text):
    pieces = [text]
    for rx in exprs:
        out = []
        for p in pieces:
            pos = 0
            for m in regex.finditer(rx, p):
                if m.start() > pos:
                    out.append(p[pos:m.start()])
                if m.end() > m.start():
                    out.append(m.group())
                pos = m.end()
            if pos < len(p):
                out.append(p[pos:])
        pieces = out
    return pieces


@pytest.mark.parametrize("pre", sorted(_REGEXES))
def test_pretokenizer_matches_regex(pre):
    regex = pytest.importorskip("regex")
    import random
    rng = random.Random(1234)
    alphabet = (list("abcXYZ019 '   \t\n\r.,!?-_()$+<=>^~|`\"#@")
                + ["'s", "'T", "'re", "'LL", "'ve", "'d", "  ", "\n\n", " \n", "123456"]
                + list("éÄñЖжд你好世界😀🙂½²٣\u0301\u0308\u00a0\u3000—…€™°µ"))
    for _ in range(1500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 25)))
        assert _core.pretokenize(pre, text) == _regex_split(regex, _REGEXES[pre], text), repr(text)


def test_pretokenize_examples():
    assert _core.pretokenize("qwen35", "Hello  world's 123") == ["Hello", " ", " world", "'s", " ", "1", "2", "3"]
    assert _core.pretokenize("llama3", "1234567") == ["123", "456", "7"]
    assert _core.pretokenize("gpt2", "a b", True) == ["a", "\u0120b"]  # byte-level form


# ---------------------------------------------------------------------------------------------
# errors

def _write_gguf(tmp_path, model, pre=None, merges=True):
    gguf = pytest.importorskip("gguf")
    p = tmp_path / f"tok-{model}-{pre}.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(["a", "b", "ab"])
    w.add_token_types([1, 1, 1])
    if merges:
        w.add_token_merges(["a b"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(p)


def test_unknown_model_is_named(tmp_path):
    with pytest.raises(ValueError, match="'nonsense-model'"):
        _core.Tokenizer.from_file(_write_gguf(tmp_path, "nonsense-model"))


def test_unknown_pre_is_named(tmp_path):
    with pytest.raises(ValueError, match="'nonsense-pre'"):
        _core.Tokenizer.from_file(_write_gguf(tmp_path, "gpt2", "nonsense-pre"))
    with pytest.raises(ValueError, match="'nonsense-pre'"):
        _core.pretokenize("nonsense-pre", "x")


def test_tiny_synthetic_bpe(tmp_path):
    t = _core.Tokenizer.from_file(_write_gguf(tmp_path, "gpt2", "qwen2"))
    assert t.tokenize("ab", False) == [2]
    assert t.tokenize("ba", False) == [1, 0]
    assert t.detokenize([2, 0]) == "aba"


# ---------------------------------------------------------------------------------------------
# incremental detokenizer

class _FakeTok:
    def __init__(self, pieces):
        self.pieces = pieces

    def token_to_piece(self, i, special=True):
        return self.pieces[i]


def test_complete_utf8_prefix_len():
    e = "🙂".encode()
    assert [complete_utf8_prefix_len(e[:k]) for k in range(5)] == [0, 0, 0, 0, 4]
    assert complete_utf8_prefix_len(b"ab" + e[:3]) == 2
    assert complete_utf8_prefix_len(b"\x80") == 1       # stray continuation: emitted (as U+FFFD)
    assert complete_utf8_prefix_len(b"\xe2a") == 2      # broken sequence: not held back
    assert complete_utf8_prefix_len("é".encode()) == 2


def test_incremental_emoji_over_spm_byte_tokens(gemma):
    ids = [gemma.text_to_token(f"<0x{b:02X}>") for b in "🙂".encode()]
    d = IncrementalDetokenizer(gemma)
    assert [d.feed(i) for i in ids] == ["", "", "", "🙂"]
    assert d.flush() == ""
    d.feed(gemma.tokenize("Hi ", False))
    assert d.feed(ids[:2]) == ""
    assert d.pending == "🙂".encode()[:2]
    assert d.feed(ids[2:]) == "🙂"
    assert d.text == "🙂Hi 🙂"


def test_incremental_emoji_over_bpe_byte_tokens(qwen):
    ids = qwen.tokenize(" 🙂 ok", False)
    assert len(ids) > 3  # the tiny vocab has no emoji token: byte-level pieces
    d = IncrementalDetokenizer(qwen)
    outs = [d.feed(i) for i in ids] + [d.flush()]
    assert "".join(outs) == " 🙂 ok"
    for o in outs:
        o.encode("utf-8")  # never a lone surrogate / split character
    assert "\ufffd" not in "".join(outs)


def test_incremental_feed_bytes_and_flush():
    d = IncrementalDetokenizer(_FakeTok({}))
    data = "aé🙂z".encode()
    got = [d.feed_bytes(data[i:i + 1]) for i in range(len(data))]
    assert "".join(got) == "aé🙂z"
    assert got[1] == "" and got[2] == "é"
    assert d.feed_bytes("🙂".encode()[:3]) == ""
    assert d.flush() == "\ufffd"  # truncated character at the end of the stream
    assert d.flush() == ""


def test_incremental_special_flag(qwen):
    assert IncrementalDetokenizer(qwen).feed([8190]) == ""
    assert IncrementalDetokenizer(qwen, special=True).feed([8190]) == "<|im_start|>"


# ---------------------------------------------------------------------------------------------
# speed sanity

@pytest.mark.parametrize("which", ["qwen", "gemma", "smol"])
def test_speed_100kb(which, request):
    tok = request.getfixturevalue(which)
    base = ("The quick brown fox jumps over the lazy dog. It's 5 o'clock; we've got 1234567,\n"
            "  def f(x):\n\treturn x**2  # Привет, мир! 你好世界 🙂 <b>html</b> <|im_end|>\n")
    text = (base * (100_000 // len(base) + 1))[:100_000]
    t0 = time.perf_counter()
    ids = tok.tokenize(text, True, True)
    dt = time.perf_counter() - t0
    assert len(ids) > 10_000
    assert dt < 1.0, f"tokenizing 100 KB took {dt:.3f}s"
