"""The ``amp-suite`` command line.

Importing this module imports no framework: torch, TensorFlow and JAX are
imported only inside the worker process that runs a cell.

``main`` dispatches each command to its handler; the parser is
:mod:`amp_suite.cli.parser`, the handlers live in
:mod:`amp_suite.cli.sweep_commands` (run, report, compare, calibrate,
numerics) and :mod:`amp_suite.cli.setup_commands` (list, init, doctor, env,
plugins), over :mod:`amp_suite.cli.shared` and :mod:`amp_suite.cli.signals`.
"""

from __future__ import annotations

import os
import signal
import sys

from amp_suite.cli.parser import build_parser
from amp_suite.cli.setup_commands import cmd_doctor, cmd_env, cmd_init, cmd_list, cmd_plugins
from amp_suite.cli.shared import _one_line_text, out_text, own_command  # noqa: F401 - re-exported
from amp_suite.cli.signals import STOP_SIGNALS, _exit_code_for, _stop_signals_interrupt  # noqa: F401 - re-exported
from amp_suite.cli.sweep_commands import cmd_calibrate, cmd_compare, cmd_numerics, cmd_report, cmd_run
from amp_suite.errors import EXIT_USAGE, PluginError, SweepInterrupted, UsageError


def main(argv: list[str] | None = None) -> int:
    from amp_suite.closed_pipes import quiet_when_closed

    try:
        quiet_when_closed()  # a reader that closes the pipe (| head -1) never stops a command
        parser = build_parser()
        args = _with_home_expanded(parser.parse_args(argv))
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        handler = {"run": cmd_run, "report": cmd_report, "list": cmd_list, "plugins": cmd_plugins,
                   "calibrate": cmd_calibrate, "doctor": cmd_doctor, "init": cmd_init, "compare": cmd_compare,
                   "env": cmd_env, "numerics": cmd_numerics}
        with _stop_signals_interrupt():
            return handler[args.command](args)
    except UsageError as exc:
        print(f"amp-suite: error: {_one_line_text(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except PluginError as exc:
        print(f"amp-suite: plugin error: {_one_line_text(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # before the first cell (a download) or after the last
        signum = exc.signum if isinstance(exc, SweepInterrupted) else signal.SIGINT
        print(f"amp-suite: interrupted by {signal.Signals(signum).name}", file=sys.stderr)
        return _exit_code_for(signum)


# The arguments that name a path: a leading ``~`` is the home directory, as a shell makes it (a quoted '~/x' or
# one from a script reaches the command unexpanded, and had made a folder named ``~``).
PATH_ARGUMENTS = ("directory", "base", "new", "out", "report", "config", "data_dir")


def _with_home_expanded(args):
    for name in PATH_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, os.path.expanduser(value))
    return args
