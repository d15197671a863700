"""Code mode over upstream MCP servers (``serve mcp --upstream servers.json``): fixture
upstreams, one whose tool raises, one that hangs past its timeout, one that dies mid-call and
one that crashes at start; a guest program calls them in a loop and aggregates, the record
shows each call, and each failure is that call's alone. Also the discovery tools, stubs,
renamed parameters and what of an upstream schema is not checked."""

from __future__ import annotations

import json
import sys

import pytest

from serve_helpers import FIXTURES, stdio_client


@pytest.fixture(scope="module")
def coded(tmp_path_factory):
    servers = {"mcpServers": {
        "shop": {"command": sys.executable, "args": [str(FIXTURES / "upstream_shop.py")]},
        "slow": {"command": sys.executable, "args": [str(FIXTURES / "upstream_slow.py")]},
        "doomed": {"command": sys.executable, "args": [str(FIXTURES / "upstream_slow.py")]},
        "broken": {"command": sys.executable, "args": [str(FIXTURES / "upstream_crash.py")]},
    }}
    path = tmp_path_factory.mktemp("code-mode") / "servers.json"
    path.write_text(json.dumps(servers))
    c = stdio_client("--upstream", str(path), "--upstream-timeout-s", "1", "--upstream-start-s", "30", "--deadline-s", "30")
    yield c
    c.close()


def text(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def run(client, code: str, **kw):
    return client.call("run_python", {"code": code, **kw})


LOOP = """
from host import tools, ToolError, ToolTimeout
total, failures, timeouts, echoes = 0.0, [], 0, []
for i, item in enumerate(["apple", "pear"]):
    total += tools.shop__price(item=item)["price"]
    try:
        tools.shop__fail(reason=f"r{i}")
    except ToolError as e:
        failures.append(str(e))
    try:
        tools.slow__wait(seconds=3600)
    except ToolTimeout:
        timeouts += 1
    echoes.append(tools.slow__echo(text=item))
print(total, timeouts, echoes)
print(failures)
"""


def test_a_program_calls_two_upstreams_in_a_loop_and_the_record_shows_each_call(coded):
    r = run(coded, LOOP)
    s = r.structured_content
    assert not r.is_error, text(r)
    first, second = s["stdout"].splitlines()
    assert first == "3.5 2 ['apple', 'pear']"
    assert "failed on purpose: r0" in second and "failed on purpose: r1" in second
    calls = [(c["tool"], c["outcome"]) for c in s["tool_calls"]]
    assert calls == [
        ("shop__price", "ok"), ("shop__fail", "tool_error"), ("slow__wait", "timeout"), ("slow__echo", "ok"),
    ] * 2
    assert "tool calls: 8" in text(r)
    still = run(coded, "from host import tools\nprint(tools.slow__echo(text='still here'))")
    assert still.structured_content["stdout"] == "still here\n"  # the hung calls left the upstream usable


def test_a_server_that_crashed_at_start_is_reported_not_fatal(coded):
    listed = coded.call("list_upstream_tools", {})
    assert not listed.is_error
    assert "broken" in listed.structured_content["unavailable"]
    assert "shop__price" in listed.structured_content["tools"]
    run_tool = next(t for t in coded.list().tools if t.name == "run_python")
    assert "broken (unavailable" in run_tool.description


def test_an_upstream_that_dies_fails_its_call_and_the_run_goes_on(coded):
    r = run(coded, """
from host import tools, ToolError
for call in (lambda: tools.doomed__die(), lambda: tools.doomed__echo(text="x")):
    try:
        call()
    except ToolError as e:
        print("failed:", e)
print(tools.shop__price(item="plum")["price"])
""")
    assert not r.is_error, text(r)
    lines = r.structured_content["stdout"].splitlines()
    assert lines[0].startswith("failed:") and "doomed" in lines[0]
    assert lines[1].startswith("failed:") and "doomed" in lines[1] and "not running" in lines[1]
    assert lines[2] == "0.5"


def test_arguments_are_checked_by_our_door_before_the_upstream(coded):
    before = run(coded, "from host import tools\nprint(tools.shop__calls())").structured_content["stdout"]
    r = run(coded, "from host import tools, ToolArgumentError\ntry:\n    tools.shop__price(item=3)\nexcept ToolArgumentError as e:\n    print('refused:', e)\nprint(tools.shop__calls())")
    out = r.structured_content["stdout"].splitlines()
    assert out[0].startswith("refused:")
    assert int(out[1]) == int(before) + 1  # only the counting call reached the upstream
    assert [c["outcome"] for c in r.structured_content["tool_calls"]] == ["invalid_arguments", "ok"]


def test_renamed_parameters_and_unchecked_keywords_are_said(coded):
    r = run(coded, "from host import tools\nprint(tools.shop__lookup(record_id=7))\nhelp(tools.shop__lookup)")
    out = r.structured_content["stdout"]
    assert out.startswith("record 7\n")
    assert "record_id" in out and "dependentRequired" in out and "patternProperties" in out
    got = coded.call("get_upstream_tool", {"name": "shop.lookup"})
    assert got.structured_content["unchecked"] == ["dependentRequired", "patternProperties"]
    assert "def shop__lookup(" in got.structured_content["stub"]
    assert "Not checked here: dependentRequired, patternProperties" in text(got)


def test_discovery_finds_tools_and_gives_stubs(coded):
    found = coded.call("search_upstream_tools", {"query": "unit price of an item", "limit": 3})
    assert found.structured_content["tools"][0] == "shop__price"
    stubs = text(coded.call("upstream_stubs", {"server": "shop"}))
    assert "def shop__price(" in stubs and "def slow__echo(" not in stubs
    missing = coded.call("get_upstream_tool", {"name": "nope"})
    assert missing.is_error


def test_a_session_calls_upstream_tools_across_turns(coded):
    assert not run(coded, "from host import tools\np = tools.shop__price(item='pear')['price']", session="shop").is_error
    r = run(coded, "p + tools.shop__price(item='apple')['price']", session="shop")
    assert r.structured_content["stdout"] == "3.5\n", text(r)
    coded.call("end_session", {"session": "shop"})


def test_a_url_upstream_with_headers_and_a_mute_one_bounded_at_start(tmp_path):
    """An upstream reached by URL (another ``serve mcp`` over HTTP, behind its token), and
    one that never answers its handshake: that one is reported once its start bound passes,
    and the other serves."""
    from serve_helpers import HttpServer

    remote = HttpServer("--token", "upstream-token")
    try:
        servers = {"mcpServers": {
            "remote": {"url": remote.url, "headers": {"Authorization": "Bearer upstream-token"}},
            "mute": {"command": sys.executable, "args": [str(FIXTURES / "upstream_mute.py")]},
        }}
        path = tmp_path / "servers.json"
        path.write_text(json.dumps(servers))
        c = stdio_client("--upstream", str(path), "--upstream-start-s", "3")
        try:
            listed = c.call("list_upstream_tools", {})
            assert "did not start within 3 s" in listed.structured_content["unavailable"]["mute"]
            r = run(c, "from host import tools\nprint(tools.remote__run_python(code='print(6 * 7)')['stdout'], end='')")
            assert r.structured_content["stdout"] == "42\n", text(r)
        finally:
            c.close()
    finally:
        remote.stop()
