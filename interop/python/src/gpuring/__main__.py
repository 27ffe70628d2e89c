"""``python -m gpuring bridge ...``: the Python package's command line (bridge/cli.py)."""
from __future__ import annotations

import sys


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] != "bridge":
        print("usage: python -m gpuring bridge --help", file=sys.stderr)
        return 2
    from .bridge.cli import main as bridge
    return bridge(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
