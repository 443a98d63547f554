"""The prompt cache over HTTP (pyllm-server on the hybrid qwen35 model): conversations alternating on one slot
reuse everything they have seen (RAM prompt cache + context checkpoints), slot save / restore / erase works
across a restart, and every reuse path answers exactly what cache_prompt off answers, with and without MTP."""
import json

import pytest

from server_util import Server

SYSTEM = "You are a careful assistant. Answer briefly and precisely. " * 30
GREEDY = {"temperature": 0, "max_tokens": 10}
SPEC = [[], ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]]


def chat(s, msgs, **kw):
    r = s.post("/v1/chat/completions", {"messages": msgs, **GREEDY, **kw})
    assert r.status_code == 200, r.text
    d = r.json()
    return d["choices"][0]["message"]["content"], d["timings"]


Q8 = ["-ctk", "q8_0", "-ctv", "q8_0", "-ctkd", "q8_0", "-ctvd", "q8_0"]


@pytest.mark.parametrize("spec", SPEC + [SPEC[1] + Q8], ids=["plain", "mtp", "mtp-q8_0-kv"])
def test_alternating_conversations_never_reprocess(spec):
    with Server("-np", "1", "-c", "4096", "--no-slots", *spec) as s:
        convs = {k: [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]
                 for k, q in (("A", "Tell me about cats."), ("B", "What do dogs eat?"), ("C", "Name a river."))}
        for turn in range(2):
            for name, conv in convs.items():
                text, t = chat(s, conv)
                ref, tr = chat(s, conv, cache_prompt=False)
                assert text == ref and tr["cache_n"] == 0
                if turn > 0:  # only the new turn (its user message and the headers) is evaluated
                    assert t["prompt_n"] <= 20, (name, t)
                conv += [{"role": "assistant", "content": text}, {"role": "user", "content": f"And then {turn}?"}]
        out = s.output()
        assert "prompt cache: saved" in out and "context checkpoints:" in out
        assert ("KV cache K q8_0, V q8_0, MTP layer K q8_0, V q8_0" in out) == ("q8_0" in spec)


def test_without_ram_cache_a_returning_conversation_reprocesses_its_turns():
    with Server("-np", "1", "-c", "4096", "--no-slots", "--cache-ram", "0") as s:
        a = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tell me about cats."}]
        b = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What do dogs eat?"}]
        text, _ = chat(s, a)
        chat(s, b)
        a += [{"role": "assistant", "content": text}, {"role": "user", "content": "More?"}]
        _, t = chat(s, a)
        # the system prompt comes back from a checkpoint; A's own turn is evaluated again
        assert t["cache_n"] > 0 and t["prompt_n"] > 20


def _complete(s, prompt, n, **kw):
    r = s.post("/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, "return_tokens": True, **kw})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("spec", SPEC, ids=["plain", "mtp"])
def test_slot_save_restart_restore_continue(spec, tmp_path):
    prompt = "The history of the printing press begins"
    with Server("-np", "2", "-c", "2048", "--slot-save-path", tmp_path, *spec) as s:
        ids = s.post("/tokenize", {"content": prompt, "add_special": True}).json()["tokens"]
        ref = _complete(s, ids, 24, cache_prompt=False, id_slot=1)["tokens"]
        first = _complete(s, ids, 12, id_slot=0)["tokens"]
        r = s.post("/slots/0?action=save", {"filename": "conv.bin"})
        assert r.status_code == 200, r.text
        saved = r.json()
        assert saved["n_saved"] == len(ids) + 11 and saved["n_written"] > 0 and "save_ms" in saved["timings"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv.bin"]  # written atomically: no temporary left
    with Server("-np", "2", "-c", "2048", "--slot-save-path", tmp_path, *spec) as s:
        r = s.post("/slots/1?action=restore", {"filename": "conv.bin"})
        assert r.status_code == 200, r.text
        assert r.json()["n_restored"] == len(ids) + 11
        d = _complete(s, ids + first, 12, id_slot=1)
        assert d["timings"]["cache_n"] == len(ids) + 11 and d["timings"]["prompt_n"] == 1
        assert first + d["tokens"] == ref
        e = s.post("/slots/1?action=erase").json()
        assert e == {"id_slot": 1, "n_erased": len(ids) + 12 + 11}
        assert _complete(s, ids + first, 4, id_slot=1)["timings"]["cache_n"] == 0


def test_slot_file_errors(tmp_path):
    with Server("-np", "1", "-c", "1024", "--slot-save-path", tmp_path, "--no-cache-idle-slots") as s:
        _complete(s, "Hello there, how are you? " * 4, 4)
        for bad in ("../x.bin", "a/b.bin", "", ".hidden", "x\\y", None, 5):
            r = s.post("/slots/0?action=save", {"filename": bad})
            assert r.status_code == 400 and "Invalid filename" in r.text, bad
        assert s.post("/slots/0?action=restore", {"filename": "missing.bin"}).status_code == 400
        assert s.post("/slots/0?action=frobnicate", {"filename": "a"}).status_code == 400
        assert s.post("/slots/7?action=save", {"filename": "a"}).status_code == 400
        assert s.post("/slots/0?action=save", {"filename": "ok.bin"}).status_code == 200
        # another model's file: the header names the model; a clear 400, nothing restored
        raw = (tmp_path / "ok.bin").read_bytes()
        i = raw.index(b'"arch": "qwen35"')
        (tmp_path / "other.bin").write_bytes(raw[:i] + b'"arch": "qwen36"' + raw[i + 16:])
        r = s.post("/slots/0?action=restore", {"filename": "other.bin"})
        assert r.status_code == 400 and "saved from model" in r.json()["error"]["message"]
        (tmp_path / "junk.bin").write_bytes(b"junk")
        r = s.post("/slots/0?action=restore", {"filename": "junk.bin"})
        assert r.status_code == 400 and "Unable to restore slot" in r.json()["error"]["message"]
    with Server("-np", "1", "-c", "1024", "--slot-save-path", tmp_path, "--spec-type", "draft-mtp") as s:
        r = s.post("/slots/0?action=restore", {"filename": "ok.bin"})
        assert r.status_code == 400 and "MTP" in r.json()["error"]["message"]
        _complete(s, "Hello there", 4)
        assert s.post("/slots/0?action=save", {"filename": "mtp.bin"}).status_code == 200
    with Server("-np", "1", "-c", "512", "--slot-save-path", tmp_path) as s:  # MTP memory is not needed here
        r = s.post("/slots/0?action=restore", {"filename": "mtp.bin"})
        assert r.status_code == 200, r.text
        assert _complete(s, "Hello there", 4)["timings"]["cache_n"] > 0
    with Server("-np", "1", "-c", "16", "--slot-save-path", tmp_path) as s:  # a context too small for the state
        r = s.post("/slots/0?action=restore", {"filename": "ok.bin"})
        assert r.status_code == 400 and "positions" in r.json()["error"]["message"]


def test_slot_save_path_must_exist(tmp_path):
    with pytest.raises(RuntimeError, match="slot-save-path"):
        Server("--slot-save-path", tmp_path / "nope")


@pytest.mark.parametrize("flag,saved", [([], True), (["--no-cache-idle-slots"], False)])
def test_idle_slots_are_copied_to_the_ram_cache(flag, saved):
    with Server("-np", "2", "-c", "2048", "--no-slots", *flag) as s:
        _complete(s, "The first conversation is about cats and their habits", 4, id_slot=0)
        _complete(s, "A second one, about the weather in spring", 4, id_slot=1)
        assert ("prompt cache: saved" in s.output()) == saved


def test_slot_action_on_a_busy_slot_waits_until_it_is_idle(tmp_path):
    import threading

    import httpx
    with Server("-np", "1", "-c", "2048", "--no-slots", "--slot-save-path", tmp_path) as s:
        ids = s.post("/tokenize", {"content": "Write a long story about a lighthouse", "add_special": True}).json()["tokens"]
        started, n_chunks = threading.Event(), []

        def stream():
            body = {"prompt": ids, "n_predict": 300, "temperature": 0, "ignore_eos": True, "stream": True}
            with httpx.stream("POST", s.url + "/completion", json=body, timeout=120) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        n_chunks.append(line)
                        started.set()

        th = threading.Thread(target=stream)
        th.start()
        assert started.wait(60)
        r = s.post("/slots/0?action=save", {"filename": "busy.bin"})
        n_at_answer = len(n_chunks)
        th.join()
        assert r.status_code == 200, r.text
        assert r.json()["n_saved"] == len(ids) + 299  # the finished sequence, never a half-done step
        # answered only once the generation was over (the stream's last chunks may still be in flight to this
        # client when the save's answer arrives: a busy box showed 2)
        assert n_at_answer >= len(n_chunks) - 3
