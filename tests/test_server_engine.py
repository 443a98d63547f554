"""Engine unit tests with the fake core (in-process, no HTTP)."""
import asyncio

import pytest

import fake_core as fake
from pyllm.args import parse_args
from pyllm.server.engine import Engine, Task


def scripted_core(script):
    """A fake core whose generated tokens follow `script` (byte values), then EOS."""
    class Ctx(fake.Context):
        def step(self):
            for s in self.seqs:
                if s.active and not hasattr(s, "script"):
                    s.script = list(script)
            return super().step()

        def _next(self, prev):
            for s in self.seqs:
                if s.active and getattr(s, "script", None) is not None and s.tokens and s.tokens[-1] == prev:
                    return s.script.pop(0) + 3 if s.script else fake.EOS
            return fake.EOS

    core = fake.install()
    core.Context = Ctx
    return core


def make_engine(tmp_path, core=fake, argv=("-np", "2", "-c", "256")):
    m = tmp_path / "m.gguf"
    m.write_bytes(b"GGUF")
    p = parse_args(["-m", str(m), *argv], "server", env={})
    e = Engine(p, core=core)
    e.load()
    return e


async def run(e, text="hi", **kw):
    prompt = e.model.tokenize(text, True, False)
    t = Task(prompt=prompt, params={"temperature": 0}, **kw)
    q = e.submit(t)
    chunks, fin = [], None
    while True:
        ev = await asyncio.wait_for(q.get(), 10)
        if ev.kind == "token":
            chunks.append(ev.text)
        elif ev.kind == "done":
            fin = ev.data
            break
        elif ev.kind == "error":
            raise RuntimeError(ev.data)
    return chunks, fin


def test_utf8_held_back(tmp_path):
    e = make_engine(tmp_path, scripted_core(list("aé€😀b".encode())))
    try:
        chunks, fin = asyncio.run(run(e))
        assert "".join(chunks) == "aé€😀b" == fin["text"]
        assert all("\ufffd" not in c for c in chunks)
        assert fin["stop_type"] == "eos"
    finally:
        e.close()


def test_stop_string_partial_never_leaks(tmp_path):
    e = make_engine(tmp_path, scripted_core(list(b"hello ENDxx END world")))
    try:
        chunks, fin = asyncio.run(run(e, stop=["END w"]))
        assert fin["text"] == "hello ENDxx " and "".join(chunks) == "hello ENDxx "
        assert fin["stop_type"] == "word" and fin["stopping_word"] == "END w"
        assert not any(c.endswith("EN") or c.endswith("E") for c in chunks[:-1] if c)
    finally:
        e.close()


def test_n_predict_and_timings(tmp_path):
    e = make_engine(tmp_path, scripted_core(list(b"abcdefghij")))
    try:
        chunks, fin = asyncio.run(run(e, n_predict=4))
        assert fin["text"] == "abcd" and fin["stop_type"] == "limit" and fin["n_decoded"] == 4
        t = fin["timings"]
        assert t["predicted_n"] == 4 and t["predicted_per_second"] == pytest.approx(1e3 / t["predicted_ms"] * 3)
        chunks, fin = asyncio.run(run(e, n_predict=1))
        assert fin["timings"]["predicted_per_second"] == 0.0 and fin["timings"]["predicted_per_token_ms"] == 0.0
    finally:
        e.close()


def test_queue_and_cancel(tmp_path, monkeypatch):
    monkeypatch.setenv("PYLLM_FAKE_STEP_MS", "2")
    e = make_engine(tmp_path, argv=("-np", "1", "-c", "4096"))

    async def main():
        long = Task(prompt=e.model.tokenize("long", True), params={"ignore_eos": True}, n_predict=100000)
        q1 = e.submit(long)
        assert (await q1.get()).kind == "begin"
        t2 = Task(prompt=e.model.tokenize("short", True), params={}, n_predict=3)
        q2 = e.submit(t2)
        await asyncio.sleep(0.05)
        assert e.n_deferred() == 1 and e.n_processing() == 1
        e.cancel(long)
        while True:
            ev = await asyncio.wait_for(q2.get(), 10)
            if ev.kind == "done":
                return ev.data
    try:
        fin = asyncio.run(main())
        assert fin["n_decoded"] <= 3
        assert e.n_processing() == 0
    finally:
        e.close()


def test_speculative_stats(tmp_path):
    e = make_engine(tmp_path, argv=("-np", "1", "-c", "512", "--spec-type", "draft-mtp"))
    try:
        _, fin = asyncio.run(run(e, n_predict=20, params_json=None))
        t = fin["timings"]
        assert t["predicted_n"] <= 20
        assert "draft_n" in t and t["draft_n_accepted"] <= t["draft_n"]
        m = e.metrics_snapshot()
        assert m["spec_decode_num_drafts_total"] > 0 and m["accepted_per_pos"]
    finally:
        e.close()


def test_cache_ram_limited_to_available_memory():
    """--cache-ram is capped at half the memory available after the load (the weights are read into memory),
    kept where it fits or where the memory cannot be read, and -1 (no limit) stays as asked."""
    from pyllm.server.engine import available_mib, cache_ram_limit
    assert cache_ram_limit(8192, 6000) == 3000
    assert cache_ram_limit(1024, 6000) == 1024
    assert cache_ram_limit(8192, None) == 8192
    assert cache_ram_limit(-1, 6000) == -1
    assert cache_ram_limit(8192, 1) == 1
    a = available_mib()
    assert a is None or a > 0
