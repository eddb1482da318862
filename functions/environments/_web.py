"""HTTP for tool environments: one pooled `httpx.AsyncClient` per worker, and page reading.

`client()` is shared by every tool call a worker process serves, so connections are
reused across rollouts; every request it makes has the finite timeouts of `WEB_LIMITS`.
`read_page(url)` fetches a page and turns its HTML into text with trafilatura (as NeMo
Gym's `browse` does), truncated like NeMo Gym's: a text of more than 10,000 words
becomes its first 5,000 characters, `...`, and its last 5,000 characters.

Every failure (bad URL, network error, HTTP error status, not a web page, too large, an
address off the public internet) raises `WebError`, whose message is written for the
model to read.

Only the public internet: a page is fetched from a host whose every address is global
unicast (`is_public`), so a policy cannot make a worker read what only the worker can
reach: loopback (the NATS monitor), private networks (in-cluster services), link-local
(cloud instance metadata at 169.254.169.254), shared, reserved or multicast addresses.
The host is resolved before each request, and redirects are followed here, one hop at a
time (at most `max_redirects`), so every hop is checked. `allow_private_addresses=True`
skips the check (the operator's choice, for a test server or an intranet). The check
resolves the name just before httpx connects, which resolves it again: a DNS server that
answers differently the second time (DNS rebinding) can still slip through; an egress
firewall is the firm guard.

Why trafilatura: it is what NeMo Gym uses, so pages read the same as in NeMo Gym
rollouts; it is well kept, works offline, and installs from wheels (lxml, justext,
htmldate, courlan, dateparser: about 60 MB installed, mostly babel's locale data).
It is imported on the first page read, and httpx on the first request, not when workers start.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import TYPE_CHECKING

from gymbus.schemas import WEB_LIMITS

if TYPE_CHECKING:
    import httpx

__all__ = [
    "WebError",
    "client",
    "extract_text",
    "is_public",
    "read_page",
    "truncate_long_text",
]


class WebError(Exception):
    """A web request failed; the message says why, for the model to read."""


USER_AGENT = "GymBus/0.1 (web tools for LLM environments)"
_PAGE_TYPES = ("html", "xml", "text/")

_pool: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None


def client() -> httpx.AsyncClient:
    """This worker's shared HTTP client (one per event loop)."""
    global _pool
    loop = asyncio.get_running_loop()
    if _pool is None or _pool[0] is not loop or _pool[1].is_closed:
        _pool = (loop, _new_client())
    return _pool[1]


def _new_client() -> httpx.AsyncClient:
    import httpx

    limits = WEB_LIMITS
    return httpx.AsyncClient(
        timeout=httpx.Timeout(limits.read, connect=limits.connect),
        limits=httpx.Limits(
            max_connections=limits.max_connections, max_keepalive_connections=limits.max_keepalive
        ),
        follow_redirects=True,
        max_redirects=limits.max_redirects,
        headers={"User-Agent": USER_AGENT},
    )


async def read_page(url: str, *, allow_private_addresses: bool = False) -> str:
    """The text of the page at `url`, truncated as NeMo Gym does; `"No text found"` when
    the page has no extractable text. `WebError` if it cannot be fetched, or if it or a
    redirect is off the public internet and `allow_private_addresses` is false."""
    html = await fetch_page(url, allow_private_addresses=allow_private_addresses)
    text = await asyncio.to_thread(extract_text, html)  # lxml parsing is CPU work: keep the loop free
    return truncate_long_text(text) if text else "No text found"


async def fetch_page(url: str, *, allow_private_addresses: bool = False) -> bytes:
    """The raw body of the web page at `url` (HTML or text), after at most `max_redirects`
    redirects; unless `allow_private_addresses`, every hop must be on the public internet."""
    import httpx

    if not url.startswith(("http://", "https://")):
        raise WebError(f"cannot browse {url!r}: give a full http:// or https:// URL")
    try:
        return await _follow(url, allow_private_addresses)
    except httpx.InvalidURL:
        raise WebError(f"cannot browse {url!r}: it is not a valid URL") from None
    except httpx.TimeoutException:
        raise WebError(f"{url} did not answer in time") from None
    except httpx.HTTPError as exc:
        raise WebError(f"could not fetch {url}: {type(exc).__name__}") from None


async def _follow(url: str, allow_private_addresses: bool) -> bytes:
    # Redirects are followed here rather than by httpx, so that each hop is checked before it is fetched.
    import httpx

    hop = httpx.URL(url)
    for redirects in range(WEB_LIMITS.max_redirects + 1):
        if not allow_private_addresses:
            await _require_public(url, hop, redirected=redirects > 0)
        async with client().stream("GET", hop, follow_redirects=False) as response:
            if not response.has_redirect_location:
                _check_page(url, response)
                return await _read_bounded(url, response)
            location = response.headers["location"]
        hop = hop.join(location)
        if hop.scheme not in ("http", "https"):
            raise WebError(
                f"cannot browse {url}: it redirects to {location}, which is not an http:// or https:// URL"
            )
    raise WebError(f"{url} redirects too many times")


def is_public(address: str) -> bool:
    """Whether the IP `address` is on the public internet: global unicast, so not loopback,
    private, link-local, shared, reserved, documentation, unspecified or multicast. An IPv4
    address written as IPv6 (`::ffff:127.0.0.1`) is judged as the IPv4 address it is."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast and not ip.is_reserved


async def _require_public(url: str, hop: httpx.URL, *, redirected: bool) -> None:
    """`WebError` unless every address of `hop`'s host is public (`url` is the page asked for)."""
    host = hop.raw_host.decode("ascii")
    via = f"it redirects to {hop}, and " if redirected else ""
    for address in await _addresses(url, hop):
        if not is_public(address):
            where = f"{address} is" if address == host else f"{host} resolves to {address}, which is"
            raise WebError(f"cannot browse {url}: {via}{where} not a public internet address")


async def _addresses(url: str, hop: httpx.URL) -> list[str]:
    """The IP addresses `hop`'s host resolves to (an address resolves to itself)."""
    host = hop.raw_host.decode("ascii")
    port = hop.port or (443 if hop.scheme == "https" else 80)
    if not host:
        raise WebError(f"cannot browse {url!r}: it names no host")
    lookup = asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    try:
        found = await asyncio.wait_for(lookup, WEB_LIMITS.connect)
    except TimeoutError:
        raise WebError(f"could not fetch {url}: looking up its host {host} took too long") from None
    except (OSError, UnicodeError):  # socket.gaierror is an OSError
        raise WebError(f"could not fetch {url}: its host {host} was not found") from None
    return [str(sockaddr[0]) for *_, sockaddr in found]


def _check_page(url: str, response: httpx.Response) -> None:
    if response.status_code >= 400:
        raise WebError(f"{url} answered HTTP {response.status_code} {response.reason_phrase}".rstrip())
    kind = response.headers.get("content-type", "text/html").lower()
    if not any(part in kind for part in _PAGE_TYPES):
        raise WebError(f"{url} is not a web page (content type {kind.split(';')[0]})")


async def _read_bounded(url: str, response: httpx.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > WEB_LIMITS.max_page_bytes:
            raise WebError(f"{url} is larger than {WEB_LIMITS.max_page_bytes // (1024 * 1024)} MiB")
    return bytes(body)


def extract_text(html: bytes | str) -> str | None:
    """The main text of an HTML document (trafilatura's default extraction), or `None`."""
    import trafilatura  # heavy: loaded on the first page a worker reads, not at start-up

    try:
        text = trafilatura.extract(html)
    except Exception:  # noqa: BLE001 - a malformed document costs one tool call, not the worker
        return None
    return text if isinstance(text, str) else None


def truncate_long_text(text: str) -> str:
    """`text` if it has at most `max_words` words, else its first and last `keep_chars`
    characters joined by `...` (NeMo Gym's rule: words are counted, characters kept)."""
    if len(text.split()) <= WEB_LIMITS.max_words:
        return text
    keep = WEB_LIMITS.keep_chars
    return text[:keep] + "..." + text[-keep:]
