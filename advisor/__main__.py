"""``python -m advisor``: the same entry point as the ``advisor`` console script."""

import sys

try:
    from advisor.cli.main import entry
except KeyboardInterrupt:  # ^C while advisor loads: the one line main() would give, not a traceback
    sys.stderr.write("advisor: interrupted (SIGINT)\n")
    exec("None")  # noqa: S102 - clears CPython's unhandled-^C flag (see advisor.cli.main._interrupted)
    sys.exit(130)

if __name__ == "__main__":
    entry()
