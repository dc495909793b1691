"""`gpuloan cost-diff`: what a change does to each stack's resources and monthly GPU cost.

Both sides run the offline preview (`python -m gpuloan preview STACK --json`) in a subprocess with their own
code: the base ref from a temporary `git worktree`, the head from the working tree. Nothing reaches AWS.
A side whose config fails validation is reported with its problems, never crashed on. The figures are the
preview's cost model (pricing/cost_model/costs.py, prices from pricing/sources/catalog.py): the guaranteed floor is a fixed monthly
cost, the elastic figure a ceiling (every elastic node up all month), the headroom what the budget leaves above
the floor.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

PREVIEW_TIMEOUT_SECONDS = 600
MARKER = "<!-- gpuloan-cost-diff -->"  # lets CI find and update its own PR comment


class CostDiffError(Exception):
    """The diff could not be made at all (not a git repository, unknown ref); the message says which."""


@dataclass
class Side:
    """One stack at one side: the preview document, or why there is none."""

    doc: dict[str, Any] | None = None
    missing: bool = False  # no Pulumi.<stack>.yaml on this side
    problems: list[str] = field(default_factory=list)  # config validation problems, one line each
    error: str | None = None  # the preview failed for another reason

    @property
    def ok(self) -> bool:
        return self.doc is not None


@dataclass
class StackDiff:
    stack: str
    base: Side
    head: Side
    added: list[dict] = field(default_factory=list)
    removed: list[dict] = field(default_factory=list)
    changed: list[tuple[dict, list[str]]] = field(default_factory=list)  # (resource, changed input keys)
    pools: list[dict] = field(default_factory=list)  # rows of the cost table
    totals: dict = field(default_factory=dict)
    node_groups: list = field(default_factory=list)  # offline.rollout.GroupChange: replaced / rolled / deleted
    upgrade_steps: list[str] = field(default_factory=list)  # a Kubernetes version change, in apply order
    platform: list[dict] = field(default_factory=list)  # {item, base, head}: monthly USD, UNKNOWN or None

    @property
    def head_invalid(self) -> bool:
        return not self.head.missing and not self.head.ok


# --- running the two sides ---------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise CostDiffError(f"git {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout.strip()


def repo_root(path: Path) -> Path:
    try:
        return Path(_git(path, "rev-parse", "--show-toplevel"))
    except CostDiffError:
        raise CostDiffError(f"{path} is not inside a git repository; cost-diff compares against a git ref") from None


def resolve_ref(repo: Path, ref: str) -> str:
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except CostDiffError:
        raise CostDiffError(f"unknown git ref '{ref}' (fetch it first; CI needs `fetch-depth: 0`)") from None


@contextlib.contextmanager
def worktree(repo: Path, commit: str) -> Iterator[Path]:
    """A detached checkout of `commit` in a temporary directory, removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="gpuloan-base-"))
    path = tmp / "base"
    _git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
    try:
        yield path
    finally:
        with contextlib.suppress(CostDiffError):
            _git(repo, "worktree", "remove", "--force", str(path))
        with contextlib.suppress(OSError):
            tmp.rmdir()
        with contextlib.suppress(CostDiffError):
            _git(repo, "worktree", "prune")


def stacks_in(root: Path) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


def head_price_file(head: Path, price_file: Path | str | None = None) -> Path | None:
    """The one price file both sides are priced with, so a cost diff shows the change and not a price update:
    `--prices`, else $GPULOAN_PRICE_FILE, else the working tree's committed gpuloan-prices.json (the head's, never
    the base's), else the head's shipped snapshot (an older base may ship another one, or none); None: the per-user
    cache, or no prices at all."""
    from pricing.sources.pricebook import ENV_PRICE_FILE, load_cache, load_snapshot, project_price_file

    chosen = price_file or os.environ.get(ENV_PRICE_FILE) or project_price_file(head)
    if not chosen and load_cache() is None and load_snapshot() is not None:
        from pricing.sources.pricebook import SNAPSHOT_FILE

        chosen = SNAPSHOT_FILE
    return Path(chosen).resolve() if chosen else None


def _price_env(price_file: Path | None) -> dict[str, str]:
    """The price source for both sides, as an absolute path: each side runs in its own directory (the base in a
    temporary worktree), where a relative path (the Makefile's `../shared/data/prices`) would name nothing, or
    another file. The base's own gpuloan-prices.json is never read (ENV_PROJECT_PRICES)."""
    from pricing.sources.pricebook import ENV_PRICE_FILE, ENV_PROJECT_PRICES

    return {ENV_PROJECT_PRICES: "0", **({ENV_PRICE_FILE: str(price_file)} if price_file else {})}


def preview_side(root: Path, stack: str, price_file: Path | None = None) -> Side:
    """Run that tree's own `gpuloan preview STACK --json` (its code first on sys.path)."""
    if not (root / f"Pulumi.{stack}.yaml").is_file():
        return Side(missing=True)
    env = {
        **os.environ,
        **_price_env(price_file),
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    try:
        result = subprocess.run(
            [sys.executable, "-m", "gpuloan", "preview", stack, "--json"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=PREVIEW_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        return Side(error=f"the offline preview took over {PREVIEW_TIMEOUT_SECONDS} s")
    if result.returncode == 0:
        try:
            return Side(doc=json.loads(result.stdout))
        except json.JSONDecodeError:
            return Side(error="the offline preview printed no JSON document")
    problems = [line.strip()[2:] for line in result.stderr.splitlines() if line.startswith(" - ")]
    if problems:
        return Side(problems=problems)
    tail = [line for line in result.stderr.strip().splitlines() if line.strip()][-3:]
    return Side(error=" / ".join(tail) or f"the offline preview exited with {result.returncode}")


# --- comparing ---------------------------------------------------------------------------------------------


def _resource_key(r: dict) -> str:
    return r["urn"]


_OBJECT_REPR = re.compile(r"^<pulumi\.asset\.\w+ object at 0x[0-9a-f]+>$")


def _same_input(a: Any, b: Any) -> bool:
    """Equal inputs; an asset a preview from before content hashing printed as `<pulumi.asset.X object at 0x…>`
    carries nothing to compare, so it matches any asset (a code change still shows in `sourceCodeHash`)."""
    if a == b:
        return True
    legacy = lambda v: isinstance(v, str) and _OBJECT_REPR.match(v) is not None  # noqa: E731
    asset = lambda v: legacy(v) or isinstance(v, dict) and "asset" in v  # noqa: E731
    return (legacy(a) or legacy(b)) and asset(a) and asset(b)


def diff_resources(base: dict | None, head: dict | None) -> tuple[list[dict], list[dict], list[tuple[dict, list[str]]]]:
    old = {_resource_key(r): r for r in (base or {}).get("resources", [])}
    new = {_resource_key(r): r for r in (head or {}).get("resources", [])}
    added = [new[k] for k in new if k not in old]
    removed = [old[k] for k in old if k not in new]
    changed = []
    for k in new:
        if k in old:
            a, b = old[k], new[k]
            keys = sorted(
                {
                    key
                    for key in set(a["inputs"]) | set(b["inputs"])
                    if not _same_input(a["inputs"].get(key), b["inputs"].get(key))
                }
            )
            keys += [opt for opt in ("ignore_changes", "protect") if a.get(opt) != b.get(opt)]
            if keys:
                marks = [m for m in (_placeholder_marker(base, a), _placeholder_marker(head, b)) if m]
                changed.append(
                    (
                        b,
                        [
                            f"{k} [secret]" if any(m(a["inputs"].get(k)) or m(b["inputs"].get(k)) for m in marks) else k
                            for k in keys
                        ],
                    )
                )
    return added, removed, changed


def _placeholder_marker(doc: dict | None, resource: dict):
    """A test for 'this input holds a secret's placeholder' on a side with unread secrets (config/secret_values.py):
    the change of such an input is the secret's, whose value neither side shows ([secret], as Pulumi prints it)."""
    if not (doc or {}).get("unchecked_secrets"):
        return None
    from config.secret_values import CANDIDATES

    tokens = [re.escape(c) for c in CANDIDATES if isinstance(c, str)]
    tokens += [
        rf"(?<![\d.]){c}(\.0+)?(?![\d.])"
        for c in CANDIDATES
        if isinstance(c, int) and not isinstance(c, bool) and c >= 100
    ]
    pattern = re.compile("|".join(tokens))
    return lambda value: value is not None and bool(pattern.search(json.dumps(value, default=str)))


# Every money column the preview's cost table shows is diffed (the on-demand fallback ceiling included).
COST_FIELDS = (
    "guaranteed_monthly_usd",
    "elastic_max_monthly_usd",
    "fallback_max_monthly_usd",
    "budget_monthly_usd",
    "headroom_monthly_usd",
)
# A cost whose price the price source lacks (the preview's null): shown as such, never as $0 (docs/prices.md).
UNKNOWN = "unknown"
# A figure a Pulumi secret feeds on either side (the preview's `cost.secret_figures`): never compared, never shown
# as a change (gpuloan/preview.py hides the placeholder's value).
SECRET = "not compared: secret"


def _cost(value: float | None) -> float | str:
    return UNKNOWN if value is None else value


class UpperBound(float):
    """A figure that is at most this (the budget headroom while some platform rows have no price): shown as ≤$N."""


def _headroom(budget: float | None, guaranteed: float | str) -> float | str | None:
    if budget is None:
        return None
    return UNKNOWN if guaranteed == UNKNOWN else budget - guaranteed


def _pool_figures(pool: dict) -> dict[str, float | str | None]:
    budget = pool.get("budget_monthly_usd")
    guaranteed = _cost(pool.get("guaranteed_monthly_usd"))
    return {
        "guaranteed_monthly_usd": guaranteed,
        "elastic_max_monthly_usd": _cost(pool.get("elastic_max_monthly_usd")),
        "fallback_max_monthly_usd": _cost(pool.get("fallback_max_monthly_usd")),
        "budget_monthly_usd": budget,
        "headroom_monthly_usd": _headroom(budget, guaranteed),
    }


COMMITMENTS_ROW = "commitments (unused)"


def _commitment_figures(doc: dict | None) -> dict[str, float | str | None] | None:
    """The row of the commitments' unused fees (preview's `cost.unused_commitment_monthly_usd`); None when the
    side lists no commitment (or has no document)."""
    cost = (doc or {}).get("cost") or {}
    if not cost.get("commitments") and cost.get("unused_commitment_monthly_usd", 0.0) is not None:
        return None
    return {
        "guaranteed_monthly_usd": _cost(cost.get("unused_commitment_monthly_usd")),
        "elastic_max_monthly_usd": None,
        "fallback_max_monthly_usd": None,
        "budget_monthly_usd": None,
        "headroom_monthly_usd": None,
    }


def commitment_lines(d: "StackDiff") -> list[str]:
    """One line per commitment whose fee or use differs between the sides (or that one side lacks)."""

    def rows(side) -> dict[str, dict]:
        return {c["name"]: c for c in ((side.doc or {}).get("cost", {}).get("commitments") or [])} if side.ok else {}

    old, new = rows(d.base), rows(d.head)
    out = []
    for name in [*new, *(n for n in old if n not in new)]:
        b, h = old.get(name), new.get(name)
        if (
            b is not None
            and h is not None
            and all(round(b[k]) == round(h[k]) for k in ("fee_monthly_usd", "used_monthly_usd"))
        ):
            continue
        c = h or b
        what = "added" if b is None else "removed" if h is None else "changed"
        out.append(
            f"{d.stack}: commitment {name} ({c['kind']}, {c['status']}) {what}: fee "
            f"{money_cell(b and b['fee_monthly_usd'], h and h['fee_monthly_usd'])}/month, covering floor hours "
            f"{money_cell(b and b['used_monthly_usd'], h and h['used_monthly_usd'])}, unused "
            f"{money_cell(b and b['unused_monthly_usd'], h and h['unused_monthly_usd'])}"
        )
    return out


def _total_figures(cost: dict) -> dict[str, float | str | None]:
    guaranteed = _cost(cost.get("guaranteed_monthly_usd"))
    headroom = _headroom(cost.get("budget_monthly_usd"), guaranteed)
    if "platform" in cost and headroom not in (None, UNKNOWN):  # the environment budget pays for the platform too
        headroom = cost["budget_headroom_monthly_usd"]
        headroom = UpperBound(headroom) if cost.get("budget_headroom_is_upper_bound") else headroom
    return {
        "guaranteed_monthly_usd": guaranteed,
        "elastic_max_monthly_usd": _cost(cost.get("elastic_max_monthly_usd")),
        "fallback_max_monthly_usd": _cost(cost.get("fallback_max_monthly_usd")),
        "budget_monthly_usd": cost.get("budget_monthly_usd"),
        "headroom_monthly_usd": headroom,
    }


def _secret_fields(doc: dict | None, row: str) -> set[str]:
    """The cost-table fields of `row` (a pool or "total") a secret feeds on this side."""
    fields = set(((doc or {}).get("cost", {}).get("secret_figures") or {}).get(row, ()))
    if "budget_monthly_usd" in fields or "budget_headroom_monthly_usd" in fields:
        fields |= {"budget_monthly_usd", "headroom_monthly_usd"}  # the headroom is budget minus floor
    if "guaranteed_monthly_usd" in fields:
        fields.add("headroom_monthly_usd")
    return fields & set(COST_FIELDS)


def _mark_secrets(row: str, sides: list[dict | None], docs: list[dict | None]) -> None:
    """A field a secret feeds on either side is SECRET on both: a value not read is never compared."""
    hidden = _secret_fields(docs[0], row) | _secret_fields(docs[1], row)
    for figures in sides:
        if figures is not None:
            figures.update({f: SECRET for f in hidden})


def diff_costs(base: dict | None, head: dict | None) -> tuple[list[dict], dict]:
    """Rows {pool, base: figures|None, head: figures|None} in head order (removed pools last), and totals."""
    old = {p["pool"]: p for p in (base or {}).get("cost", {}).get("pools", [])}
    new = {p["pool"]: p for p in (head or {}).get("cost", {}).get("pools", [])}
    names = list(new) + [n for n in old if n not in new]
    rows = [
        {
            "pool": n,
            "base": _pool_figures(old[n]) if n in old else None,
            "head": _pool_figures(new[n]) if n in new else None,
        }
        for n in names
    ]
    # The commitments' fees no floor uses: billed all the same, in no pool (the total includes them).
    sides = [_commitment_figures(doc) for doc in (base, head)]
    if any(s is not None for s in sides):
        rows.append({"pool": COMMITMENTS_ROW, "base": sides[0], "head": sides[1]})
    totals = {
        "base": _total_figures(base["cost"]) if base else None,
        "head": _total_figures(head["cost"]) if head else None,
    }
    for row in rows:
        _mark_secrets(row["pool"], [row["base"], row["head"]], [base, head])
    _mark_secrets("total", [totals["base"], totals["head"]], [base, head])
    return rows, totals


def diff_stack(stack: str, base: Side, head: Side) -> StackDiff:
    d = StackDiff(stack, base, head)
    if (base.ok or base.missing) and (head.ok or head.missing):
        d.added, d.removed, d.changed = diff_resources(base.doc, head.doc)
    if base.ok and head.ok:
        from offline.rollout import group_changes, upgrade_steps

        d.node_groups = group_changes(base.doc, head.doc)
        d.upgrade_steps = upgrade_steps(base.doc, head.doc)
    if base.ok or head.ok:
        d.pools, d.totals = diff_costs(base.doc, head.doc)
        d.platform = diff_platform(base.doc, head.doc)
    return d


def diff_platform(base: dict | None, head: dict | None) -> list[dict]:
    """Rows {item, base, head} of the platform cost (monthly USD, UNKNOWN, or None where the side lacks it)."""

    def rows(doc):
        return {r["item"]: _cost(r["monthly_usd"]) for r in (doc or {}).get("cost", {}).get("platform", [])}

    old, new = rows(base), rows(head)
    return [{"item": i, "base": old.get(i), "head": new.get(i)} for i in [*new, *(i for i in old if i not in new)]]


def cost_diff(
    repo: Path, base_ref: str, stacks: list[str] | None = None, parallel: int = 2, price_file: Path | str | None = None
) -> list[StackDiff]:
    root = repo_root(repo)
    commit = resolve_ref(root, base_ref)
    price_file = head_price_file(repo, price_file)
    with worktree(root, commit) as base_root:
        names = stacks or sorted(set(stacks_in(base_root)) | set(stacks_in(root)))
        if not names:
            raise CostDiffError(f"no Pulumi.<stack>.yaml in {root} or at {base_ref}")
        known = set(stacks_in(base_root)) | set(stacks_in(root))
        unknown = [s for s in names if s not in known]
        if unknown:  # a typo must not read as "will not change" and pass a required check
            raise CostDiffError(
                f"no stack {', '.join(unknown)} in the working tree or at {base_ref} (stacks: "
                f"{', '.join(sorted(known)) or 'none'})"
            )
        jobs = [(base_root, s) for s in names] + [(root, s) for s in names]
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            sides = list(pool.map(lambda job: preview_side(*job, price_file=price_file), jobs))
    return [diff_stack(s, sides[i], sides[len(names) + i]) for i, s in enumerate(names)]


# --- rendering ---------------------------------------------------------------------------------------------


def _usd(value: float | str | None) -> str:
    if value == UNKNOWN:
        return UNKNOWN
    return "—" if value is None else f"{'≤' if isinstance(value, UpperBound) else ''}${value:,.0f}"


def _delta(value: float) -> str:
    sign = "+" if value > 0 else "−"
    return f"{sign}${abs(value):,.0f}"


def money_cell(base: float | None, head: float | None, base_known: bool = True) -> str:
    if SECRET in (base, head):
        return SECRET
    if not base_known:
        return _usd(head)
    if base is None and head is None:
        return "—"
    if UNKNOWN in (base, head):  # no difference can be computed from an unknown price
        return UNKNOWN if base == head else f"{_usd(base)} → {_usd(head)}"
    if base is not None and head is not None and round(base) == round(head):
        return _usd(head)
    return f"{_usd(base)} → {_usd(head)} ({_delta((head or 0.0) - (base or 0.0))})"


HEADERS = ("pool", "guaranteed (fixed)", "elastic max", "fallback max", "budget", "budget headroom")


def cost_rows(d: StackDiff) -> list[list[str]]:
    base_known = d.base.ok or d.base.missing
    out = []
    for row in [*d.pools, {"pool": "total", **d.totals}]:
        b, h = row["base"] or {}, row["head"] or {}
        label = row["pool"]
        if row["base"] is None and base_known and row["head"] is not None and label != "total":
            label += " (new)"
        if row["head"] is None and label != "total":
            label += " (removed)"
        out.append([label] + [money_cell(b.get(f), h.get(f), base_known) for f in COST_FIELDS])
    return out


def _side_notes(d: StackDiff) -> list[str]:
    notes = []
    secrets = sorted({p for side in (d.base, d.head) if side.ok for p in side.doc.get("unchecked_secrets") or []})
    if secrets:
        notes.append(
            "not compared: secret (Pulumi `secure:` values, opaque offline; previewed with placeholders, "
            "figures they feed not shown): " + ", ".join(secrets)
        )
    for name, side in (("base", d.base), ("head", d.head)):
        if side.missing:
            notes.append(
                f"{name}: no Pulumi.{d.stack}.yaml" + (" (new stack)" if name == "base" else " (stack removed)")
            )
        elif side.problems:
            notes.append(f"{name}: config fails validation:" + "".join(f"\n  - {p}" for p in side.problems))
        elif side.error:
            notes.append(f"{name}: no offline preview: {side.error}")
    return notes


def summary(d: StackDiff) -> str:
    return f"{len(d.added)} to add, {len(d.changed)} to change, {len(d.removed)} to remove"


def render_markdown(diffs: list[StackDiff], base_label: str) -> str:
    lines = [MARKER, f"## GPU cost diff: `{base_label}` → this change", ""]
    for d in diffs:
        lines.append(f"### stack `{d.stack}`")
        for note in _side_notes(d):
            head, *rest = note.split("\n")
            lines.append(f"> **{head}**")
            lines += [f"> {r.strip()}" for r in rest]
            lines.append("")
        if d.base.ok or d.head.ok:
            if (d.base.ok or d.base.missing) and (d.head.ok or d.head.missing):
                lines += [f"Resources: {summary(d)}", ""]
            lines.append("| " + " | ".join(HEADERS) + " |")
            lines.append("|---|" + "---:|" * (len(HEADERS) - 1))
            for row in cost_rows(d):
                cells = [f"**{c}**" if row[0] == "total" else c for c in row]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
        lines += node_group_lines(d)
        lines += resource_lines(d)
    lines.append(
        "Monthly USD at 730 h/month; guaranteed = the floor at the rate it is paid (price model and "
        "source below), elastic max = every elastic (spot) node up all month (a ceiling), fallback max = the "
        "on-demand fallback group at its max all month (a ceiling), headroom = budget "
        "minus floor. Offline preview: nothing was created."
    )
    lines += [f"{d.stack}: {src}" for d, src in _price_sources(diffs)]
    lines += [line for d in diffs for line in commitment_lines(d)]
    lines += [
        f"{d.stack}/{p['pool']} floor: {p['guaranteed_price_model']}, {p['guaranteed_rate_source'] or 'rate unknown'}"
        for d in diffs
        if d.head.ok
        for p in d.head.doc["cost"]["pools"]
        if p.get("guaranteed_price_model")
    ]
    return "\n".join(lines) + "\n"


def resource_lines(d: StackDiff) -> list[str]:
    """The collapsed table of resources added, changed (with the inputs that changed) and removed; [] if none."""
    rows = (
        [f"| + add | `{r['type']}` | {r['name']} |" for r in d.added]
        + [f"| ~ change | `{r['type']}` | {r['name']} ({', '.join(keys)}) |" for r, keys in d.changed]
        + [f"| − remove | `{r['type']}` | {r['name']} |" for r in d.removed]
    )
    if not rows:
        return []
    return [
        "<details><summary>resources</summary>",
        "",
        "| | type | name |",
        "|---|---|---|",
        *rows,
        "",
        "</details>",
        "",
    ]


def _price_sources(diffs: list[StackDiff]) -> list[tuple[StackDiff, str]]:
    """Each stack's price line (source and date of its prices, or how to get prices), from the working tree."""
    return [
        (d, d.head.doc["cost"]["price_source"]) for d in diffs if d.head.ok and "price_source" in d.head.doc["cost"]
    ]


def node_group_lines(d: StackDiff) -> list[str]:
    """The PR comment's node group section: what this change does to running nodes (offline/rollout.py)."""
    out = []
    if d.upgrade_steps:
        out += ["**Kubernetes upgrade**, in the order `pulumi up` applies it:", "", *d.upgrade_steps, ""]
    if not d.node_groups:
        return out
    out += ["**Node groups this change replaces or rolls** (running pods on them are evicted):", ""]
    for change in d.node_groups:
        mark = "⚠️ **floor**: " if change.is_floor else ""
        out.append(f"- {mark}{change.sentence()}")
    if any(c.is_floor and c.action in ("replaces", "deletes") for c in d.node_groups):
        out.append(
            "- the floor is `protect`ed (protect_critical): `pulumi up` refuses this until protection is "
            "lifted on purpose"
        )
    return out + [""]
