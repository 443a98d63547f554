"""--spec-draft-n-max ranges, one measured run, and the per-setting statistics."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Optional

MAX_N_MAX = 64
# `auto` / `auto:CAP` settings (the adaptive draft length, --spec-draft-n-max auto) are kept as the int
# AUTO + CAP, so they sort after every fixed n_max and stay one int like the others (n_max > 0: speculative)
AUTO = 1000
AUTO_CAP = 7


def is_auto(n: int) -> bool:
    return n >= AUTO


def draft_cap(n: int) -> int:
    """The longest draft of a setting: n_max, or an auto setting's cap."""
    return n - AUTO if n >= AUTO else n


def n_max_flag(n: int) -> str:
    """The --spec-draft-n-max value of a setting ("3", "auto", "auto:5")."""
    if n < AUTO:
        return str(n)
    return "auto" if n - AUTO == AUTO_CAP else f"auto:{n - AUTO}"


class RangeError(ValueError):
    pass


def parse_range(spec: str) -> list:
    """'1-7' -> [1..7], '1,3,5' -> [1,3,5], '0' -> [] (baseline only), '0,2-3' -> [2,3], '1-7,auto' -> [1..7, AUTO + 7]
    ('auto:CAP' for another cap). The baseline (no speculation) always runs, so 0 never appears in the result."""
    s = str(spec).strip()
    if not s:
        raise RangeError("error: empty --spec-draft-n-max range")
    out = []
    for part in s.split(","):
        part = part.strip()
        if part.lower() == "auto" or part.lower().startswith("auto:"):
            try:
                cap = AUTO_CAP if part.lower() == "auto" else int(part[5:])
            except ValueError:
                raise RangeError(f"error: bad --spec-draft-n-max value '{part}' (auto:CAP needs an integer CAP)")
            if cap < 1 or cap > MAX_N_MAX:
                raise RangeError(f"error: --spec-draft-n-max {part}: the cap must be within [1, {MAX_N_MAX}]")
            if AUTO + cap not in out:
                out.append(AUTO + cap)
            continue
        try:
            if "-" in part[1:]:
                a, b = part.split("-", 1) if not part.startswith("-") else (None, None)
                if a is None:
                    raise ValueError
                lo, hi = int(a), int(b)
                if lo > hi:
                    raise RangeError(f"error: bad --spec-draft-n-max range '{part}': start > end")
                vals = range(lo, hi + 1)
            else:
                vals = [int(part)]
        except ValueError:
            raise RangeError(f"error: bad --spec-draft-n-max value '{part}' (expected e.g. 1-7, 1,3,5, 0 or auto)")
        for v in vals:
            if v < 0 or v > MAX_N_MAX:
                raise RangeError(f"error: --spec-draft-n-max value {v} out of range [0, {MAX_N_MAX}]")
            if v and v not in out:
                out.append(v)
    return sorted(out)


@dataclass
class Run:
    """One measured generation."""
    engine: str
    task: str
    n_max: int                 # 0 = baseline (no speculation); AUTO + cap = --spec-draft-n-max auto
    rep: int
    n_prompt: int = 0
    t_prompt_ms: float = 0.0
    n_gen: int = 0
    t_gen_ms: float = 0.0
    gen_tps: float = 0.0
    prompt_tps: float = 0.0
    n_draft: int = 0
    n_draft_accepted: int = 0
    n_verif_steps: Optional[int] = None        # None: not reported (servers)
    accepted_per_pos: Optional[list] = None    # None: not reported (servers)
    tokens: Optional[list] = None
    text: Optional[str] = None
    drafters: Optional[dict] = None            # drafter type -> [drafted, accepted] (several drafters / ngram types)

    def output_key(self):
        return tuple(self.tokens) if self.tokens is not None else self.text


def tps(n: float, ms: float) -> float:
    return n / ms * 1e3 if ms > 0 else 0.0


@dataclass
class Setting:
    """All repetitions of one (engine, task, n_max)."""
    engine: str
    task: str
    n_max: int
    reps: int
    n_gen: int
    gen_tps_median: float
    gen_tps_min: float
    gen_tps_max: float
    prompt_tps_median: float
    speedup: Optional[float] = None            # median gen tok/s over the baseline's (same engine, same task)
    n_draft: int = 0
    n_draft_accepted: int = 0
    accept_rate: Optional[float] = None        # accepted / drafted
    mean_len: Optional[float] = None           # 1 + accepted / verification steps (tokens per target pass)
    mean_len_estimated: bool = False           # servers: verification steps estimated as n_gen - 1 - accepted
    accept_per_pos: Optional[list] = None      # P(draft position i accepted) per verification step (unconditional)
    same_as_baseline: Optional[bool] = None    # greedy output identical to the baseline's, every repetition
    synthetic: bool = False                    # --spec-synth-*: acceptance is simulated, the output is not valid
    drafters: Optional[dict] = None            # drafter type -> [drafted, accepted] over the repetitions
    runs: list = field(default_factory=list, repr=False)

    def to_dict(self, runs=False) -> dict:
        d = asdict(self)
        d.pop("runs")
        if runs:
            d["runs"] = [{k: v for k, v in asdict(r).items() if k not in ("tokens", "text")} for r in self.runs]
        return d


def aggregate(runs: list, baseline: Optional["Setting"] = None, baseline_output=None) -> Setting:
    """Statistics over the repetitions of one setting. baseline_output: the baseline's output key
    (tokens or text) to compare with; None = this is the baseline or there is none."""
    r0 = runs[0]
    g = [r.gen_tps for r in runs]
    p = [r.prompt_tps for r in runs]
    s = Setting(engine=r0.engine, task=r0.task, n_max=r0.n_max, reps=len(runs),
                n_gen=int(statistics.median([r.n_gen for r in runs])),
                gen_tps_median=statistics.median(g), gen_tps_min=min(g), gen_tps_max=max(g),
                prompt_tps_median=statistics.median(p), runs=list(runs))
    s.n_draft = sum(r.n_draft for r in runs)
    s.n_draft_accepted = sum(r.n_draft_accepted for r in runs)
    if any(r.drafters for r in runs):
        s.drafters = {}
        for r in runs:
            for k, (d, a) in (r.drafters or {}).items():
                tot = s.drafters.setdefault(k, [0, 0])
                tot[0] += d
                tot[1] += a
    if s.n_draft > 0:
        s.accept_rate = s.n_draft_accepted / s.n_draft
        steps = [r.n_verif_steps for r in runs]
        if all(x is not None for x in steps) and sum(steps) > 0:
            s.mean_len = 1.0 + s.n_draft_accepted / sum(steps)
        elif s.n_max > 0:
            # servers report no verification steps. When every step after the first token verifies a draft
            # (draft-mtp, n_min 0), steps = (n_gen - 1) - accepted; else drafts are n_max long (p_min 0)
            est = sum(r.n_gen - 1 - r.n_draft_accepted for r in runs)
            if est <= 0:
                est = s.n_draft / draft_cap(s.n_max)
            s.mean_len = 1.0 + s.n_draft_accepted / est if est > 0 else None
            s.mean_len_estimated = True
        if all(r.accepted_per_pos is not None for r in runs) and all(x is not None for x in steps) and sum(steps) > 0:
            n = max(len(r.accepted_per_pos) for r in runs)
            tot = [0] * n
            for r in runs:
                for i, v in enumerate(r.accepted_per_pos):
                    tot[i] += v
            s.accept_per_pos = [t / sum(steps) for t in tot]
    if baseline is not None and baseline.gen_tps_median > 0 and r0.n_max > 0:
        s.speedup = s.gen_tps_median / baseline.gen_tps_median
    elif r0.n_max == 0:
        s.speedup = 1.0
    if baseline_output is not None and r0.n_max > 0:
        s.same_as_baseline = all(r.output_key() == baseline_output for r in runs)
    return s


def summarize(runs: list) -> list:
    """Group runs by (engine, task, n_max) and aggregate, baseline first; speedups and output equality
    are relative to the same engine's baseline on the same task."""
    groups: dict = {}
    for r in runs:
        groups.setdefault((r.engine, r.task, r.n_max), []).append(r)
    out = []
    engines = list(dict.fromkeys(r.engine for r in runs))
    tasks = list(dict.fromkeys(r.task for r in runs))
    for e in engines:
        for t in tasks:
            base_runs = groups.get((e, t, 0))
            base = aggregate(base_runs) if base_runs else None
            base_out = base_runs[0].output_key() if base_runs else None
            if base is not None:
                out.append(base)
            for n in sorted(k[2] for k in groups if k[0] == e and k[1] == t and k[2] != 0):
                out.append(aggregate(groups[(e, t, n)], base, base_out))
    return out
