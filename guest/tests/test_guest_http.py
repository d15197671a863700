"""host.http: the request frame's exact bytes, the answer read back, and every way the
host says no (docs/network.md), against a fake `_host` door."""

import json

import pytest

PREFIX = b"\0wasi-python http "


class NetDoor:
    """A `_host` whose door answers each request with `answer` (bytes) or raises `error`."""

    def __init__(self, answer=b"", error=None):
        self.answer, self.error, self.frames = answer, error, []

    def call(self, frame):
        self.frames.append(frame)
        if self.error is not None:
            raise self.error
        return self.answer


def head(**fields):
    return json.dumps(fields).encode() + b"\0"


def test_a_request_is_the_prefix_a_json_head_a_nul_and_the_raw_body(guest):
    door = NetDoor(head(status=201, reason="Created", url="https://x.test/a", headers=[["A", "1"], ["b", "2"]]) + b"\0body\xff")
    guest(door)
    import host.http as http

    r = http.request("POST", "https://x.test/a", headers={"X-K": "v"}, body=b"\x00\x01raw", timeout=2)
    (frame,) = door.frames
    assert frame.startswith(PREFIX)
    meta, _, body = frame[len(PREFIX):].partition(b"\0")
    assert json.loads(meta) == {"method": "POST", "url": "https://x.test/a", "headers": [["X-K", "v"]], "timeout": 2.0, "has_body": True}
    assert body == b"\x00\x01raw"
    assert (r.status, r.reason, r.url, r.ok) == (201, "Created", "https://x.test/a", True)
    assert r.body == b"\0body\xff" and r.header("B") == "2" and r.header("c") is None


@pytest.mark.parametrize("kind", ["refused", "limit", "timeout", "cancelled", "error"])
def test_the_host_s_refusals_are_network_errors_by_kind(guest, kind):
    guest(NetDoor(head(error=kind, message="because")))
    import host.http as http

    with pytest.raises(http.NetworkError) as e:
        http.get("http://x.test/")
    assert isinstance(e.value, OSError) and e.value.kind == kind and e.value.message == "because"


def test_no_door_or_a_door_that_does_not_speak_it_means_no_network(guest):
    guest(NetDoor(error=ConnectionRefusedError()))
    import host.http as http

    with pytest.raises(http.NetworkError) as e:
        http.get("http://x.test/")
    assert e.value.kind == "refused" and "no network" in e.value.message
    guest(NetDoor(b'{"v":1,"id":null,"ok":false}'))
    import host.http as http

    with pytest.raises(http.NetworkError) as e:
        http.get("http://x.test/")
    assert e.value.kind == "refused"


def test_arguments_are_checked_before_a_frame_is_sent(guest):
    door = NetDoor()
    guest(door)
    import host.http as http

    for call in (
        lambda: http.request(b"GET", "http://x/"),
        lambda: http.get("http://x/", headers={"a": 1}),
        lambda: http.get("http://x/", body=3),
    ):
        with pytest.raises(TypeError):
            call()
    with pytest.raises(ValueError):
        http.get("http://x/", timeout=0)
    assert door.frames == []
