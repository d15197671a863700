"""``NetworkRun``: one run's (or session's) handler of the guest's network requests
(docs/network.md), which the extension calls on a thread of its own
(crates/pybind/src/network.rs) with the frame, the time left and the run's cancel.
Imported only by a run that has a network.

Every request is checked before any byte leaves: the URL (scheme, host against the
allow-list with its wildcards, port, path prefix), the method, the headers (no CR, LF or
NUL, a bounded count and size), then the host's name resolved here and every address
checked (loopback, private, link-local, multicast, reserved and the like refused unless
the allow-list names the address or ``allow_private``), and the connection made to that
address itself (no second lookup). Redirects are followed here, one hop at a time, each
checked the same way. Secrets are put in place of their placeholders only for their
hosts, and taken out of responses again. urllib3 makes the requests (TLS verified against
the system's trust store, or ``ca_file``; proxies from the environment).
"""

from __future__ import annotations

import contextvars
import ipaddress
import json
import secrets as _random
import socket
import ssl
import threading
import time
from typing import Any, Mapping, Optional
from urllib.parse import urljoin, urlsplit

from . import _otel
from ._network import DEFAULT_PORTS, SCHEMES, Network, NetworkRecord, NetworkRequest, Secret, host_matches, ip_in

__all__ = ["NetworkRun"]

# RFC 9110 token characters, for methods and header names.
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_MAX_URL = 8192
_MAX_HEADERS = 100
_MAX_HEADER_BYTES = 64 << 10
# Headers the host sets itself: the guest may not.
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "te", "upgrade", "proxy-authorization", "proxy-connection", "keep-alive", "trailer"})
# Dropped from a redirect to another origin, as browsers and urllib3 do.
_CROSS_ORIGIN_DROP = frozenset({"authorization", "cookie", "proxy-authorization"})
_REDIRECTS = {301, 302, 303, 307, 308}
_LISTED = 1000
_CHUNK = 64 << 10


class _Refused(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind



class NetworkRun:
    """One run's (or session's) handler: the extension calls ``request`` from a thread of
    its own for each of the guest's requests. The counts and the record start again at
    each ``turn()``; ``record()`` is what the run or turn did."""

    def __init__(self, network: Network, secrets: Mapping[str, Secret]) -> None:
        self.network = network
        self.max_request_bytes = network.max_request_bytes
        # NAME -> (placeholder, secret); the placeholder is what the guest's environment holds.
        self.secrets = {name: ("wasi-python-secret-" + _random.token_hex(16), s) for name, s in secrets.items()}
        self._lock = threading.Lock()
        self._pools: dict[tuple[Any, ...], Any] = {}
        self._ssl: Optional[ssl.SSLContext] = None
        # Where a request's span goes: under the run's (made in its context), or a turn's.
        self._caller = contextvars.copy_context()
        self.turn()

    def env(self) -> list[tuple[str, str]]:
        """The guest's environment entries: each secret's name and placeholder."""
        return [(name, placeholder) for name, (placeholder, _) in self.secrets.items()]

    def turn(self) -> None:
        """A new run or session turn: counts and record anew."""
        with self._lock:
            self._requests = 0
            self._bytes = 0
            self._refused = 0
            self._total = 0
            self._listed: list[dict[str, Any]] = []

    def use_context(self, context: contextvars.Context) -> None:
        """A session turn's caller's context: its requests' spans go under that turn's."""
        self._caller = context

    def record(self) -> NetworkRecord:
        """The record so far; a request still running is listed as "abandoned"."""
        with self._lock:
            out = []
            for e in self._listed:
                e = dict(e)
                if e["outcome"] is None:
                    e["outcome"], e["reason"] = "abandoned", "the run ended, or the request outlived its bound, while it ran"
                out.append(NetworkRequest(**e))
            return NetworkRecord(requests=tuple(out), total=self._total, refused=self._refused, response_bytes=self._bytes)

    def close(self) -> None:
        with self._lock:
            pools, self._pools = self._pools, {}
        for p in pools.values():
            try:
                p.close()
            except Exception:  # noqa: BLE001, S110 - closing what may be in use elsewhere
                pass

    # ---- one request

    def request(self, frame: bytes, remaining_s: Optional[float], cancel: Any) -> bytes:
        """The answer to one frame (see crates/door/src/network.rs): a JSON head, a NUL,
        the body. Never raises."""
        tracer = _otel.tracer()
        if tracer is None:
            return self._answer(frame, remaining_s, cancel)
        # Under the run's (or turn's) span: the context of its start holds it.
        return self._caller.copy().run(self._traced, tracer, frame, remaining_s, cancel)

    def _traced(self, tracer: Any, frame: bytes, remaining_s: Optional[float], cancel: Any) -> bytes:
        with self._lock:
            first = len(self._listed)
        with _otel.span("wasi_python.network_request", {}, tracer) as s:
            out = self._answer(frame, remaining_s, cancel)
            with self._lock:
                hops = [dict(e) for e in self._listed[first:]]
            if hops:
                e, last = hops[0], hops[-1]
                values = {k: e[k] for k in ("method", "scheme", "host", "port", "path", "request_bytes")}
                values.update(status=last["status"], outcome=last["outcome"], reason=last["reason"], redirects=len(hops) - 1,
                              response_bytes=sum(h["response_bytes"] for h in hops))
                _otel.set_outcome(s, values, None if last["outcome"] == "ok" else str(last["outcome"]))
            return out

    def _answer(self, frame: bytes, remaining_s: Optional[float], cancel: Any) -> bytes:
        start = time.monotonic()
        try:
            return self._request(frame, start, remaining_s, cancel)
        except _Refused as e:
            return self._answer_error(e.kind, str(e))
        except Exception as e:  # noqa: BLE001 - the guest gets a message, never our traceback
            return self._answer_error("error", self.scrub_text(f"{type(e).__name__}: {e}"))

    def _request(self, frame: bytes, start: float, remaining_s: Optional[float], cancel: Any) -> bytes:
        head_end = frame.find(b"\0")
        if head_end < 0 or head_end > 1 << 20:
            raise _Refused("refused", "the request frame is not a head and a body")
        try:
            head = json.loads(frame[:head_end])
        except ValueError:
            raise _Refused("refused", "the request's head is not JSON") from None
        if type(head) is not dict:
            raise _Refused("refused", "the request's head is not an object")
        body = frame[head_end + 1 :]
        method, url, headers = head.get("method"), head.get("url"), head.get("headers", [])
        timeout = head.get("timeout")
        current = [self._entry("?", "", "?", None, "", len(body))]
        entry = current[0]
        try:
            self._count()
            if not isinstance(method, str) or not 0 < len(method) <= 32 or not set(method) <= _TCHAR:
                raise _Refused("refused", "the method is not an HTTP token of at most 32 characters")
            method = method.upper()
            entry["method"] = method
            if not isinstance(url, str) or len(url) > _MAX_URL:
                raise _Refused("refused", f"the URL is not a str of at most {_MAX_URL} characters")
            pairs = self._headers(headers)
            limit = self.network.timeout_s
            if timeout is not None:
                if type(timeout) not in (int, float) or not 0 < timeout < 1e9:
                    raise _Refused("refused", "the timeout is not a positive number of seconds")
                limit = min(limit, float(timeout))
            if remaining_s is not None:
                limit = min(limit, remaining_s)
            end = start + limit
            return self._hops(current, method, url, pairs, body, head.get("has_body", bool(body)), end, cancel)
        except _Refused as e:
            self._finish(current[0], e.kind, str(e), None, 0, current[1] if len(current) > 1 else start)
            raise

    def _entry(self, method: str, scheme: str, host: str, port: Optional[int], path: str, request_bytes: int, redirect: bool = False) -> dict[str, Any]:
        e = {"method": method, "scheme": scheme, "host": host, "port": port, "path": path, "status": None, "outcome": None,
             "reason": None, "request_bytes": request_bytes, "response_bytes": 0, "duration_s": 0.0, "redirect": redirect}
        with self._lock:
            self._total += 1
            if len(self._listed) < _LISTED:
                self._listed.append(e)
        return e

    def _finish(self, e: dict[str, Any], outcome: str, reason: Optional[str], status: Optional[int], n: int, start: float) -> None:
        with self._lock:
            e.update(outcome=outcome, reason=self.scrub_text(reason) if reason else None, status=status, response_bytes=n,
                     duration_s=time.monotonic() - start)
            if outcome in ("refused", "limit"):
                self._refused += 1

    def _headers(self, headers: Any) -> list[tuple[str, str]]:
        if type(headers) is not list or len(headers) > _MAX_HEADERS:
            raise _Refused("refused", f"the headers are not a list of at most {_MAX_HEADERS} pairs")
        out, size = [], 0
        for h in headers:
            if type(h) is not list or len(h) != 2 or not all(type(x) is str for x in h):
                raise _Refused("refused", "a header is not a [name, value] pair of str")
            k, v = h
            if not k or not set(k) <= _TCHAR:
                raise _Refused("refused", f"the header name {k[:40]!r} is not an HTTP token")
            if any(c in v for c in "\r\n\0"):
                raise _Refused("refused", f"the header {k!r} holds a CR, LF or NUL")
            if k.lower() in _OWN_HEADERS:
                raise _Refused("refused", f"the header {k!r} is the host's to set")
            size += len(k) + len(v) + 4
            if size > _MAX_HEADER_BYTES:
                raise _Refused("refused", f"the headers are over {_MAX_HEADER_BYTES} bytes")
            out.append((k, v))
        return out

    def _hops(self, current: list[Any], method: str, url: str, headers: list[tuple[str, str]], body: bytes, has_body: bool,
              end: float, cancel: Any) -> bytes:
        """The request and the redirects the host follows: ``current`` holds the hop's
        record entry and its start, for the caller to finish should a hop fail."""
        entry = current[0]
        hop_start = time.monotonic()
        current.append(hop_start)
        origin = None
        for hop in range(self.network.max_redirects + 1):
            scheme, host, port, path, target = self._parse(url)
            entry.update(scheme=scheme, host=host, port=port, path=self._recorded_path(target))
            if hop:
                self._count()
            if origin is not None and (scheme, host, port) != origin:
                headers = [(k, v) for k, v in headers if k.lower() not in _CROSS_ORIGIN_DROP]
            origin = (scheme, host, port)
            why = self.network.refusal(method, scheme, host, port, path)
            if why is not None:
                raise _Refused("refused", why)
            sent_headers, sent_body = self._swap(host, url, headers, body)
            if time.monotonic() >= end:
                raise _Refused("timeout", "no time was left for the request")
            if cancel.is_cancelled():
                raise _Refused("cancelled", "the run was cancelled")
            ip = self._resolve(host, port)
            resp = self._send(method, scheme, host, port, ip, target, sent_headers, sent_body if has_body else None, end)
            read = False
            try:
                location = resp.headers.get("location")
                if resp.status in _REDIRECTS and location is not None and hop < self.network.max_redirects:
                    self._finish(entry, "ok", None, resp.status, 0, hop_start)
                    nxt = urljoin(url, location)
                    if resp.status == 303 or (resp.status in (301, 302) and method == "POST"):
                        method, body, has_body = ("GET" if method != "HEAD" else "HEAD"), b"", False
                        headers = [(k, v) for k, v in headers if k.lower() not in ("content-type",)]
                    url = nxt
                    hop_start = time.monotonic()
                    entry = self._entry(method, "", "?", None, "", len(body), redirect=True)
                    current[:] = [entry, hop_start]
                    continue
                data = self._read(resp, end, cancel)
                read = True
            finally:
                if not read:
                    resp.close()  # not reused: what is left unread would be the next response's start
                resp.release_conn()
            self._finish(entry, "ok", None, resp.status, len(data), hop_start)
            with self._lock:
                self._bytes += len(data)
            answer = {
                "status": resp.status,
                "reason": self.scrub_text(resp.reason or ""),
                "url": self.scrub_text(url),
                "headers": [[self.scrub_text(k), self.scrub_text(v)] for k, v in resp.headers.items()],
            }
            return json.dumps(answer, separators=(",", ":")).encode() + b"\0" + self.scrub(data)
        raise _Refused("limit", "too many redirects")  # not reached: the last hop returns

    def _count(self) -> None:
        """One more request of the run's ``max_requests`` (every frame, and each redirect
        hop), or ``limit``."""
        with self._lock:
            if self._requests >= self.network.max_requests:
                raise _Refused("limit", f"the run's {self.network.max_requests} requests are spent (max_requests)")
            self._requests += 1

    def _parse(self, url: str) -> tuple[str, str, int, str, str]:
        if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
            raise _Refused("refused", "the URL holds a space or a control character")
        try:
            u = urlsplit(url)
            port = u.port
        except ValueError as e:
            raise _Refused("refused", f"the URL does not parse: {e}") from None
        scheme = u.scheme.lower()
        if scheme not in SCHEMES:
            raise _Refused("refused", f"the scheme {scheme!r} is not http or https")
        if u.username is not None or u.password is not None:
            raise _Refused("refused", "the URL holds credentials (user@); send them in a header")
        host = (u.hostname or "").rstrip(".")
        if not host:
            raise _Refused("refused", "the URL has no host")
        try:
            host = host.encode("idna").decode("ascii").lower() if not host.isascii() else host.lower()
        except UnicodeError:
            raise _Refused("refused", "the URL's host is not a valid name") from None
        target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        return scheme, host, port or DEFAULT_PORTS[scheme], u.path or "/", target

    def _recorded_path(self, target: str) -> str:
        path = target if self.network.record_queries else target.partition("?")[0]
        return path[:1024]

    def _swap(self, host: str, url: str, headers: list[tuple[str, str]], body: bytes) -> tuple[dict[str, str], bytes]:
        """The headers and body as sent: each secret's placeholder replaced by its value
        for its hosts; a placeholder anywhere else refuses the request."""
        out = {}
        for name, (placeholder, secret) in self.secrets.items():
            ours = any(host_matches(host, p) or ip_in(host, p) for p in secret.hosts)
            if placeholder in url:
                raise _Refused("refused", f"the secret {name}'s placeholder is in the URL; secrets go in headers" + (" or the body (in_body=True)" if ours else ""))
            if placeholder.encode() in body:
                if not ours:
                    raise _Refused("refused", f"the secret {name} may go only to {', '.join(secret.hosts)}, not {host}")
                if not secret.in_body:
                    raise _Refused("refused", f"the secret {name}'s placeholder is in the body, and its Secret has in_body=False")
                body = body.replace(placeholder.encode(), secret.reveal())
        for k, v in headers:
            for name, (placeholder, secret) in self.secrets.items():
                if placeholder in k:
                    raise _Refused("refused", f"the secret {name}'s placeholder is in a header's name")
                if placeholder in v:
                    if not any(host_matches(host, p) or ip_in(host, p) for p in secret.hosts):
                        raise _Refused("refused", f"the secret {name} may go only to {', '.join(secret.hosts)}, not {host}")
                    v = v.replace(placeholder, secret.reveal().decode("latin-1"))
            if k in out:
                out[k] = out[k] + ", " + v
            else:
                out[k] = v
        return out, body

    def scrub(self, data: bytes) -> bytes:
        for placeholder, secret in self.secrets.values():
            data = data.replace(secret.reveal(), placeholder.encode())
        return data

    def scrub_text(self, text: str) -> str:
        for placeholder, secret in self.secrets.values():
            value = secret.reveal().decode("latin-1")
            text = text.replace(value, placeholder)
            try:
                text = text.replace(secret.reveal().decode(), placeholder)
            except UnicodeDecodeError:
                pass
        return text

    def _resolve(self, host: str, port: int) -> str:
        """The address to connect to: the host's, every address it resolves to checked."""
        try:
            literal = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [literal]
        else:
            try:
                if self.network.resolver is not None:
                    found = list(self.network.resolver(host, port))[:64]
                else:
                    found = [ai[4][0] for ai in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)][:64]
                addresses = [ipaddress.ip_address(str(a).split("%")[0]) for a in found]
            except (OSError, ValueError, UnicodeError) as e:
                raise _Refused("error", f"{host!r} does not resolve: {e}") from None
        if not addresses:
            raise _Refused("error", f"{host!r} resolves to no address")
        for ip in addresses:
            why = self.network.address_refusal(host, ip)
            if why is not None:
                raise _Refused("refused", why)
        return str(addresses[0])

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=self.network.ca_file) if self.network.ca_file else ssl.create_default_context()
        return self._ssl

    def _send(self, method: str, scheme: str, host: str, port: int, ip: str, target: str, headers: dict[str, str],
              body: Optional[bytes], end: float) -> Any:
        import urllib3

        left = end - time.monotonic()
        if left <= 0:
            raise _Refused("timeout", "the request's time ran out")
        timeout = urllib3.Timeout(connect=left, read=left)
        default = DEFAULT_PORTS[scheme]
        hostport = host if port == default else f"{host}:{port}"
        if ":" in host and port == default:
            hostport = f"[{host}]"
        elif ":" in host:
            hostport = f"[{host}]:{port}"
        headers = {"Host": hostport, "User-Agent": "wasi-python", "Accept-Encoding": "identity", **headers}
        pool = self._pool(scheme, host, port, ip)
        try:
            return pool.urlopen(method, target, body=body, headers=headers, retries=False, redirect=False,
                                preload_content=False, decode_content=False, timeout=timeout, assert_same_host=False)
        except urllib3.exceptions.TimeoutError:
            raise _Refused("timeout", f"the request timed out after {left:.3g} s") from None
        except urllib3.exceptions.SSLError as e:
            raise _Refused("error", f"TLS failed: {self.scrub_text(str(e))}") from None
        except urllib3.exceptions.HTTPError as e:
            raise _Refused("error", f"the request failed: {self.scrub_text(str(e))}") from None

    def _pool(self, scheme: str, host: str, port: int, ip: str) -> Any:
        import urllib3

        key = (scheme, host, port, ip)
        with self._lock:
            pool = self._pools.get(key)
        if pool is not None:
            return pool
        proxy = self._proxy(scheme, host)
        if proxy is not None:
            # The proxy connects; the name was checked here, its address by the proxy's lookup.
            pool = urllib3.ProxyManager(proxy, ssl_context=self._context() if scheme == "https" else None).connection_from_host(host, port, scheme)
        elif scheme == "https":
            pool = urllib3.HTTPSConnectionPool(ip, port, maxsize=1, ssl_context=self._context(), server_hostname=host,
                                               assert_hostname=host)
        else:
            pool = urllib3.HTTPConnectionPool(ip, port, maxsize=1)
        with self._lock:
            if len(self._pools) >= 32:
                old = self._pools.pop(next(iter(self._pools)))
                old.close()
            self._pools[key] = pool
        return pool

    def _proxy(self, scheme: str, host: str) -> Optional[str]:
        if self.network.proxies is None:
            return None
        import urllib.request

        proxies = urllib.request.getproxies()
        if scheme not in proxies or urllib.request.proxy_bypass(host):
            return None
        return proxies[scheme]

    def _read(self, resp: Any, end: float, cancel: Any) -> bytes:
        cap = self.network.max_response_bytes
        with self._lock:
            left_total = self.network.max_total_bytes - self._bytes
        cap = min(cap, max(left_total, 0))
        chunks, n = [], 0
        import urllib3

        try:
            while True:
                if cancel.is_cancelled():
                    raise _Refused("cancelled", "the run was cancelled")
                if time.monotonic() >= end:
                    raise _Refused("timeout", "the response did not end in time")
                chunk = resp.read1(min(_CHUNK, cap - n + 1)) if cap - n + 1 > 0 else b""
                if not chunk:
                    break
                n += len(chunk)
                if n > cap:
                    which = "max_response_bytes" if cap == self.network.max_response_bytes else "max_total_bytes"
                    raise _Refused("limit", f"the response is over {cap} bytes ({which})")
                chunks.append(chunk)
        except urllib3.exceptions.TimeoutError:
            raise _Refused("timeout", "the response did not end in time") from None
        except urllib3.exceptions.HTTPError as e:
            raise _Refused("error", f"the response failed: {self.scrub_text(str(e))}") from None
        return b"".join(chunks)

    def _answer_error(self, kind: str, message: str) -> bytes:
        return json.dumps({"error": kind, "message": self.scrub_text(message)}).encode() + b"\0"
