#!/usr/bin/env bash
# Fast developer build: configure once into build/dev, rebuild incrementally, drop _core*.so into
# pyllm/ so `python -c "import pyllm"` and pytest use it from the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${PYLLM_BUILD_DIR:-build/dev}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" >/dev/null
fi
cmake --build "$BUILD" -j"${JOBS:-2}"
# copy then rename: a process that has the old module mapped keeps its file (cp over it would crash it)
for so in "$BUILD"/_core*.so; do
  cp -f "$so" "pyllm/.$(basename "$so").tmp" && mv -f "pyllm/.$(basename "$so").tmp" "pyllm/$(basename "$so")"
done
