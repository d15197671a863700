"""``wasi-python serve mcp`` as a subprocess, talked to with the ``mcp`` SDK's own client
over stdio and over streamable HTTP: tools listed, code run, a session across calls, a guest
past its deadline, a guest out of memory, malformed calls; the server answers each and stays
up. Also the bounds of sessions (the cap, the idle end), the bearer token, ``--help``'s
defaults and the config file."""

from __future__ import annotations

import json
import subprocess

import pytest

from serve_helpers import HttpServer, serve_argv, server_env, stdio_client


TOKEN = "t0ken-for-the-tests"
# Small caps, so the hostile guests below meet them at once.
OPTIONS = ("--deadline-s", "20", "--memory-bytes", str(256 << 20), "--max-sessions", "2", "--session-idle-s", "3")


@pytest.fixture(scope="module")
def stdio():
    c = stdio_client(*OPTIONS)
    yield c
    c.close()


@pytest.fixture(scope="module")
def http_server():
    s = HttpServer(*OPTIONS, "--token", TOKEN)
    yield s
    assert s.stop() == 0  # SIGTERM: a graceful end, its sessions closed


@pytest.fixture(scope="module")
def http(http_server):
    c = http_server.client(TOKEN)
    yield c
    c.close()


@pytest.fixture(params=["stdio", "http"])
def client(request):
    return request.getfixturevalue(request.param)


def text(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def still_up(client) -> None:
    r = client.call("run_python", {"code": "print(6 * 7)"})
    assert not r.is_error and r.structured_content["stdout"] == "42\n"


def test_lists_run_python_with_its_schema(client):
    tools = {t.name: t for t in client.list().tools}
    assert set(tools) == {"run_python", "end_session"}
    run = tools["run_python"]
    assert run.input_schema["required"] == ["code"]
    assert set(run.input_schema["properties"]) == {"code", "timeout_s", "session"}
    assert "20 s" in run.description  # the limit this server was started with


def test_runs_code_and_answers_text_and_structured_content(client):
    r = client.call("run_python", {"code": "import pandas as pd\nprint(pd.Series([1, 2, 3]).sum())"})
    assert not r.is_error
    s = r.structured_content
    assert (s["exit_code"], s["stdout"], s["stderr"], s["trapped"]) == (0, "6\n", "", None)
    assert "exit code: 0" in text(r) and "6" in text(r)


def test_a_guest_error_is_a_tool_result(client):
    r = client.call("run_python", {"code": "raise ValueError('nope')"})
    assert r.is_error
    assert r.structured_content["exit_code"] == 1
    assert "ValueError: nope" in r.structured_content["stderr"] and "ValueError: nope" in text(r)
    still_up(client)


def test_a_session_keeps_its_variables_across_calls(client, request):
    name = f"keep-{request.node.callspec.id}"
    r = client.call("run_python", {"code": "import math\nx = 41", "session": name})
    assert not r.is_error and r.structured_content["session"] == name
    r = client.call("run_python", {"code": "x + 1", "session": name})
    assert r.structured_content["stdout"] == "42\n"
    r = client.call("run_python", {"code": "print(x)"})  # no session: a fresh interpreter
    assert r.is_error and "NameError" in r.structured_content["stderr"]
    assert not client.call("end_session", {"session": name}).is_error


def test_a_guest_past_its_deadline_is_stopped(client):
    r = client.call("run_python", {"code": "while True:\n    pass", "timeout_s": 0.5})
    assert r.is_error
    assert r.structured_content["trapped"] == "deadline"
    assert "deadline" in text(r)
    still_up(client)


def test_a_session_turn_past_its_deadline_ends_that_session(client, request):
    name = f"loop-{request.node.callspec.id}"
    client.call("run_python", {"code": "y = 1", "session": name})
    r = client.call("run_python", {"code": "while True:\n    pass", "session": name, "timeout_s": 0.5})
    assert r.is_error and r.structured_content["trapped"] == "deadline"
    assert any("ended" in n for n in r.structured_content["notes"])
    r = client.call("run_python", {"code": "print('y' in globals())", "session": name})
    assert r.structured_content["stdout"] == "False\n"  # a new session
    client.call("end_session", {"session": name})


def test_a_guest_that_exhausts_memory_is_stopped(client):
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))"
    r = client.call("run_python", {"code": hog})
    assert r.is_error
    s = r.structured_content
    assert s["trapped"] == "memory" or "MemoryError" in s["stderr"]
    still_up(client)


@pytest.mark.parametrize("arguments", [
    {},
    {"code": 3},
    {"code": "print(1)", "extra": True},
    {"code": "print(1)", "timeout_s": -1},
    {"code": "print(1)", "timeout_s": "soon"},
    {"code": "print(1)", "session": "no spaces allowed"},
    {"code": "print(1)", "session": "x" * 65},
    {"code": "print('\\0')\0"},
])
def test_a_malformed_call_is_answered_and_the_server_stays_up(client, arguments):
    r = client.call("run_python", arguments)
    assert r.is_error and text(r)
    still_up(client)


def test_an_unknown_tool_is_a_protocol_error(client):
    from mcp.shared.exceptions import MCPError

    with pytest.raises(MCPError):
        client.call("no_such_tool", {})
    still_up(client)


def test_sessions_are_capped(stdio):
    for name in ("cap-a", "cap-b"):
        assert not stdio.call("run_python", {"code": "1", "session": name}).is_error
    r = stdio.call("run_python", {"code": "1", "session": "cap-c"})
    assert r.is_error and "sessions are alive" in text(r)
    assert not stdio.call("run_python", {"code": "print(1)"}).is_error  # no session: still served
    assert not stdio.call("end_session", {"session": "cap-a"}).is_error
    assert not stdio.call("run_python", {"code": "1", "session": "cap-c"}).is_error
    for name in ("cap-b", "cap-c"):
        stdio.call("end_session", {"session": name})


def test_an_idle_session_ends_and_the_name_starts_a_new_one(stdio):
    import time

    stdio.call("run_python", {"code": "z = 5", "session": "idle"})
    time.sleep(3.5)  # past --session-idle-s 3
    r = stdio.call("run_python", {"code": "print('z' in globals())", "session": "idle"})
    assert r.structured_content["stdout"] == "False\n"
    assert any("had ended (idle)" in n for n in r.structured_content["notes"])
    stdio.call("end_session", {"session": "idle"})


def test_http_needs_the_bearer_token(http_server):
    import httpx2

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        resp = httpx2.post(http_server.url, json=body, headers=headers, timeout=30)
        assert resp.status_code == 401
    resp = httpx2.post(http_server.url, content=b"{not json", headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, timeout=30)
    assert 400 <= resp.status_code < 500
    assert http_server.proc.poll() is None


def test_http_refuses_a_non_loopback_address_without_a_token():
    done = subprocess.run(serve_argv("--http", "0.0.0.0:0"), env=server_env(), capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and b"--token" in done.stderr


def test_help_shows_the_library_defaults():
    from wasi_python import DEFAULTS

    done = subprocess.run(serve_argv("--help"), env=server_env(), capture_output=True, timeout=60)
    out = " ".join(done.stdout.decode().split())
    assert done.returncode == 0
    for name, value in (("deadline", DEFAULTS["deadline_s"]), ("memory", DEFAULTS["memory_bytes"]), ("output", DEFAULTS["output_bytes"])):
        assert f"(default: {value})" in out, name
    assert "(default: 8)" in out and "(default: 900.0)" in out


def test_settings_come_from_the_file_then_the_command_line(tmp_path):
    import argparse

    from wasi_python.serve import ConfigError, add_arguments, config_from

    data = tmp_path / "data"
    data.mkdir()
    conf = tmp_path / "serve.json"
    conf.write_text(json.dumps({"deadline_s": 7, "max_sessions": 3, "mounts": [{"host": str(data), "guest": "/data"}]}))
    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = config_from(p.parse_args(["--config", str(conf), "--max-sessions", "5", "--mount-rw", f"{data}:/out"]))
    assert cfg.deadline_s == 7 and cfg.max_sessions == 5
    assert [(g.guest_path, g.writable) for g in cfg.mounts] == [("/data", False), ("/out", True)]
    assert cfg.run_limits(100)["deadline_s"] == 7  # a call cannot ask past the server's deadline
    for bad in (["--deadline-s", "0"], ["--mount", "nowhere"], ["--http", "what"]):
        with pytest.raises(ConfigError):
            config_from(p.parse_args(bad))
    conf.write_text(json.dumps({"deadline": 7}))
    with pytest.raises(ConfigError):
        config_from(p.parse_args(["--config", str(conf)]))
