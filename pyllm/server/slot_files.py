"""POST /slots/{id}?action=save|restore|erase (llama-server's slot persistence, --slot-save-path): a slot's
whole state (the core's SeqState: tokens, KV, recurrent state, context checkpoints, the MTP layer's memory) in
one file under the save directory, written atomically by the core, with a JSON header naming the model and the
context it came from, so restoring into another model or shape is a clear error instead of garbage.

These run on the engine's worker thread while the slot is idle (Engine.slot_action)."""
from __future__ import annotations

import json
import os
import time

from ..generation import uses_mtp

FORMAT = "pyllm-slot/1"


class SlotFileError(ValueError):
    """A request the slot action refuses (answered 400)."""


def validate_filename(name) -> str:
    """llama-server's fs_validate_filename, strict: a plain file name inside the save directory."""
    if not isinstance(name, str) or not name:
        raise SlotFileError("Invalid filename")
    if (len(name.encode()) > 255 or name in (".", "..") or name.startswith(".") or "/" in name or "\\" in name
            or any(ord(c) < 32 or c in ':*?"<>|' for c in name) or name.strip() != name):
        raise SlotFileError("Invalid filename")
    return name


def identity(gen) -> dict:
    """What a slot file must match: the model (file name, size, architecture, shapes, quantization). The context's
    shape (layer sizes, positions per slot, the MTP layer's memory when this server drafts) is checked by the core
    when the state is put back; "mtp" records whether the file carries the MTP memory."""
    m = gen.model
    return {"model": {"file": os.path.basename(m.path), "size": m.size_bytes, "arch": m.arch, "n_vocab": m.n_vocab,
                      "n_embd": m.n_embd, "n_layer": m.n_layer, "n_params": m.n_params, "ftype": m.ftype},
            "mtp": uses_mtp(gen.spec)}


def _path(save_dir: str, filename: str) -> str:
    path = os.path.join(save_dir, validate_filename(filename))
    if os.path.dirname(os.path.abspath(path)) != os.path.abspath(save_dir):  # belt and braces
        raise SlotFileError("Invalid filename")
    return path


def save(gen, slot: int, save_dir: str, filename: str) -> dict:
    path = _path(save_dir, filename)
    t0 = time.perf_counter()
    st = gen.state_get(slot)
    header = dict(identity(gen), format=FORMAT, n_ctx_seq=gen.n_ctx_seq, n_tokens=st.n_tokens)
    try:
        st.write(path, json.dumps(header))
    except RuntimeError as e:
        raise OSError(str(e)) from None
    return {"id_slot": slot, "filename": filename, "n_saved": st.n_tokens, "n_written": os.path.getsize(path),
            "timings": {"save_ms": (time.perf_counter() - t0) * 1e3}}


def restore(gen, slot: int, save_dir: str, filename: str) -> dict:
    path = _path(save_dir, filename)
    if not os.path.isfile(path):
        raise SlotFileError(f"Unable to restore slot: file '{filename}' not found")
    t0 = time.perf_counter()
    try:
        st, raw = gen.model.core.SeqState.read(path)
        header = json.loads(raw.decode())
    except (RuntimeError, ValueError, UnicodeDecodeError) as e:
        raise SlotFileError(f"Unable to restore slot: {e}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SlotFileError(f"Unable to restore slot: '{filename}' is not a {FORMAT} file")
    want = identity(gen)
    if header.get("model") != want["model"]:
        raise SlotFileError(f"Unable to restore slot: '{filename}' was saved from model {header.get('model')}, "
                            f"this server runs {want['model']}")
    try:
        gen.state_set(slot, st)
    except ValueError as e:
        raise SlotFileError(f"Unable to restore slot: {e}") from None
    return {"id_slot": slot, "filename": filename, "n_restored": st.n_tokens, "n_read": os.path.getsize(path),
            "timings": {"restore_ms": (time.perf_counter() - t0) * 1e3}}


def erase(gen, slot: int) -> dict:
    n = gen.ctx.seq_pos(slot)  # the evaluated tokens, as n_saved counts them
    gen.clear(slot)
    return {"id_slot": slot, "n_erased": n}
