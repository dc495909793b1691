"""The shape of the tick state (the DynamoDB item "tick", policy/io/state.py), checked before anything reads it.

The item is written by this code, but a hand edit, a restore from an old backup or a future release can leave
something else there. A state that does not parse must never stop a tick: the safety rules do not depend on it,
and the bookkeeping that does (spend since the last Budgets figure, notification timestamps, spot notices, the
warm-up history, the policy's own last change per group) is worth less than the function running. So each part is checked on its own; a part that is
malformed is dropped for the tick, reported (PolicyErrors, the error email) and rewritten by the tick's save.
Dropping spend is safe: without a figure the budget cap refuses scale-ups until Budgets is read again
(docs/policy.md, "unknown spend is not zero"), which this same tick does, since nothing is on record.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

MONTH = re.compile(r"\d{4}-\d{2}")


def _number(value, allow_none: bool = False) -> bool:
    if value is None:
        return allow_none
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _timestamp(value, allow_none: bool = False) -> bool:
    if value is None:
        return allow_none
    if not isinstance(value, str):
        return False
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return False
    return stamp.tzinfo is not None  # the tick compares it with an aware "now"


def _spend_scope(entry) -> str | None:
    """Why a spend scope entry (policy/spend.py) is unusable, or None."""
    if not isinstance(entry, dict):
        return f"is a {type(entry).__name__}, not an object"
    if not isinstance(entry.get("month"), str) or not MONTH.fullmatch(entry["month"]):
        return "has no month (YYYY-MM)"
    if not _number(entry.get("actual_usd"), allow_none=True):
        return f"actual_usd {entry.get('actual_usd')!r} is not a non-negative number"
    if not _timestamp(entry.get("actual_as_of"), allow_none=True):
        return f"actual_as_of {entry.get('actual_as_of')!r} is not an ISO 8601 time with a zone"
    if not _timestamp(entry.get("refused_at"), allow_none=True):
        return f"refused_at {entry.get('refused_at')!r} is not an ISO 8601 time with a zone"
    if not isinstance(entry.get("refused_why", ""), str):
        return f"refused_why {entry.get('refused_why')!r} is not a string"
    for key in ("estimated_since_usd", "elastic_month_usd"):
        if key in entry and not _number(entry[key]):
            return f"{key} {entry[key]!r} is not a non-negative number"
    return None


def _clean_map(state: dict, key: str, valid, what: str, problems: list[str]) -> None:
    """A part that maps names to values (notification times, spot notice expiries): dropped whole when it is not
    an object, else only its entries whose value `valid` refuses."""
    part = state.get(key)
    if part is None:
        return
    if not isinstance(part, dict):
        problems.append(f"{key} is a {type(part).__name__}, not an object")
        state.pop(key)
        return
    bad = sorted(str(k) for k, v in part.items() if not valid(v))
    if bad:
        problems.append(f"{key} {what}: {', '.join(bad)[:200]}")
        state[key] = {k: v for k, v in part.items() if valid(v)}
    else:  # every entry valid (each tick, almost always): a copy, without checking each entry again
        state[key] = dict(part)


def clean(raw: dict) -> tuple[dict, list[str]]:
    """(the usable part of the state, one line per dropped part). Parts this code does not know are kept."""
    state = dict(raw)
    problems: list[str] = []

    spend = state.get("spend")
    if spend is not None:
        if not isinstance(spend, dict):
            problems.append(f"spend is a {type(spend).__name__}, not an object")
            state.pop("spend")
        else:
            kept = {}
            for scope, entry in spend.items():
                why = _spend_scope(entry)
                if why:
                    problems.append(f"spend[{scope!r}] {why}")
                else:
                    kept[scope] = entry
            state["spend"] = kept

    if "last_tick_at" in state and not _timestamp(state["last_tick_at"]):
        problems.append(f"last_tick_at {state['last_tick_at']!r} is not an ISO 8601 time with a zone")
        state.pop("last_tick_at")

    _clean_map(state, "notified", _timestamp, "times not ISO 8601 with a zone", problems)
    _clean_map(state, "leaving", _number, "expiries not numbers", problems)
    _clean_map(state, "changed", _timestamp, "times not ISO 8601 with a zone", problems)

    rhythm = state.get("rhythm")
    if rhythm is not None and not isinstance(rhythm, dict):  # each pool's history checks itself (policy/rhythm.py)
        problems.append(f"rhythm is a {type(rhythm).__name__}, not an object")
        state.pop("rhythm")
    return state, problems
