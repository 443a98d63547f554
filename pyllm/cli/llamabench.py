"""`pyllm bench`: llama-bench's interface on pyllm's core (see pyllm/bench/llama_bench.py); the MTP n-max sweep
is `pyllm-bench`."""
from __future__ import annotations

import sys

from pyllm.bench.llama_bench import BenchError, run
from pyllm.bench.llama_bench_args import USAGE, BenchArgError, parse_args, physical_cores


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        params = parse_args(argv)
    except BenchArgError as e:
        print(str(e), file=sys.stderr)
        return 1
    if params.help:
        sys.stdout.write(USAGE.format(threads=physical_cores()))
        return 0
    try:
        return run(params)
    except BenchError as e:
        print(str(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pyllm bench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
