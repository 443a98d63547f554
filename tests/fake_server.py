"""pyllm-server on the fake core (tests/fake_core.py): `python tests/fake_server.py [llama-server flags]`.
The test-only stand-in is injected here, by the tests; production code never loads it."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_core  # noqa: E402
from pyllm.server.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], core=fake_core))
