"""`pyllm bench` / `pyllm-bench`: not implemented yet."""
from __future__ import annotations

import sys


def main(argv=None) -> int:
    print("error: pyllm bench is not implemented yet (use `pyllm generate`, which prints prompt/generation "
          "speed, or the server's timings)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
