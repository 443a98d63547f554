"""``pyllm inspect FILE``: print a GGUF file's header, metadata and tensor table (like gguf-dump).

Text output: version, alignment, file size, key count, every key with its type and value (arrays abbreviated to
type, length and the first few items, long strings truncated; ``--full`` prints everything), then the tensor table
(index, name, type, shape in ggml ne order, bytes, absolute file offset) and totals (parameters, bytes by type).
``--json`` prints the same information in full as one JSON object (tensor ``offset`` is relative to the data
section as in the GGUF tensor info, ``file_offset`` is absolute). ``--no-tensors`` leaves the tensor table out.
A file that fails to load prints the GGUFError message to stderr and exits with status 1.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import OrderedDict

ARRAY_ITEMS = 8        # array items shown without --full
STRING_CHARS = 80      # string characters shown without --full


def _load(path: str):
    from pyllm import GGUFFile

    return GGUFFile(path)


def _json_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    return v


def _short_str(s: str, full: bool) -> str:
    r = json.dumps(s, ensure_ascii=False)
    if full or len(s) <= STRING_CHARS:
        return r
    return json.dumps(s[:STRING_CHARS], ensure_ascii=False)[:-1] + f'..." ({len(s)} chars)'


def _fmt_scalar(v, full: bool) -> str:
    if isinstance(v, str):
        return _short_str(v, full)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def format_value(v, full: bool = False, vtype: str = "") -> str:
    if "float32" in vtype:  # shortest repr that round-trips through float32 (1e-06, not 9.99999997e-07)
        v = [float(f"{x:.7g}") for x in v] if isinstance(v, (list, tuple)) else float(f"{v:.7g}")
    if isinstance(v, (list, tuple)):
        items = v if full else v[:ARRAY_ITEMS]
        body = ", ".join(_fmt_scalar(x, full) for x in items)
        more = "" if len(items) == len(v) else f", ... ({len(v) - len(items)} more)"
        return f"[{body}{more}]"
    return _fmt_scalar(v, full)


def describe(f) -> dict:
    """Everything about the file as plain data (what --json prints)."""
    md = f.metadata()
    kv = []
    for k, v in md.items():
        kv.append(OrderedDict(key=k, type=f.value_type(k), value=_json_value(v)))
    tensors = []
    by_type: dict[str, dict[str, int]] = {}
    n_params = 0
    n_bytes = 0
    for i, t in enumerate(f.tensors()):
        n = math.prod(t["shape"]) if t["shape"] else 1
        n_params += n
        n_bytes += t["nbytes"]
        d = by_type.setdefault(t["type_name"], {"tensors": 0, "parameters": 0, "bytes": 0})
        d["tensors"] += 1
        d["parameters"] += n
        d["bytes"] += t["nbytes"]
        tensors.append(OrderedDict(index=i, name=t["name"], type=t["type_name"], type_id=t["type"],
                                   shape=list(t["shape"]), parameters=n, bytes=t["nbytes"], offset=t["offset"],
                                   file_offset=f.data_offset + t["offset"]))
    return OrderedDict(
        path=f.path, version=f.version, alignment=f.alignment, file_size=f.file_size, data_offset=f.data_offset,
        kv_count=len(kv), tensor_count=len(tensors), metadata=kv, tensors=tensors,
        totals=OrderedDict(parameters=n_params, bytes=n_bytes,
                           by_type=OrderedDict(sorted(by_type.items(), key=lambda x: -x[1]["bytes"]))),
    )


def _human(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.2f}{unit}"
        n /= 1000
    return str(n)


def print_text(info: dict, out, full: bool = False, tensors: bool = True) -> None:
    w = out.write
    w(f"GGUF file: {info['path']}\n")
    w(f"version: {info['version']}  alignment: {info['alignment']}  file size: {info['file_size']} bytes  "
      f"data offset: {info['data_offset']}\n")
    w(f"tensors: {info['tensor_count']}  metadata keys: {info['kv_count']}\n\n")
    w(f"* metadata ({info['kv_count']} keys)\n")
    if info["metadata"]:
        kw = max(len(e["key"]) for e in info["metadata"])
        tw = max(len(e["type"]) for e in info["metadata"])
        for e in info["metadata"]:
            v = e["value"]
            length = f"[{len(v)}] " if isinstance(v, list) else ""
            w(f"  {e['key']:<{kw}}  {e['type']:<{tw}}  {length}{format_value(v, full, e['type'])}\n")
    if not tensors:
        return
    w(f"\n* tensors ({info['tensor_count']})\n")
    rows = [(str(t["index"]), t["name"], t["type"], "{" + ", ".join(map(str, t["shape"])) + "}", str(t["bytes"]),
             str(t["file_offset"])) for t in info["tensors"]]
    hdr = ("idx", "name", "type", "shape", "bytes", "offset")
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(hdr)]
    right = {0, 4, 5}

    def line(r):
        return "  " + "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()

    w(line(hdr) + "\n")
    for r in rows:
        w(line(r) + "\n")
    tot = info["totals"]
    w(f"\n* totals: {tot['parameters']} parameters ({_human(tot['parameters'])}), {tot['bytes']} bytes "
      f"({tot['bytes'] / 2**20:.2f} MiB) in {info['tensor_count']} tensors\n")
    for name, d in tot["by_type"].items():
        w(f"  {name:<8} {d['tensors']:>5} tensors  {d['parameters']:>14} parameters  {d['bytes']:>14} bytes\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pyllm inspect", description="Print a GGUF file's metadata and tensors.")
    p.add_argument("file", help="GGUF file")
    p.add_argument("--json", action="store_true", help="machine-readable output (everything, unabbreviated)")
    p.add_argument("--no-tensors", action="store_true", help="leave out the tensor table and totals")
    p.add_argument("--full", action="store_true", help="do not abbreviate arrays or long strings")
    a = p.parse_args(argv)
    try:
        from pyllm import GGUFError
    except ImportError as e:  # pragma: no cover
        print(f"pyllm inspect: cannot import pyllm: {e}", file=sys.stderr)
        return 1
    try:
        f = _load(a.file)
        info = describe(f)
    except (GGUFError, OSError) as e:
        print(f"pyllm inspect: {e}", file=sys.stderr)
        return 1
    try:
        if a.json:
            if a.no_tensors:
                info.pop("tensors")
                info.pop("totals")
            json.dump(info, sys.stdout, ensure_ascii=False, indent=1)
            sys.stdout.write("\n")
        else:
            print_text(info, sys.stdout, full=a.full, tensors=not a.no_tensors)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `pyllm inspect f.gguf | head`: quiet exit, no traceback at shutdown
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
