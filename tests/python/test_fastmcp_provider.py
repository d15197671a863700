"""The FastMCP ``CodeMode`` sandbox provider (`wasi_python.serve.fastmcp`), against the
pinned fastmcp: a program that calls two FastMCP tools and uses pandas (which FastMCP's
default sandbox, a Python subset, cannot import); the code's errors, a hostile loop and
``asyncio.gather`` as FastMCP's own code-mode prompt suggests."""

from __future__ import annotations

import asyncio

import pytest

SALES = {"north": [{"sku": "a", "amount": 10.0}, {"sku": "b", "amount": 32.0}], "south": [{"sku": "a", "amount": 8.0}]}


def server(**provider_kw):
    from fastmcp import FastMCP
    from fastmcp.experimental.transforms.code_mode import CodeMode

    from wasi_python.serve.fastmcp import WasiPythonSandboxProvider

    mcp = FastMCP("shop")

    @mcp.tool
    def sales(region: str) -> list[dict]:
        """The sales rows of a region."""
        return SALES[region]

    @mcp.tool
    def fx_rate(currency: str) -> float:
        """How many of ``currency`` one dollar buys."""
        return {"EUR": 0.5, "GBP": 0.25}[currency]

    provider = WasiPythonSandboxProvider(**provider_kw)
    mcp.add_transform(CodeMode(sandbox_provider=provider))
    return mcp, provider


def execute(mcp, code: str, *, raise_on_error: bool = True):
    from fastmcp import Client

    async def go():
        async with Client(mcp) as c:
            names = {t.name for t in await c.list_tools()}
            assert "execute" in names and "sales" not in names  # CodeMode replaced the tools
            return await c.call_tool("execute", {"code": code}, raise_on_error=raise_on_error)

    return asyncio.run(asyncio.wait_for(go(), 60))


PANDAS = """
import pandas as pd
rows = []
for region in ["north", "south"]:
    # FastMCP hands a tool's structured content: a list comes wrapped as {"result": [...]}.
    for row in (await call_tool("sales", {"region": region}))["result"]:
        rows.append(dict(row, region=region))
rate = (await call_tool("fx_rate", {"currency": "EUR"}))["result"]
df = pd.DataFrame(rows)
by_region = df.groupby("region")["amount"].sum() * rate
return {"eur": by_region.round(2).to_dict(), "rows": len(df), "pandas": pd.__version__[:1]}
"""


def test_a_program_calls_two_fastmcp_tools_and_uses_pandas():
    mcp, provider = server()
    result = execute(mcp, PANDAS)
    assert result.data == {"eur": {"north": 21.0, "south": 4.0}, "rows": 3, "pandas": "3"}
    calls = [(o.tool, o.outcome) for o in provider.last.tools.outcomes if o.op == "call"]
    assert calls == [("call_tool", "ok")] * 3 + [("wasi_python_result", "ok")]


def test_gather_and_a_final_expression():
    mcp, _ = server()
    code = "import asyncio\nrates = await asyncio.gather(call_tool('fx_rate', {'currency': 'EUR'}), call_tool('fx_rate', {'currency': 'GBP'}))\nsum(r['result'] for r in rates)"
    assert execute(mcp, code).content[0].text == "0.75"


def test_an_error_in_the_code_is_a_tool_error_the_model_reads():
    mcp, _ = server()
    r = execute(mcp, "x = 1\nraise ValueError('bad input ' + str(x))", raise_on_error=False)
    assert r.is_error
    message = r.content[0].text
    assert "ValueError: bad input 1" in message and 'File "<code>", line 2' in message


def test_a_failing_tool_call_raises_in_the_code():
    mcp, _ = server()
    r = execute(mcp, "try:\n    await call_tool('sales', {'region': 'west'})\nexcept Exception as e:\n    return type(e).__name__\nreturn 'no error'")
    assert r.content[0].text == "ToolError"


def test_a_hostile_loop_is_stopped_at_the_deadline():
    mcp, provider = server(deadline_s=1.0)
    r = execute(mcp, "while True:\n    pass", raise_on_error=False)
    assert r.is_error and "deadline" in r.content[0].text
    assert provider.last.trapped == "deadline"


def test_the_provider_keeps_its_own_keywords():
    from wasi_python.serve.fastmcp import WasiPythonSandboxProvider

    with pytest.raises(TypeError):
        WasiPythonSandboxProvider(tools=[])
