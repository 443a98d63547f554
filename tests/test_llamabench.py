"""`pyllm bench`: llama-bench's flags and output formats on pyllm's core, and --vs against a (fake) llama-bench."""
import csv
import io
import json
import stat
import sys

import pytest

from conftest import ROOT, SHARED_MODELS
from pyllm import _core
from pyllm.bench import llama_bench as lb
from pyllm.bench.llama_bench_args import (BenchArgError, Instance, instances, llama_bench_argv, parse_args,
                                          parse_int_range)
from pyllm.bench.llama_bench_output import FIELDS, make_printer
from pyllm.cli.llamabench import main

TINY = ROOT / "models" / "qwen35-tiny-mtp-Q8_0.gguf"


# ---------------------------------------------------------------------------------------------------------------
# flags


@pytest.mark.parametrize("s,want", [("512", [512]), ("1,2", [1, 2]), ("16-64+16", [16, 32, 48, 64]),
                                    ("1-256*4", [1, 4, 16, 64, 256]), ("1-4", [1, 2, 3, 4]), ("5-3", []),
                                    ("0,8", [0, 8]), ("1,2,", [1, 2]), ("2-9*3,100", [2, 6, 100])])
def test_int_ranges(s, want):
    assert parse_int_range(s) == want


@pytest.mark.parametrize("s", ["", "abc", "1,,2", "1-8*1", "-3", "1-4+0", "1.5", "4-8/2"])
def test_bad_int_ranges(s):
    with pytest.raises(BenchArgError):
        parse_int_range(s)


def test_defaults_and_lists():
    p = parse_args([])
    assert (p.n_prompt, p.n_gen, p.n_pg, p.n_depth, p.n_batch, p.n_ubatch) == ([512], [128], [], [0], [2048], [512])
    assert (p.type_k, p.type_v, p.reps, p.output, p.output_err) == (["f16"], ["f16"], 5, "md", "none")
    assert len(p.n_threads) == 1 and p.n_threads[0] >= 1
    p = parse_args(["-m", "a.gguf,b.gguf", "--model", "c.gguf", "-p", "8", "-p", "16-32+16", "-n", "0", "-t", "1,2",
                    "-pg", "4,2", "-pg", "8,1", "-b", "64", "-ub", "16,32", "-r", "2", "-o", "json", "--n_depth", "4",
                    "-ctk", "f16", "-ctv", "f16", "--delay", "0", "--progress", "--no-warmup", "-oe", "md", "--bw"])
    assert p.model == ["a.gguf", "b.gguf", "c.gguf"] and p.n_prompt == [8, 16, 32] and p.n_gen == [0]
    assert p.n_threads == [1, 2] and p.n_pg == [(4, 2), (8, 1)] and p.n_ubatch == [16, 32] and p.n_depth == [4]
    assert p.reps == 2 and p.output == "json" and p.output_err == "md" and p.no_warmup and p.progress and p.bw
    assert not p.is_default("n_batch") and p.is_default("type_k")


@pytest.mark.parametrize("argv,msg", [
    (["--bogus"], "--bogus"), (["-ngl", "99"], "-ngl"), (["-fa", "1"], "flash-attention"),
    (["-ctk", "q5_1"], "KV cache holds"), (["-ctv", "q4_2"], "-ctv"), (["-o", "xml"], "xml"), (["-r", "0"], "-r"),
    (["-p"], "missing value"), (["-p", "1-x"], "-p"), (["-pg", "8"], "-pg"), (["-pg", "a,b"], "-pg"),
    (["-t", "0"], "n_threads"), (["-b", "0"], "n_batch"), (["--delay", "-1"], "--delay"),
    (["--spec-draft-n-max", "3"], "--spec-draft-n-max"), (["-C", "0x1"], "CPU masks"), (["-hf", "x/y"], "-hf"),
    (["-mmp", "2"], "-mmp")])
def test_bad_flags(argv, msg):
    with pytest.raises(BenchArgError) as e:
        parse_args(argv)
    assert msg in str(e.value) and str(e.value).startswith("error:")


def test_cli_bad_flag_exit_code(capsys):
    assert main(["--frobnicate"]) == 1
    assert "--frobnicate" in capsys.readouterr().err
    assert main(["-h"]) == 0
    out = capsys.readouterr().out
    assert "-pg <pp,tg>" in out and "--vs" in out and "--bw" in out


def test_instances_order_and_names():
    p = parse_args(["-m", "m.gguf", "-p", "512", "-n", "128", "-pg", "512,128", "-t", "1,2", "-d", "0,64"])
    names = [(i.n_threads, i.name) for i in instances(p)]
    assert names == [(1, "pp512"), (1, "tg128"), (1, "pp512+tg128"), (1, "pp512 @ d64"), (1, "tg128 @ d64"),
                     (1, "pp512+tg128 @ d64"), (2, "pp512"), (2, "tg128"), (2, "pp512+tg128"),
                     (2, "pp512 @ d64"), (2, "tg128 @ d64"), (2, "pp512+tg128 @ d64")]
    assert [i.name for i in instances(parse_args(["-p", "0", "-n", "0", "-pg", "0,0"]))] == []


def test_llama_bench_argv():
    i = Instance("m.gguf", 32, 8, 0, 2048, 512, "f16", "f16", 2)
    a = llama_bench_argv(i)
    assert a[:2] == ["-m", "m.gguf"] and a[a.index("-pg") + 1] == "32,8" and a[a.index("-p") + 1] == "0"
    assert a[a.index("-t") + 1] == "2" and a[-4:] == ["-r", "1", "-o", "json"]
    a = llama_bench_argv(Instance("m.gguf", 0, 128, 16, 64, 32, "f16", "f16", 1))
    assert a[a.index("-n") + 1] == "128" and a[a.index("-p") + 1] == "0" and "-pg" not in a
    assert a[a.index("-d") + 1] == "16" and a[a.index("-b") + 1] == "64" and a[a.index("-ub") + 1] == "32"
    assert "-mmp" not in a  # each side's default unless -mmp is given


def test_mmap_flag(capsys):
    """-mmp 0,1: both residencies, passed on to llama-bench, the mmap column and the use_mmap field."""
    p = parse_args(["-m", "m.gguf", "-mmp", "0,1", "-p", "8", "-n", "0"])
    ins = instances(p)
    assert [i.use_mmap for i in ins] == [0, 1]
    assert llama_bench_argv(ins[0])[-2:] == ["-mmp", "0"]
    assert main(["-m", str(TINY), "-mmp", "0,1", "-p", "8", "-n", "0", "-r", "1", "-o", "jsonl"]) == 0
    rows = [json.loads(l) for l in capsys.readouterr().out.splitlines() if l.strip()]
    assert [r["use_mmap"] for r in rows] == [False, True]


# ---------------------------------------------------------------------------------------------------------------
# weight bytes


def test_prompt_chunks():
    assert lb.prompt_chunks(1000, 512, 128) == [128] * 7 + [104]
    assert lb.prompt_chunks(100, 32, 64) == [32, 32, 32, 4]
    assert lb.prompt_chunks(512, 2048, 512) == [512] and lb.prompt_chunks(0, 8, 8) == []


def test_weight_bytes_dense_tied_and_moe(smollm2):
    gf = _core.GGUFFile(str(TINY))
    ts = {t["name"]: t["nbytes"] for t in gf.tensors()}
    mtp = f"blk.{gf.get('qwen35.block_count') - 1}."  # the MTP block (nextn_predict_layers 1)
    assert gf.get("qwen35.nextn_predict_layers") == 1 and mtp + "nextn.eh_proj.weight" in ts
    want = sum(v for k, v in ts.items() if k != "token_embd.weight" and not k.startswith(mtp))
    w = lb.WeightModel(gf)
    assert w.forward_bytes(1) == want == w.forward_bytes(64)
    inst = Instance(str(TINY), 8, 0, 0, 4, 4, "f16", "f16", 1)
    assert w.per_token(inst) == pytest.approx(want / 4)  # two forwards of 4 tokens for 8 tokens
    # tied embeddings (no output.weight): token_embd is the output matrix
    gs = _core.GGUFFile(str(smollm2))
    assert lb.WeightModel(gs).forward_bytes(1) == sum(t["nbytes"] for t in gs.tensors())
    # MoE: n_expert_used / n_expert of the expert tensors per token, more experts for a ubatch
    gm = _core.GGUFFile(str(SHARED_MODELS / "tiny-qwen35moe-mtp-random-Q8_0.gguf"))
    meta = gm.metadata()
    E, k = meta["qwen35moe.expert_count"], meta["qwen35moe.expert_used_count"]
    ts = {t["name"]: t["nbytes"] for t in gm.tensors()}
    mtp = f"blk.{meta['qwen35moe.block_count'] - 1}."
    keep = {n: b for n, b in ts.items() if n != "token_embd.weight" and not n.startswith(mtp)}
    exp = sum(b for n, b in keep.items() if "_exps" in n)
    wm = lb.WeightModel(gm)
    assert wm.forward_bytes(1) == pytest.approx(sum(keep.values()) - exp + exp * k / E)
    assert wm.forward_bytes(512) == pytest.approx(sum(keep.values()), rel=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# output writers


def _row(vs=False, bw=False):
    inst = Instance("m.gguf", 512, 0, 0, 2048, 512, "f16", "f16", 2)
    info = {"model_filename": "m.gguf", "model_type": "qwen35 27B Q4_K - Small", "model_size": 3 * 1024 ** 3,
            "model_n_params": 4_500_000_000, "use_mmap": False}
    vs_objs = [{"samples_ns": [2_000_000_000], "model_type": "qwen35 27B Q4_K - Small"},
               {"samples_ns": [2_000_000_000]}] if vs else None
    return lb.make_row(inst, info, [1_000_000_000, 1_000_000_000], 1e6, 20e9 if bw else None, vs_objs,
                       "2026-01-01T00:00:00Z", [(153600, 76_800_000), (153600, 76_800_000)])


def _print(fmt, rows, argv=()):
    buf = io.StringIO()
    p = make_printer(fmt, buf, "pyllm test")
    p.header(parse_args(list(argv)), ["read bandwidth: x"] if "--bw" in argv else [])
    for r in rows:
        p.row(r)
    p.footer()
    return buf.getvalue()


def test_markdown():
    out = _print("md", [_row()])
    lines = out.splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head == ["model", "size", "params", "backend", "threads", "test", "t/s", "weights/tok", "GB/s",
                    "dispatch/tok"]
    assert set(lines[1].replace("|", "").split()) <= {"-" * n + e for n in range(1, 40) for e in ("", ":")}
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[:6] == ["qwen35 27B Q4_K - Small", "3.00 GiB", "4.50 B", "CPU", "2", "pp512"]
    assert cells[6] == "512.00 ± 0.00" and cells[7] == "0.95 MiB" and cells[8] == "0.51"
    assert cells[9] == "300 (150 us)"  # 153600 dispatches and 76.8 ms of waiting per sample, over 512 tokens
    assert out.rstrip().endswith("build: pyllm test")
    out = _print("md", [_row(vs=True, bw=True)], ["--vs", "x", "--bw", "-b", "64"])
    head = [c.strip() for c in out.splitlines()[2].strip("|").split("|")]
    assert out.startswith("read bandwidth: x")
    assert head == ["model", "size", "params", "backend", "threads", "n_batch", "test", "t/s", "weights/tok", "GB/s",
                    "dispatch/tok", "bw %", "llama.cpp t/s", "ratio"]
    cells = [c.strip() for c in out.splitlines()[4].strip("|").split("|")]
    assert cells[-3:] == ["3", "256.00 ± 0.00", "2.00"]


def test_json_jsonl_csv_sql():
    rows = [_row(), _row(vs=True, bw=True)]
    js = json.loads(_print("json", rows))
    assert len(js) == 2
    for d in js:
        assert list(d)[:len(FIELDS)] == FIELDS
        assert d["n_prompt"] == 512 and d["n_gen"] == 0 and d["avg_ns"] == 1_000_000_000 and d["stddev_ns"] == 0
        assert d["avg_ts"] == 512.0 and d["samples_ns"] == [1_000_000_000] * 2 and d["samples_ts"] == [512.0] * 2
        assert d["weight_bytes_per_token"] == 1_000_000 and d["weight_gbps"] == pytest.approx(0.512)
    assert "ratio" not in js[0] and js[1]["ratio"] == 2.0 and js[1]["llamacpp_avg_ts"] == 256.0
    assert js[1]["llamacpp_samples_ns"] == [2_000_000_000] * 2 and js[1]["read_bw_gbps"] == 20.0
    assert js[1]["t_excess_us"] == pytest.approx(1e6 / 512 - 1e6 * 1e6 / 20e9)
    assert js[0]["dispatches_per_token"] == 300.0 and js[0]["dispatch_us_per_token"] == pytest.approx(150.0)
    lines = _print("jsonl", rows).splitlines()
    assert [json.loads(x)["avg_ts"] for x in lines] == [512.0, 512.0]
    rd = list(csv.reader(io.StringIO(_print("csv", [rows[0]]))))
    assert rd[0][:len(FIELDS)] == FIELDS and dict(zip(rd[0], rd[1]))["avg_ts"] == "512.000000"
    assert dict(zip(rd[0], rd[1]))["n_threads"] == "2"
    sql = _print("sql", [rows[1]])
    assert sql.startswith("CREATE TABLE IF NOT EXISTS llama_bench (") and "avg_ts REAL" in sql
    assert "INSERT INTO llama_bench (build_commit" in sql and "ratio" in sql


# ---------------------------------------------------------------------------------------------------------------
# real runs


def test_tiny_run_json(capsys):
    assert main(["-m", str(TINY), "-p", "8", "-n", "4", "-r", "1", "-t", "1", "-o", "json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [(r["n_prompt"], r["n_gen"]) for r in res] == [(8, 0), (0, 4)]
    for r in res:
        assert len(r["samples_ns"]) == 1 and r["avg_ts"] > 0 and r["model_filename"] == str(TINY)
        assert r["model_type"] == "qwen35 12M Q8_0" and r["backends"] == "CPU" and r["n_threads"] == 1
        assert r["weight_bytes_per_token"] > 0 and r["weight_gbps"] > 0
    assert res[0]["weight_bytes_per_token"] == pytest.approx(res[1]["weight_bytes_per_token"] / 8, abs=1)
    assert all(r["dispatches_per_token"] == 0 and r["dispatch_us_per_token"] == 0 for r in res)  # -t 1: none
    assert main(["-m", str(TINY), "-p", "0", "-n", "3", "-r", "1", "-t", "2", "-o", "json"]) == 0
    r = json.loads(capsys.readouterr().out)[0]
    assert r["dispatches_per_token"] >= 1 and r["dispatch_us_per_token"] >= 0


def test_tiny_run_md_depth_batches_bw(capsys, monkeypatch):
    monkeypatch.setattr(lb, "bw_buffer_bytes", lambda: 32 << 20)
    assert main(["-m", str(TINY), "-p", "0", "-n", "0", "-pg", "8,2", "-d", "4", "-b", "4", "-ub", "2", "-r", "2",
                 "-t", "1", "--bw", "--progress", "-oe", "jsonl"]) == 0
    cap = capsys.readouterr()
    assert "read bandwidth:" in cap.out and "pp8+tg2 @ d4" in cap.out and "bw %" in cap.out
    row = json.loads([ln for ln in cap.err.splitlines() if ln.startswith("{")][0])
    assert row["n_depth"] == 4 and row["n_batch"] == 4 and row["n_ubatch"] == 2 and row["read_bw_gbps"] > 0
    assert "benchmark 1/1: pyllm run 2/2" in cap.err


def test_read_bandwidth_probe():
    assert _core.read_bandwidth(2, 16 << 20, 2) > 1e8
    with pytest.raises(ValueError):
        _core.read_bandwidth(0, 1 << 20, 1)
    with pytest.raises(ValueError):
        _core.read_bandwidth(1, 8, 1)


def test_missing_model(capsys):
    assert main(["-m", "/nonexistent/m.gguf", "-p", "8", "-n", "0"]) == 1
    assert "failed to load model '/nonexistent/m.gguf'" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# --vs


FAKE = """#!{python}
import json, os, sys
a = sys.argv[1:]
open(os.environ["FAKE_LB_LOG"], "a").write("llama " + " ".join(a) + "\\n")
if os.environ.get("FAKE_LB_MODE") == "fail":
    sys.stderr.write("llama-bench: error: failed to load model\\n"); sys.exit(3)
if os.environ.get("FAKE_LB_MODE") == "garbage":
    print("not json"); sys.exit(0)
v = lambda f: a[a.index(f) + 1]
pp, tg = int(v("-p")), int(v("-n"))
if "-pg" in a:
    pp, tg = map(int, v("-pg").split(","))
assert v("-r") == "1" and v("-o") == "json"
print(json.dumps([{{"model_type": "fake", "n_prompt": pp, "n_gen": tg, "n_threads": int(v("-t")),
                   "samples_ns": [1000000000], "samples_ts": [float(pp + tg)]}}], indent=2))
"""


@pytest.fixture
def fake_lb(tmp_path, monkeypatch):
    exe = tmp_path / "llama-bench"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "log"
    monkeypatch.setenv("FAKE_LB_LOG", str(log))
    orig = lb.PyllmRunner.sample

    def logged(self, ctx, inst):  # records pyllm's repetitions in the same log, to check the interleaving
        with open(log, "a") as f:
            f.write("pyllm\n")
        return orig(self, ctx, inst)
    monkeypatch.setattr(lb.PyllmRunner, "sample", logged)
    return exe, log


def test_vs_interleaved_with_ratio(fake_lb, capsys):
    exe, log = fake_lb
    assert main(["-m", str(TINY), "-p", "8", "-n", "2", "-r", "2", "-t", "1", "--vs", str(exe), "-o", "json"]) == 0
    res = json.loads(capsys.readouterr().out)
    lines = log.read_text().splitlines()
    assert [ln.split()[0] for ln in lines] == ["pyllm", "llama"] * 4
    assert "-p 8 -n 0" in lines[1] and "-p 0 -n 2" in lines[5] and "-t 1" in lines[1] and "-m " + str(TINY) in lines[1]
    for r in res:
        n = r["n_prompt"] + r["n_gen"]
        assert r["llamacpp_samples_ns"] == [1_000_000_000] * 2 and r["llamacpp_avg_ts"] == pytest.approx(n)
        assert r["ratio"] == pytest.approx(r["avg_ts"] / n) and r["llamacpp_model_type"] == "fake"
    assert main(["-m", str(TINY), "-p", "0", "-n", "0", "-pg", "4,1", "-r", "1", "-t", "1", "--vs", str(exe),
                 "-o", "csv"]) == 0
    rd = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert "ratio" in rd[0] and float(dict(zip(rd[0], rd[1]))["ratio"]) > 0
    assert "-pg 4,1" in log.read_text().splitlines()[-1]
    assert main(["-m", str(TINY), "-p", "4", "-n", "0", "-r", "1", "-t", "1", "--vs", str(exe)]) == 0
    assert "llama.cpp t/s" in capsys.readouterr().out


def test_vs_errors(fake_lb, tmp_path, capsys, monkeypatch):
    exe, _ = fake_lb
    base = ["-m", str(TINY), "-p", "4", "-n", "0", "-r", "1", "-t", "1", "--vs"]
    assert main(base + [str(tmp_path / "nope")]) == 1
    assert "llama-bench binary not found" in capsys.readouterr().err
    noexec = tmp_path / "noexec"
    noexec.write_text("x")
    assert main(base + [str(noexec)]) == 1 and "not an executable" in capsys.readouterr().err
    monkeypatch.setenv("FAKE_LB_MODE", "fail")
    assert main(base + [str(exe)]) == 1
    err = capsys.readouterr().err
    assert "exited with code 3" in err and "failed to load model" in err
    monkeypatch.setenv("FAKE_LB_MODE", "garbage")
    assert main(base + [str(exe)]) == 1 and "did not print llama-bench JSON" in capsys.readouterr().err


def test_warmup_settles_the_group_kernels_read_mode(monkeypatch):
    """The warm-up repeats the test's own shape until cpu/prefetch_tune.h has chosen its read modes (a short prompt
    its batches, which time the batch class; a long prompt or a generation test one-token decodes), else the test's
    repetitions would run in the modes being timed; it stops at once when they are chosen."""
    class Core:
        def __init__(self, n):
            self.n = n

        def x16_prefetch(self, n_threads=0):
            assert n_threads == 1  # the test's own pool size
            self.n -= 1
            return "measuring" if self.n >= 0 else "streams"

    class Ctx:
        def __init__(self):
            self.evals = []

        def seq_clear(self, seq):
            pass

        def eval(self, seq, toks, logits):
            self.evals.append(list(toks))
    r = lb.PyllmRunner()
    r.n_vocab, r.bos = 100, 1
    for n_prompt, n_gen, shape in ((4, 0, [4]), (512, 0, [1]), (0, 16, [1]), (8, 16, [8, 1])):
        inst = Instance(model="m", n_prompt=n_prompt, n_gen=n_gen, n_depth=0, n_batch=2048, n_ubatch=512,
                        type_k="f16", type_v="f16", n_threads=1)
        first = [n_prompt] * (n_prompt > 0) + [1] * (n_gen > 0)  # the warm-up's own prompt and decode
        for n_measuring, rounds in ((3, 3), (0, 0)):
            monkeypatch.setattr(lb, "_core", lambda c=Core(n_measuring): c)
            ctx = Ctx()
            r.warmup(ctx, inst)
            assert [len(e) for e in ctx.evals] == first + shape * rounds, (n_prompt, n_gen, n_measuring)
