"""`python -m builder` and the `assemble` command. A Ctrl-C at any instant, while the modules are
still being imported too, ends in one line and exit 130, never a traceback."""

import signal


def entry() -> int:
    try:
        from builder.cli.main import main
        code = main()
    except KeyboardInterrupt:
        from builder.errors import interrupted
        return interrupted()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the run is over: a late Ctrl-C cannot make it a traceback
    return code


if __name__ == "__main__":
    raise SystemExit(entry())
