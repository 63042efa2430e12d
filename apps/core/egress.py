"""The egress guard: which destinations an outbound request may reach (webhooks.md §Egress).

Every outbound request the host makes (A2A push, OpenWOP webhooks, outbound A2A/MCP peers) is
judged here, once at registration (`egress_check_url`) and again when the TCP connection is opened
(`egress_addresses`, called by the pinned transports in `apps.core.egress_transport`). There is one
implementation of the rules and every entry point uses it:

- https only; no userinfo, fragment, backslash, whitespace or control character; a strict parse
  that refuses anything two URL parsers could read differently;
- never `localhost`, `*.localhost`, private-use names (`*.internal`, `*.local`, `*.home.arpa`),
  cloud metadata names, or a single-label name (search domains would expand it) unless the
  operator's hosts file names it exactly;
- names resolve absolute (a trailing dot: no search list), except a name the hosts file
  (`OPENWOP_EGRESS_HOSTS_FILE`, default /etc/hosts: Docker `extra_hosts`, Kubernetes
  `hostAliases`) lists exactly, whose addresses come from that file;
- every address a name resolves to, and any IP literal in any spelling inet_aton accepts
  (`2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`), must be globally reachable. IPv4 embedded in
  IPv6 (mapped, SIIT, IPv4-compatible, NAT64 `64:ff9b::/96`, 6to4) is judged by the IPv4 inside
  and those prefixes are not denied wholesale (webhooks.md §Egress SHOULD); Teredo and the rest of
  `2001::/23` are refused outright;
- `settings.OPENWOP_EGRESS_ALLOW_CIDRS` (an operator relaxation, read at call time) admits
  addresses inside the named ranges; it never relaxes the scheme, name or redirect rules.
- `settings.OPENWOP_EGRESS_ALLOW_HTTP_CIDRS` (empty by default) is the only relaxation of the
  scheme: plain `http` to a destination every address of which lies inside these ranges, checked
  at registration and again at connect. Every other rule still applies (the address must also be
  allowed, by the rules or OPENWOP_EGRESS_ALLOW_CIDRS; redirects are still never followed).

Any explicit port 1-65535 is allowed: the guard is about which machine is reached, and receivers
legitimately listen on 8443 and friends.

Messages never carry the URL, its query, its userinfo or a resolved address: an API caller learns
which rule refused it, never what the host's resolver said (no internal-DNS oracle). Operators get
the detail in `EgressRefused.log_detail`, which is safe to log.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import unicodedata
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import idna
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from apps.core.errors import OpenWopError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

logger = logging.getLogger(__name__)

MAX_URL_LENGTH = 2048
HTTPS_PORT = 443
HTTP_PORT = 80

# Public reason codes (EgressRefused.reason / details.reason) and their fixed messages.
REASON_SCHEME = "scheme_not_https"
REASON_MALFORMED = "malformed_url"
REASON_USERINFO = "userinfo_present"
REASON_HOST = "host_not_allowed"
REASON_ADDRESS = "address_not_allowed"

_MESSAGES = {
    REASON_SCHEME: "The destination URL must use https.",
    REASON_MALFORMED: "The destination URL is not a well-formed https URL.",
    REASON_USERINFO: "The destination URL must not carry credentials.",
    REASON_HOST: "The destination host is not allowed.",
    # One message for "resolves to a forbidden address" and "does not resolve": a caller must not
    # be able to probe which internal names exist.
    REASON_ADDRESS: "The destination does not resolve to an allowed public address.",
}


class EgressRefused(OpenWopError):
    """The guard refused a destination. REST renders it as 400 `webhook_url_rejected`."""

    code = "webhook_url_rejected"
    default_message = "The destination URL is not allowed."

    def __init__(self, reason: str, log_detail: str = "") -> None:
        super().__init__(_MESSAGES[reason], details={"reason": reason})
        self.reason = reason
        # For operators' logs only: names the rule and address, never the URL, query or userinfo.
        self.log_detail = log_detail or reason


@dataclass(frozen=True)
class EgressTarget:
    """A destination that passed the guard. `addresses` is empty when not resolved (resolve=False)."""

    host: str  # ASCII (IDNA) hostname without a trailing dot, or the canonical IP literal
    port: int
    addresses: tuple[IPAddress, ...]


# --- address rules ------------------------------------------------------------------------------


def _nets(*rows: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(cidr), why) for cidr, why in rows)


# Written out rather than left to `ipaddress.is_global` alone: that table changes between Python
# patch releases (3.11.7 still calls 2002::/16, 64:ff9b:1::/48 and 3fff::/20 global). IANA IPv4
# and IPv6 special-purpose address registries, RFC 6890 and successors.
_DENIED_V4 = _nets(
    ("0.0.0.0/8", "this-network"),
    ("10.0.0.0/8", "private (RFC 1918)"),
    ("100.64.0.0/10", "shared address space (CGNAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata)"),
    ("172.16.0.0/12", "private (RFC 1918)"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private (RFC 1918)"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
)
_DENIED_V6 = _nets(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
    ("100::/64", "discard-only"),
    ("2001::/23", "IETF protocol assignments (Teredo, benchmarking, ORCHID)"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "SRv6 SIDs"),
    ("fc00::/7", "unique local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
)
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_SIIT = ipaddress.IPv6Network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIXTOFOUR = ipaddress.IPv6Network("2002::/16")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address a translation form carries, with the form's name (webhooks.md §Egress)."""
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _MAPPED:
        return low32, "IPv4-mapped"
    if ip in _SIIT:
        return low32, "IPv4-translated"
    if ip in _NAT64:
        return low32, "NAT64"
    if ip in _SIXTOFOUR:
        assert ip.sixtofour is not None
        return ip.sixtofour, "6to4"
    if ip in _COMPATIBLE and int(ip) > 1:  # `::` and `::1` are judged as themselves
        return low32, "IPv4-compatible"
    return None


def address_refusal(ip: IPAddress, allow: tuple[IPNetwork, ...] = ()) -> str | None:
    """Why `ip` may not be reached (a short range name), or None when it may."""
    if ip.is_unspecified:
        return "unspecified"  # 0.0.0.0 and :: reach the local host; no allowlist admits them
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        return "scoped (zone id)"
    if any(ip.version == net.version and ip in net for net in allow):
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            inner, form = embedded
            why = address_refusal(inner, allow)
            return None if why is None else f"{why} inside {form}"
    for net, why in _DENIED_V4 if ip.version == 4 else _DENIED_V6:
        if ip in net:
            return why
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _GLOBAL_UNICAST_V6:
        return "reserved"
    if not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_private or ip.is_link_local:
        return "not globally reachable"
    return None


def _networks(setting: str) -> tuple[IPNetwork, ...]:
    raw: Any = getattr(settings, setting, None) or []
    if isinstance(raw, str):
        raw = [part for part in raw.split(",") if part.strip()]
    networks: list[IPNetwork] = []
    for entry in raw:
        try:
            networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            # Fail closed and loudly: a typo must not silently widen or narrow egress.
            raise ImproperlyConfigured(f"{setting}: {entry!r} is not a CIDR") from None
    return tuple(networks)


def allowed_networks() -> tuple[IPNetwork, ...]:
    """The operator relaxation `OPENWOP_EGRESS_ALLOW_CIDRS`, read now so tests and reloads see changes."""
    return _networks("OPENWOP_EGRESS_ALLOW_CIDRS")


def plain_http_networks() -> tuple[IPNetwork, ...]:
    """`OPENWOP_EGRESS_ALLOW_HTTP_CIDRS`: where plain http may go (nowhere when empty), read now."""
    return _networks("OPENWOP_EGRESS_ALLOW_HTTP_CIDRS")


def _inside(ip: IPAddress, networks: tuple[IPNetwork, ...]) -> bool:
    if any(ip.version == net.version and ip in net for net in networks):
        return True
    embedded = _embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    return embedded is not None and _inside(embedded[0], networks)


def egress_relaxation() -> dict[str, Any] | None:
    """What discovery says about the operator relaxations (`extensions["openwop-host.egress"]`), or None."""
    described: dict[str, Any] = {}
    if networks := allowed_networks():
        described["allowCidrs"] = [str(net) for net in networks]
    if http_networks := plain_http_networks():
        described["allowHttpCidrs"] = [str(net) for net in http_networks]
    return described or None


# --- host names and literals --------------------------------------------------------------------

# Names that only ever mean "this machine", "this network" or a metadata service.
_DENIED_NAMES = frozenset({"metadata.goog", "metadata.google.internal", "instance-data.ec2.internal"})
_DENIED_SUFFIXES = ("localhost", "localdomain", "local", "internal", "home.arpa")
_LABEL_RE = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_NUMERIC_LABEL_RE = re.compile(r"^(?:[0-9]+|0x[0-9a-f]*)$")


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """inet_aton / WHATWG IPv4 parsing: 1-4 parts, each decimal, 0-octal or 0x-hex.

    getaddrinfo accepts all of these, so `https://0x7f.1/` connects to 127.0.0.1; we must read the
    host the way the resolver will. Returns None when the text is not numeric at all, raises
    EgressRefused when it is numeric but not a valid address (`1.2.3.4.5`, `256.1.1.1`).
    """
    parts = host.split(".")
    if not _NUMERIC_LABEL_RE.match(parts[-1]):
        return None
    numbers: list[int] = []
    for part in parts:
        try:
            if part.startswith("0x"):
                numbers.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part.startswith("0"):
                numbers.append(int(part, 8))
            else:
                numbers.append(int(part, 10))
        except ValueError:
            raise EgressRefused(REASON_MALFORMED, "malformed numeric host") from None
    if len(numbers) > 4 or any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise EgressRefused(REASON_MALFORMED, "malformed numeric host")
    value = numbers[-1]
    for index, number in enumerate(numbers[:-1]):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _ipv6_literal(text: str) -> ipaddress.IPv6Address:
    if "%" in text:
        raise EgressRefused(REASON_HOST, "IPv6 zone id")
    try:
        return ipaddress.IPv6Address(text)
    except ValueError:
        raise EgressRefused(REASON_MALFORMED, "malformed IPv6 literal") from None


def _normalise_host(host: str) -> tuple[str, IPAddress | None]:
    """(ASCII host without trailing dot, IP literal or None). Refuses what a resolver could misread."""
    if not host:
        raise EgressRefused(REASON_MALFORMED, "empty host")
    if host.startswith("[") or host.endswith("]"):
        if not (host.startswith("[") and host.endswith("]")):
            raise EgressRefused(REASON_MALFORMED, "unbalanced brackets")
        ip6 = _ipv6_literal(host[1:-1])
        return str(ip6), ip6
    if ":" in host:  # httpx hands the transport IPv6 hosts without brackets
        ip6 = _ipv6_literal(host)
        return str(ip6), ip6
    if "%" in host:
        raise EgressRefused(REASON_MALFORMED, "percent-encoded host")
    if host.isascii():
        name = host.lower()
    else:
        try:
            name = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError):
            raise EgressRefused(REASON_MALFORMED, "IDNA encoding failed") from None
    if name.endswith("."):
        name = name[:-1]
    if not name or len(name) > 253:
        raise EgressRefused(REASON_MALFORMED, "host length")
    literal = _legacy_ipv4(name)
    if literal is not None:
        return str(literal), literal
    for label in name.split("."):
        if not _LABEL_RE.match(label):
            raise EgressRefused(REASON_MALFORMED, "invalid host label")
        if label.startswith("xn--"):
            try:
                idna.decode(label)
            except (idna.IDNAError, UnicodeError):
                raise EgressRefused(REASON_MALFORMED, "invalid A-label") from None
    return name, None


def _name_refusal(name: str) -> str | None:
    if "." not in name and not hosts_file_addresses(name):
        # A search list would complete it; an exact hosts-file entry is the operator's own naming.
        return "single-label name"
    if name in _DENIED_NAMES:
        return "cloud metadata name"
    for suffix in _DENIED_SUFFIXES:
        if name == suffix or name.endswith("." + suffix):
            return f"special-use name (.{suffix})"
    return None


# --- resolution and the one address check --------------------------------------------------------


def hosts_file_addresses(name: str) -> list[IPAddress]:
    """The addresses the operator's hosts file gives `name` by an exact (case-insensitive) match.

    The trailing dot `resolve_host` adds keeps the resolver's search list out, but glibc's `files`
    source then no longer matches hosts entries either, so the file is read here: Docker
    `extra_hosts` and Kubernetes `hostAliases` write it. Only the exact name matches (never a
    search-list completion of it); every line naming it counts, and each address is checked.
    Read at call time (containers rewrite it at start; tests point `OPENWOP_EGRESS_HOSTS_FILE` away).
    """
    path = str(getattr(settings, "OPENWOP_EGRESS_HOSTS_FILE", "") or "/etc/hosts")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read(1024 * 1024).splitlines()
    except OSError:
        return []
    wanted = name.lower().rstrip(".")
    addresses: list[IPAddress] = []
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2 or wanted not in (alias.lower().rstrip(".") for alias in fields[1:]):
            continue
        try:
            address = ipaddress.ip_address(fields[0])
        except ValueError:
            continue
        if address not in addresses:
            addresses.append(address)
    return addresses


def resolve_host(host: str, port: int) -> list[IPAddress]:
    """Every A/AAAA answer for `host`, in resolver order. Raises OSError when it does not resolve.

    The single resolver every check uses (tests monkeypatch it). A name the hosts file lists
    exactly gets the file's addresses; any other is made absolute so a resolver search list
    (Kubernetes' ndots:5) never turns it into an internal name.
    """
    if listed := hosts_file_addresses(host):
        return listed
    absolute = host if host.endswith(".") else host + "."
    addresses: list[IPAddress] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(absolute, port, type=socket.SOCK_STREAM):
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        address = ipaddress.ip_address(str(sockaddr[0]))
        if address not in addresses:
            addresses.append(address)
    return addresses


def _static_refusal(name: str, literal: IPAddress | None, allow: tuple[IPNetwork, ...]) -> EgressRefused | None:
    """The rules that need no DNS: the name policy, or the address rules on an IP literal."""
    if literal is not None:
        why = address_refusal(literal, allow)
        return None if why is None else EgressRefused(REASON_ADDRESS, f"{literal}: {why}")
    why = _name_refusal(name)
    return None if why is None else EgressRefused(REASON_HOST, f"{name}: {why}")


def egress_addresses(host: str, port: int, *, plain_http: bool = False) -> list[IPAddress]:
    """Resolve `host` now and return its addresses, every one checked; refuse if any is forbidden.

    The transports connect only to what this returns, so check and connect see the same answer.
    `plain_http`: the connection will carry http, so every address must also lie inside
    OPENWOP_EGRESS_ALLOW_HTTP_CIDRS.
    """
    name, literal = _normalise_host(host)
    allow = allowed_networks()
    if (refusal := _static_refusal(name, literal, allow)) is not None:
        raise refusal
    if literal is not None:
        addresses = [literal]
    else:
        try:
            addresses = resolve_host(name, port)
        except (OSError, UnicodeError) as exc:
            raise EgressRefused(REASON_ADDRESS, f"{name} does not resolve ({type(exc).__name__})") from None
        if not addresses:
            raise EgressRefused(REASON_ADDRESS, f"{name} has no addresses")
        for address in addresses:
            why = address_refusal(address, allow)
            if why is not None:
                # One forbidden answer refuses the name: the attacker, not us, picks which one is used.
                raise EgressRefused(REASON_ADDRESS, f"{name} -> {address}: {why}")
    if plain_http:
        http_allow = plain_http_networks()
        for address in addresses:
            if not _inside(address, http_allow):
                raise EgressRefused(REASON_SCHEME, f"{name} -> {address}: plain http outside the http ranges")
    return addresses


def scheme_refusal(scheme: str) -> EgressRefused | None:
    """https always; plain http only while OPENWOP_EGRESS_ALLOW_HTTP_CIDRS names a range (the
    addresses are judged against those ranges by `egress_addresses`)."""
    scheme = scheme.lower()
    if scheme == "https" or (scheme == "http" and plain_http_networks()):
        return None
    return EgressRefused(REASON_SCHEME, f"scheme {scheme[:10]}")


def egress_check_origin(*, scheme: str, host: str, port: int | None, resolve: bool = True) -> EgressTarget:
    """The scheme/host/port rules on already-parsed parts (the transports' entry point)."""
    if (refusal := scheme_refusal(scheme)) is not None:
        raise refusal
    plain_http = scheme.lower() == "http"
    if port is not None and not 0 < port < 65536:
        raise EgressRefused(REASON_MALFORMED, "port out of range")
    port = port or (HTTP_PORT if plain_http else HTTPS_PORT)
    name, literal = _normalise_host(host)
    if resolve:
        addresses = egress_addresses(name, port, plain_http=plain_http)
        return EgressTarget(host=name, port=port, addresses=tuple(addresses))
    if (refusal := _static_refusal(name, literal, allowed_networks())) is not None:
        raise refusal
    if plain_http and literal is not None and not _inside(literal, plain_http_networks()):
        raise EgressRefused(REASON_SCHEME, f"{literal}: plain http outside the http ranges")
    return EgressTarget(host=name, port=port, addresses=())


def _is_unsafe_char(ch: str) -> bool:
    # Whitespace, controls, format characters (zero-width joiners, bidi marks) and backslash: each
    # is read differently by at least one URL parser or resolver.
    return ch <= " " or ch == "\\" or unicodedata.category(ch) in {"Cc", "Cf", "Zs", "Zl", "Zp"}


_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")
_PORT_RE = re.compile(r"^[0-9]{1,5}$")


def _split_url(url: str) -> tuple[str, str, int | None]:
    """(scheme, host text, port) from a URL, by a deliberately narrow grammar."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
        raise EgressRefused(REASON_MALFORMED, "empty or too long")
    scheme, separator, rest = url.partition("://")
    if not separator or not _SCHEME_RE.match(scheme):
        raise EgressRefused(REASON_MALFORMED, "no scheme")
    if (refusal := scheme_refusal(scheme)) is not None:
        raise refusal
    if any(_is_unsafe_char(ch) for ch in url):
        raise EgressRefused(REASON_MALFORMED, "whitespace, control character or backslash")
    if "#" in rest:
        # A fragment is never sent; refusing it removes the `https://a#@b` family of confusions.
        raise EgressRefused(REASON_MALFORMED, "fragment")
    authority = re.split(r"[/?]", rest, maxsplit=1)[0]
    if "@" in authority:
        raise EgressRefused(REASON_USERINFO)
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise EgressRefused(REASON_MALFORMED, "unbalanced brackets")
        host, after = authority[: close + 1], authority[close + 1 :]
        if after and not after.startswith(":"):
            raise EgressRefused(REASON_MALFORMED, "text after IPv6 literal")
        port_text = after[1:] if after else None
    elif ":" in authority:
        host, _, port_text = authority.partition(":")
    else:
        host, port_text = authority, None
    if port_text is not None and not _PORT_RE.match(port_text):
        raise EgressRefused(REASON_MALFORMED, "invalid port")
    # The port's range is judged by `egress_check_origin`, as for every other caller.
    return scheme, host, None if port_text is None else int(port_text)


def egress_check_url(url: str, *, resolve: bool = True) -> EgressTarget:
    """Registration-time check: parse strictly, apply the host rules and (by default) resolve now.

    Raises EgressRefused. Passing is not a promise: delivery re-checks (the DNS answer may change).
    """
    scheme, host, port = _split_url(url)
    return egress_check_origin(scheme=scheme, host=host, port=port, resolve=resolve)


# --- logging ------------------------------------------------------------------------------------

UNPARSEABLE_URL = "<unparseable url>"


def sanitize_url(url: object) -> str:
    """`scheme://host[:port]/path` for logs: no userinfo, query or fragment; odd characters escaped.

    STYLE.md habit 16. Note that a capability URL carries its secret in the path; callers logging
    those should log the host only.
    """
    try:
        parts = urlsplit(str(url))
        host = parts.hostname
        port = parts.port
    except ValueError:
        return UNPARSEABLE_URL
    if not host or not _SCHEME_RE.match(parts.scheme or ""):
        return UNPARSEABLE_URL
    netloc = quote(host, safe=".-_:")
    if ":" in host:
        netloc = f"[{netloc}]"
    if port is not None:
        netloc += f":{port}"
    path = quote(parts.path, safe="/%-._~!$&'()*+,;=:@")
    return f"{parts.scheme.lower()}://{netloc}{path}"[:512]
