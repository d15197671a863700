"""The guide's two recipes, as written there: a LangChain tool and an MCP server's tool.

The project ships no adapter and the package depends on neither library; the tests do, at the
versions the guide names, pinned in tests/requirements.txt (`cargo xtask venv` installs them),
so these run, and fail, wherever the suite runs."""

from __future__ import annotations

import asyncio
import textwrap

import pytest
from helpers import guest


# --- Recipe: a LangChain tool (langchain-core==1.6.12) ------------------------------------


def test_langchain_recipe():
    # The recipe, exactly as in the guide.
    from langchain_core.tools import ToolException
    from pydantic import BaseModel, Field
    from wasi_python.tools import ToolError, tool

    def from_langchain(lc_tool):
        def call(**args):
            try:
                return lc_tool.invoke(args)
            except ToolException as e:
                raise ToolError(str(e)) from None  # its text is meant for the caller

        return tool(call, name=lc_tool.name, description=lc_tool.description,
                    input_schema=lc_tool.args_schema, validates_input=True)

    # A LangChain tool, its input checked by its own pydantic model.
    from langchain_core.tools import StructuredTool

    class AddArgs(BaseModel):
        a: int = Field(description="The first number.")
        b: int = Field(ge=0, description="The second number, not negative.")

    added = []

    def add(a: int, b: int) -> int:
        if a == 13:
            raise ToolException("13 is unlucky")
        added.append((a, b))
        return a + b

    lc_add = StructuredTool.from_function(
        func=add, name="add", description="Add two integers.", args_schema=AddArgs
    )
    t = from_langchain(lc_add)
    assert t.name == "add"
    assert t.description == "Add two integers."

    done = guest(
        """
        from host import tools, ToolError
        print(tools.add(a=2, b=3))
        try:
            tools.add(a=13, b=1)
        except ToolError as e:
            print("error:", e)
        try:
            tools.add(a=1, b=-1)
        except ToolError as e:
            print("refused", isinstance(e, ToolError))
        print(tools.add.descriptor["inputSchema"]["properties"]["a"]["description"])
        """,
        [t],
    )
    assert done.ok, done.stderr
    assert done.stdout.decode().splitlines() == [
        "5",
        "error: 13 is unlucky",
        "refused True",
        "The first number.",
    ]
    assert added == [(2, 3)]


# --- Recipe: an MCP server's tool (mcp==2.3.0) --------------------------------------------


def test_mcp_recipe():
    import mcp

    assert hasattr(mcp, "Client"), "the recipe is written for mcp 2.x, whose session is an mcp.Client"

    # The recipe, exactly as in the guide.
    from wasi_python import run_async
    from wasi_python.tools import ToolError, tool

    def from_mcp(session, listed, timeout_s=30):
        async def call(**args):
            result = await session.call_tool(listed.name, args)
            text = " ".join(c.text for c in result.content if c.type == "text")
            if result.is_error:
                raise ToolError(text)
            return result.structured_content if result.structured_content is not None else text

        return tool(call, name=listed.name, description=listed.description or "",
                    input_schema=listed.input_schema, validates_input=True, timeout_s=timeout_s)

    async def answer(session, code):  # session: your open mcp.Client
        tools = [from_mcp(session, t) for t in (await session.list_tools()).tools]
        return await run_async(["-c", code], tools=tools)

    # An in-process server (mcp 2.x's MCPServer: a tool's ToolError is the text its client
    # reads; any other exception's text stays on the server).
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError as ServerToolError

    server = MCPServer("recipe")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def refuse(reason: str) -> str:
        """Always fails."""
        raise ServerToolError(f"the server says {reason}")

    code = textwrap.dedent(
        """
        from host import tools, ToolError
        print(tools.add(a=2, b=3))
        try:
            tools.refuse(reason="no")
        except ToolError as e:
            print("error:", e)
        """
    )

    async def main():
        async with mcp.Client(server) as session:
            return await answer(session, code)

    done = asyncio.run(asyncio.wait_for(main(), 60))
    assert done.ok, done.stderr
    first, second = done.stdout.decode().splitlines()
    assert first in ("{'result': 5}", "5")  # structured content, or its text
    assert second.startswith("error:") and "the server says no" in second
    assert [o.outcome for o in done.tools.outcomes] == ["ok", "ok", "tool_error"]


# --- the recipes' own code, with stand-ins for the libraries -------------------------------
# These run without langchain_core or mcp: the adapter code is the guide's, line for line; only
# the objects it adapts are stand-ins with the attributes the recipe reads.


class FakeToolException(Exception):
    pass


def test_langchain_recipe_code_with_a_stand_in_tool():
    from pydantic import BaseModel, Field
    from wasi_python.tools import ToolError, tool

    ToolException = FakeToolException

    def from_langchain(lc_tool):
        def call(**args):
            try:
                return lc_tool.invoke(args)
            except ToolException as e:
                raise ToolError(str(e)) from None  # its text is meant for the caller

        return tool(call, name=lc_tool.name, description=lc_tool.description,
                    input_schema=lc_tool.args_schema, validates_input=True)

    class Args(BaseModel):
        city: str = Field(description="A city.")
        days: int = Field(default=1, ge=1, le=7)

    class StandIn:
        name = "forecast"
        description = "The weather forecast."
        args_schema = Args

        def __init__(self):
            self.seen = []

        def invoke(self, args):
            parsed = Args(**args)  # the tool checks its own input
            self.seen.append(parsed.model_dump())
            if parsed.city == "Atlantis":
                raise FakeToolException("no forecast under the sea")
            return {"city": parsed.city, "days": [f"sunny {i}" for i in range(parsed.days)]}

    lc = StandIn()
    t = from_langchain(lc)
    done = guest(
        """
        from host import tools, ToolError
        print(tools.forecast(city="Oslo", days=2))
        print(tools.forecast("Rome"))
        try:
            tools.forecast(city="Atlantis")
        except ToolError as e:
            print("error:", e)
        """,
        [t],
    )
    assert done.ok, done.stderr
    assert done.stdout.decode().splitlines() == [
        "{'city': 'Oslo', 'days': ['sunny 0', 'sunny 1']}",
        "{'city': 'Rome', 'days': ['sunny 0']}",
        "error: no forecast under the sea",
    ]
    assert [s["city"] for s in lc.seen] == ["Oslo", "Rome", "Atlantis"]


def test_mcp_recipe_code_with_a_stand_in_session():
    from types import SimpleNamespace

    from wasi_python import run_async
    from wasi_python.tools import ToolError, tool

    def from_mcp(session, listed, timeout_s=30):
        async def call(**args):
            result = await session.call_tool(listed.name, args)
            text = " ".join(c.text for c in result.content if c.type == "text")
            if result.is_error:
                raise ToolError(text)
            return result.structured_content if result.structured_content is not None else text

        return tool(call, name=listed.name, description=listed.description or "",
                    input_schema=listed.input_schema, validates_input=True, timeout_s=timeout_s)

    async def answer(session, code):  # session: your open mcp.Client
        tools = [from_mcp(session, t) for t in (await session.list_tools()).tools]
        return await run_async(["-c", code], tools=tools)

    class Session:
        """Lives on the loop that awaits run_async, as an MCP client session does."""

        def __init__(self):
            self.loop = None
            self.loops = []

        async def list_tools(self):
            self.loop = asyncio.get_running_loop()
            schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                      "required": ["a", "b"]}
            return SimpleNamespace(tools=[
                SimpleNamespace(name="add", description="Add.", input_schema=schema),
                SimpleNamespace(name="greet", description=None, input_schema={"type": "object", "properties": {}}),
                SimpleNamespace(name="fail", description="Fails.", input_schema={"type": "object", "properties": {}}),
            ])

        async def call_tool(self, name, args):
            self.loops.append(asyncio.get_running_loop())
            await asyncio.sleep(0)
            text = lambda t: SimpleNamespace(type="text", text=t)
            if name == "add":
                return SimpleNamespace(content=[text(str(args["a"] + args["b"]))], is_error=False,
                                       structured_content={"result": args["a"] + args["b"]})
            if name == "greet":
                return SimpleNamespace(content=[text("hello"), text("there")], is_error=False,
                                       structured_content=None)
            return SimpleNamespace(content=[text("Error:"), text("server says no")], is_error=True,
                                   structured_content=None)

    code = textwrap.dedent(
        """
        from host import tools, ToolError
        print(tools.add(a=2, b=3))
        print(tools.greet())
        try:
            tools.fail()
        except ToolError as e:
            print("error:", e)
        """
    )
    session = Session()
    loop = asyncio.new_event_loop()
    try:
        done = loop.run_until_complete(asyncio.wait_for(answer(session, code), 10))
    finally:
        loop.close()
    assert done.stdout.decode().splitlines() == ["{'result': 5}", "hello there", "error: Error: server says no"], done.stderr
    # "The session lives on your event loop, and an async tool is awaited there."
    assert session.loops == [session.loop] * 3


# --- what the recipes rely on -------------------------------------------------------------


def test_the_project_ships_no_adapter():
    import wasi_python
    import wasi_python.tools

    for module in (wasi_python, wasi_python.tools):
        names = {n.lower() for n in dir(module)}
        assert not any("langchain" in n or "mcp" in n for n in names)


OUTSIDE_SUBSET = {
    "type": "object",
    "properties": {"a": {"type": "string"}, "b": {"type": "string", "maxLength": 3}},
    "dependentRequired": {"a": ["b"]},  # outside the protocol's subset
}


def test_validates_input_lets_keywords_outside_the_subset_through_unchecked():
    from wasi_python.tools import tool

    seen = []

    def pair(a: str = "", b: str = "") -> str:
        """Pairs."""
        seen.append((a, b))
        return a + b

    with pytest.raises(ValueError):
        tool(pair, input_schema=OUTSIDE_SUBSET)
    t = tool(pair, input_schema=OUTSIDE_SUBSET, validates_input=True)
    done = guest(
        """
        from host import tools
        print(tools.pair(a="x"))  # dependentRequired would refuse this: it is not checked
        try:
            tools.pair(a="x", b="toolong")  # maxLength is in the subset: still checked
        except TypeError as e:
            print(e.kind)
        """,
        [t],
    )
    assert done.stdout == b"x\ninvalid_arguments\n", done.stderr
    assert seen == [("x", "")]


def test_a_tool_whose_names_are_not_identifiers_needs_name_and_a_renamed_schema():
    from wasi_python.tools import tool

    async def call(**args):
        return args

    schema = {"type": "object", "properties": {"city-name": {"type": "string"}}}
    with pytest.raises((TypeError, ValueError)):
        tool(call, name="get-weather", input_schema={"type": "object", "properties": {}}, validates_input=True)
    with pytest.raises((TypeError, ValueError)):
        tool(call, name="get_weather", input_schema=schema, validates_input=True)
    renamed = {"type": "object", "properties": {"city_name": {"type": "string"}}}
    t = tool(call, name="get_weather", input_schema=renamed, validates_input=True)
    assert t.name == "get_weather"
