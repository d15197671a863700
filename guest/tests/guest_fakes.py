"""A fake `_host` door that answers as a version-1 host would, descriptor helpers, and
what a fresh interpreter loads to import and call the tools.

The guest package runs on this CPython as in the sandbox, with the fake standing
in for the guest's builtin door module `_host`.
"""

import base64
import json
import pathlib
import subprocess
import sys

GUEST = pathlib.Path(__file__).resolve().parents[1]


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def to_wire(value):
    """A Python value as a host sends it: bytes as {"$bytes": base64}."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {k: to_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_wire(v) for v in value]
    return value


def from_wire(value):
    if isinstance(value, dict):
        if list(value) == ["$bytes"]:
            return base64.b64decode(value["$bytes"], validate=True)
        return {k: from_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    return value


class HostError(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind
        self.message = message


class FakeHost:
    """Answers frames as a version-1 host would and records every frame it gets.

    `tools`: the descriptors the list answer carries. `handlers`: name -> function
    of the decoded arguments; it returns the value or raises HostError.
    `script`: answers (bytes) or door exceptions used, in order, before any of that.
    """

    def __init__(self, tools=(), handlers=None, script=()):
        self.tools = list(tools)
        self.handlers = dict(handlers or {})
        self.script = list(script)
        self.frames = []
        self.last_ok = False

    # The `_host` module's API.
    def call(self, frame):
        if not isinstance(frame, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"a bytes-like object is required, not '{type(frame).__name__}'"
            )
        frame = bytes(frame)
        self.frames.append(frame)
        if self.script:
            answer = self.script.pop(0)
            self.last_ok = not isinstance(answer, BaseException)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        self.last_ok = True
        return self.answer(json.loads(frame))

    def available(self):
        return self.last_ok

    def answer(self, request):
        rid = request["id"]
        if request["op"] == "list":
            return dumps({"v": 1, "id": rid, "ok": True, "tools": self.tools})
        handler = self.handlers.get(request["tool"])
        if handler is None:
            error = {
                "kind": "unknown_tool",
                "message": f"no tool named {request['tool']!r}",
            }
            return dumps({"v": 1, "id": rid, "ok": False, "error": error})
        try:
            value = handler(**from_wire(request.get("args", {})))
        except HostError as e:
            error = {"kind": e.kind, "message": e.message}
            return dumps({"v": 1, "id": rid, "ok": False, "error": error})
        return dumps({"v": 1, "id": rid, "ok": True, "value": to_wire(value)})

    def requests(self):
        return [json.loads(f) for f in self.frames]


def answer(**fields):
    """An answer frame: {"v": 1, ...fields} as compact UTF-8 JSON."""
    return dumps({"v": 1, **fields})


def tool(
    name, description="", properties=None, required=(), output=None, meta=None, **extra
):
    """A descriptor as a host lists it."""
    d = {"name": name, "description": description}
    if properties is not None:
        d["inputSchema"] = {
            "type": "object",
            "properties": properties,
            "required": list(required),
            "additionalProperties": False,
        }
    if output is not None:
        d["outputSchema"] = output
    if meta is not None:
        d["_meta"] = {"python": meta}
    d.update(extra)
    return d


def echo_all(**args):
    """A handler that answers with the arguments it got."""
    return args


_FAST_PATH = """
import json, sys
sys.path.insert(0, GUEST)
LISTED = json.dumps({"v": 1, "id": 1, "ok": True, "tools": [DESCRIPTOR]}).encode()

class Door:
    def call(self, frame):
        if json.loads(frame)["op"] == "list":
            return LISTED
        return b'{"v":1,"id":null,"ok":true,"value":VALUE}'

sys.modules["_host"] = Door()
before = set(sys.modules)
from host import tools
CALLS
print(sorted(set(sys.modules) - before))
"""


def modules_loaded(descriptor, calls, value="null"):
    """The modules a fresh CPython (``-S -I``: no site, no user paths) loads to import
    ``host.tools`` offering ``descriptor`` and run ``calls`` (lines of code), each call
    answered with ``value`` (JSON text)."""
    program = _FAST_PATH.replace("GUEST", repr(str(GUEST))).replace("DESCRIPTOR", repr(descriptor))
    program = program.replace("VALUE", value).replace("CALLS", calls)
    command = [sys.executable, "-S", "-I", "-c", program]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return eval(done.stdout)
