"""`import host`: PROTOCOL and the exception classes, with nothing sent."""

import pytest
from guest_fakes import FakeHost

EXCEPTIONS = [
    # name, extra base besides the chain to ToolError, kind
    ("ToolError", Exception, "tool_error"),
    ("ToolDenied", PermissionError, "denied"),
    ("ToolArgumentError", TypeError, "invalid_arguments"),
    ("ToolTimeout", TimeoutError, "timeout"),
    ("ToolCancelled", None, "cancelled"),
    ("ToolTooLarge", None, "too_large"),
    ("ToolBudgetExceeded", None, "budget_exceeded"),
    ("ToolProtocolError", None, "protocol"),
]


def test_import_host_sends_nothing(guest):
    fake = FakeHost()
    host = guest(fake)
    assert host.PROTOCOL == 1
    assert fake.frames == []
    assert "host.tools" not in __import__("sys").modules


@pytest.mark.parametrize("name, base, kind", EXCEPTIONS)
def test_exception_bases_and_kind(guest, name, base, kind):
    host = guest(FakeHost())
    cls = getattr(host, name)
    assert cls.kind == kind
    if name == "ToolError":
        assert cls.__bases__ == (Exception,)
    else:
        expected = (host.ToolError,) if base is None else (host.ToolError, base)
        assert cls.__bases__ == expected
    assert name in host.__all__


@pytest.mark.parametrize("name, base, kind", EXCEPTIONS)
def test_exceptions_are_ordinary_and_the_guest_runs_on(guest, name, base, kind):
    host = guest(FakeHost())
    cls = getattr(host, name)
    with pytest.raises(host.ToolError) as info:
        raise cls("the message")
    assert str(info.value) == "the message"
    assert info.value.kind == kind
    if base is not None:
        with pytest.raises(base):
            raise cls("caught by its builtin base")
