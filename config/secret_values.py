"""Pulumi secrets offline: a `secure:` value is opaque to gpuloan (it has no key to decrypt it), so validation and
the offline preview put a typed placeholder in its place, one the field's own validation accepts, and list the
value as not checked. Everything that does not depend on it is still validated and previewed; a figure that does
depend on it is never shown as a change (offline/diff.py: "not compared: secret").

The placeholder is the first of CANDIDATES with which the config has no problem at the secret's path (and the
fewest problems elsewhere: a placeholder budget must not trip the pools-within-budget rule). A secret no candidate
fits (a whole list of pools, say) stays a problem: "a Pulumi secret ... validate it with --config-json".
"""

from __future__ import annotations

import copy
import re
from typing import Any, Callable

# Strings first (an email passes every string field that takes an address, and any plain string field), then
# numbers from large to small (a large budget keeps budget-sum rules satisfied), then the other JSON types.
PLACEHOLDER_EMAIL = "unchecked-secret@example.com"
CANDIDATES: tuple[Any, ...] = (
    PLACEHOLDER_EMAIL,
    "unchecked-secret",
    1_000_000,
    10_000,
    100,
    10,
    1,
    0.5,
    True,
    False,
    0,
    [],
    {},
)

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def secure_paths(value: Any, path: str = "") -> list[str]:
    """Paths of Pulumi secrets (`{secure: <ciphertext>}`) in a stack file's values: gpuloan cannot decrypt them."""
    if isinstance(value, dict):
        if set(value) == {"secure"} and isinstance(value["secure"], str):
            return [path or "(root)"]
        return [p for k, v in value.items() for p in secure_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in secure_paths(v, f"{path}[{i}]")]
    return []


def under(problem_path: str, secret: str) -> bool:
    return problem_path == secret or problem_path.startswith(secret + ".") or problem_path.startswith(secret + "[")


def _parts(path: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _PART.findall(path)]


def _put(data: Any, path: str, value: Any) -> None:
    *head, last = _parts(path)
    for part in head:
        data = data[part]
    data[last] = value


def substitute(
    data: dict[str, Any], problems_of: Callable[[dict[str, Any]], list[tuple[str, str]]]
) -> tuple[dict[str, Any], list[str], list[str]]:
    """(a copy of the `gpuloan:` data with placeholders, the secret paths replaced (not checked), the secret paths
    no placeholder fits (left as they are)). `problems_of(data)` validates and returns the (path, message) list."""
    secrets = [p for p in secure_paths(data) if p != "(root)"]
    if not secrets:
        return data, [], []
    out = copy.deepcopy(data)
    for path in secrets:
        _put(out, path, CANDIDATES[0])
    replaced, unfit = [], []
    for path in secrets:
        best: tuple[tuple[bool, int], Any] | None = None
        for candidate in CANDIDATES:
            _put(out, path, copy.deepcopy(candidate))
            problems = problems_of(out)
            score = (any(under(p, path) for p, _ in problems), len(problems))
            if best is None or score < best[0]:
                best = (score, candidate)
            if not problems:
                break
        assert best is not None
        if best[0][0]:  # every candidate fails the field itself: report the secret as before
            _put(out, path, copy.deepcopy(data_at(data, path)))
            unfit.append(path)
        else:
            _put(out, path, copy.deepcopy(best[1]))
            replaced.append(path)
    return out, replaced, unfit


def data_at(data: Any, path: str) -> Any:
    for part in _parts(path):
        data = data[part]
    return data


def budget_secret(path: str) -> int | None | bool:
    """Which budget a secret path is (False: none): None for the environment budget, i for pools[i]'s."""
    m = re.fullmatch(r"budget(\.monthly_usd)?", path)
    if m:
        return None
    m = re.fullmatch(r"pools\[(\d+)\]\.budget(\.monthly_usd)?", path)
    return int(m.group(1)) if m else False


def touches_money(path: str) -> bool:
    """Whether a secret at `path` can change a cost figure other than a budget: addresses, thresholds and CI
    settings do not; anything under pools, the region, the cluster or instance prices may."""
    if re.search(r"(^|\.)alert_emails(\[\d+\])?$", path) or re.search(r"thresholds_pct(\[\d+\])?$", path):
        return False
    if budget_secret(path) is not False:
        return False
    return path.split(".")[0].split("[")[0] in {
        "region",
        "pools",
        "cluster",
        "instance_prices",
        "cost_assumptions",
        "policy",
    }
