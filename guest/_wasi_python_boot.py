"""The host's `run` entry (crates/runtime/src/run.rs): imported by a one-line `-c`.

Runs the caller's command line through the reactor's own runner (`_reactor.run`, what
the `run` export does), then what interpreter finalisation does that a program can
observe: atexit handlers, `__main__` torn down so unclosed files flush, the streams
flushed. It ends with `os._exit`, skipping CPython's ~20 ms teardown: the host drops
the instance anyway.
"""

import os
import sys

import _reactor


def _main() -> None:
    code = _reactor.run([sys.executable, *sys.argv[1:]], dict(os.environ))
    import atexit
    import gc

    atexit._run_exitfuncs()
    main = sys.modules.get("__main__")
    if main is not None:
        main.__dict__.clear()
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or broken stream loses nothing more
            pass
    os._exit(code)


_main()
