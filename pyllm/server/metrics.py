"""/metrics: the counters llama-server keeps (updated by the scheduler) and their Prometheus text, names and help
strings as llama-server's to_metrics()."""
from __future__ import annotations

COUNTERS = [
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "Total time spent processing prompts"),
    ("tokens_predicted_total", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens"),
    ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps"),
]
GAUGES = [
    ("prompt_tokens_seconds", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "Average generation throughput in tokens/s"),
    ("requests_processing", "Number of requests processing"),
    ("requests_deferred", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call"),
]


def _num(v) -> str:
    # std::stringstream << double: 6 significant digits
    return f"{float(v):g}" if isinstance(v, float) else str(v)


def render(m: dict) -> str:
    out = []
    for kind, items in (("counter", COUNTERS), ("gauge", GAUGES)):
        for name, desc in items:
            out.append(f"# HELP llamacpp:{name} {desc}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {_num(m[name])}\n")
    app = m.get("accepted_per_pos") or []
    if app:
        out.append("# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position\n"
                   "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter\n")
        for i, v in enumerate(app):
            out.append(f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}\n')
    # pyllm's addition with several drafters (or an ngram one): the same counters per drafter type
    per = m.get("per_drafter") or []
    for key, name, desc in (("n_draft", "spec_decode_num_draft_tokens_per_type_total", "draft tokens generated"),
                            ("n_draft_accepted", "spec_decode_num_accepted_tokens_per_type_total", "draft tokens accepted"),
                            ("n_drafts", "spec_decode_num_drafts_per_type_total", "verification steps")):
        if not per:
            break
        out.append(f"# HELP llamacpp:{name} Speculative: {desc}, per drafter type\n# TYPE llamacpp:{name} counter\n")
        for d in per:
            out.append(f'llamacpp:{name}{{type="{d["type"]}"}} {int(d[key])}\n')
    return "".join(out)


class Metrics:
    """llama-server's server_metrics. The scheduler's worker thread updates it under the scheduler's lock."""

    def __init__(self, speculative: bool, per_drafter: bool = False):
        self.speculative = speculative
        self.per_drafter = per_drafter
        self.m = {"prompt_tokens_total": 0, "prompt_tokens_cached_total": 0, "prompt_seconds_total": 0.0,
                  "tokens_predicted_total": 0, "tokens_predicted_seconds_total": 0.0, "n_decode_total": 0,
                  "n_busy_slots_total": 0, "n_tokens_max": 0, "spec_decode_num_draft_tokens_total": 0,
                  "spec_decode_num_accepted_tokens_total": 0, "spec_decode_num_drafts_total": 0,
                  "accepted_per_pos": [], "spec_seen": False, "per_drafter": []}
        self._bucket = self._zero_bucket()

    @staticmethod
    def _zero_bucket():
        return {"n_prompt": 0, "t_prompt": 0.0, "n_pred": 0, "t_pred": 0.0}

    def on_decode(self, n_busy: int, g):
        """One batched decode; g = the core's global statistics (llamacpp:spec_decode_* come from there)."""
        m = self.m
        m["n_decode_total"] += 1
        m["n_busy_slots_total"] += n_busy
        if g is None:
            return
        m["spec_decode_num_draft_tokens_total"] = int(g.get("n_draft", 0) or 0)
        m["spec_decode_num_accepted_tokens_total"] = int(g.get("n_draft_accepted", 0) or 0)
        m["spec_decode_num_drafts_total"] = int(g.get("n_drafts", 0) or 0)
        if self.speculative:
            m["accepted_per_pos"] = [int(v) for v in (g.get("n_accepted_per_pos") or [])]
            m["spec_seen"] = True
            if self.per_drafter:
                m["per_drafter"] = [dict(d) for d in g.get("drafters") or []]

    def on_finish(self, fin: dict):
        """A sequence finished or was cancelled (llama-server's metrics_on_prediction); fin = its summary."""
        t, m, b = fin["timings"], self.m, self._bucket
        m["prompt_tokens_total"] += t["prompt_n"]
        m["prompt_tokens_cached_total"] += t["cache_n"]
        m["prompt_seconds_total"] += t["prompt_ms"] / 1e3
        m["tokens_predicted_total"] += fin["n_decoded"]
        m["tokens_predicted_seconds_total"] += t["predicted_ms"] / 1e3
        m["n_tokens_max"] = max(m["n_tokens_max"], fin["n_held"])
        b["n_prompt"] += t["prompt_n"]
        b["t_prompt"] += t["prompt_ms"]
        if fin["n_decoded"] > 1:
            b["n_pred"] += fin["n_decoded"] - 1
            b["t_pred"] += t["predicted_ms"]
        if self.speculative and int(fin["stats"].get("n_verif_steps", 0) or 0) > 0:
            m["spec_seen"] = True

    def snapshot(self, reset_bucket: bool, processing: int, deferred: int) -> dict:
        m = dict(self.m)
        m["accepted_per_pos"] = list(self.m["accepted_per_pos"])
        m["per_drafter"] = list(self.m["per_drafter"])
        b = dict(self._bucket)
        if reset_bucket:
            self._bucket = self._zero_bucket()
        m["requests_processing"] = processing
        m["requests_deferred"] = deferred
        m["prompt_tokens_seconds"] = 1e3 / b["t_prompt"] * b["n_prompt"] if b["t_prompt"] > 0 else 0.0
        m["predicted_tokens_seconds"] = 1e3 / b["t_pred"] * b["n_pred"] if b["t_pred"] > 0 else 0.0
        m["n_busy_slots_per_decode"] = (m["n_busy_slots_total"] / m["n_decode_total"]) if m["n_decode_total"] else 0.0
        return m
