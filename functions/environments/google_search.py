"""`google_search`: NeMo Gym's web-search multiple-choice environment.

Tools:
- `search(query)` → `{"search_results": <the provider's results as a JSON string>}`
  (Google Custom Search by default; see `_search_providers` for the settings).
- `browse(url)` → `{"page_content": <the page's main text>}`, extracted from the HTML with
  trafilatura and truncated to the first and last 5,000 characters if it has more than
  10,000 words; `"No text found"` when the page has no main text.

A failure (no key configured, provider down, HTTP error, a URL that is not a page)
is the tool's output, `"Error: <why>"` in the same field, for the model to read, as
NeMo Gym does; the worker never fails on it. The key never appears in an output.

`browse` reads the public internet only: a URL, or any redirect it leads to, whose host
resolves to a loopback, private, link-local or other non-public address is refused with
an `"Error: ..."` output, since the worker may reach what the policy must not (the NATS
monitor, cloud instance metadata, in-cluster services). Settings (in `GYMBUS_GOOGLE_SEARCH`,
see `_settings`): `google_api_key` and `google_cx` (NeMo Gym's names; they win over the
`GOOGLE_API_KEY` and `GOOGLE_CX` variables), and `allow_private_addresses` (default false),
which lets `browse` read non-public addresses too, for a test server or an intranet. NeMo
Gym's `browse` fetches any URL.

Reward: the first `\\boxed{...}` (regex `\\boxed\\{(.*?)\\}`) in the text of the last
output item, if that item is an assistant message, is `parsed_option`; reward 1.0 iff
it equals the row's `expected_answer` exactly (an option letter), else 0.0. No boxed
answer, or a last item that is not an assistant message, gives `parsed_option: null`
and reward 0.0 (NeMo Gym's verifier fails on that case instead).
"""

from __future__ import annotations

import re

from msgspec import Struct

from gymbus.schemas import Response, VerifyRequest, VerifyResult, item_text

from .._spec import Environment, Session, tool
from ._search_providers import provider_from_env
from ._settings import settings
from ._web import WebError, client, read_page

__all__ = ["ENVIRONMENT", "last_assistant_text", "parse_boxed"]

NAME = "google_search"

_BOXED = re.compile(r"\\boxed\{(.*?)\}")


class SearchSettings(Struct, kw_only=True, forbid_unknown_fields=True):
    google_api_key: str | None = None
    google_cx: str | None = None
    allow_private_addresses: bool = False
    """Let `browse` read loopback, private, link-local and other non-public addresses."""


class SearchArgs(Struct, kw_only=True):
    query: str


class SearchResults(Struct, kw_only=True):
    search_results: str


class BrowseArgs(Struct, kw_only=True):
    url: str


class PageContent(Struct, kw_only=True):
    page_content: str


async def search(args: SearchArgs, session: Session) -> SearchResults:
    """Web search results for `args.query`, or `Error: ...` saying why there are none."""
    config = settings(SearchSettings, NAME)
    try:
        provider = provider_from_env(api_key=config.google_api_key, cx=config.google_cx)
        return SearchResults(search_results=await provider.search(client(), args.query))
    except WebError as exc:
        return SearchResults(search_results=f"Error: {exc}")


async def browse(args: BrowseArgs, session: Session) -> PageContent:
    """The main text of the page at `args.url`, or `Error: ...` saying why it cannot be read
    (a page off the public internet is refused unless the settings allow it)."""
    allowed = settings(SearchSettings, NAME).allow_private_addresses
    try:
        return PageContent(page_content=await read_page(args.url, allow_private_addresses=allowed))
    except WebError as exc:
        return PageContent(page_content=f"Error: {exc}")


class SearchVerifyRequest(VerifyRequest, kw_only=True):
    expected_answer: str


class SearchVerifyResult(VerifyResult, kw_only=True):
    parsed_option: str | None


def last_assistant_text(response: Response) -> str | None:
    """The text of the last output item if it is an assistant message, else `None`."""
    if not response.output:
        return None
    last = response.output[-1]
    return item_text(last) if last.kind == "message" and last.role == "assistant" else None


def parse_boxed(text: str | None) -> str | None:
    """The content of the first `\\boxed{...}` in `text` (up to the first `}`), or `None`."""
    found = _BOXED.search(text) if text else None
    return found.group(1) if found else None


async def verify(request: SearchVerifyRequest, session: Session) -> SearchVerifyResult:
    """1.0 iff the last assistant message's boxed option equals `expected_answer`."""
    parsed = parse_boxed(last_assistant_text(request.response))
    return SearchVerifyResult(reward=1.0 if parsed == request.expected_answer else 0.0, parsed_option=parsed)


ENVIRONMENT = Environment(
    name=NAME,
    settings=SearchSettings,
    tools=(tool(search), tool(browse)),
    verify=verify,
    verify_request=SearchVerifyRequest,
    agents=("google_search_simple_agent",),
    description="NeMo Gym's google_search: web search and browse tools, boxed multiple-choice answer.",
)
