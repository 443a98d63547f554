"""`pyllm bench` printers: llama-bench's md / csv / json / jsonl / sql formats and field names, plus pyllm's
columns (weight bytes per token, the GB/s they imply, thread-pool dispatches per token and their cost, read
bandwidth, and the llama.cpp ratio with --vs).

A result row is a dict holding llama-bench's fields (FIELDS, in its order; the ones for flags pyllm does not
have are left out) followed by the additions (EXTRA_FIELDS, present when measured). Rows are printed as each
test finishes, as llama-bench does.
"""
from __future__ import annotations

import json
from typing import IO, List, Optional

from .llama_bench_args import BenchParams

# llama-bench's test::get_fields() that apply to pyllm (GPU/offload/mask/poll/fit fields are omitted)
FIELDS = ["build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
          "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "type_k", "type_v", "n_gpu_layers",
          "use_mmap", "repack", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts"]
SAMPLES = ["samples_ns", "samples_ts"]
# pyllm's additions (see llama_bench.py for their definitions)
EXTRA_FIELDS = ["weight_bytes_per_token", "weight_gbps", "dispatches_per_token", "dispatch_us_per_token",
                "read_bw_gbps", "read_bw_share", "t_excess_us",
                "llamacpp_model_type", "llamacpp_avg_ns", "llamacpp_stddev_ns", "llamacpp_avg_ts",
                "llamacpp_stddev_ts", "llamacpp_samples_ns", "llamacpp_samples_ts", "ratio"]
INT_FIELDS = {"build_number", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "n_gpu_layers",
              "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "weight_bytes_per_token", "llamacpp_avg_ns",
              "llamacpp_stddev_ns"}
FLOAT_FIELDS = {"avg_ts", "stddev_ts", "weight_gbps", "dispatches_per_token", "dispatch_us_per_token",
                "read_bw_gbps", "read_bw_share", "t_excess_us",
                "llamacpp_avg_ts", "llamacpp_stddev_ts", "ratio"}


def row_fields(row: dict) -> List[str]:
    """Scalar fields of a row, in order (llama-bench's, then the additions it has)."""
    return [f for f in FIELDS if f in row] + [f for f in EXTRA_FIELDS if f in row and not f.endswith("samples_ns")
                                               and not f.endswith("samples_ts")]


def _str(field: str, v) -> str:
    """A value as llama-bench's get_values() spells it (std::to_string: %f for doubles, 0/1 for bools)."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if field in FLOAT_FIELDS and v is not None:
        return f"{float(v):f}"
    return "" if v is None else str(v)


def fmt_size(n: int) -> str:
    return f"{n / 1024 ** 2:.2f} MiB" if n < 1024 ** 3 else f"{n / 1024 ** 3:.2f} GiB"


def fmt_params(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n < 1e9 else f"{n / 1e9:.2f} B"


class Printer:
    def __init__(self, out: IO[str]):
        self.out = out

    def header(self, params: BenchParams, notes: List[str]) -> None:
        pass

    def row(self, row: dict) -> None:
        raise NotImplementedError

    def footer(self) -> None:
        pass


class CSVPrinter(Printer):
    fields: Optional[List[str]] = None

    @staticmethod
    def _esc(s: str) -> str:
        return '"' + s.replace('"', '""') + '"'

    def row(self, row: dict) -> None:
        if self.fields is None:  # the columns are known with the first row (extras depend on the options)
            self.fields = row_fields(row)
            self.out.write(",".join(self.fields) + "\n")
        self.out.write(",".join(self._esc(_str(f, row.get(f))) for f in self.fields) + "\n")
        self.out.flush()


def _json_obj(row: dict) -> dict:
    d = {f: row[f] for f in row_fields(row)}
    d["samples_ns"] = list(row["samples_ns"])
    d["samples_ts"] = list(row["samples_ts"])
    for f in ("llamacpp_samples_ns", "llamacpp_samples_ts"):
        if f in row:
            d[f] = list(row[f])
    return d


class JSONPrinter(Printer):
    first = True

    def header(self, params, notes):
        self.out.write("[\n")

    def row(self, row):
        if not self.first:
            self.out.write(",\n")
        self.first = False
        # llama-bench's layout: one field per line, sample lists on one line
        d = _json_obj(row)
        body = ",\n".join(f"    {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in d.items())
        self.out.write("  {\n" + body + "\n  }")
        self.out.flush()

    def footer(self):
        self.out.write("\n]\n")
        self.out.flush()


class JSONLPrinter(Printer):
    def row(self, row):
        self.out.write(json.dumps(_json_obj(row), ensure_ascii=False) + "\n")
        self.out.flush()


class SQLPrinter(Printer):
    fields: Optional[List[str]] = None

    def row(self, row):
        if self.fields is None:
            self.fields = row_fields(row)
            cols = []
            for f in self.fields:
                t = "INTEGER" if f in INT_FIELDS else "REAL" if f in FLOAT_FIELDS else "TEXT"
                cols.append(f"  {f} {t}")
            self.out.write("CREATE TABLE IF NOT EXISTS llama_bench (\n" + ",\n".join(cols) + "\n);\n\n")
        vals = ", ".join("'" + _str(f, row.get(f)).replace("'", "''") + "'" for f in self.fields)
        self.out.write(f"INSERT INTO llama_bench ({', '.join(self.fields)}) VALUES ({vals});\n")
        self.out.flush()


class MarkdownPrinter(Printer):
    """llama-bench's table: model, size, params, backend, threads, the test flags given other than their
    defaults, test, t/s; then pyllm's columns."""

    WIDTHS = {"model": -30, "size": 10, "params": 10, "backend": -10, "n_threads": 7, "n_batch": 7, "n_ubatch": 8,
              "type_k": 6, "type_v": 6, "use_mmap": 4, "repack": 6, "test": 15, "t/s": 20, "weights/tok": 11, "GB/s": 8, "dispatch/tok": 16, "bw %": 5,
              "llama.cpp t/s": 20, "ratio": 6}
    NAMES = {"n_threads": "threads", "use_mmap": "mmap"}

    def __init__(self, out, build: str):
        super().__init__(out)
        self.build = build
        self.cols: List[str] = []

    def header(self, params, notes):
        for n in notes:
            self.out.write(n + "\n")
        if notes:
            self.out.write("\n")
        self.cols = ["model", "size", "params", "backend", "n_threads"]
        self.cols += [f for f in ("n_batch", "n_ubatch", "type_k", "type_v") if not params.is_default(f)]
        if params.use_mmap:
            self.cols.append("use_mmap")
        if params.repack:
            self.cols.append("repack")
        self.cols += ["test", "t/s", "weights/tok", "GB/s", "dispatch/tok"]
        if params.bw:
            self.cols.append("bw %")
        if params.vs:
            self.cols += ["llama.cpp t/s", "ratio"]
        self.out.write("|" + "".join(f" {self.NAMES.get(c, c):{self._align(c)}{abs(self.WIDTHS[c])}} |"
                                     for c in self.cols) + "\n")
        self.out.write("|" + "".join(f" {'-' * (abs(self.WIDTHS[c]) - 1)}{':' if self.WIDTHS[c] > 0 else '-'} |"
                                     for c in self.cols) + "\n")
        self.out.flush()

    def _align(self, c: str) -> str:
        return "<" if self.WIDTHS[c] < 0 else ">"

    def _value(self, c: str, r: dict) -> str:
        if c == "model":
            return r["model_type"]
        if c == "size":
            return fmt_size(r["model_size"])
        if c == "params":
            return fmt_params(r["model_n_params"])
        if c == "backend":
            return r["backends"]
        if c == "test":
            return r["test"]
        if c == "t/s":
            return f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}"
        if c == "weights/tok":
            return fmt_size(int(r["weight_bytes_per_token"]))
        if c == "GB/s":
            return f"{r['weight_gbps']:.2f}"
        if c == "dispatch/tok":  # count (the caller's wait in them)
            if r.get("dispatches_per_token") is None:
                return "-"
            return f"{r['dispatches_per_token']:.0f} ({r['dispatch_us_per_token']:.0f} us)"
        if c == "bw %":
            return f"{100 * r['read_bw_share']:.0f}" if r.get("read_bw_share") is not None else "-"
        if c == "llama.cpp t/s":
            return f"{r['llamacpp_avg_ts']:.2f} ± {r['llamacpp_stddev_ts']:.2f}"
        if c == "ratio":
            return f"{r['ratio']:.2f}"
        return _str(c, r[c])

    def row(self, row):
        self.out.write("|" + "".join(f" {self._value(c, row):{self._align(c)}{abs(self.WIDTHS[c])}} |"
                                     for c in self.cols) + "\n")
        self.out.flush()

    def footer(self):
        self.out.write(f"\nbuild: {self.build}\n")
        self.out.flush()


def make_printer(fmt: str, out: IO[str], build: str) -> Optional[Printer]:
    if fmt == "none":
        return None
    return {"csv": CSVPrinter, "json": JSONPrinter, "jsonl": JSONLPrinter, "sql": SQLPrinter}[fmt](out) \
        if fmt != "md" else MarkdownPrinter(out, build)
