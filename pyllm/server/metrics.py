"""Prometheus text for /metrics, names and help strings as llama-server's to_metrics()."""
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
    return "".join(out)
