"""pyllm-bench helpers: prompts, runners (in-process / HTTP), statistics and output writers."""
from .stats import Run, Setting, aggregate, parse_range, summarize  # noqa: F401
