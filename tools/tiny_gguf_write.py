"""Tensor data for make_tiny_gguf.py, written in parallel and streamed: big files in minutes.

Every tensor's data offset is known before any data exists (make_tiny_gguf plans the layout), so tensors are
independent jobs: `n_threads` workers each take the largest tensor left, draw its values chunk by chunk from
its own random stream (numpy releases the GIL while drawing), quantize each chunk with pyllm's C++ quantizers
(pyllm._core.quantize_fast: the reference quantizers' bytes, GIL released) and os.pwrite it at its offset. Memory stays at a few chunks
per worker whatever the file size; the bytes are the same as writing the tensors one after another.

Without pyllm._core (a checkout that is not built) the non-K types fall back to gguf-py's numpy quantizers,
which produce the same bytes (tests/test_make_tiny_gguf.py checks it) but are several times slower.
"""
from __future__ import annotations

import os
import queue
import sys
import threading
import time
from typing import Callable, Iterable, List, Optional, Tuple

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES

K_QUANTS = {QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K}
GGUFPY_QUANTS = {QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.BF16, QT.MXFP4}  # gguf-py quantizes these


def core_quantize():
    """pyllm._core's quantizer: quantize_fast (the reference's bytes, Q4_K/Q5_K several times faster) when the
    build has it, else quantize (the reference); None without a built pyllm."""
    try:
        from pyllm import _core
    except Exception:
        return None
    return getattr(_core, "quantize_fast", None) or getattr(_core, "quantize", None)


def encode(data: np.ndarray, t: QT, backend: str = "core") -> np.ndarray:
    """float32 values -> the tensor bytes of type t (a uint8/float array to write as is).
    backend "core": pyllm's C++ quantizers for every non-F32 type; "gguf": gguf-py / numpy where they exist
    (the reference the core path is checked against), the core for K-quants (gguf-py has none)."""
    if t == QT.F32:
        return np.ascontiguousarray(data, dtype=np.float32)
    q = core_quantize()
    if backend == "gguf" or (q is None and t not in K_QUANTS):
        if t == QT.F16:
            return data.astype(np.float16)
        if t in GGUFPY_QUANTS:
            return gguf.quants.quantize(data, t)
    if q is None:
        raise RuntimeError(f"{t.name} output needs pyllm._core.quantize (build pyllm)")
    out = np.asarray(q(int(t), np.ascontiguousarray(data, dtype=np.float32).reshape(-1)), dtype=np.uint8)
    bs, ts = GGML_QUANT_SIZES[t]
    if out.size != data.size // bs * ts:
        raise RuntimeError(f"pyllm._core.quantize({t.name}) returned {out.size} bytes, expected {data.size // bs * ts}")
    return out


# one job: (tensor index, file offset, expected bytes, type, name, chunk source: () -> iterable of float32 arrays)
Job = Tuple[int, int, int, QT, str, Callable[[], Iterable[np.ndarray]]]


def write_jobs(fd: int, jobs: List[Job], n_threads: int, backend: str = "core",
               progress: Optional[Callable[[str], None]] = None) -> None:
    """Runs the jobs on n_threads workers, largest first; raises the first worker error."""
    todo: "queue.Queue[Job]" = queue.Queue()
    for j in sorted(jobs, key=lambda j: -j[2]):
        todo.put(j)
    errors: List[BaseException] = []
    lock = threading.Lock()
    done = [0]
    t0 = time.time()

    def worker():
        while not errors:
            try:
                idx, off, nbytes, t, name, chunks = todo.get_nowait()
            except queue.Empty:
                return
            try:
                pos = off
                for data in chunks():
                    enc = encode(data, t, backend)
                    mv = memoryview(enc).cast("B")
                    while mv:
                        n = os.pwrite(fd, mv, pos)
                        pos += n
                        mv = mv[n:]
                if pos - off != nbytes:
                    raise RuntimeError(f"{name}: wrote {pos - off} bytes, planned {nbytes}")
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller
                with lock:
                    errors.append(e)
                return
            if progress is not None:
                with lock:
                    done[0] += 1
                    progress(f"[{done[0]}/{len(jobs)}] {name} {t.name} {time.time() - t0:.1f}s")

    n = max(1, min(n_threads, len(jobs)))
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def stderr_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
