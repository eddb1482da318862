"""`google_search`: its tools against a local fake search provider and fake pages, and
its reward rule on hand-built responses. No test reaches the internet."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from gymbus import bus, schemas
from gymbus.functions import Session
from gymbus.functions.environments import _web
from gymbus.functions.environments._web import extract_text, is_public, truncate_long_text
from gymbus.functions.environments.google_search import (
    BrowseArgs,
    SearchArgs,
    SearchVerifyRequest,
    browse,
    search,
    verify,
)
from gymbus.functions.registry import ENVIRONMENTS
from gymbus.schemas import ContentPart, Item, Response, ResponsesCreateParams
from tests.fake_openai import free_port
from tests.fake_web import ARTICLE_TEXT, CX, KEY, FakeWeb

SESSION = Session(id="s")
SETTINGS = "GYMBUS_GOOGLE_SEARCH"
NOT_PUBLIC = "not a public internet address"


async def run_search(query: str) -> str:
    return (await search(SearchArgs(query=query), SESSION)).search_results


async def run_browse(url: str) -> str:
    return (await browse(BrowseArgs(url=url), SESSION)).page_content


# search


async def test_search_returns_the_providers_results_as_a_json_string(fake_web: FakeWeb) -> None:
    results = json.loads(await run_search("time reversal acoustics"))
    assert results["items"][0]["link"] == f"{fake_web.url}/pages/article"
    assert results["queries"]["request"][0]["searchTerms"] == "time reversal acoustics"
    [sent] = fake_web.searches
    assert sent.params == {"cx": CX, "q": "time reversal acoustics"}  # the key is not in the URL
    assert sent.key_header == KEY


async def test_a_provider_http_error_is_a_readable_output_without_the_key(
    fake_web: FakeWeb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "wrong-key-abcdef")
    output = await run_search("anything")
    assert (
        output
        == "Error: the search provider answered HTTP 400: API key not valid. Please pass a valid API key."
    )
    assert "wrong-key-abcdef" not in output


async def test_a_provider_server_error_is_a_readable_output(fake_web: FakeWeb) -> None:
    fake_web.fail_next = 1
    assert await run_search("anything") == "Error: the search provider answered HTTP 500: Backend Error"
    assert json.loads(await run_search("anything"))["items"]  # the next search works


async def test_a_provider_that_is_down_is_a_readable_output(
    fake_web: FakeWeb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_SEARCH_URL", f"http://127.0.0.1:{free_port()}/customsearch/v1")
    assert await run_search("anything") == "Error: the search provider cannot be reached (ConnectError)"


@pytest.mark.parametrize("unset", [("GOOGLE_API_KEY",), ("GOOGLE_CX",), ("GOOGLE_API_KEY", "GOOGLE_CX")])
async def test_a_missing_key_or_cx_is_a_readable_output_and_nothing_is_sent(
    fake_web: FakeWeb, monkeypatch: pytest.MonkeyPatch, unset: tuple[str, ...]
) -> None:
    for name in unset:
        monkeypatch.delenv(name)
    output = await run_search("anything")
    assert output == f"Error: search is not configured on this server ({' and '.join(unset)} not set)"
    assert fake_web.searches == []


async def test_nemo_gyms_key_and_cx_settings_configure_the_search(
    fake_web: FakeWeb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY")
    monkeypatch.delenv("GOOGLE_CX")
    monkeypatch.setenv(SETTINGS, json.dumps({"google_api_key": KEY, "google_cx": CX}))
    assert json.loads(await run_search("time reversal acoustics"))["items"]
    [sent] = fake_web.searches
    assert (sent.params["cx"], sent.key_header) == (CX, KEY)


async def test_an_unknown_provider_is_a_readable_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCH_PROVIDER", "altavista")
    assert (
        await run_search("x")
        == "Error: search provider 'altavista' is unknown on this server (known: google)"
    )


def test_the_key_is_not_in_the_providers_repr(fake_web: FakeWeb) -> None:
    from gymbus.functions.environments._search_providers import provider_from_env

    assert KEY not in repr(provider_from_env())


# browse


async def test_browse_extracts_the_main_text_of_a_page(fake_web: FakeWeb) -> None:
    text = await run_browse(f"{fake_web.url}/pages/article")
    assert ARTICLE_TEXT in text and "multiple scattering improves the focus" in text
    assert "About us" not in text and "All rights reserved" not in text  # navigation and footer dropped


async def test_browse_follows_redirects(fake_web: FakeWeb) -> None:
    assert ARTICLE_TEXT in await run_browse(f"{fake_web.url}/pages/moved")


async def test_a_page_of_more_than_10000_words_keeps_its_first_and_last_5000_characters(
    fake_web: FakeWeb,
) -> None:
    text = await run_browse(f"{fake_web.url}/pages/long")
    full = " ".join(f"w{i}" for i in range(12_000))
    assert text == full[:5000] + "..." + full[-5000:]


async def test_a_page_of_exactly_10000_words_is_whole(fake_web: FakeWeb) -> None:
    text = await run_browse(f"{fake_web.url}/pages/exact")
    assert len(text.split()) == 10_000 and text.endswith("w9999")


def test_truncation_counts_words_but_keeps_characters() -> None:
    assert truncate_long_text("a " * 10_000) == "a " * 10_000
    long = "abc " * 10_001
    assert truncate_long_text(long) == long[:5000] + "..." + long[-5000:]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/pages/missing", "Error: {url} answered HTTP 404 Not Found"),
        ("/pages/report.pdf", "Error: {url} is not a web page (content type application/pdf)"),
        ("/pages/empty", "No text found"),
    ],
)
async def test_pages_that_cannot_be_read_say_why(fake_web: FakeWeb, path: str, expected: str) -> None:
    url = f"{fake_web.url}{path}"
    assert await run_browse(url) == expected.format(url=url)


@pytest.mark.parametrize("url", ["example.com/page", "file:///etc/passwd", ""])
async def test_a_url_that_is_not_http_is_refused(url: str) -> None:
    assert await run_browse(url) == f"Error: cannot browse {url!r}: give a full http:// or https:// URL"


async def test_a_server_that_is_down_is_a_readable_output(private_allowed: None) -> None:
    url = f"http://127.0.0.1:{free_port()}/page"
    assert await run_browse(url) == f"Error: could not fetch {url}: ConnectError"


async def test_redirects_are_followed_a_bounded_number_of_times(fake_web: FakeWeb) -> None:
    url = f"{fake_web.url}/pages/loop"
    assert await run_browse(url) == f"Error: {url} redirects too many times"


async def test_a_redirect_off_the_web_is_refused(fake_web: FakeWeb) -> None:
    url = f"{fake_web.url}/redirect?to=file:///etc/passwd"
    assert await run_browse(url) == (
        f"Error: cannot browse {url}: it redirects to file:///etc/passwd, "
        "which is not an http:// or https:// URL"
    )


# browse: only the public internet, unless the operator allows more


@pytest.fixture
def public_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default settings: `browse` reads public addresses only."""
    monkeypatch.delenv(SETTINGS, raising=False)


@pytest.fixture
def private_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SETTINGS, json.dumps({"allow_private_addresses": True}))


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True), ("2001:4860:4860::8888", True), ("::ffff:8.8.8.8", True),
        ("127.0.0.1", False), ("::1", False), ("::ffff:127.0.0.1", False),  # loopback
        ("10.1.2.3", False), ("172.16.0.1", False), ("192.168.0.1", False), ("fd00::1", False),  # private
        ("169.254.169.254", False), ("fe80::1", False), ("fe80::1%2", False),  # link-local
        ("100.64.0.1", False), ("0.0.0.0", False), ("::", False), ("240.0.0.1", False),  # shared, reserved
        ("224.0.0.1", False), ("ff02::1", False), ("192.0.2.1", False), ("2001:db8::1", False),
    ],
)  # fmt: skip
def test_only_global_unicast_addresses_are_public(address: str, public: bool) -> None:
    assert is_public(address) is public


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8222/varz",  # the NATS monitor
        "http://[::1]:4222/",
        "http://2130706433/",  # 127.0.0.1, written as one number
        "http://[::ffff:127.0.0.1]/",
        "http://10.0.0.1/",
        "https://192.168.1.1/admin",
        "http://169.254.169.254/latest/meta-data/",  # cloud instance metadata
        "http://[fe80::1]/",
        "http://0.0.0.0:8222/",
    ],
)
async def test_browse_refuses_addresses_off_the_public_internet(public_only: None, url: str) -> None:
    text = await run_browse(url)
    assert text.startswith(f"Error: cannot browse {url}: ") and text.endswith(NOT_PUBLIC)


async def test_a_name_that_resolves_to_loopback_is_refused(public_only: None) -> None:
    url = "http://localhost:8222/varz"
    text = await run_browse(url)
    assert text.startswith(f"Error: cannot browse {url}: localhost resolves to ") and text.endswith(
        NOT_PUBLIC
    )


async def test_the_operator_can_allow_private_addresses(
    fake_web_server: FakeWeb, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{fake_web_server.url}/pages/article"
    monkeypatch.delenv(SETTINGS, raising=False)
    assert await run_browse(url) == f"Error: cannot browse {url}: 127.0.0.1 is {NOT_PUBLIC}"
    monkeypatch.setenv(SETTINGS, '{"allow_private_addresses": true}')
    assert ARTICLE_TEXT in await run_browse(url)


@pytest.mark.parametrize(
    "target", ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/", "http://[::1]:8222/varz"]
)
async def test_a_redirect_from_a_public_host_to_a_private_address_is_refused(
    fake_web_server: FakeWeb, public_only: None, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    # The fake web stands in for a public host: its address counts as public, no other private one does.
    monkeypatch.setattr(_web, "is_public", lambda address: address == "127.0.0.1" or is_public(address))
    assert ARTICLE_TEXT in await run_browse(f"{fake_web_server.url}/pages/moved")  # public to public: read
    url = f"{fake_web_server.url}/redirect?to={quote(target)}"
    text = await run_browse(url)
    assert text.startswith(f"Error: cannot browse {url}: it redirects to {target}, and ")
    assert text.endswith(NOT_PUBLIC)


async def test_a_wrong_setting_is_a_bad_request_naming_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SETTINGS, '{"allow_private_addresses": "yes"}')
    with pytest.raises(schemas.BadRequest, match=SETTINGS):
        await run_browse("http://127.0.0.1/")


def test_garbage_extracts_to_nothing_rather_than_raising() -> None:
    assert extract_text(b"") is None
    assert extract_text("<html><body></body></html>") is None


# verify


def answer(text: str, *, last: Item | None = None) -> Response:
    message = Item(
        type="message", role="assistant", content=[ContentPart(type="output_text", text=text, annotations=[])]
    )
    output = [message] if last is None else [message, last]
    return Response(id="r", created_at=0, model="m", output=output)


async def verify_text(response: Response, expected: str = "C") -> tuple[float, str | None]:
    request = SearchVerifyRequest(
        responses_create_params=ResponsesCreateParams(input="q"), response=response, expected_answer=expected
    )
    result = await verify(request, SESSION)
    return result.reward, result.parsed_option


@pytest.mark.parametrize(
    ("text", "reward", "parsed"),
    [
        ("The answer is \\boxed{C}.", 1.0, "C"),
        ("The answer is \\boxed{B}.", 0.0, "B"),
        ("\\boxed{C} or maybe \\boxed{B}", 1.0, "C"),  # the first boxed answer counts
        ("\\boxed{B} or maybe \\boxed{C}", 0.0, "B"),
        ("\\boxed{ C }", 0.0, " C "),  # exact match, no trimming
        ("\\boxed{c}", 0.0, "c"),  # exact match, case matters
        ("\\boxed{C: homogeneity}", 0.0, "C: homogeneity"),
        ("\\boxed{\\text{C}}", 0.0, "\\text{C"),  # up to the first closing brace
        ("The answer is C.", 0.0, None),  # no boxed answer
        ("boxed{C}", 0.0, None),  # no backslash
        ("", 0.0, None),
    ],
)
async def test_reward_is_one_iff_the_first_boxed_option_is_the_expected_one(
    text: str, reward: float, parsed: str | None
) -> None:
    assert await verify_text(answer(text)) == (reward, parsed)


async def test_only_the_last_item_counts_and_it_must_be_an_assistant_message() -> None:
    call = Item(type="function_call", name="search", arguments="{}", call_id="c")
    assert await verify_text(answer("\\boxed{C}", last=call)) == (0.0, None)
    user = Item(type="message", role="user", content="\\boxed{C}")
    assert await verify_text(answer("\\boxed{C}", last=user)) == (0.0, None)
    assert await verify_text(Response(id="r", created_at=0, model="m", output=[])) == (0.0, None)


async def test_a_row_without_expected_answer_is_a_bad_request() -> None:
    env = ENVIRONMENTS["google_search"]
    body = b'{"responses_create_params": {"input": "q"}, "response": {"id": "r", "created_at": 0, "model": "m", "output": []}}'
    with pytest.raises(schemas.BadRequest, match="expected_answer"):
        bus.wire.decode(body, env.verify_request, "verify request")


def test_the_environment_serves_the_agent_nemo_gym_datasets_name() -> None:
    env = ENVIRONMENTS["google_search"]
    assert env.agents == ("google_search_simple_agent",)
    assert [one.name for one in env.tools] == ["search", "browse"]
