"""The network through the host (docs/network.md): `network=`, `secrets=`,
`Completed.network`, `host.http` and urllib in the guest, against HTTP and HTTPS servers
this module starts on 127.0.0.1 (a self-signed certificate it trusts explicitly through
`Network(ca_file=...)`). Servers listen only on 127.0.0.1, and every response loop is
bounded (by its size, or by the server's stop)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
import ssl
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import zstandard
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from wasi_python import Network, Secret, Session, run
from wasi_python._wasi_python import CancelToken

SECRET = "sk-live-3b9f0c2e8d41a7"  # what the server must see, and the guest never


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A response's head and body are two writes: without this, Nagle's algorithm holds the
    # body for the client's delayed ACK (40 ms) on a kept-alive connection.
    disable_nagle_algorithm = True

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status, body, ctype="text/plain", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self):
        server = self.server
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        server.seen.append((self.command, self.path, dict(self.headers), body))
        path, _, query = self.path.partition("?")
        if path == "/small":
            return self._send(200, b"ok")
        if path == "/data.csv":
            return self._send(200, b"a,b\n1,2\n3,4\n", "text/csv")
        if path == "/json":
            return self._send(200, b'{"answer": 42}', "application/json")
        if path == "/echo":
            # Echoes what it got, the secret included, in the body and a header.
            got = {"method": self.command, "headers": dict(self.headers), "body": body.decode("latin-1")}
            auth = self.headers.get("Authorization", "")
            return self._send(200, json.dumps(got).encode(), "application/json", [("X-Echo-Auth", auth)])
        if path == "/redirect":
            return self._send(302, b"", extra=[("Location", query.removeprefix("to="))])
        if path == "/status":
            return self._send(int(query), b"nope")
        if path == "/slow":
            server.slow_started.set()
            # Sleeps until the server stops (bounded by the fixture's end), sending nothing.
            server.stopping.wait(60)
            return None
        if path == "/endless":
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            chunk = b"x" * 65536
            # Until the client leaves or the server stops; at most 1 GiB whatever happens.
            for _ in range(16384):
                if server.stopping.is_set():
                    break
                try:
                    self.wfile.write(chunk)
                except OSError:
                    break
            self.close_connection = True
            return None
        return self._send(404, b"no such path")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _route


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, tls=None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen = []
        self.stopping = threading.Event()
        self.slow_started = threading.Event()
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def port(self):
        return self.server_address[1]

    def stop(self):
        self.stopping.set()
        self.shutdown()
        self.server_close()


def _certificate(tmp):
    """A self-signed certificate for localhost and 127.0.0.1: (cert file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "wasi-python test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp / "cert.pem", tmp / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return str(cert_file), str(key_file)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    cert, key = _certificate(tmp_path_factory.mktemp("tls"))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    plain, secure = _Server(), _Server(tls)
    try:
        yield plain, secure, cert
    finally:
        plain.stop()
        secure.stop()


@pytest.fixture
def http(servers):
    server = servers[0]
    server.seen.clear()
    server.slow_started.clear()
    return server


@pytest.fixture
def https(servers):
    return servers[1], servers[2]


def guest(code, **kw):
    kw.setdefault("preload", ())
    return run(["-c", textwrap.dedent(code)], **kw)


HTTP_CALL = """
from host import http
try:
    r = http.request({method!r}, {url!r}{extra})
    print("status", r.status, r.body[:200])
except http.NetworkError as e:
    print("error", e.kind, e.message)
"""


def call(url, method="GET", extra="", **kw):
    return guest(HTTP_CALL.format(method=method, url=url, extra=extra), **kw)


def out(done):
    assert done.trapped is None, (done.trapped, done.stderr)
    assert done.exit_code == 0, done.stderr.decode()
    return done.stdout.decode()


# ---- allowed and refused -------------------------------------------------------------


def test_an_allowed_address_is_reached_over_http_and_recorded(http):
    done = call(f"http://127.0.0.1:{http.port}/small?token=abc", network=Network(["127.0.0.1"]))
    assert out(done) == "status 200 b'ok'\n"
    (req,) = done.network.requests
    assert (req.method, req.scheme, req.host, req.port, req.path, req.status, req.outcome) == ("GET", "http", "127.0.0.1", http.port, "/small", 200, "ok")
    assert req.response_bytes == 2 and done.network.total == 1 and done.network.refused == 0
    assert "token" not in req.path, "no query strings unless asked"


def test_https_with_a_certificate_the_network_trusts_and_refused_without_it(https):
    server, cert = https
    url = f"https://localhost:{server.port}/small"
    done = call(url, network=Network(["localhost"], allow_private=True, ca_file=cert))
    assert out(done) == "status 200 b'ok'\n"
    done = call(url, network=Network(["localhost"], allow_private=True))
    assert out(done).startswith("error error TLS failed"), "the system's trust store does not hold the test's certificate"


def test_no_network_by_default_and_a_host_off_the_list_is_refused(http):
    url = f"http://127.0.0.1:{http.port}/small"
    assert out(call(url)).startswith("error refused this run has no network")
    done = call(url, network=Network(["example.com"]))
    assert out(done).startswith("error refused the host '127.0.0.1' is not on the allow-list")
    assert done.network.requests[0].outcome == "refused" and done.network.refused == 1
    assert http.seen == []


def test_wildcards_match_names_under_a_domain_not_the_domain_itself(http):
    resolver = lambda host, port: ["127.0.0.1"]  # noqa: E731 - every name is the test server
    net = Network(["*.example.test"], allow_private=True, resolver=resolver)
    assert out(call(f"http://api.example.test:{http.port}/small", network=net)) == "status 200 b'ok'\n"
    assert out(call(f"http://a.b.example.test:{http.port}/small", network=net)) == "status 200 b'ok'\n"
    for host in ("example.test", "evilexample.test", "example.test.evil.org"):
        assert out(call(f"http://{host}:{http.port}/small", network=net)).startswith("error refused"), host
    assert http.seen[0][2]["Host"] == f"api.example.test:{http.port}"


def test_methods_ports_schemes_and_path_prefixes(http):
    url = f"http://127.0.0.1:{http.port}"
    net = Network(["127.0.0.1"], methods=["GET"], path_prefixes=["/small", "/data.csv"])
    assert out(call(url + "/small", network=net)) == "status 200 b'ok'\n"
    assert "the method POST is not allowed" in out(call(url + "/small", "POST", network=net))
    assert "outside the allowed prefixes" in out(call(url + "/smaller", network=net))
    assert "the port" in out(call(url + "/small", network=Network(["127.0.0.1"], ports=[443])))
    assert "the scheme 'http'" in out(call(url + "/small", network=Network(["127.0.0.1"], schemes=["https"])))


def test_a_redirect_is_followed_hop_by_hop_and_refused_at_a_refused_host(http):
    net = Network(["127.0.0.1"])
    ok = f"http://127.0.0.1:{http.port}/redirect?to=/small"
    done = call(ok, network=net)
    assert out(done) == "status 200 b'ok'\n"
    assert [(r.path, r.status, r.redirect) for r in done.network.requests] == [("/redirect", 302, False), ("/small", 200, True)]
    bad = f"http://127.0.0.1:{http.port}/redirect?to=http://localhost:{http.port}/small"
    done = call(bad, network=net)
    assert "the host 'localhost' is not on the allow-list" in out(done)
    assert [r.outcome for r in done.network.requests] == ["ok", "refused"]
    # A hop to an allowed name whose address is private: refused at the address.
    private = Network(["127.0.0.1", "*.example.test"], resolver=lambda h, p: ["10.1.2.3"])
    hop = f"http://127.0.0.1:{http.port}/redirect?to=http://a.example.test/small"
    assert "'a.example.test' resolves to 10.1.2.3" in out(call(hop, network=private))
    assert [p for _, p, _, _ in http.seen] == ["/redirect?to=/small", "/small", f"/redirect?to=http://localhost:{http.port}/small", "/redirect?to=http://a.example.test/small"]


def test_a_name_resolving_to_loopback_is_refused_without_the_explicit_allowance(http):
    url = f"http://localhost:{http.port}/small"
    refused = out(call(url, network=Network(["localhost"])))
    assert refused.startswith("error refused 'localhost' resolves to"), refused
    assert http.seen == []
    assert out(call(url, network=Network(["localhost"], allow_private=True))) == "status 200 b'ok'\n"
    # A resolver an attacker's DNS stands for: the address checked is the one connected to.
    rebinding = Network(["*.example.test"], resolver=lambda h, p: ["127.0.0.1"])
    assert "resolves to 127.0.0.1" in out(call(f"http://a.example.test:{http.port}/small", network=rebinding))
    mapped = Network(["*.example.test"], resolver=lambda h, p: ["::ffff:127.0.0.1"])
    assert "refused" in out(call(f"http://a.example.test:{http.port}/small", network=mapped))
    assert http.seen[-1][1] == "/small" and len(http.seen) == 1


# ---- bounds ---------------------------------------------------------------------------


def test_a_slow_server_is_ended_by_the_request_timeout_and_the_run_goes_on(http):
    done = call(f"http://127.0.0.1:{http.port}/slow", extra=", timeout=0.3", network=Network(["127.0.0.1"]))
    assert out(done).startswith("error timeout")
    assert done.network.requests[0].outcome == "timeout"


def test_a_slow_server_is_ended_by_the_run_s_deadline(http):
    done = call(f"http://127.0.0.1:{http.port}/slow", network=Network(["127.0.0.1"]), deadline_s=1.5)
    # The request's answer comes just before the deadline; the run ends at it or just before.
    assert done.trapped == "deadline" or done.stdout.startswith(b"error timeout"), (done.trapped, done.stdout)
    assert done.network.requests[0].outcome in ("timeout", "abandoned")


def test_a_slow_server_is_ended_by_the_cancel(http):
    token = CancelToken()
    threading.Thread(target=lambda: (http.slow_started.wait(30), token.cancel()), daemon=True).start()
    done = call(f"http://127.0.0.1:{http.port}/slow", network=Network(["127.0.0.1"]), cancel=token, deadline_s=30)
    assert done.trapped == "cancelled"


def test_an_endless_response_is_cut_at_the_byte_cap(http):
    done = call(f"http://127.0.0.1:{http.port}/endless", network=Network(["127.0.0.1"], max_response_bytes=1 << 20))
    assert out(done).startswith("error limit the response is over 1048576 bytes (max_response_bytes)")
    done = call(f"http://127.0.0.1:{http.port}/endless", network=Network(["127.0.0.1"], max_total_bytes=100_000))
    assert "max_total_bytes" in out(done)


def test_the_request_count_is_capped_per_run(http):
    code = f"""
    from host import http
    for i in range(5):
        try:
            http.get("http://127.0.0.1:{http.port}/small")
            print("ok")
        except http.NetworkError as e:
            print(e.kind)
    """
    done = guest(code, network=Network(["127.0.0.1"], max_requests=3))
    assert out(done).split() == ["ok", "ok", "ok", "limit", "limit"]
    assert [r.outcome for r in done.network.requests] == ["ok"] * 3 + ["limit"] * 2


def test_ten_thousand_small_requests_fit_the_budget(http):
    code = f"""
    from host import http
    n = sum(http.get("http://127.0.0.1:{http.port}/small").body == b"ok" for _ in range(10_000))
    print(n)
    """
    done = guest(code, network=Network(["127.0.0.1"], max_requests=10_000), deadline_s=600)
    assert out(done) == "10000\n"
    assert done.network.total == 10_000 and len(done.network.requests) == 1000


# ---- secrets --------------------------------------------------------------------------


SECRET_CALL = """
import os
from host import http
token = os.environ["API_TOKEN"]
print("placeholder", token.startswith("wasi-python-secret-"))
try:
    r = http.request("POST", {url!r}, headers={{"Authorization": "Bearer " + token}}, body={body})
    print(r.header("X-Echo-Auth"))
    print(r.body.decode())
except http.NetworkError as e:
    print("error", e.kind, e.message)
"""


def test_a_secret_is_swapped_for_its_host_and_the_echo_scrubbed(http):
    url = f"http://127.0.0.1:{http.port}/echo"
    secrets = {"API_TOKEN": Secret(SECRET, hosts=["127.0.0.1"])}
    done = guest(SECRET_CALL.format(url=url, body="'plain'"), network=Network(["127.0.0.1", "localhost"], allow_private=True), secrets=secrets)
    text = out(done)
    assert text.startswith("placeholder True\nBearer wasi-python-secret-"), text
    assert SECRET not in text
    # The server got the value itself.
    (seen,) = http.seen
    assert seen[2]["Authorization"] == f"Bearer {SECRET}"
    assert repr(secrets["API_TOKEN"]).count(SECRET) == 0


def test_a_secret_is_refused_for_another_host_and_in_a_body_unless_asked(http):
    net = Network(["127.0.0.1", "localhost"], allow_private=True)
    secrets = {"API_TOKEN": Secret(SECRET, hosts=["127.0.0.1"])}
    other = guest(SECRET_CALL.format(url=f"http://localhost:{http.port}/echo", body="'x'"), network=net, secrets=secrets)
    assert "error refused the secret API_TOKEN may go only to 127.0.0.1, not localhost" in out(other)
    in_body = guest(SECRET_CALL.format(url=f"http://127.0.0.1:{http.port}/echo", body="token"), network=net, secrets=secrets)
    assert "in_body=False" in out(in_body)
    assert http.seen == []
    asked = {"API_TOKEN": Secret(SECRET, hosts=["127.0.0.1"], in_body=True)}
    done = guest(SECRET_CALL.format(url=f"http://127.0.0.1:{http.port}/echo", body="token"), network=net, secrets=asked)
    assert SECRET not in out(done) and http.seen[0][3] == SECRET.encode()


def _payloads(blob):
    """Every zstd frame in a snapshot file, decompressed (its memory pages)."""
    d = zstandard.ZstdDecompressor()
    for m in re.finditer(rb"\x28\xb5\x2f\xfd", blob):
        try:
            yield d.decompressobj().decompress(blob[m.start():])
        except zstandard.ZstdError:
            continue


def test_the_secret_never_reaches_output_files_records_or_a_snapshot(http, tmp_path):
    """A guest that prints, writes to a file and keeps the echoed answer, then its
    session's snapshot: the real value is nowhere, the guest's memory scanned for it."""
    net = Network(["127.0.0.1"])
    secrets = {"API_TOKEN": Secret(SECRET, hosts=["127.0.0.1"])}
    with Session(network=net, secrets=secrets, preload=()) as s:
        done = s.run(textwrap.dedent(SECRET_CALL.format(url=f"http://127.0.0.1:{http.port}/echo", body="'x'")) + textwrap.dedent("""
            kept = [r.body, r.headers, token]
            open("/work/answer.txt", "wb").write(r.body)
            print(open("/work/answer.txt").read())
            import sys; print(r.body.decode(), file=sys.stderr)
        """))
        text = out(done)
        assert "wasi-python-secret-" in text
        blob = s.snapshot().to_bytes()
    assert http.seen[0][2]["Authorization"] == f"Bearer {SECRET}", "the request carried the value"
    everything = done.stdout + done.stderr + repr(done).encode()
    assert SECRET.encode() not in everything
    pages = list(_payloads(blob))
    assert pages and sum(map(len, pages)) > 1 << 16, "the snapshot's memory was read"
    assert not any(SECRET.encode() in p for p in pages)
    assert any(b"wasi-python-secret-" in p for p in pages), "the scan would find what the guest holds"


# ---- the hostile guest ------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"X-A": "1\r\nX-Injected: 1"},
        {"X-A": "1\nHost: evil"},
        {"X-A\r\nX-B": "1"},
        {"X A": "1"},
        {"Host": "evil.example"},
        {"Transfer-Encoding": "chunked"},
        {"X-Big": "y" * (1 << 20)},
        {f"X-{i}": "1" for i in range(200)},
    ],
)
def test_header_injection_and_huge_headers_are_refused(http, headers):
    done = call(f"http://127.0.0.1:{http.port}/small", extra=f", headers={headers!r}", network=Network(["127.0.0.1"]))
    assert out(done).startswith("error refused"), out(done)
    assert http.seen == []


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "gopher://127.0.0.1:70/",
        "http://user:pw@127.0.0.1/",
        "http://[::1",
        "http://127.0.0.1:99999/",
        "http:///small",
        "http://127.0.0.1/ a",
        "http://127.0.0.1/\x00",
        "http://" + "a" * 100_000 + ".com/",
        "http://0177.0.0.1/",
        "http://2130706433/",
        "http://[::ffff:127.0.0.1]/",
        "http://169.254.169.254/latest/meta-data/",
    ],
)
def test_absurd_urls_are_refused(url):
    done = call(url, network=Network(["example.com"]))
    assert out(done).startswith(("error refused", "error error")), out(done)


def test_a_request_over_the_host_s_cap_is_refused_before_a_copy(http):
    code = f"""
    from host import http
    try:
        http.request("POST", "http://127.0.0.1:{http.port}/echo", body=b"x" * (2 << 20))
    except http.NetworkError as e:
        print(e.kind, e.message)
    """
    done = guest(code, network=Network(["127.0.0.1"], max_request_bytes=1 << 20))
    assert out(done).startswith("refused the request is")
    assert http.seen == []


# ---- urllib and pandas ----------------------------------------------------------------


def test_urlopen_and_json_through_the_host_and_its_errors(http):
    code = f"""
    import json, urllib.request, urllib.error
    print(json.load(urllib.request.urlopen("http://127.0.0.1:{http.port}/json")))
    try:
        urllib.request.urlopen("http://127.0.0.1:{http.port}/status?404")
    except urllib.error.HTTPError as e:
        print("HTTPError", e.code, e.read())
    try:
        urllib.request.urlopen("http://example.com/")
    except urllib.error.HTTPError:
        print("wrong")
    except urllib.error.URLError as e:
        print("URLError", e.reason)
    """
    text = out(guest(code, network=Network(["127.0.0.1"])))
    lines = text.splitlines()
    assert lines[0] == "{'answer': 42}"
    assert lines[1] == "HTTPError 404 b'nope'"
    assert lines[2].startswith("URLError the host refused the request (refused): the host 'example.com' is not on the allow-list")


def test_urlopen_without_a_network_says_so():
    code = """
    import urllib.request, urllib.error
    try:
        urllib.request.urlopen("https://example.com/")
    except urllib.error.URLError as e:
        print(e.reason)
    """
    assert "this run has no network" in out(guest(code))


def test_pandas_read_csv_of_a_url_in_a_fresh_run(http):
    code = f"""
    import pandas as pd
    print(pd.read_csv("http://127.0.0.1:{http.port}/data.csv").to_dict("list"))
    """
    done = run(["-c", textwrap.dedent(code)], network=Network(["127.0.0.1"]))
    assert out(done) == "{'a': [1, 3], 'b': [2, 4]}\n"


# ---- arguments ------------------------------------------------------------------------


def test_arguments_are_checked_before_the_run():
    with pytest.raises(TypeError):
        run(["-c", "pass"], network=["example.com"])
    with pytest.raises(TypeError):
        run(["-c", "pass"], secrets={"A": Secret("abcd", hosts=["x.com"])})
    with pytest.raises(ValueError):
        run(["-c", "pass"], network=Network(["x.com"]), secrets={"A": Secret("abcd", hosts=["x.com"])}, env={"A": "1"})
    with pytest.raises(ValueError):
        Network(["a.*.com"])
    with pytest.raises(ValueError):
        Secret("ab\r\ncd", hosts=["x.com"])
    with pytest.raises(ValueError):
        Network(["x.com"], timeout_s=float("nan"))
    with pytest.raises(ValueError):
        Network(["x.com"], max_requests=2**64)


def test_a_session_counts_each_turn_anew(http):
    with Session(network=Network(["127.0.0.1"], max_requests=1), preload=()) as s:
        code = f"from host import http\nprint(http.get('http://127.0.0.1:{http.port}/small').status)"
        assert out(s.run(code)) == "200\n"
        second = s.run(code)
        assert out(second) == "200\n" and second.network.total == 1


# ---- passed on: serve and the Ray pool ---------------------------------------------------


def test_serve_s_network_allow_reaches_the_runs_it_makes(http):
    import argparse

    from wasi_python.serve import _config, _http_config, _http_wire

    p = argparse.ArgumentParser()
    _config.add_arguments(p)
    cfg = _config.config_from(p.parse_args(["--network-allow", "127.0.0.1", "--no-preload"]))
    assert cfg.network().hosts == ("127.0.0.1",)
    code = f"from host import http\nprint(http.get('http://127.0.0.1:{http.port}/small').body)"
    spec = _http_wire.run_request({"code": code}, cfg)
    done = run(spec.argv, **spec.kw)
    assert out(done) == "b'ok'\n" and done.network.total == 1
    # serve http reads the same option; without it, no network.
    hp = argparse.ArgumentParser()
    _http_config.add_arguments(hp)
    assert _http_config.config_from(hp.parse_args(["--network-allow", "*.example.com"])).serve.network().hosts == ("*.example.com",)
    assert _http_config.config_from(hp.parse_args([])).serve.network() is None
    with pytest.raises(_config.ConfigError):
        _config.config_from(p.parse_args(["--network-allow", "a.*.com"]))


def test_a_pool_takes_network_and_secrets_and_they_pickle_for_its_workers():
    import pickle

    from wasi_python.ray._keywords import RUN_KEYWORDS, SESSION_KEYWORDS

    assert {"network", "secrets"} <= RUN_KEYWORDS and {"network", "secrets"} <= SESSION_KEYWORDS
    net = pickle.loads(pickle.dumps(Network(["*.example.com", "10.0.0.0/8"], methods=["GET"])))
    assert net.refusal("GET", "https", "a.example.com", 443, "/") is None
    assert net.refusal("POST", "https", "a.example.com", 443, "/") is not None
    secret = pickle.loads(pickle.dumps(Secret(SECRET, hosts=["api.example.com"])))
    assert secret.reveal() == SECRET.encode() and SECRET not in repr(secret)
