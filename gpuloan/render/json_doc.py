"""The conventions of every JSON document a gpuloan command prints (issue 37, item 4), in one place:

- it opens with `schema_version` (SCHEMA_VERSION: raised when a key is renamed or its meaning changes, so a script
  that reads the output can tell);
- an amount of money (a key ending in `_usd`, or a value under one) is rounded to cents, and an unknown one is
  `null`, never the text "unknown";
- a rate (`..._usd_per_hour`, `usd_per_gpu_hour` ...) and any other number keep 10 significant digits, so float
  noise (4.550305000000001) does not reach the reader;
- `resources` (the Pulumi inputs of the offline preview) are printed as the program gave them.
Text output is untouched: tables already print money as `$1,234` or `unknown`."""

from __future__ import annotations

import json
from typing import Any

SCHEMA_VERSION = 1
UNKNOWN_TEXT = "unknown"
VERBATIM_KEYS = frozenset({"resources"})


def _is_amount(key: str | None) -> bool:
    """`monthly_usd`, `total_cost_usd`, `estimated_savings_usd_over_window`: dollars, not dollars per unit."""
    return key is not None and (key == "usd" or key.endswith("_usd") or ("_usd_" in key and not _is_rate(key)))


def _is_rate(key: str | None) -> bool:
    return key is not None and "usd_per_" in key


def normalised(value: Any, key: str | None = None, amount: bool = False) -> Any:
    """`value` with the money and number conventions applied; `amount`: it sits under a money key."""
    if isinstance(value, dict):
        return {k: v if k in VERBATIM_KEYS else normalised(v, k, amount or _is_amount(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalised(v, key, amount) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    money = (amount or _is_amount(key)) and not _is_rate(key)
    if money and value == UNKNOWN_TEXT:
        return None
    if isinstance(value, float):
        return round(value, 2) if money else float(f"{value:.10g}")
    return value


def document(doc: dict) -> dict:
    """The document as printed: `schema_version` first, then `doc` normalised."""
    return {"schema_version": SCHEMA_VERSION, **normalised({k: v for k, v in doc.items() if k != "schema_version"})}


def dumps(doc: dict, **options) -> str:
    """json.dumps of document(doc); `options` as json.dumps takes them (indent defaults to 2)."""
    options.setdefault("indent", 2)
    return json.dumps(document(doc), **options)
