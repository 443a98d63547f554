"""Writers: Markdown table, JSON, CSV and a matplotlib chart of the per-setting statistics."""
from __future__ import annotations

import csv
import json
from typing import Optional

from .stats import Setting, is_auto, n_max_flag


def _f(x, fmt="{:.1f}", none="-"):
    return none if x is None else fmt.format(x)


def n_max_label(n: int) -> str:
    return "0 (base)" if n == 0 else ("server" if n < 0 else n_max_flag(n))


def _same(s: Setting) -> str:
    if s.n_max == 0:
        return "-"
    if s.synthetic:
        return "synth"
    return {True: "yes", False: "NO", None: "?"}[s.same_as_baseline]


def markdown(settings: list, meta: Optional[dict] = None) -> str:
    lines = []
    if meta:
        bits = [f"model: {meta.get('model_name', '?')}"]
        for k, label in (("threads", "threads"), ("n_predict", "n_predict"), ("repetitions", "repetitions"),
                         ("spec_type", "spec-type")):
            if meta.get(k) is not None:
                bits.append(f"{label}: {meta[k]}")
        lines.append("**pyllm-bench** " + ", ".join(bits))
        lines.append("")
    multi = len({s.engine for s in settings}) > 1
    head = (["engine"] if multi else []) + [
        "task", "n_max", "gen tok/s (median)", "min..max", "prompt tok/s", "speedup", "accept rate",
        "mean len", "accept per pos", "same as base"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" if i < (2 if multi else 1) else "---:" for i in range(len(head))) + "|")
    for s in settings:
        ml = _f(s.mean_len, "{:.2f}")
        if s.mean_len is not None and s.mean_len_estimated:
            ml = "~" + ml
        pp = " ".join(f"{x:.2f}" for x in s.accept_per_pos[:8]) if s.accept_per_pos else "-"
        if s.accept_per_pos and len(s.accept_per_pos) > 8:  # ngram drafts are long: the first positions
            pp += " …"
        acc = "-" if s.accept_rate is None else f"{s.accept_rate:.3f} ({s.n_draft_accepted}/{s.n_draft})"
        if s.drafters and s.accept_rate is not None:  # per drafter: accepted/drafted
            acc += " [" + ", ".join(f"{k} {a}/{d}" for k, (d, a) in s.drafters.items()) + "]"
        row = ([s.engine] if multi else []) + [
            s.task, n_max_label(s.n_max), _f(s.gen_tps_median), f"{_f(s.gen_tps_min)}..{_f(s.gen_tps_max)}",
            _f(s.prompt_tps_median), _f(s.speedup, "{:.2f}x"), acc, ml, pp, _same(s)]
        lines.append("| " + " | ".join(row) + " |")
    notes = []
    if any(s.mean_len_estimated for s in settings):
        notes.append("~ mean len derived from the server's timings: verification steps = generated - 1 - accepted "
                     "(every step after the first verifies a draft; off by at most the last step).")
    if notes:
        lines.append("")
        lines.extend(notes)
    return "\n".join(lines) + "\n"


def write_json(path: str, settings: list, meta: dict):
    doc = dict(meta)
    doc["settings"] = [s.to_dict(runs=True) for s in settings]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


CSV_FIELDS = ["engine", "task", "n_max", "reps", "n_gen", "gen_tps_median", "gen_tps_min", "gen_tps_max",
              "prompt_tps_median", "speedup", "n_draft", "n_draft_accepted", "accept_rate", "mean_len",
              "mean_len_estimated", "accept_per_pos", "same_as_baseline", "synthetic"]


def write_csv(path: str, settings: list):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(CSV_FIELDS)
        for s in settings:
            d = s.to_dict()
            d["accept_per_pos"] = ";".join(f"{x:.4f}" for x in s.accept_per_pos) if s.accept_per_pos else ""
            row = []
            for k in CSV_FIELDS:
                v = d[k]
                if v is None:
                    v = ""
                elif isinstance(v, float):
                    v = f"{v:.4f}"
                row.append(v)
            w.writerow(row)


PLOT_HINT = 'error: --plot needs matplotlib, which is not installed: pip install "pyllm[plot]"'


def require_matplotlib():
    """BenchError naming the extra to install when matplotlib is missing (it is optional: only --plot uses it)."""
    from .runners import BenchError
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BenchError(PLOT_HINT) from None


def plot(path: str, settings: list, title: str):
    """Generation tok/s against n_max, one panel per task, one series per engine (min..max as error bars);
    each engine's baseline is a dashed line in the same colour."""
    require_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    tasks = list(dict.fromkeys(s.task for s in settings))
    engines = list(dict.fromkeys(s.engine for s in settings))
    n = len(tasks)
    cols = 1 if n == 1 else 2
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(8.0 if cols == 1 else 6.6 * cols, 4.4 * rows + 0.6),
                             squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    all_n = sorted({s.n_max for s in settings if s.n_max > 0 and not is_auto(s.n_max)})
    for ti, task in enumerate(tasks):
        ax = axes[ti // cols][ti % cols]
        for ei, eng in enumerate(engines):
            col = colors[ei % len(colors)]
            ss = [s for s in settings if s.task == task and s.engine == eng]
            spec = sorted((s for s in ss if s.n_max > 0 and not is_auto(s.n_max)), key=lambda s: s.n_max)
            base = next((s for s in ss if s.n_max == 0), None)
            for a in (s for s in ss if is_auto(s.n_max)):  # the adaptive length: one level, dotted
                ax.axhline(a.gen_tps_median, color=col, linestyle=":", linewidth=1.6)
                ax.annotate(f"{eng} {n_max_flag(a.n_max)} {a.gen_tps_median:.1f}", (0.0, a.gen_tps_median),
                            xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(4, 3),
                            ha="left", va="bottom", fontsize=7.5, color=col,
                            bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8))
            if spec:
                x = [s.n_max for s in spec]
                y = [s.gen_tps_median for s in spec]
                lo = [s.gen_tps_median - s.gen_tps_min for s in spec]
                hi = [s.gen_tps_max - s.gen_tps_median for s in spec]
                ax.errorbar(x, y, yerr=[lo, hi], color=col, marker="o", linewidth=1.8, capsize=3)
                for s in spec:
                    if s.accept_rate is not None:
                        ax.annotate(f"{s.accept_rate * 100:.0f}%", (s.n_max, s.gen_tps_median),
                                    textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7, color=col,
                                    bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8))
            if base is not None:
                ax.axhline(base.gen_tps_median, color=col, linestyle="--", linewidth=1.4)
                ax.annotate(f"{eng} baseline {base.gen_tps_median:.1f}", (1.0, base.gen_tps_median),
                            xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(-4, 3),
                            ha="right", va="bottom", fontsize=7.5, color=col,
                            bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8))
        ax.set_title(f"task: {task}", fontsize=11)
        ax.set_xlabel("--spec-draft-n-max")
        ax.set_ylabel("generation tokens/s")
        if all_n:
            ax.set_xticks(all_n)
            ax.set_xlim(min(all_n) - 0.4, max(all_n) + 0.4)
        top = max([s.gen_tps_max for s in settings if s.task == task] + [1e-9])
        ax.set_ylim(0, top * 1.15)
        ax.grid(True, alpha=0.3)
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    fig.suptitle(title + "\npoint labels: draft acceptance rate; error bars: min..max over repetitions; "
                 "dashed: no speculation; dotted: --spec-draft-n-max auto", fontsize=10)
    handles = []
    for ei, eng in enumerate(engines):
        col = colors[ei % len(colors)]
        handles.append(Line2D([], [], color=col, marker="o", linewidth=1.8, label=f"{eng}: speculative (median)"))
        handles.append(Line2D([], [], color=col, linestyle="--", linewidth=1.4, label=f"{eng}: no speculation"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=9, frameon=False)
    legend_h = 0.45 * ((len(handles) + 3) // 4) / fig.get_figheight()
    fig.tight_layout(rect=(0, legend_h, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
