"""`pyllm` command: pyllm generate | inspect | bench | pyllm-bench."""
from __future__ import annotations

import sys

USAGE = """usage: pyllm COMMAND [options]

commands:
  generate     generate text from a prompt (llama.cpp flags: -m FILE -p PROMPT -n N ...; -h for all)
  inspect      print a GGUF file's metadata and tensors (pyllm inspect FILE [--json])
  bench        llama-bench's interface: pp/tg tokens/s (-m -p -n -pg -t -r -b -ub -o md|json|csv|jsonl ...),
               weight GB/s per token, --bw (read bandwidth), --vs PATH/llama-bench (interleaved, with ratios)
  pyllm-bench  throughput and MTP acceptance sweep over --spec-draft-n-max (same as the pyllm-bench command)

the server is a separate command: pyllm-server (same flags as llama-server)
"""


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE) if argv else sys.stderr.write(USAGE)
        return 0 if argv else 1
    cmd, rest = argv[0], argv[1:]
    if cmd == "generate":
        from .generate import main as run
    elif cmd == "inspect":
        from .inspect import main as run
    elif cmd == "bench":
        from .llamabench import main as run
    elif cmd == "pyllm-bench":
        from .bench import main as run
    else:
        sys.stderr.write(f"error: unknown command: {cmd}\n\n{USAGE}")
        return 1
    try:
        return int(run(rest) or 0)
    except SystemExit as e:  # argparse (inspect) exits on bad flags
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


if __name__ == "__main__":
    sys.exit(main())
