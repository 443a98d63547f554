"""/slots JSON (server_slot::to_json) from the engine's slot table."""
from __future__ import annotations


def slots_json(engine, spec_types: str) -> list:
    out = engine.slots_json()
    for d in out:
        if "params" in d and isinstance(d["params"], dict):
            d["params"] = dict(d["params"])
            d["params"].setdefault("speculative.types", spec_types)  # a request's own settings are already there
    return out


def has_idle_slot(engine) -> bool:
    return engine.n_processing() < engine.n_slots
