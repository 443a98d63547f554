#!/usr/bin/env python3
"""Agent replay: how much of each prompt a llama-server-compatible server evaluates again, and its time to first
token, for the traffic an agent client sends: one long system prompt (tool documentation, ~7K tokens) shared by
conversations that alternate on ONE slot (-np 1), plus a conversation whose system prompt diverges half-way.

Per turn it prints the prompt length, the tokens the server reused (timings.cache_n), re-evaluated
(timings.prompt_n), the tokens that are new since this conversation was last answered, and the time to the first
streamed token. Each engine's server is started with the same model and flags (after --):

  python tools/agent_replay.py -m models/qwen35-tiny-mtp-Q8_0.gguf \\
      --engine pyllm="python -m pyllm.server" --engine llama.cpp=/path/to/llama-server \\
      -- -np 1 -c 16384 -t 2 --cache-ram 4096 -cms 1024
"""
import argparse
import json
import os
import sys
import time

import httpx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pyllm.bench.runners import ServerProcess  # noqa: E402

TOOL_DOC = ("Tool `{name}`: {verb} the {obj} at the given path. Arguments: `path` (string, required), `limit` "
            "(integer, optional, default {n}), `recursive` (boolean). Returns a JSON object with `ok`, `items` and "
            "`error`. Use it when the user asks to {verb} {obj}s; never call it twice with the same arguments.\n")
VERBS = ["read", "list", "search", "index", "copy", "move", "inspect", "compress", "archive", "validate"]
OBJS = ["file", "folder", "log", "record", "table", "image", "report", "config", "module", "ticket"]


def system_prompt(n_tokens: int, tokenize, variant: int = 0) -> str:
    """Tool documentation of about n_tokens tokens; variant != 0 changes the second half (a diverging prompt)."""
    parts, i = ["You are a coding agent with these tools.\n"], 0
    while True:
        half = len(tokenize("".join(parts))) >= n_tokens // 2
        v = VERBS[i % len(VERBS)] if not (variant and half) else VERBS[(i * 7 + variant) % len(VERBS)]
        parts.append(TOOL_DOC.format(name=f"tool_{i}", verb=v, obj=OBJS[(i // 10) % len(OBJS)], n=10 + i))
        i += 1
        if i % 8 == 0 and len(tokenize("".join(parts))) >= n_tokens:
            return "".join(parts)


def turn(url: str, messages: list, n_predict: int) -> dict:
    """One streamed chat turn: the answer, time to first token, and the final timings."""
    body = {"messages": messages, "max_tokens": n_predict, "temperature": 0, "stream": True,
            "timings_per_token": False}
    t0 = time.perf_counter()
    ttft, text, timings = None, [], {}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            for c in d.get("choices") or []:
                delta = c.get("delta") or {}
                piece = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
                if piece and ttft is None:
                    ttft = time.perf_counter() - t0
                text.append(delta.get("content") or "")
            timings = d.get("timings") or timings
    return {"text": "".join(text), "ttft_ms": (ttft if ttft is not None else time.perf_counter() - t0) * 1e3,
            "timings": timings}


def replay(url: str, n_system: int, n_turns: int, n_predict: int) -> list:
    def tokenize(s):
        return httpx.post(url + "/tokenize", json={"content": s}, timeout=600).json()["tokens"]

    sys_a = system_prompt(n_system, tokenize)
    sys_c = system_prompt(n_system, tokenize, variant=3)
    convs = {"A": [{"role": "system", "content": sys_a}], "B": [{"role": "system", "content": sys_a}],
             "C": [{"role": "system", "content": sys_c}]}
    asks = {"A": "List the log files in /var/log, then summarize the largest one.",
            "B": "Search the module folder for tickets about timeouts.",
            "C": "Validate the config files and report errors."}
    order = []
    for t in range(n_turns):
        order += ["A", "B"] + (["C"] if t >= n_turns // 2 else [])
    seen, rows = {}, []
    for k, name in enumerate(order):
        conv = convs[name]
        conv.append({"role": "user", "content": asks[name] if len(conv) == 1 else f"Step {k}: continue, be brief."})
        r = turn(url, conv, n_predict)
        t = r["timings"]
        n_prompt = int(t.get("cache_n", 0)) + int(t.get("prompt_n", 0))
        new = n_prompt - seen.get(name, 0)
        rows.append({"turn": k + 1, "conv": name, "n_prompt": n_prompt, "cache_n": t.get("cache_n"),
                     "re_evaluated": t.get("prompt_n"), "new": new, "ttft_ms": r["ttft_ms"]})
        seen[name] = n_prompt + int(t.get("predicted_n", 0))
        conv.append({"role": "assistant", "content": r["text"]})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--engine", action="append", required=True, help="NAME=COMMAND (the server to start)")
    ap.add_argument("--system-tokens", type=int, default=7000)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("-n", "--n-predict", type=int, default=24)
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("server_args", nargs="*", help="flags for every server (after --)")
    a = ap.parse_args(argv)
    results = {}
    for spec in a.engine:
        name, _, cmd = spec.partition("=")
        srv = ServerProcess(cmd, name)
        srv.start(["-m", a.model] + a.server_args, "agent replay")
        try:
            results[name] = replay(srv.url, a.system_tokens, a.turns, a.n_predict)
        finally:
            srv.stop()
    names = list(results)
    head = "| turn | conv | prompt | new |" + "".join(f" {n} reused | {n} re-evaluated | {n} TTFT ms |" for n in names)
    print(head)
    print("|" + "---|" * (4 + 3 * len(names)))
    for i, row in enumerate(results[names[0]]):
        cells = [str(row["turn"]), row["conv"], str(row["n_prompt"]), str(row["new"])]
        for n in names:
            r = results[n][i]
            cells += [str(r["cache_n"]), str(r["re_evaluated"]), f"{r['ttft_ms']:.0f}"]
        print("| " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
