"""``python -m amp_suite`` is the ``amp-suite`` command: :func:`entry`, which the console script calls too."""

import sys


def entry() -> int:
    """The command line (:func:`amp_suite.cli.main`), loaded here so that Ctrl-C while Python loads it ends the
    command as Ctrl-C during a command does: one line and exit 130, no traceback."""
    try:
        from amp_suite.cli import main
    except KeyboardInterrupt:
        print("amp-suite: interrupted by SIGINT", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(entry())
