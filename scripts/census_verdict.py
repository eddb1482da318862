"""What the census concludes from what each side recorded: each server's class, the rows and
requests that differ, those left unsettled, and the evidence behind "works".

Pure functions of the two sides' recorded results (outcome, own cause, rewards, request
logs), so that each class can be made from a case built for it. The classes, in the
table's order:

- **fails on both, different causes**: each side failed, and the causes read from each
  side's own log do not match (first: one side's failure may hide the other's bug);
- **works on both**: each side collected every row, its policy got calls, and it has a
  non-zero reward or re-verified NeMo Gym's stored rollouts;
- **runs, not evidenced**: each side collected every row, but on a side the policy got no
  call, or it has neither a non-zero reward nor a re-verification: nothing shows the rows
  did what they are for;
- **works on GymBus only**, **works on NeMo Gym only** (a GymBus bug, always);
- **fails on both, same cause**: each side failed, and the two causes match (`same_cause`).

A row is unsettled only where a side's own two tries differ on that row: NeMo Gym's two
collections of the same rows (`settle_collected`), or a side's two re-verifications of the
same stored rollout (`settle_reverified`); a request is unsettled only where NeMo Gym's own
two collections sent it a different number of times (`settle_requests`). Each is listed
with every reward, and every other difference stands.
"""

from __future__ import annotations

import collections
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from census_endpoint import as_sent, in_api

from gymbus.schemas import GymError

__all__ = [
    "CLASSES",
    "BothWays",
    "Requests",
    "Side",
    "cause",
    "compare_requests",
    "judge",
    "same_cause",
    "TIMED_OUT",
    "settle_collected",
    "settle_reverified",
    "unevidenced",
    "verdict",
]

CLASSES = (
    "fails on both, different causes",
    "works on both",
    "runs, not evidenced",
    "works on GymBus only",
    "works on NeMo Gym only",
    "fails on both, same cause",
)
REWARD_TOLERANCE = 1e-6
POLICY = "policy"
"""The policy's name at the census endpoint, on both sides (its judges have their own)."""
CAUSE_CHARS = 200
_DETAIL = re.compile(r'"detail"\s*:\s*("(?:[^"\\]|\\.)*")')
"""FastAPI's error body, as NeMo Gym's client logs a server's answer."""
_QUOTED = re.compile(r"(?=NeMo Gym server \S+ (?:refused the request to|failed on) \S+ \(\d+\): (.+))")
"""The bridge's quote of a server's error body (`_http`: FastAPI's `detail` already taken),
each of those nested in one another (a lookahead: the innermost is the last found)."""
_WRAPPING = re.compile(r"\"\}+'?$")
"""What an error body quoted inside another's (`b'{"error": {... "message": "..."}}'`) ends with."""
_NO_AGENT = re.compile(r"No agent specified for rows|field `agent_ref`: missing, and no --agent was given")
"""Rows that name no agent, as each side says it: NeMo Gym's `ng_collect_rollouts`, GymBus's `collect`."""
_STARTS_NO_SERVER = (
    re.compile(r"Process `[^`]+` finished unexpectedly!$"),
    re.compile(r"expected one server class, found none$"),
)
"""An entrypoint that defines no server (`gymnasium`'s `base.py`, a library), as each side
meets it: NeMo Gym runs it, it returns at once, and `ng_run` says only that the process
finished (the census reads that only where no server raised anything); GymBus's launcher
looks for the server class it would start and finds none."""
_UNRESOLVED_HOST = re.compile(r"Could not resolve host: ([\w.-]+)")
"""A download from a host this machine cannot reach: which of a server's sources each side's
installer fetched first (and failed on) is its own order, the host is the cause."""
_TIMED_OUT = re.compile(r"did not finish (?:before its deadline|within the census's)")
"""A time-out's cause on either side: GymBus's `deadline_exceeded`, the census's `TIMED_OUT`."""
TIMED_OUT = "did not finish within the census's {limit:.0f} s"
"""The cause of a NeMo Gym collection the census stopped at its limit (its log ends mid-run)."""
_FOLDERS = re.compile(r"(?<![\w:/.])/(?:[^\s/'\"]+/)+")
_RELATIVE_FOLDERS = re.compile(r"(?<![\w:/.+-])(?:[\w.+-]+/){2,}")
"""Two or more folders of a relative path (`venvs/resources_servers/x/.venv/...`); one alone
may be a word's (`and/or`), and a URL's are not (they follow `:` or `/`)."""
_UNSET_KEY = re.compile(r"Interpolation key '([^']+)' not found|Config value '[^']*' references '([^']+)'")
"""A config value whose `${key}` has no value: omegaconf's `InterpolationKeyError` (GymBus
reading the config), and NeMo Gym's CLI's own words for that same error
(`translate_interpolation_error`)."""


@dataclass
class Side:
    """What one side did with the server's rows."""

    outcome: str = "fails"
    why: str = ""
    cause: str = ""
    """Why it failed, in a short text from this side's own log (`cause`); empty where it works."""
    rows: int = 0
    ok: int = 0
    failed: int = 0
    rewards: dict[str, float | None] = field(default_factory=dict)
    """Collected rows' rewards by task index; re-verified ones' by `r<line>`."""
    reverified: int = 0
    reproduced: int = 0
    """Re-verified rewards equal to the ones NeMo Gym's example rollouts store."""
    policy_calls: int = 0
    """Requests its collection sent to the policy's name at the endpoint."""
    seconds: float = 0.0


@dataclass
class BothWays:
    server: str
    klass: str = "fails on both, same cause"
    why: str = ""
    agent: str = ""
    policy: str = "openai"
    """The adapter serving the policy on each side: `vllm` where the server allows no other."""
    judges: list[str] = field(default_factory=list)
    nemo_gym: Side = field(default_factory=Side)
    gymbus: Side = field(default_factory=Side)
    stored: dict[str, float | None] = field(default_factory=dict)
    """The rewards NeMo Gym's example rollouts store, by `r<line>` of those re-verified."""
    reward_mismatches: list[str] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)
    """Rows (and requests) on which a side's own two tries differ, each with every reward."""
    request_mismatches: list[str] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    """How many requests each side sent the endpoint."""
    seconds: float = 0.0


# --- causes ---


def cause(text: str, why: str) -> str:
    """A side's own cause of failure, from its own failure `text` (a log's tail, a failures
    file's message): the words a NeMo Gym server answered with, where one answered with an
    error; else `why`, what `classify` read from the same text (its last exception, or the
    line that names what is missing)."""
    details = _DETAIL.findall(text)
    if details:
        try:
            said = json.loads(details[-1])
        except ValueError:  # an escape JSON has not (a log's own quoting)
            said = details[-1][1:-1]
    else:
        quoted = _QUOTED.findall(text)
        said = _WRAPPING.sub("", quoted[-1]).replace("\\'", "'") if quoted else why
    said = " ".join(without_folders(str(said)).split())
    return said if len(said) <= CAUSE_CHARS else said[: CAUSE_CHARS - 3] + "..."


def without_folders(text: str) -> str:
    """`text` with the folders of its paths left out, before anything cuts it: each side's
    copy of a server lives elsewhere (absolute on one side, relative on the other), and a
    path cut at two lengths would differ where the causes do not."""
    return _RELATIVE_FOLDERS.sub("", _FOLDERS.sub("", text))


def _comparable(text: str) -> str:
    text = _FOLDERS.sub("", text.removesuffix("...")).lower()
    text = re.sub(r"\d{4,}", "#", text)  # a port, a process id: this run's, not the cause's
    return " ".join(re.sub(r"[^a-z0-9#]+", " ", text).split())


def _unset_key(text: str) -> str:
    found = _UNSET_KEY.search(text)
    return (found[1] or found[2]) if found else ""


def same_cause(ours: str, theirs: str) -> bool:
    """Whether two causes say the same, spelled alike but for punctuation, folders and
    long numbers; one cut short (or quoted within the other) matches the rest. Two
    time-outs match: each side words its own (GymBus a rollout's deadline, NeMo Gym's
    collection stopped at the census's limit), and what each waited on is in its log. Two
    that name the same unset config key match: NeMo Gym's CLI rewords omegaconf's error. So
    do two that say the rows name no agent, each in its own words, two that meet an
    entrypoint that starts no server, and two downloads from the same unreachable host."""
    if _TIMED_OUT.search(ours) and _TIMED_OUT.search(theirs):
        return True
    if _unset_key(ours) and _unset_key(ours) == _unset_key(theirs):
        return True
    if _NO_AGENT.search(ours) and _NO_AGENT.search(theirs):
        return True
    host = _UNRESOLVED_HOST.search(ours)
    if host and host[1] == (_UNRESOLVED_HOST.search(theirs) or [None, None])[1]:
        return True
    ended, none = _STARTS_NO_SERVER
    if (ended.search(theirs) and none.search(ours)) or (ended.search(ours) and none.search(theirs)):
        return True
    a, b = sorted((_comparable(ours), _comparable(theirs)), key=len)
    return bool(a) and (a == b or (len(a) >= 20 and a in b))


# --- evidence ---


def unevidenced(side: Side) -> str:
    """What a side that collected every row lacks as evidence that its rows ran as meant
    (empty when nothing): a call to the policy, and a non-zero reward or a re-verification."""
    missing = []
    if not side.policy_calls:
        missing.append("the policy got no call")
    if not side.reverified and not any(_nonzero(reward) for reward in side.rewards.values()):
        missing.append("no reward is non-zero and nothing was re-verified")
    return " and ".join(missing)


def _nonzero(reward: Any) -> bool:
    return isinstance(reward, int | float) and abs(reward) > REWARD_TOLERANCE


def verdict(theirs: Side, ours: Side) -> tuple[str, str]:
    """(class, why) of a server whose NeMo Gym side ended as `theirs` and GymBus's as `ours`."""
    if theirs.outcome == ours.outcome == "works":
        missing = [f"{name}: {said}" for name, side in (("NeMo Gym", theirs), ("GymBus", ours))
                   if (said := unevidenced(side))]  # fmt: skip
        return ("runs, not evidenced", "; ".join(missing)) if missing else ("works on both", theirs.why)
    if theirs.outcome == "works":
        return "works on NeMo Gym only", f"GymBus: {ours.why}"
    if ours.outcome == "works":
        return "works on GymBus only", f"NeMo Gym: {theirs.why}"
    if same_cause(theirs.cause, ours.cause):
        return "fails on both, same cause", theirs.cause
    return "fails on both, different causes", f"NeMo Gym: {theirs.cause}; GymBus: {ours.cause}"


# --- requests ---


@dataclass
class Requests:
    counts: dict[str, int]
    """How many requests each side's logs hold."""
    differences: list[str]
    unsettled: list[str]
    """Differences on requests NeMo Gym's own two collections sent a different number of times."""


def _records(logs: list[Path]) -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for log in (log for log in logs if log.exists()):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            found.append((str(record["model"]), str(record["api"]), record["request"]))
    return found


def _key(model: str, api: str, body: dict[str, Any]) -> str:
    return json.dumps([model, api, as_sent(body)], sort_keys=True)


def _forms(model: str, api: str, body: dict[str, Any], apis: set[str]) -> list[str]:
    """The keys a GymBus request may match a NeMo Gym one by: as it was sent, and as GymBus's
    own conversion puts it into each other API NeMo Gym asked this model over."""
    forms = [_key(model, api, body)]
    for wanted in sorted(apis - {api}):
        try:
            forms.append(_key(model, wanted, in_api(api, body, wanted)))
        except (GymError, ValueError) as exc:  # that conversion refuses it: it cannot match
            forms.append(_key(model, wanted, {"unconvertible": str(exc)}))
    return forms


def request_keys(logs: list[Path]) -> collections.Counter[str]:
    """NeMo Gym's requests, as sent, counted."""
    return collections.Counter(_key(*record) for record in _records(logs))


def compare_requests(ours: list[Path], theirs: list[Path], varied: frozenset[str] = frozenset()) -> Requests:
    """Each side's requests, counted, and what differs: each request one side sent more
    often than the other, with its first differing field against the other side's nearest;
    those `varied` (sent a different number of times by NeMo Gym's own two collections) are
    unsettled, not differences."""
    nemo_gym = request_keys(theirs)
    apis: dict[str, set[str]] = collections.defaultdict(set)
    for key in nemo_gym:
        model, api, _ = json.loads(key)
        apis[model].add(api)
    left, unmatched = nemo_gym.copy(), []
    gymbus = _records(ours)
    for model, api, body in gymbus:
        forms = _forms(model, api, body, apis[model])
        found = next((form for form in forms if left[form] > 0), None)
        if found is None:
            unmatched.append(forms)
        else:
            left[found] -= 1
    left = +left
    steady = collections.Counter({key: count for key, count in left.items() if key not in varied})
    stays = [forms for forms in unmatched if not set(forms) & varied]
    moved = [forms for forms in unmatched if set(forms) & varied]
    stays, more = _in_place_of(left - steady, moved, stays)
    return Requests(
        {"nemo_gym": sum(nemo_gym.values()), "gymbus": len(gymbus)},
        _differences(steady, stays),
        [f"request {said} (NeMo Gym's own two collections differ on it)"
         for said in _differences(left - steady, moved + more)],
    )  # fmt: skip


def _in_place_of(
    varying: collections.Counter[str], moved: list[list[str]], stays: list[list[str]]
) -> tuple[list[list[str]], list[list[str]]]:
    """(`stays` still standing, those unsettled): GymBus's requests sent where NeMo Gym sent
    one its own two collections sent differently (`varying`, left unmatched), one for each
    such request of the same model and API that no GymBus request matching a varying one
    (`moved`) already stands in for. A conversation dealt at random (an appointment id)
    varies on both sides, and GymBus's request then matches neither of NeMo Gym's."""
    slots = collections.Counter(tuple(json.loads(key)[:2]) for key in varying.elements())
    for forms in moved:
        _take_slot(slots, forms)
    standing: list[list[str]] = []
    unsettled: list[list[str]] = []
    for forms in stays:
        (unsettled if _take_slot(slots, forms) else standing).append(forms)
    return standing, unsettled


def _take_slot(slots: collections.Counter[tuple[str, ...]], forms: list[str]) -> bool:
    """Takes one of `slots` (a model and API) that a form of the request is sent to."""
    for form in forms:
        slot = tuple(json.loads(form)[:2])
        if slots[slot] > 0:
            slots[slot] -= 1
            return True
    return False


def _differences(left: collections.Counter[str], unmatched: list[list[str]]) -> list[str]:
    found = []
    for key in sorted(left.elements()):
        model, api, said = json.loads(key)
        pool = [
            json.loads(form)[2]
            for forms in unmatched
            for form in forms
            if json.loads(form)[:2] == [model, api]
        ]
        if not pool:
            found.append(f"{model}: NeMo Gym sent a request GymBus did not")
            continue
        nearest = min(pool, key=lambda other: len(_first_difference(said, other)))
        found.append(f"{model}: {_first_difference(said, nearest)} (NeMo Gym != GymBus)")
    extra = len(unmatched) - sum(left.values())
    if extra > 0:
        found.append(f"GymBus sent {extra} request(s) more")
    return found


def _first_difference(a: Any, b: Any, at: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{at}.{key}")
        return at
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{at}[{index}]")
    return f"{at}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}"


def varied(first: list[Path], second: list[Path]) -> frozenset[str]:
    """The requests NeMo Gym's two collections (`first`, `second`: their logs) sent a
    different number of times."""
    one, two = request_keys(first), request_keys(second)
    return frozenset(key for key in one | two if one[key] != two[key])


def policy_calls(log: Path) -> int:
    return sum(1 for model, _, _ in _records([log]) if model == POLICY)


# --- rewards ---


def _same(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (
        isinstance(a, int | float) and isinstance(b, int | float) and abs(a - b) <= REWARD_TOLERANCE
    )


def differing(theirs: Side, ours: Side) -> list[str]:
    """The rows whose rewards differ between the sides (re-verified ones only where both re-verified)."""
    keys = set(theirs.rewards) | set(ours.rewards)
    if not (theirs.reverified and ours.reverified):  # a side whose re-verification did not run says why
        keys = {key for key in keys if not key.startswith("r")}
    return [key for key in sorted(keys) if not _same(theirs.rewards.get(key), ours.rewards.get(key))]


def _row(said: str) -> str:
    return said.removeprefix("row ").partition(":")[0]


def settle_collected(result: BothWays, second: dict[str, float | None]) -> None:
    """NeMo Gym's second collection of the same rows (`second`: its rewards by task index):
    a collected row whose rewards differ between the sides is unsettled where NeMo Gym's own
    two collections differ on that row, listed with every reward; elsewhere it stands."""
    kept = []
    for said in result.reward_mismatches:
        key = _row(said)
        first = result.nemo_gym.rewards.get(key)
        if key.startswith("r") or _same(first, second.get(key)):
            kept.append(said)
            continue
        each = f"NeMo Gym {first} then {second.get(key)}, GymBus {result.gymbus.rewards.get(key)}"
        result.unsettled.append(f"row {key}: {each} (NeMo Gym's own two collections differ on this row)")
    result.reward_mismatches = kept


def settle_reverified(
    result: BothWays, theirs: dict[str, float | None], ours: dict[str, float | None]
) -> None:
    """Each differing re-verified row tried again on both sides (`theirs`, `ours`): a row one
    side scored differently the second time is unsettled, no longer a mismatch; a row each
    side scored alike twice (or a second try that gave no reward) stays a mismatch, saying so."""
    kept = []
    for said in result.reward_mismatches:
        key = _row(said)
        if key not in theirs and key not in ours:
            kept.append(said)
            continue
        tries = {
            "NeMo Gym": (result.nemo_gym.rewards.get(key), theirs.get(key)),
            "GymBus": (result.gymbus.rewards.get(key), ours.get(key)),
        }
        each = ", ".join(f"{side} {first} then {second}" for side, (first, second) in tries.items())
        moved = [side for side, (first, second) in tries.items() if not _same(first, second)]
        if moved and None not in (value for pair in tries.values() for value in pair):
            by = " and ".join(moved)
            result.unsettled.append(f"row {key}: {each} (the same request scored differently by {by})")
        else:
            kept.append(f"row {key}: {each}")
    result.reward_mismatches = kept


def _reproduced(side: Side, stored: dict[str, float | None]) -> int:
    return sum(
        1 for key, reward in stored.items() if key in side.rewards and _same(side.rewards[key], reward)
    )


# --- the whole verdict ---


def judge(result: BothWays, work: Path) -> None:
    """The server's class, its evidence, and what differs between the sides, from what each
    side recorded and the request logs in `work`."""
    theirs, ours = result.nemo_gym, result.gymbus
    # Rows and requests compare only where both sides ran the rows: a side that did not start
    # (its class says why) has nothing to differ by.
    both_ran = bool(theirs.rows and ours.rows)
    for key in differing(theirs, ours) if both_ran else []:
        said = f"NeMo Gym {theirs.rewards.get(key)}, GymBus {ours.rewards.get(key)}"
        result.reward_mismatches.append(f"row {key}: {said}")
    compared = _compare_logs(result, work)
    result.requests = compared.counts
    result.request_mismatches = compared.differences if both_ran else []
    for side, name in ((theirs, "nemo_gym"), (ours, "gymbus")):
        side.policy_calls = policy_calls(work / f"{name}.requests.jsonl")
        side.reproduced = _reproduced(side, result.stored) if side.reverified else 0
    result.klass, result.why = verdict(theirs, ours)


def _compare_logs(result: BothWays, work: Path, varies: frozenset[str] = frozenset()) -> Requests:
    # A re-verification's requests count only where both sides re-verified.
    both = result.nemo_gym.reverified and result.gymbus.reverified
    logs = ["requests", *(["reverify.requests"] if both else [])]
    ours, theirs = ([work / f"{side}.{log}.jsonl" for log in logs] for side in ("gymbus", "nemo_gym"))
    return compare_requests(ours, theirs, varies)


def settle_requests(result: BothWays, work: Path, again: Path) -> None:
    """The request differences again, with those NeMo Gym's own second collection (its log
    `again`) sent a different number of times from its first unsettled."""
    if not (result.nemo_gym.rows and result.gymbus.rows):
        return
    compared = _compare_logs(result, work, varied([work / "nemo_gym.requests.jsonl"], [again]))
    result.request_mismatches = compared.differences
    result.unsettled += compared.unsettled
