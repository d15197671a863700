"""What a worker reports of itself: its memory (RSS and PSS)."""

from __future__ import annotations


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

