"""The main job, end to end: the guide's examples ("Offer tools to the guest") run for real.

Run it with `cargo xtask demo` (it builds what is missing first).
"""

from __future__ import annotations

import asyncio
import time
from functools import partial

from wasi_python import Grant, Session, run, run_async
from wasi_python.tools import ToolCall, ToolDenied, ToolError, stubs, tool


def section(title: str) -> None:
    print(f"\n== {title}")


# -- Offer a tool ------------------------------------------------------------------------
REGIONS = {"EMEA": {"code": "EMEA", "manager": "Ada"}}


@tool(read_only=True)
def lookup_region(code: str) -> dict:
    """Look up a sales region by its code.

    Args:
        code: The region code, such as "EMEA".
    """
    if code not in REGIONS:
        raise ToolError(f"no region {code!r}")  # the guest reads this message
    return REGIONS[code]


section("Offer a tool")
program = """
from host import tools
print(tools.lookup_region("EMEA")["manager"])
"""
done = run(["-c", program], tools=[lookup_region])
print("stdout:", done.stdout)
print("outcomes:", [o.outcome for o in done.tools.outcomes])

section("The guest sees the same signature and docstring (help(tools.lookup_region))")
done = run(["-c", "from host import tools\nhelp(tools.lookup_region)"], tools=[lookup_region])
print(done.stdout.decode())

section("stubs() for a prompt")
print(stubs([lookup_region]))


# -- Keep a tool's authority narrow -------------------------------------------------------
class Orders:
    def latest(self, user_id: int, limit: int) -> list[dict]:
        return [{"user": user_id, "order": n} for n in range(limit)]


orders = Orders()


def orders_for(user_id: int, api_key: str, limit: int = 10) -> list[dict]:
    """This user's latest orders."""
    assert api_key == "secret-key"
    return orders.latest(user_id=user_id, limit=min(limit, 50))


section("Authority bound by a partial: the guest never sees user_id or the key")
my_orders = tool(partial(orders_for, user_id=7, api_key="secret-key"), name="my_orders")
done = run(
    ["-c", "from host import tools\nprint(tools.my_orders(limit=2))\nprint(tools.my_orders.descriptor['inputSchema'])"],
    tools=[my_orders],
)
print(done.stdout.decode())


# -- Gate each call -----------------------------------------------------------------------
def gate(call: ToolCall) -> bool | None:
    print(f"  gate: seq={call.seq} tool={call.tool} arguments={call.arguments} bytes={call.request_bytes}")
    if call.arguments.get("code") == "APAC":
        raise ToolDenied("APAC is not yours to read")
    return None


section("A gate refuses a call; the guest reads a PermissionError and runs on")
done = run(
    ["-c", "from host import tools\ntry:\n    tools.lookup_region('APAC')\nexcept PermissionError as e:\n    print('refused:', e)\nprint(tools.lookup_region('EMEA')['manager'])"],
    tools=[lookup_region],
    gate=gate,
)
print(done.stdout.decode(), [(o.tool, o.outcome) for o in done.tools.outcomes])


# -- Bound a tool's time ------------------------------------------------------------------
@tool(timeout_s=0.2)
def slow() -> str:
    """A tool that takes too long."""
    time.sleep(1)
    return "late"


section("A tool past its timeout: the guest gets ToolTimeout and runs on")
done = run(["-c", "from host import tools\ntry:\n    tools.slow()\nexcept TimeoutError as e:\n    print('timeout:', e)"], tools=[slow])
print(done.stdout.decode(), "abandoned:", [o.abandoned for o in done.tools.outcomes])


# -- Limits and the sandbox ---------------------------------------------------------------
section("Limits: a runaway loop, a sleep past the deadline, the host's files")
print(run(["-c", "while True: pass"], deadline_s=0.5).trapped)
print(run(["-c", "import time; time.sleep(30)"], deadline_s=0.5).trapped)
print(run(["-c", "import os; print(os.path.exists('/etc/passwd'))"]).stdout)

section("numpy and pandas, inside (preloaded: the import is a dictionary lookup)")
t = time.perf_counter()
print(run(["-c", "import pandas as pd; print(pd.DataFrame({'x': [1, 2, 3]}).x.sum())"]).stdout)
print(f"a fresh run with pandas: {(time.perf_counter() - t) * 1000:.0f} ms (the first builds the snapshot if it is missing)")

section("Serve files from your own code: inputs from a dict, outputs collected")
from wasi_python import MemoryFiles, Mount  # noqa: E402

outputs = MemoryFiles()
done = run(
    ["-c", "import pandas as pd\ndf = pd.read_csv('/data/sales.csv')\ndf.groupby('region').sum().to_csv('totals.csv')"],
    mounts=[Mount(MemoryFiles({"sales.csv": b"region,amount\nnorth,10\nsouth,32\nnorth,1\n"}), "/data"),
            Mount(outputs, "/out", writable=True)],
    workdir="/out",
)
print(outputs.files["totals.csv"], done.files.calls)


# -- Async and sessions -------------------------------------------------------------------
@tool
async def fetch(n: int) -> int:
    """An async tool, awaited on the caller's loop."""
    await asyncio.sleep(0.01)
    return n * 2


async def main() -> None:
    section("run_async: four guests at once, async tools on this loop")
    done = await asyncio.gather(*[run_async(["-c", f"from host import tools; print(tools.fetch({i}))"], tools=[fetch]) for i in range(4)])
    print([d.stdout for d in done])


asyncio.run(main())

section("A session keeps its interpreter across turns")
with Session() as s:
    s.run("import math\nx = 21")
    print(s.run("x * 2").stdout)
    print(s.run("math.sqrt(x * 84)").stdout)
print("\nDone.")
