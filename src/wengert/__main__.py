"""``python -m wengert profile script.py [args]``: see ``wengert.profiling``."""
from __future__ import annotations

import sys

COMMANDS = ("profile",)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        helped = bool(argv) and argv[0] in ("-h", "--help")
        print("usage: python -m wengert profile [--json PATH] [--plot PATH] [--no-forward] script.py [args ...]\n"
              "\n"
              "commands:\n"
              "  profile   run a script unchanged and explain the cost of every gradient it computes",
              file=sys.stdout if helped else sys.stderr)
        return 0 if helped else 2
    from .profiling._cli import main as profile_main
    return profile_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
