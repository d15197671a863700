"""The network through the host: the guest has no sockets, so the host makes its
requests, within what the embedder allows (docs/network.md).

``request(method, url, headers=, body=, timeout=)`` sends one request and returns a
``Response`` whatever its status (4xx and 5xx included); a request the host refused or
could not make raises ``NetworkError`` (an ``OSError``) whose ``kind`` says why:
"refused" (not allowed, with the reason), "limit" (a bound of the run), "timeout",
"cancelled", "error" (the request failed on the host). ``urllib.request.urlopen`` goes
through here too,
raising urllib's own ``URLError`` and ``HTTPError`` (``_wasi_python_boot`` makes its
http and https handlers call ``open_request``).

A request frame is the host's prefix, a JSON head, a NUL, then the body's bytes; its
answer, a JSON head, a NUL, then the body (crates/door/src/network.rs).
"""

__all__ = ["request", "get", "Response", "NetworkError"]

_PREFIX = b"\0wasi-python http "


class NetworkError(OSError):
    """A request the host refused or could not make: ``kind`` and its ``message``."""

    def __init__(self, kind, message):
        super().__init__(f"the host {'refused' if kind in ('refused', 'limit') else 'failed'} the request ({kind}): {message}")
        self.kind = kind
        self.message = message


class Response:
    """A response the host received: ``status``, ``reason``, ``url`` (after the host's
    redirects), ``headers`` (a list of (name, value)) and ``body`` (bytes)."""

    __slots__ = ("status", "reason", "url", "headers", "body")

    def __init__(self, status, reason, url, headers, body):
        self.status = status
        self.reason = reason
        self.url = url
        self.headers = headers
        self.body = body

    def header(self, name, default=None):
        """The first header named ``name`` (any case), else ``default``."""
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    @property
    def ok(self):
        return 200 <= self.status < 300

    def text(self, encoding=None):
        if encoding is None:
            ctype = self.header("content-type", "")
            _, _, charset = ctype.partition("charset=")
            encoding = charset.split(";")[0].strip().strip('"') or "utf-8"
        return self.body.decode(encoding, errors="replace")

    def json(self):
        import json

        return json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.status} {self.reason} {self.url} ({len(self.body)} bytes)>"


def request(method, url, *, headers=None, body=None, timeout=None):
    """One request through the host; see the module's docstring."""
    import json

    if not isinstance(method, str) or not isinstance(url, str):
        raise TypeError("method and url must be str")
    pairs = []
    if headers is not None:
        items = headers.items() if hasattr(headers, "items") else headers
        for k, v in items:
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"headers must map str to str; {k!r}: {v!r} is not")
            pairs.append([k, v])
    if body is None:
        data = b""
    elif isinstance(body, str):
        data = body.encode()
    elif isinstance(body, (bytes, bytearray, memoryview)):
        data = bytes(body)
    else:
        raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
    if timeout is not None:
        timeout = float(timeout)
        if not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds")
    head = {"method": method, "url": url, "headers": pairs, "timeout": timeout, "has_body": body is not None}
    frame = b"".join((_PREFIX, json.dumps(head, separators=(",", ":")).encode(), b"\0", data))
    try:
        import _host
    except ImportError:
        raise NetworkError("refused", "there is no host: this is not the sandbox") from None
    try:
        raw = _host.call(frame)
    except ConnectionRefusedError:
        raise NetworkError("refused", "this run has no network: its embedder passed no network=") from None
    except OSError as e:
        raise NetworkError("error", f"the door failed: {e}") from None
    end = raw.find(b"\0")
    try:
        answer = json.loads(raw[:end]) if end >= 0 else None
    except ValueError:
        answer = None
    if type(answer) is not dict:
        raise NetworkError("refused", "this run has no network (the host does not speak it)")
    if "error" in answer:
        raise NetworkError(str(answer.get("error")), str(answer.get("message", "")))
    return Response(answer["status"], answer.get("reason", ""), answer.get("url", url), [tuple(h) for h in answer.get("headers", ())], raw[end + 1 :])


def get(url, **kwargs):
    """``request("GET", url, ...)``."""
    return request("GET", url, **kwargs)


def open_request(req):
    """A urllib ``Request`` made through the host: urllib's response, or URLError."""
    import email.parser
    import io
    import urllib.error
    import urllib.response

    timeout = req.timeout if isinstance(req.timeout, (int, float)) and req.timeout > 0 else None
    data = req.data
    if data is not None and not isinstance(data, (bytes, bytearray, memoryview)):
        # An iterable body, as http.client takes it.
        data = b"".join(bytes(chunk) for chunk in data)
    # urllib adds these itself (`do_request_`); the host sets them for the request it makes.
    headers = {k: v for k, v in req.header_items() if k.lower() not in _URLLIB_OWN}
    try:
        r = request(req.get_method(), req.full_url, headers=headers, body=data, timeout=timeout)
    except NetworkError as e:
        raise urllib.error.URLError(str(e)) from None
    raw = "".join(f"{k}: {v}\r\n" for k, v in r.headers) + "\r\n"
    msg = email.parser.Parser(_class=_http_message()).parsestr(raw)
    resp = urllib.response.addinfourl(io.BytesIO(r.body), msg, r.url, r.status)
    resp.msg = r.reason
    resp.reason = r.reason
    return resp


_URLLIB_OWN = frozenset({"host", "connection", "content-length", "transfer-encoding"})


def _http_message():
    import http.client

    return http.client.HTTPMessage
