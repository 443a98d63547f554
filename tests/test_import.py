"""Importing pyllm: the public names, and a source tree without a built core failing with one clear line."""
import shutil
import subprocess
import sys
from pathlib import Path

import pyllm

ROOT = Path(__file__).resolve().parents[1]


def test_public_names():
    assert set(pyllm.__all__) == {"Llama", "GGUFError", "GGUFFile"}
    assert callable(pyllm.Llama) and issubclass(pyllm.GGUFError, Exception)


def test_unbuilt_source_tree_says_what_to_run(tmp_path):
    # a copy of the package without _core*.so, imported with no site-packages (no editable-install redirect)
    shutil.copytree(ROOT / "pyllm", tmp_path / "pyllm", ignore=shutil.ignore_patterns("_core*", "__pycache__"))
    r = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import pyllm"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert "partially initialized" not in r.stderr
    assert last.startswith("pyllm._native.CoreNotBuiltError: pyllm's C++ core (pyllm._core) is not built: run "
                           "`pip install -e .`"), r.stderr
