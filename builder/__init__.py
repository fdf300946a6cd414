"""assemble: turn a pinned llama.cpp into a relocatable, verified GPU runtime."""

import sys as _sys

__version__ = "0.1.0"

if _sys.argv[:1] == ["-m"]:
    # `python -m builder` starting: runpy has yet to find and run builder/__main__.py, whose entry()
    # turns a Ctrl-C into one line. Until then a Ctrl-C ends it at once in the same words, never in
    # a traceback. (Python sets argv[0] to "-m" only while it locates the module.)
    import os as _os
    import signal as _signal

    def _interrupted_while_starting(signum: object, frame: object) -> None:
        _os.write(2, b"error: interrupted\n")
        _os._exit(130)

    _signal.signal(_signal.SIGINT, _interrupted_while_starting)

    def _unraisable_while_starting(hook_args: "_sys.UnraisableHookArgs") -> None:   # builder.__main__._unraisable's words, until it is loaded
        if isinstance(hook_args.exc_value, KeyboardInterrupt):
            _interrupted_while_starting(None, None)
        _sys.__unraisablehook__(hook_args)

    _sys.unraisablehook = _unraisable_while_starting
