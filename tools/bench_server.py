#!/usr/bin/env python3
"""Aggregate generation throughput of llama-server-compatible servers under concurrent clients.

Starts each engine's server on 127.0.0.1 (same model file and flags), sends C simultaneous
/completion requests (greedy, fixed n_predict, cache_prompt off; client i sends seed 1 + i, so the synthetic
acceptance coins of --spec-synth-rates, drawn from a per-request RNG seeded by it, differ between clients) for
C in --clients, and reports
aggregate tokens/s = total generated tokens / wall time of the batch, best of -r runs, with the
ratio of each engine to the first one. Engines alternate per measurement so both see the same
machine load. `--variant NAME=JSON` (repeatable) measures each engine once per variant, with those
request fields added (e.g. `plain={"speculative.type": "none"}` beside `mtp={}` on one speculative
pyllm server: MTP on and off in the same process, where two 16 GB servers would not fit in memory).

  python tools/bench_server.py -m models/qwen35-tiny-mtp-Q8_0.gguf --clients 1,4,8 \\
      --engine pyllm="python -m pyllm.server" --engine llama.cpp=/path/to/llama-server \\
      -- -np 8 -c 8192 -t 2 --spec-type draft-mtp --spec-draft-n-max 3
"""
import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pyllm.bench.runners import BenchError, ServerProcess, http_json  # noqa: E402

PROMPTS = [
    "def retry_with_backoff(fn, retries=3):",
    "The following module provides a simple way to",
    "class LRUCache:\n    def __init__(self, capacity):",
    "Write a function that parses a CSV line into fields.",
]


def start_server(name, cmd, model, extra):
    """The bench package's launcher: free loopback port, /health wait, clear error with the log tail."""
    srv = ServerProcess(cmd, name)
    srv.start(["-m", model] + list(extra), "bench_server")
    return srv


def post_completion(server, body):
    status, r = http_json(server.url + "/completion", body, timeout=600)
    if status != 200:
        raise BenchError(f"error: {server.name} answered HTTP {status}: {r}")
    return r


def batch(server, clients, n_predict, fields=None):
    """C simultaneous requests (with the variant's extra request fields); returns (aggregate tok/s, draft_n,
    draft_n_accepted)."""
    results = [None] * clients
    errors = []
    def one(i):
        try:
            results[i] = post_completion(server, {
                "prompt": PROMPTS[i % len(PROMPTS)], "n_predict": n_predict, "temperature": 0,
                "cache_prompt": False, "ignore_eos": True, "seed": 1 + i, **(fields or {})})
        except (BenchError, OSError) as e:  # reported after the batch, not lost in the thread
            errors.append(e)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise BenchError(f"error: {server.name}: {errors[0]}")
    n = sum(r["timings"]["predicted_n"] for r in results)
    dn = sum(r["timings"].get("draft_n", 0) for r in results)
    da = sum(r["timings"].get("draft_n_accepted", 0) for r in results)
    return n / wall, dn, da


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--engine", action="append", required=True, help="NAME=COMMAND (server binary and fixed args)")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    ap.add_argument("-r", "--repeat", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=JSON: request fields added for this variant (repeatable; each engine runs each)")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="-- then flags passed to every server")
    a = ap.parse_args(argv)
    extra = a.extra[1:] if a.extra[:1] == ["--"] else a.extra
    engines = [e.split("=", 1) for e in a.engine]
    if any(len(e) != 2 for e in engines):
        ap.error("--engine takes NAME=COMMAND")
    variants = {}
    for v in a.variant:
        name, eq, body = v.partition("=")
        try:
            fields = json.loads(body) if eq else None
        except json.JSONDecodeError as e:
            ap.error(f"--variant {name}: bad JSON ({e})")
        if not isinstance(fields, dict):
            ap.error(f"--variant takes NAME=JSON with a JSON object, got {v!r}")
        variants[name] = fields
    variants = variants or {"": {}}
    clients = [int(c) for c in a.clients.split(",")]
    servers = {}
    try:
        for name, cmd in engines:
            print(f"starting {name}: {cmd}", file=sys.stderr)
            servers[name] = start_server(name, cmd, a.model, extra)
        for name in servers:  # warm-up
            batch(servers[name], 1, 8)
        cols = [(e, v) for e in servers for v in variants]  # (engine, variant): one column each
        label = {(e, v): f"{e} {v}".strip() for e, v in cols}
        res = {label[col]: {c: (0.0, 0, 0) for c in clients} for col in cols}
        for rep in range(a.repeat):
            for c in clients:
                for e, v in cols:
                    tps, dn, da = batch(servers[e], c, a.n_predict, variants[v])
                    if tps > res[label[e, v]][c][0]:
                        res[label[e, v]][c] = (tps, dn, da)
                    print(f"rep {rep} clients {c} {label[e, v]}: {tps:.1f} tok/s", file=sys.stderr)
    except BenchError as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        for s in servers.values():
            s.close()
    names = list(res)
    head = "| clients | " + " | ".join(f"{n} tok/s" for n in names) + " | " + " | ".join(f"{n}/{names[0]}" for n in names[1:]) + " | accepted/drafted |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for c in clients:
        cells = [f"{res[n][c][0]:.1f}" for n in names]
        ratios = [f"{res[n][c][0] / res[names[0]][c][0]:.2f}" for n in names[1:]]
        acc = ", ".join(f"{n}: {res[n][c][2]}/{res[n][c][1]}" for n in names)
        print(f"| {c} | " + " | ".join(cells) + " | " + " | ".join(ratios) + f" | {acc} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "extra": extra, "results": res}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
