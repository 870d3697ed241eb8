"""The entry point of `flashbuild` (console script) and `python -m flashbuild`.

Kept light on purpose: the stop signals are made flashbuild's (interrupts.py) before the CLI's
modules load (Typer, Rich: about 0.1 s), so a Ctrl-C or SIGTERM in that window ends the run with
one line and exit 130 instead of a KeyboardInterrupt traceback (or, for SIGTERM, a silent -15).
Nothing but the standard library is imported before `install()`.
"""

from __future__ import annotations

import sys

from flashbuild import interrupts


def main() -> None:
    interrupts.install()
    try:
        from flashbuild.cli import main as cli_main
    except BaseException as exc:
        # A stop while the CLI's modules load, also when Python wrapped it (caused_by_stop).
        if not (isinstance(exc, KeyboardInterrupt) or interrupts.caused_by_stop(exc)):
            raise
        interrupts.finished()
        sys.stderr.write(interrupts.startup_message())
        sys.exit(130)
    if interrupts.received() is not None:
        # The signal arrived, but where Python cannot raise (a callback of its import
        # machinery prints "Exception ignored ... StopRequested" and goes on): the import
        # finished as if nothing happened. The stop still counts.
        interrupts.finished()
        sys.stderr.write(interrupts.startup_message())
        sys.exit(130)
    try:
        cli_main()
    except KeyboardInterrupt:  # in the instant between the command's end and finished()
        interrupts.finished()
        sys.exit(130)


if __name__ == "__main__":
    main()
