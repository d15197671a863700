"""A fresh `host` package, talking to a fake `_host` door, for every test."""

import sys

import pytest
from guest_fakes import GUEST


def forget_host():
    for name in list(sys.modules):
        if name == "host" or name.startswith("host."):
            del sys.modules[name]


@pytest.fixture
def guest(monkeypatch):
    """guest(fake) installs `fake` as `_host` and returns a freshly imported `host`."""
    monkeypatch.syspath_prepend(str(GUEST))

    def load(fake):
        forget_host()
        monkeypatch.setitem(sys.modules, "_host", fake)
        import host

        return host

    yield load
    forget_host()
