"""The core's prompt cache on the hybrid qwen35 model (Gated DeltaNet + attention): context checkpoints let a
prompt reuse a prefix the recurrent state has moved past, a sequence's whole state can be taken, written, read
and put back, and every reuse path gives the same greedy tokens as evaluating from scratch (cache_prompt off),
with and without MTP drafting."""
import pytest

from conftest import SHARED_MODELS

from pyllm.generation import Generator, Request
from pyllm.model import Model

QWEN = SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf"
MOE = SHARED_MODELS / "tiny-qwen35moe-mtp-random-Q8_0.gguf"
TEXT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
SPECS = ["none", "draft-mtp"]
_models = {}


def model(path=QWEN, mtp=True):
    key = (str(path), mtp)
    if key not in _models:
        _models[key] = Model(str(path), load_mtp=mtp)
    return _models[key]


def gen(spec="none", n_max=32, min_step=8192, path=QWEN, n_ctx=2048):
    m = model(path, spec != "none")
    return Generator(m, n_ctx=n_ctx, n_seq=1, n_threads=1, spec_type=spec, ctx_checkpoints=n_max,
                     checkpoint_min_step=min_step)


def run(g, prompt, n=16, cache=True):
    fin = None
    for ev in g.run(Request(prompt=list(prompt), sampling={"temperature": 0}, n_predict=n, cache_prompt=cache)):
        if ev.kind == "done":
            fin = ev.data
    return fin


def prompt(k=3):
    return model().tokenize(TEXT * k)


@pytest.mark.parametrize("spec", SPECS)
def test_identical_prompt_evaluates_only_its_last_token(spec):
    g, p = gen(spec), prompt()
    first = run(g, p)
    assert first["n_cached"] == 0
    assert (len(p) - 1) in [pos for pos, _ in g.checkpoints(0)]
    again = run(g, p)
    assert again["n_cached"] == len(p) - 1 and again["timings"]["prompt_n"] == 1
    assert again["stats"]["ckpt_restored"] == len(p) - 1
    assert again["tokens"] == first["tokens"] == run(g, p, cache=False)["tokens"]


@pytest.mark.parametrize("spec", SPECS)
def test_diverging_prompt_restores_the_nearest_checkpoint(spec):
    g, p = gen(spec, min_step=32), prompt(4)
    run(g, p)
    pos = [q for q, _ in g.checkpoints(0)]
    assert pos[:3] == [32, 64, 96] and pos[-1] == len(p) - 1
    other = p[:75] + model().tokenize(" A dog barked loudly at the", add_special=False)
    r = run(g, other)
    assert r["n_cached"] == 64 and r["timings"]["prompt_n"] == len(other) - 64
    assert r["tokens"] == run(gen(spec), other, cache=False)["tokens"]


@pytest.mark.parametrize("spec", SPECS)
def test_checkpoints_while_generating(spec):
    g, p = gen(spec, min_step=16), prompt(2)
    out = run(g, p, n=48)["tokens"]
    pos = [q for q, _ in g.checkpoints(0)]
    assert any(q > len(p) for q in pos), pos
    # the client sends back part of the answer, then something else
    nxt = p + out[:30] + model().tokenize(" The end.", add_special=False)
    best = max(q for q in pos if q <= len(p) + 30)
    r = run(g, nxt)
    assert r["n_cached"] == best and best > len(p)
    assert r["tokens"] == run(gen(spec), nxt, cache=False)["tokens"]


def test_checkpoints_are_bounded_and_spread():
    g, p = gen(n_max=4, min_step=8), prompt(4)
    run(g, p, n=40)
    ck = g.checkpoints(0)
    assert len(ck) == 4 and all(b > 0 for _, b in ck)
    pos = [q for q, _ in ck]
    assert pos == sorted(pos) and pos[0] < len(p) // 2  # thinning keeps early ones too, not only the newest


def test_checkpoints_off_keeps_the_old_behaviour():
    g, p = gen(n_max=0), prompt()
    a = run(g, p)
    b = run(g, p)
    assert g.checkpoints(0) == [] and b["n_cached"] == 0 and a["tokens"] == b["tokens"]


@pytest.mark.parametrize("spec", SPECS)
def test_state_file_restart_continue_equals_never_stopped(spec, tmp_path):
    p = prompt()
    ref = run(gen(spec), p, n=32, cache=False)["tokens"]
    g = gen(spec)
    out1 = run(g, p, n=16)["tokens"]
    st = g.state_get(0)
    assert st.n_tokens == len(p) + 15 and st.has_mtp == (spec != "none") and st.checkpoints
    f = tmp_path / "slot.bin"
    st.write(str(f), '{"who": "test"}')
    del g
    g2 = gen(spec)  # a fresh context: the server restarted
    st2, header = model(mtp=spec != "none").core.SeqState.read(str(f))
    assert header == b'{"who": "test"}' and st2.tokens == st.tokens and st2.checkpoints == st.checkpoints
    g2.state_set(0, st2)
    r = run(g2, p + out1, n=16)
    assert r["n_cached"] == len(p) + 15 and r["timings"]["prompt_n"] == 1  # only the never-fed last token
    assert out1 + r["tokens"] == ref
    if spec != "none":
        assert r["stats"]["n_draft"] > 0


def test_state_errors(tmp_path):
    g = gen()
    run(g, prompt(), n=4)
    st = g.state_get(0)
    other = gen(path=MOE)
    with pytest.raises(ValueError, match="layer"):
        other.state_set(0, st)
    small = gen(n_ctx=64)
    with pytest.raises(ValueError, match="positions"):
        small.state_set(0, st)
    mtp = gen("draft-mtp")
    with pytest.raises(ValueError, match="MTP"):
        mtp.state_set(0, st)
    f = tmp_path / "s.bin"
    st.write(str(f), "{}")
    data = f.read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.bin").write_bytes(b"not a slot file at all")
    SeqState = model().core.SeqState
    with pytest.raises(RuntimeError, match="truncated|past the end"):
        SeqState.read(str(tmp_path / "cut.bin"))
    with pytest.raises(RuntimeError, match="magic|truncated"):
        SeqState.read(str(tmp_path / "junk.bin"))
    assert not list(tmp_path.glob("*.tmp"))
    # a busy sequence's state cannot be taken
    g.begin(0, Request(prompt=prompt(), sampling={"temperature": 0}, n_predict=4))
    with pytest.raises(ValueError, match="busy"):
        g.state_get(0)
    g.cancel(0)


def test_checkpoint_settings_are_checked():
    g = gen()
    with pytest.raises(ValueError, match="min-step"):
        g.ctx.set_checkpoints(4, -1)


@pytest.mark.parametrize("spec", SPECS)
def test_llama_save_and_load_state(spec):
    from pyllm import Llama
    llm = Llama(str(QWEN), n_ctx=1024, n_threads=1, spec_type=spec, verbose=False)
    text = TEXT * 2
    a = llm.create_completion(text, max_tokens=8, temperature=0)["choices"][0]["text"]
    state = llm.save_state()
    assert state.n_tokens == len(state.input_ids) > 0 and state.llama_state_size > 0
    llm.create_completion("Something else entirely, about ships.", max_tokens=4, temperature=0)
    llm.load_state(state)
    b = llm.create_completion(text, max_tokens=8, temperature=0)
    assert b["choices"][0]["text"] == a
    assert llm.last_timings["cache_n"] == len(llm.tokenize(text.encode())) - 1  # from the end-of-prompt checkpoint
    with pytest.raises(TypeError):
        llm.load_state(object())


def test_a_single_checkpoint_is_the_newest():
    g, p = gen(n_max=1, min_step=16), prompt(2)
    run(g, p, n=4)
    assert [q for q, _ in g.checkpoints(0)] == [len(p) - 1]
    assert run(g, p, n=4)["n_cached"] == len(p) - 1
