"""pyllm-bench: ranges, statistics, writers, prompts, the HTTP modes against a fake llama-server, errors,
and one short real in-process sweep on the tiny MTP model."""
import csv
import json
import socket
import subprocess
import sys
import threading
import types
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import SHARED_MODELS, smollm2_path
from pyllm.bench import output
from pyllm.bench.prompts import TASKS, PromptError, load_prompt_file, parse_tasks, render_prompt
from pyllm.bench.runners import spec_flags
from pyllm.bench.stats import RangeError, Run, aggregate, parse_range, summarize
from pyllm.cli.bench import main, split_argv

ROOT = Path(__file__).resolve().parents[1]
TINY = SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf"

# A fake llama-server: /health, /props, /completion with canned timings that depend on --spec-draft-n-max.
# Run as a script (for --server-cmd) or exec'd for an in-thread server (for --server URL).
FAKE_SERVER = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONF = {"n_max": 0, "reject_spec": False, "speed": 100.0, "diverge_at": 0}

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def _send(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        elif self.path == "/props":
            self._send(200, {"chat_template": "{% for m in messages %}<|u|>{{ m.content }}{% endfor %}<|a|>"})
        else:
            self._send(404, {"error": {"message": "not found"}})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/completion":
            return self._send(404, {"error": {"message": "not found"}})
        n, k = body["n_predict"], CONF["n_max"]
        toks = list(range(n))
        if CONF["diverge_at"] and k:
            toks[CONF["diverge_at"]:] = [7] * (n - CONF["diverge_at"])
        speed = CONF["speed"] + 10.0 * k
        t = {"cache_n": 0, "prompt_n": len(body["prompt"]), "prompt_ms": 10.0,
             "prompt_per_second": len(body["prompt"]) * 100.0, "predicted_n": n,
             "predicted_ms": n / speed * 1e3, "predicted_per_second": speed}
        if k:
            t["draft_n"] = 4 * k
            t["draft_n_accepted"] = (n - 1) // 2
        res = {"content": "x" * n, "tokens": toks if body.get("return_tokens") else [], "timings": t}
        self._send(200, res)

def main(argv):
    port, i = 8080, 0
    while i < len(argv):
        a = argv[i]
        if a == "--port": port = int(argv[i + 1]); i += 1
        elif a == "--spec-draft-n-max": CONF["n_max"] = int(argv[i + 1]); i += 1
        elif a == "--speed": CONF["speed"] = float(argv[i + 1]); i += 1
        elif a == "--diverge-at": CONF["diverge_at"] = int(argv[i + 1]); i += 1
        elif a == "--reject-spec": CONF["reject_spec"] = True
        elif a == "--spec-type" and CONF["reject_spec"]:
            print("loading model", file=sys.stderr)
            print("error: invalid argument: --spec-type", file=sys.stderr)
            sys.exit(1)
        i += 1
    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    srv.serve_forever()

if __name__ == "__main__":
    main(sys.argv[1:])
'''


@pytest.fixture(scope="module")
def fake_script(tmp_path_factory):
    p = tmp_path_factory.mktemp("fake") / "fake_llama_server.py"
    p.write_text(FAKE_SERVER)
    return p


@pytest.fixture()
def fake_http():
    mod = types.ModuleType("fake_llama_server")
    exec(FAKE_SERVER, mod.__dict__)
    mod.CONF["n_max"] = 3
    srv = ThreadingHTTPServer(("127.0.0.1", 0), mod.Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------ ranges

@pytest.mark.parametrize("spec,want", [
    ("1-7", [1, 2, 3, 4, 5, 6, 7]), ("1,3,5", [1, 3, 5]), ("0", []), ("0,2-3", [2, 3]), ("3", [3]),
    ("5,1-2", [1, 2, 5]), ("2-2", [2]), (" 1 - 3 ", [1, 2, 3]),
    ("auto", [1007]), ("1-2,auto", [1, 2, 1007]), ("auto:3,AUTO,3", [3, 1003, 1007]),
])
def test_parse_range(spec, want):
    assert parse_range(spec) == want


@pytest.mark.parametrize("spec", ["7-1", "a", "-1", "", "1-", "1,,2", "99", "1-x", "1.5", "auto:0", "auto:x", "autox"])
def test_parse_range_bad(spec):
    with pytest.raises(RangeError):
        parse_range(spec)


def test_bad_range_cli(capsys):
    assert main(["-m", str(TINY), "--spec-draft-n-max", "7-1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "7-1" in err and "\n" not in err


def test_split_argv():
    opts, rest = split_argv(["-m", "F", "--spec-draft-n-max", "1-3", "--server-cmd", "a -b", "--server_cmd", "c",
                             "--engine-name", "x", "-n", "8", "--no-chat", "-f", "p.txt", "--plot", "o.png"])
    assert rest == ["-m", "F", "-n", "8"]
    assert opts["n_max"] == "1-3" and opts["server_cmds"] == ["a -b", "c"] and opts["engine_names"] == ["x"]
    assert opts["no_chat"] and opts["prompt_files"] == ["p.txt"] and opts["plot"] == "o.png"


def test_unknown_flag_and_bad_task(capsys):
    assert main(["-m", str(TINY), "--bogus"]) == 1
    assert "invalid argument: --bogus" in capsys.readouterr().err
    assert main(["-m", str(TINY), "--tasks", "code,poetry"]) == 1
    assert "unknown task 'poetry'" in capsys.readouterr().err


def test_spec_flags():
    assert spec_flags("draft-mtp", 0) == []
    assert spec_flags("draft-mtp", 3) == ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]
    assert spec_flags("draft-mtp", 2, synth_rates=[0.9, 0.5])[-2:] == ["--spec-synth-rates", "0.9,0.5"]
    assert spec_flags("draft-mtp", 2, synth_len=2.5)[-2:] == ["--spec-synth-len", "2.5"]
    assert spec_flags("draft-mtp", 1007) == ["--spec-type", "draft-mtp", "--spec-draft-n-max", "auto"]
    assert spec_flags("draft-mtp", 1004)[-1] == "auto:4"


def test_auto_setting_in_process(capsys):
    """`auto` is a setting like the fixed ones: measured, labelled, lossless (same as base)."""
    assert main(["-m", str(TINY), "--spec-draft-n-max", "2,auto:3", "-n", "12", "-r", "1", "-t", "1", "--tasks",
                 "code", "--no-progress", "--no-warmup"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| code")]
    assert [ln.split("|")[2].strip() for ln in rows] == ["0 (base)", "2", "auto:3"]
    assert rows[-1].rstrip(" |").endswith("yes")


def test_in_process_settings_alternate_per_repetition(capsys):
    """In process every setting keeps its context and the settings take turns, repetition by repetition (a drift
    of the machine's speed then reaches all of them alike); each context is made once."""
    import re
    from pyllm.bench import runners
    made = []
    orig = runners.InProcess.setup

    def setup(self, n_max, *a):
        before = len(self.gens)
        orig(self, n_max, *a)
        if len(self.gens) > before:
            made.append(n_max)
    runners.InProcess.setup = setup
    try:
        assert main(["-m", str(TINY), "--spec-draft-n-max", "1,2", "-n", "4", "-r", "2", "-t", "1", "--tasks",
                     "code", "--no-warmup"]) == 0
    finally:
        runners.InProcess.setup = orig
    err = capsys.readouterr().err
    order = re.findall(r"pyllm (baseline|n_max=\d) code (r\d)", err)
    assert order == [("baseline", "r1"), ("n_max=1", "r1"), ("n_max=2", "r1"),
                     ("baseline", "r2"), ("n_max=1", "r2"), ("n_max=2", "r2")], err
    assert made == [0, 1, 2]


def test_in_process_takes_the_cheap_head_and_cache_flags(monkeypatch, capsys):
    """--spec-draft-vocab / --spec-draft-head-type / --spec-accept reach the speculative settings' contexts and
    -ctk / -ctv every context (they were parsed and then dropped in process)."""
    from pyllm import generation
    seen = []
    orig = generation.Generator.__init__

    def init(self, *a, **kw):
        seen.append(kw)
        orig(self, *a, **kw)
    monkeypatch.setattr(generation.Generator, "__init__", init)
    assert main(["-m", str(TINY), "--spec-draft-n-max", "1", "-n", "4", "-r", "1", "-t", "1", "--tasks", "code",
                 "--no-warmup", "--no-progress", "--spec-draft-vocab", "1024", "--spec-draft-head-type", "q4_0",
                 "-ctk", "q8_0"]) == 0
    base, spec = seen
    assert "draft_vocab" not in base and base["cache_type_k"] == "q8_0"
    assert spec["draft_vocab"] == 1024 and spec["draft_head_type"] == "q4_0" and spec["cache_type_k"] == "q8_0"
    assert "draft head: " in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ statistics

def _run(task, n, rep, gen_tps, n_draft=0, acc=0, steps=None, pos=None, tokens=(1, 2, 3), engine="e"):
    return Run(engine=engine, task=task, n_max=n, rep=rep, n_prompt=10, t_prompt_ms=5.0, n_gen=3, t_gen_ms=20.0,
               gen_tps=gen_tps, prompt_tps=2000.0 + rep, n_draft=n_draft, n_draft_accepted=acc, n_verif_steps=steps,
               accepted_per_pos=pos, tokens=list(tokens))


def test_aggregate_statistics():
    base = [_run("t", 0, r, v) for r, v in enumerate([100.0, 90.0, 120.0])]
    spec = [_run("t", 2, 0, 150.0, 20, 12, 10, [8, 4]), _run("t", 2, 1, 130.0, 20, 8, 10, [6, 2]),
            _run("t", 2, 2, 170.0, 20, 10, 10, [7, 3])]
    b = aggregate(base)
    assert (b.gen_tps_median, b.gen_tps_min, b.gen_tps_max) == (100.0, 90.0, 120.0)
    assert b.speedup == 1.0 and b.accept_rate is None and b.same_as_baseline is None
    assert b.prompt_tps_median == 2001.0
    s = aggregate(spec, b, base[0].output_key())
    assert s.gen_tps_median == 150.0 and s.gen_tps_min == 130.0 and s.gen_tps_max == 170.0
    assert s.speedup == pytest.approx(1.5)
    assert s.n_draft == 60 and s.n_draft_accepted == 30 and s.accept_rate == pytest.approx(0.5)
    assert s.mean_len == pytest.approx(2.0) and not s.mean_len_estimated      # 1 + 30/30
    assert s.accept_per_pos == pytest.approx([21 / 30, 9 / 30])
    assert s.same_as_baseline is True
    spec[1].tokens = [1, 2, 4]
    assert aggregate(spec, b, base[0].output_key()).same_as_baseline is False


def test_aggregate_server_estimates_mean_len():
    r = _run("t", 4, 0, 50.0, n_draft=40, acc=20)       # servers report no verification steps
    r.n_gen = 31                                         # 30 tokens after the first = 10 steps + 20 accepted
    s = aggregate([r])
    assert s.accept_rate == pytest.approx(0.5) and s.mean_len == pytest.approx(3.0) and s.mean_len_estimated
    assert s.accept_per_pos is None and s.speedup is None
    r.n_gen = 3                                          # inconsistent counts: fall back to drafted / n_max
    assert aggregate([r]).mean_len == pytest.approx(3.0)


def test_summarize_groups_per_engine_and_task():
    runs = []
    for eng, f in (("a", 1.0), ("b", 2.0)):
        for task in ("x", "y"):
            for n in (0, 1, 2):
                runs.append(_run(task, n, 0, f * (100 + n), n_draft=n * 10, acc=n * 5, steps=n * 10 and 10,
                                 pos=[5] * n if n else None, engine=eng))
    ss = summarize(runs)
    assert [(s.engine, s.task, s.n_max) for s in ss][:3] == [("a", "x", 0), ("a", "x", 1), ("a", "x", 2)]
    assert len(ss) == 12
    assert all(s.speedup == pytest.approx((100 + s.n_max) / 100) for s in ss)
    assert all(s.same_as_baseline for s in ss if s.n_max)


# ------------------------------------------------------------------------------------------ writers

def _settings():
    runs = [_run("code", 0, 0, 100.0), _run("code", 1, 0, 80.0, 10, 8, 10, [8]),
            _run("code", 2, 0, 110.0, 20, 10, 10, [6, 4], tokens=(9,)),
            _run("story", 0, 0, 95.0), _run("story", 1, 0, 90.0, 10, 5, 10, [5])]
    return summarize(runs)


def test_markdown():
    md = output.markdown(_settings(), {"model_name": "m.gguf", "threads": 2, "n_predict": 16, "repetitions": 1})
    lines = md.splitlines()
    assert lines[0].startswith("**pyllm-bench** model: m.gguf, threads: 2")
    header = next(ln for ln in lines if ln.startswith("| task"))
    assert "gen tok/s (median)" in header and "accept per pos" in header and "same as base" in header
    rows = [ln for ln in lines if ln.startswith("| code") or ln.startswith("| story")]
    assert len(rows) == 5
    assert "| 0 (base) | 100.0 |" in rows[0]
    assert "0.800 (8/10)" in rows[1] and "| 1.80 |" in rows[1] and "0.80x" in rows[1] and rows[1].endswith("| yes |")
    assert "0.60 0.40" in rows[2] and rows[2].endswith("| NO |")
    multi = output.markdown(_settings() + [aggregate([_run("code", 0, 0, 1.0, engine="other")])])
    assert "| engine | task |" in multi


def test_json_csv_png(tmp_path):
    ss = _settings()
    j, c, png = tmp_path / "b.json", tmp_path / "b.csv", tmp_path / "b.png"
    output.write_json(str(j), ss, {"model": "m", "threads": 2})
    doc = json.loads(j.read_text())
    assert doc["threads"] == 2 and len(doc["settings"]) == 5
    s1 = doc["settings"][1]
    assert s1["n_max"] == 1 and s1["accept_rate"] == pytest.approx(0.8) and s1["runs"][0]["gen_tps"] == 80.0
    output.write_csv(str(c), ss)
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == 5 and rows[2]["accept_per_pos"] == "0.6000;0.4000" and rows[0]["speedup"] == "1.0000"
    assert rows[2]["same_as_baseline"] == "False"
    output.plot(str(png), ss + [aggregate([_run("code", 0, 0, 70.0, engine="other")])], "title\nsecond line")
    data = png.read_bytes()
    assert len(data) > 10000 and data[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------ prompts

def test_builtin_tasks():
    assert parse_tasks("all") == ["code", "translate", "story", "agent", "edit"]
    assert parse_tasks("story, code") == ["story", "code"]
    with pytest.raises(PromptError):
        parse_tasks("code,nope")
    assert "canvas" in TASKS["code"] and "```python" in TASKS["agent"]
    cyr = sum(1 for ch in TASKS["story"] if "\u0400" <= ch <= "\u04ff")
    assert cyr > 100       # the story prompt is in Russian


def test_prompt_files(tmp_path):
    a = tmp_path / "mine.txt"
    a.write_text("hello there\n")
    assert load_prompt_file(str(a)) == [("mine", "hello there")]
    b = tmp_path / "list.json"
    b.write_text(json.dumps(["one", {"name": "two", "prompt": "zwei"}]))
    assert load_prompt_file(str(b)) == [("list-1", "one"), ("two", "zwei")]
    b.write_text("[1, 2]")
    with pytest.raises(PromptError):
        load_prompt_file(str(b))
    with pytest.raises(PromptError):
        load_prompt_file(str(tmp_path / "missing.txt"))


def test_render_prompt():
    assert render_prompt("hi", "chatml", True) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert render_prompt("hi", "chatml", False) == "hi"
    assert render_prompt("hi", None, True) == "hi"


# ------------------------------------------------------------------------------------------ HTTP modes

def test_server_url(fake_http, tmp_path, capsys):
    j = tmp_path / "s.json"
    rc = main(["--server", fake_http, "--spec-draft-n-max", "3", "-n", "8", "-r", "2", "--tasks", "code,story",
               "--json", str(j), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    doc = json.loads(j.read_text())
    assert [(s["task"], s["n_max"]) for s in doc["settings"]] == [("code", 3), ("story", 3)]
    s = doc["settings"][0]
    # n=8, k=3: drafted 12, accepted 3 per run; verification steps = 8 - 1 - 3 = 4
    assert s["gen_tps_median"] == 130.0 and s["accept_rate"] == pytest.approx(0.25)
    assert s["mean_len"] == pytest.approx(1.75) and s["mean_len_estimated"] and s["reps"] == 2
    # the chat template from /props was applied (prompt_n = length of the rendered prompt in the fake)
    assert s["runs"][0]["n_prompt"] == len("<|u|>" + TASKS["code"] + "<|a|>")
    assert "~1.75" in out


def test_server_url_sweep_needs_server_cmd(fake_http, capsys):
    assert main(["--server", fake_http, "--spec-draft-n-max", "1-3"]) == 1
    assert "--server-cmd" in capsys.readouterr().err


def test_server_not_reachable(capsys):
    url = f"http://127.0.0.1:{_free_port()}"
    assert main(["--server", url, "-n", "4", "--tasks", "code"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: server {url} not reachable") and "\n" not in err


def test_server_cmd_compare(fake_script, tmp_path, capsys):
    j, png, c = tmp_path / "c.json", tmp_path / "c.png", tmp_path / "c.csv"
    cmd_a = f"{sys.executable} {fake_script} -m x.gguf"
    cmd_b = f"{sys.executable} {fake_script} -m x.gguf --speed 200 --diverge-at 3"
    rc = main(["--spec-type", "draft-mtp", "--spec-draft-n-max", "1-2", "-n", "8", "-r", "1", "--tasks", "code",
               "--server-cmd", cmd_a, "--engine-name", "upstream", "--server-cmd", cmd_b, "--engine-name", "other",
               "--json", str(j), "--plot", str(png), "--csv", str(c), "--no-progress", "--spec-synth-rates", "0.9,0.5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    doc = json.loads(j.read_text())
    got = [(s["engine"], s["n_max"], s["gen_tps_median"]) for s in doc["settings"]]
    assert got == [("upstream", 0, 100.0), ("upstream", 1, 110.0), ("upstream", 2, 120.0),
                   ("other", 0, 200.0), ("other", 1, 210.0), ("other", 2, 220.0)]
    assert doc["settings"][2]["speedup"] == pytest.approx(1.2)
    assert "| engine | task |" in out and "| other | code | 1 |" in out
    assert png.stat().st_size > 10000 and len(c.read_text().splitlines()) == 7
    # synthetic acceptance: outputs are not comparable with the baseline
    assert all(s["synthetic"] for s in doc["settings"] if s["n_max"]) and "| synth |" in out


def test_server_cmd_same_output(fake_script, tmp_path, capsys):
    j = tmp_path / "o.json"
    cmd = f"{sys.executable} {fake_script} --diverge-at 3"      # speculative runs differ from token 3 on
    assert main(["--spec-draft-n-max", "1", "-n", "8", "-r", "1", "--tasks", "code", "--server-cmd", cmd,
                 "--server-cmd", f"{sys.executable} {fake_script}", "--no-progress", "--json", str(j)]) == 0
    got = [(s["engine"], s["n_max"], s["same_as_baseline"]) for s in json.loads(j.read_text())["settings"]]
    e1, e2 = got[0][0], got[2][0]
    assert e2 == e1 + "-2"                                       # default names are made unique
    assert got == [(e1, 0, None), (e1, 1, False), (e2, 0, None), (e2, 1, True)]
    assert "| NO |" in capsys.readouterr().out


def test_server_cmd_rejects_spec(fake_script, capsys):
    cmd = f"{sys.executable} {fake_script} --reject-spec"
    rc = main(["--spec-draft-n-max", "2", "-n", "4", "-r", "1", "--tasks", "code", "--server-cmd", cmd,
               "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err[-1].startswith("error: server command for ") and "exited with code 1" in err[-1]
    assert "n_max=2" in err[-1] and "invalid argument: --spec-type" in err[-1]


def test_partial_results_on_failure(fake_script, tmp_path, capsys):
    j = tmp_path / "p.json"
    ok = f"{sys.executable} {fake_script}"
    bad = f"{sys.executable} {fake_script} --reject-spec"
    rc = main(["--spec-draft-n-max", "1", "-n", "4", "-r", "1", "--tasks", "code", "--no-progress", "--json", str(j),
               "--server-cmd", ok, "--engine-name", "good", "--server-cmd", bad, "--engine-name", "bad"])
    cap = capsys.readouterr()
    assert rc == 1 and "exited with code 1" in cap.err.strip().splitlines()[-1]
    assert "| good | code | 1 |" in cap.out and "| bad | code | 0 (base) |" in cap.out
    assert [(s["engine"], s["n_max"]) for s in json.loads(j.read_text())["settings"]] == [
        ("good", 0), ("good", 1), ("bad", 0)]


def test_server_cmd_not_found(capsys):
    assert main(["--spec-draft-n-max", "0", "-n", "4", "--tasks", "code", "--server-cmd",
                 "/nonexistent/llama-server -m x", "--no-progress"]) == 1
    assert "cannot start server command" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ in-process

def test_no_mtp_file(tmp_path, capsys):
    path = smollm2_path()
    if path is None:
        path = tmp_path / "nomtp.gguf"
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_tiny_gguf.py"), "--no-mtp", "--n-layer", "4",
                        "--type", "q8_0", str(path)], check=True, capture_output=True)
    assert main(["-m", str(path), "--spec-type", "draft-mtp", "--spec-draft-n-max", "1-2", "-n", "4"]) == 1
    err = capsys.readouterr().err.strip()
    assert "has no MTP layers" in err and "\n" not in err


def test_missing_model(capsys):
    assert main(["-m", "/nonexistent/model.gguf", "-n", "4", "--tasks", "code"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: failed to load model") and "\n" not in err


def test_real_inprocess_sweep(tmp_path, capsys):
    assert TINY.exists(), f"{TINY} missing (PYLLM_SHARED?)"
    j, png = tmp_path / "r.json", tmp_path / "r.png"
    rc = main(["-m", str(TINY), "--spec-type", "draft-mtp", "--spec-draft-n-max", "1-2", "-n", "16", "-r", "1",
               "--tasks", "code", "-t", "1", "--json", str(j), "--plot", str(png)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    doc = json.loads(j.read_text())
    ss = doc["settings"]
    assert [s["n_max"] for s in ss] == [0, 1, 2]
    assert all(s["n_gen"] == 16 and s["gen_tps_median"] > 0 and s["prompt_tps_median"] > 0 for s in ss)
    for s in ss[1:]:
        assert s["n_draft"] > 0 and 0 <= s["accept_rate"] <= 1
        assert len(s["accept_per_pos"]) == s["n_max"] and 1.0 <= s["mean_len"] <= s["n_max"] + 1
        assert s["same_as_baseline"] is True           # greedy MTP output equals plain decoding
        assert not s["mean_len_estimated"]
        for r in s["runs"]:   # the server-side estimate of verification steps is right to within the last step
            assert 0 <= (r["n_gen"] - 1 - r["n_draft_accepted"]) - r["n_verif_steps"] <= 1
    # the chat template was applied: the prompt holds the ChatML wrapping
    assert ss[0]["runs"][0]["n_prompt"] > 20
    assert "| code | 0 (base) |" in cap.out and "3/3" in cap.err
    assert png.stat().st_size > 10000


def test_plot_without_matplotlib_names_the_extra(fake_http, tmp_path, capsys, monkeypatch):
    """--plot when matplotlib is not installed: one line naming pyllm[plot], before any measurement."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    png = tmp_path / "p.png"
    assert main(["--server", fake_http, "--spec-draft-n-max", "3", "-n", "4", "--tasks", "code",
                 "--plot", str(png)]) == 1
    cap = capsys.readouterr()
    assert cap.err.strip() == 'error: --plot needs matplotlib, which is not installed: pip install "pyllm[plot]"'
    assert cap.out == "" and not png.exists()


def _bench_server(args):
    root = Path(__file__).resolve().parent.parent
    return subprocess.run([sys.executable, str(root / "tools" / "bench_server.py")] + args, capture_output=True,
                          text=True, timeout=300, cwd=str(root))


def test_bench_server_variants():
    """tools/bench_server.py --variant: one speculative pyllm server measured with MTP on and, through the
    request field speculative.type = "none", off; the off column drafts nothing, the on column drafts; a bad
    --variant is refused with its name."""
    model = str(SHARED_MODELS / "qwen35-tiny-mtp-Q8_0.gguf")
    out = _bench_server(["-m", model, "--clients", "1,2", "-n", "8", "-r", "1",
                         "--engine", f"pyllm={sys.executable} -m pyllm.server --spec-type draft-mtp --spec-draft-n-max 2",
                         "--variant", "mtp={}", "--variant", 'plain={"speculative.type": "none"}',
                         "--", "-np", "2", "-c", "1024", "-t", "1"])
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [l for l in out.stdout.splitlines() if l.startswith("| 1 |") or l.startswith("| 2 |")]
    assert len(rows) == 2 and "pyllm mtp tok/s" in out.stdout and "pyllm plain tok/s" in out.stdout
    for r in rows:
        acc = r.split("|")[-2]  # "pyllm mtp: A/D, pyllm plain: A/D"
        mtp, plain = [x.split(":")[1].strip() for x in acc.split(",")]
        assert int(mtp.split("/")[1]) > 0, r
        assert plain == "0/0", r
    bad = _bench_server(["-m", model, "--engine", "x=true", "--variant", "v={oops"])
    assert bad.returncode != 0 and "--variant v: bad JSON" in bad.stderr
