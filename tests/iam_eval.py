"""A small IAM identity-policy evaluator for tests: explicit deny > allow > implicit deny.

Covers what the stack's policies use: Action/Resource with `*`/`?` wildcards (actions case-insensitive), and the
condition operators StringEquals, StringNotEquals, StringLike, ArnLike, Null, with ForAnyValue:/ForAllValues:
prefixes and list values (any value matches). A key missing from the request context fails StringEquals/Like and
passes StringNotEquals, as in IAM. Not a replacement for the IAM policy simulator: it answers "does this document
allow this request", which is what the permission tests need.
"""

from __future__ import annotations

import re
from typing import Any


def _listify(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _glob(pattern: str, value: str, case: bool = True) -> bool:
    regex = "^" + re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".") + "$"
    return re.match(regex, value, 0 if case else re.I) is not None


def action_matches(pattern: str, action: str) -> bool:
    return _glob(pattern, action, case=False)


def _condition_holds(op: str, key: str, expected: Any, context: dict[str, Any]) -> bool:
    qualifier, _, base = op.rpartition(":")
    expected = [str(e) for e in _listify(expected)]
    present = key in context
    if base == "Null":
        return (not present) == (expected[0].lower() == "true")
    actual = [str(v) for v in _listify(context.get(key, []))]
    if base.endswith("IfExists"):
        if not present:
            return True
        base = base[: -len("IfExists")]
    if base == "StringEquals":
        one = lambda v: v in expected  # noqa: E731
    elif base == "StringNotEquals":
        if not present:
            return True
        one = lambda v: v not in expected  # noqa: E731
    elif base in ("StringLike", "ArnLike", "ArnEquals"):
        one = lambda v: any(_glob(e, v) for e in expected)  # noqa: E731
    else:
        raise NotImplementedError(op)
    if not present:
        return False
    if qualifier == "ForAllValues":
        return all(one(v) for v in actual)
    return any(one(v) for v in actual)


def statement_applies(st: dict, action: str, resource: str, context: dict[str, Any]) -> bool:
    if "Action" in st and not any(action_matches(p, action) for p in _listify(st["Action"])):
        return False
    if "NotAction" in st and any(action_matches(p, action) for p in _listify(st["NotAction"])):
        return False
    if not any(_glob(p, resource) for p in _listify(st.get("Resource", "*"))):
        return False
    for op, pairs in (st.get("Condition") or {}).items():
        for key, expected in pairs.items():
            if not _condition_holds(op, key, expected, context):
                return False
    return True


def _decide(documents: list[dict], action: str, resource: str, context: dict[str, Any]) -> bool:
    statements = [st for d in documents for st in _listify(d["Statement"])]
    if any(st["Effect"] == "Deny" and statement_applies(st, action, resource, context) for st in statements):
        return False
    return any(st["Effect"] == "Allow" and statement_applies(st, action, resource, context) for st in statements)


def allowed(
    documents: list[dict] | dict,
    action: str,
    resource: str = "*",
    context: dict[str, Any] | None = None,
    boundary: dict | None = None,
) -> bool:
    """Identity policies `documents`, and the principal's permissions boundary if it has one: a request within the
    account is allowed only when an identity policy allows it AND the boundary allows it, and an explicit deny in
    either refuses it (IAM User Guide, "Policy evaluation logic" and "Permissions boundaries for IAM entities",
    https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html)."""
    docs = documents if isinstance(documents, list) else [documents]
    context = context or {}
    if boundary is not None and not _decide([boundary], action, resource, context):
        return False
    return _decide(docs, action, resource, context)


def granted_somewhere(documents: list[dict] | dict, action: str) -> bool:
    """Some Allow statement names this action (whatever its resource or condition)."""
    docs = documents if isinstance(documents, list) else [documents]
    return any(
        st["Effect"] == "Allow" and any(action_matches(p, action) for p in _listify(st.get("Action", [])))
        for d in docs
        for st in _listify(d["Statement"])
    )
