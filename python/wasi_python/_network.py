"""The network through the host (docs/network.md): ``Network``, what a run may reach;
``Secret``, a value the guest sees only as a placeholder; the record of the requests;
and the checks of ``network=`` and ``secrets=``. The handler that makes a run's requests
is ``_network_run.NetworkRun``, imported only by a run that has a network (so
``import wasi_python`` loads neither ssl nor urllib3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

if TYPE_CHECKING:
    import ipaddress

    from ._network_run import NetworkRun

__all__ = ["Network", "Secret", "NetworkRequest", "NetworkRecord"]

SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}


class Secret:
    """A value the guest sees only as a random placeholder in its environment, under the
    name ``secrets=`` gives it. The host puts the value in place of the placeholder in a
    request's headers (and its body with ``in_body=True``) only when the request goes to
    one of ``hosts`` (the allow-list's patterns: ``"api.example.com"``, ``"*.example.com"``),
    refuses a request carrying the placeholder anywhere else, and replaces the value with
    the placeholder in every response before the guest gets it. Its repr hides the value.
    """

    __slots__ = ("_value", "hosts", "in_body")

    def __init__(self, value: str | bytes, *, hosts: Iterable[str], in_body: bool = False) -> None:
        if isinstance(value, str):
            value = value.encode()
        if not isinstance(value, bytes):
            raise TypeError(f"Secret's value must be str or bytes, not {type(value).__name__}")
        if len(value) < 4:
            raise ValueError("Secret's value must be at least 4 bytes: a shorter one cannot be scrubbed from responses safely")
        if b"\r" in value or b"\n" in value or b"\0" in value:
            raise ValueError("Secret's value must hold no CR, LF or NUL: it goes in a header")
        self._value = value
        self.hosts = _check_patterns("Secret hosts", hosts)
        if not self.hosts:
            raise ValueError("Secret needs at least one host to go to")
        if type(in_body) is not bool:
            raise TypeError("in_body must be a bool")
        self.in_body = in_body

    def reveal(self) -> bytes:
        """The value (the host's code only)."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret(<hidden>, hosts={list(self.hosts)!r}, in_body={self.in_body})"

    def __reduce__(self) -> Any:
        # Pickled whole: a pool's worker needs the value to make the requests.
        return (_secret, (self._value, self.hosts, self.in_body))


def _secret(value: bytes, hosts: Sequence[str], in_body: bool) -> Secret:
    return Secret(value, hosts=hosts, in_body=in_body)


def _check_patterns(what: str, patterns: Any) -> tuple[str, ...]:
    if isinstance(patterns, (str, bytes)) or not isinstance(patterns, Iterable):
        raise TypeError(f"{what} must be a list of host names or patterns, such as ['api.example.com', '*.example.com']")
    out = []
    for p in patterns:
        if not isinstance(p, str) or not p:
            raise TypeError(f"{what} must hold non-empty str, not {p!r}")
        p = p.strip().lower().rstrip(".")
        if p != "*" and ("*" in p[2:] if p.startswith("*.") else "*" in p):
            raise ValueError(f"{what}: {p!r}: a wildcard is allowed only as a whole first label ('*.example.com') or alone ('*')")
        if any(c in p for c in "/@:?#[] \t\r\n") and _network_of(p) is None:
            raise ValueError(f"{what}: {p!r} is not a host name, address or network")
        out.append(p)
    return tuple(out)


def _network_of(pattern: str) -> Optional[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The address or network a pattern names (``"10.0.0.0/8"``, ``"::1"``), else None."""
    import ipaddress

    try:
        return ipaddress.ip_network(pattern.strip("[]"), strict=False)
    except ValueError:
        return None


def host_matches(host: str, pattern: str) -> bool:
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def _special(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether an address is not a public unicast one: loopback, private, link-local,
    multicast, reserved, unspecified, shared (100.64/10), documentation, and IPv6 forms
    of any of them (mapped, 6to4, Teredo)."""
    if ip.version == 6:
        for inner in (ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None):
            if inner is not None and _special(inner):
                return True
    return not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_unspecified or ip.is_loopback or ip.is_link_local


class Network:
    """What a run's guest may reach through the host (``run(..., network=Network(...))``).

    - ``hosts``: host names (``"api.example.com"``), wildcards (``"*.example.com"``: any
      name under it, not itself; ``"*"``: any public host), addresses or networks
      (``"10.1.2.3"``, ``"10.0.0.0/8"``).
    - ``schemes`` (default http and https), ``ports`` (default: any), ``methods``
      (default: any), ``path_prefixes`` (default: any path).
    - ``allow_private``: reach names that resolve to loopback, private, link-local and
      other special addresses (default False: only an address or network the allow-list
      names itself is reached there).
    - Bounds, per run or session turn: ``max_requests`` (each redirect hop counts),
      ``max_response_bytes`` per response and ``max_total_bytes`` in all,
      ``max_request_bytes`` per request, ``timeout_s`` per request (never past the run's
      deadline), ``max_redirects``.
    - ``ca_file``: trust these certificates instead of the system's; ``proxies``: the
      environment's (default, ``"environment"``) or None.
    - ``record_queries``: keep query strings in ``Completed.network`` (default False).
    - ``resolver``: ``resolver(host, port)`` → addresses (str), in place of the system's
      lookup (tests, pinned names); its addresses are checked as any.
    """

    def __init__(
        self,
        hosts: Iterable[str],
        *,
        schemes: Iterable[str] = SCHEMES,
        ports: Optional[Iterable[int]] = None,
        methods: Optional[Iterable[str]] = None,
        path_prefixes: Optional[Iterable[str]] = None,
        allow_private: bool = False,
        max_requests: int = 1000,
        max_response_bytes: int = 16 << 20,
        max_total_bytes: int = 64 << 20,
        max_request_bytes: int = 16 << 20,
        timeout_s: float = 30.0,
        max_redirects: int = 5,
        ca_file: Optional[str] = None,
        proxies: Optional[str] = "environment",
        record_queries: bool = False,
        resolver: Optional[Callable[[str, int], Iterable[str]]] = None,
    ) -> None:
        from ._types import check_int, check_seconds

        self.hosts = _check_patterns("hosts", hosts)
        self.schemes = tuple(s.lower() for s in _strs("schemes", schemes))
        for s in self.schemes:
            if s not in SCHEMES:
                raise ValueError(f"schemes: {s!r} is not http or https")
        self.ports = None if ports is None else frozenset(check_int("ports", p, minimum=1, maximum=65535) for p in ports)
        self.methods = None if methods is None else frozenset(m.upper() for m in _strs("methods", methods))
        self.path_prefixes = None if path_prefixes is None else tuple(_strs("path_prefixes", path_prefixes))
        for p in self.path_prefixes or ():
            if not p.startswith("/"):
                raise ValueError(f"path_prefixes: {p!r} must start with '/'")
        if type(allow_private) is not bool:
            raise TypeError("allow_private must be a bool")
        self.allow_private = allow_private
        self.max_requests = check_int("max_requests", max_requests, minimum=1)
        self.max_response_bytes = check_int("max_response_bytes", max_response_bytes, minimum=0)
        self.max_total_bytes = check_int("max_total_bytes", max_total_bytes, minimum=0)
        self.max_request_bytes = check_int("max_request_bytes", max_request_bytes, minimum=1, maximum=1 << 30)
        self.timeout_s = check_seconds("timeout_s", timeout_s)
        if not self.timeout_s:
            raise ValueError("timeout_s must be a positive number of seconds")
        self.max_redirects = check_int("max_redirects", max_redirects, minimum=0, maximum=100)
        if ca_file is not None and not isinstance(ca_file, str):
            raise TypeError("ca_file must be a path (str) or None")
        self.ca_file = ca_file
        if proxies not in ("environment", None):
            raise ValueError("proxies must be 'environment' or None")
        self.proxies = proxies
        if type(record_queries) is not bool:
            raise TypeError("record_queries must be a bool")
        self.record_queries = record_queries
        if resolver is not None and not callable(resolver):
            raise TypeError("resolver must be a callable (host, port) -> addresses")
        self.resolver = resolver
        self._networks = [n for n in map(_network_of, self.hosts) if n is not None]

    def __repr__(self) -> str:
        return f"Network(hosts={list(self.hosts)!r}, allow_private={self.allow_private})"

    # ---- the checks, shared by every hop

    def refusal(self, method: str, scheme: str, host: str, port: int, path: str) -> Optional[str]:
        """Why the allow-list refuses this request, or None."""
        if scheme not in self.schemes:
            return f"the scheme {scheme!r} is not allowed (allowed: {', '.join(self.schemes)})"
        if not any(host_matches(host, p) or ip_in(host, p) for p in self.hosts):
            return f"the host {host!r} is not on the allow-list"
        if self.ports is not None and port not in self.ports:
            return f"the port {port} is not allowed"
        if self.methods is not None and method not in self.methods:
            return f"the method {method} is not allowed (allowed: {', '.join(sorted(self.methods))})"
        if self.path_prefixes is not None and not any(path == p.rstrip("/") or path.startswith(p if p.endswith("/") else p + "/") or p == "/" for p in self.path_prefixes):
            return f"the path {path!r} is outside the allowed prefixes"
        return None

    def address_refusal(self, host: str, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> Optional[str]:
        """Why the address a host resolved to is refused, or None."""
        if not _special(ip) or self.allow_private:
            return None
        if any(ip in n for n in self._networks if n.version == ip.version):
            return None
        return f"{host!r} resolves to {ip}, a loopback, private or otherwise special address the allow-list does not name (allow_private=False)"


def ip_in(host: str, pattern: str) -> bool:
    """An address-literal host inside an address or network pattern."""
    import ipaddress

    net = _network_of(pattern)
    if net is None:
        return False
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return ip.version == net.version and ip in net


def _strs(what: str, values: Any) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{what} must be a list of str")
    out = list(values)
    for v in out:
        if not isinstance(v, str) or not v:
            raise TypeError(f"{what} must hold non-empty str, not {v!r}")
    return out


@dataclass(frozen=True, slots=True)
class NetworkRequest:
    """One request the guest asked for (or one redirect hop the host followed), as
    ``Completed.network`` lists it. No secret's value, no query string unless the
    ``Network`` has ``record_queries=True``."""

    method: str
    scheme: str
    host: str
    port: Optional[int]
    path: str
    status: Optional[int]  # the response's, when there was one
    outcome: str  # "ok", "refused", "limit", "timeout", "cancelled", "error", "abandoned"
    reason: Optional[str]  # why, for any outcome but "ok"
    request_bytes: int
    response_bytes: int
    duration_s: float
    redirect: bool = False  # a hop the host followed, not the guest's own request


@dataclass(frozen=True, slots=True)
class NetworkRecord:
    """What a run asked of the network (``Completed.network``; None without ``network=``).

    - ``requests``: the first 1,000 requests and hops, in order; ``total`` counts all.
    - ``refused``: requests refused (the allow-list, a secret, the bounds).
    - ``response_bytes``: body bytes delivered to the guest in all.
    """

    requests: tuple[NetworkRequest, ...] = ()
    total: int = 0
    refused: int = 0
    response_bytes: int = 0


def check_secrets(secrets: Any, env: Sequence[tuple[str, str]]) -> dict[str, Secret]:
    """``secrets=``: a mapping of environment names to ``Secret``s, none of them in ``env``."""
    if secrets is None:
        return {}
    if not isinstance(secrets, Mapping):
        raise TypeError(f"secrets must be a mapping of names to Secret, not {type(secrets).__name__}")
    names = {k for k, _ in env}
    out = {}
    for k, v in secrets.items():
        if not isinstance(k, str) or not k or "=" in k or "\0" in k or not k.isascii():
            raise ValueError(f"secrets: {k!r} is not a valid environment variable name")
        if not isinstance(v, Secret):
            raise TypeError(f"secrets[{k!r}] must be a Secret, not {type(v).__name__}")
        if k in names:
            raise ValueError(f"secrets: {k!r} is also in env=")
        out[k] = v
    return out


def check_network(network: Any, secrets: Mapping[str, Secret]) -> Optional[Network]:
    if network is None:
        if secrets:
            raise TypeError("secrets= without network=: a secret is only ever sent by a request, and this run has no network")
        return None
    if not isinstance(network, Network):
        raise TypeError(f"network must be a wasi_python.Network, not {type(network).__name__}")
    return network


def handler(network: Network, secrets: Mapping[str, Secret]) -> "NetworkRun":
    """A handler of the requests of one run or session (ssl and urllib3 imported now)."""
    from ._network_run import NetworkRun

    return NetworkRun(network, secrets)


def run_with(spec: tuple[Network, Mapping[str, Secret]], work: Callable[["NetworkRun"], Any]) -> Any:
    """``work(handler)`` (a run) with a handler of its own; its ``Completed`` with the
    record, and with any secret's value (which the guest never held) scrubbed from its
    output all the same."""
    run = handler(*spec)
    try:
        done = work(run)
    finally:
        run.close()
    return completed_with(done, run)


def completed_with(done: Any, handler: "NetworkRun") -> Any:
    """``done`` with ``handler``'s record as its ``network``, its output scrubbed."""
    import dataclasses

    out = {"network": handler.record()}
    if handler.secrets:
        out.update(stdout=handler.scrub(done.stdout), stderr=handler.scrub(done.stderr))
    return dataclasses.replace(done, **out)
