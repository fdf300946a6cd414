"""`python -m builder` and the `assemble` command. A Ctrl-C at any instant, while the modules are
still being imported too, ends in one line and exit 130, never a traceback."""

import os
import signal
import sys


def _unraisable(hook_args: "sys.UnraisableHookArgs") -> None:   # a typeshed-only name: quoted
    """A Ctrl-C that lands in code Python runs for itself (an import lock's weakref callback) is
    "ignored" with a traceback and the run goes on: say it as any Ctrl-C and stop here."""
    if isinstance(hook_args.exc_value, KeyboardInterrupt):
        os.write(2, b"error: interrupted\n")
        os._exit(130)
    sys.__unraisablehook__(hook_args)


def entry() -> int:
    sys.unraisablehook = _unraisable
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)   # Ctrl-C: KeyboardInterrupt, handled here
        from builder.cli.main import main
        code = main()
    except BaseException as exc:
        from builder.errors import from_interrupt, interrupted
        if not from_interrupt(exc):
            raise
        code = interrupted()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the run is over: a late Ctrl-C cannot make it a traceback
    if code == 130:
        # CPython remembers a KeyboardInterrupt raised inside some code it ran for us (seen: an import)
        # and at exit kills itself with SIGINT instead of returning this status. Everything was cleaned
        # up as the interrupt unwound: leave at once, with the status.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code


if __name__ == "__main__":
    raise SystemExit(entry())
