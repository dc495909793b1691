"""The cost-diff report in the shape Infracost users know: a headline per stack and for all stacks
("Monthly cost will increase by $16,029 (+46 %)"), the floor/elastic/fallback split per pool, the cost per
resource in a details block, and the replace/roll warnings of the change. Rendered as Markdown (the PR comment),
a plain table, or JSON; `exceeds()` is the `--fail-above` check of a required status check.

The headline figure is the **fixed** monthly cost: the guaranteed floor plus the platform rows that have a
price (EKS, NAT, system nodes, volumes, KMS, CloudWatch, Lambda). Elastic and fallback figures are ceilings (every
node up all month); their change is a second line, never mixed into the headline.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from offline import diff as cost_diff
from gpuloan.render import json_doc
from offline.diff import UNKNOWN, StackDiff
from pricing.cost_model.billing import HOURS_PER_MONTH

FORMATS = ("markdown", "table", "json")


@dataclass(frozen=True)
class Change:
    """One monthly figure before and after (None: the side has no such stack; UNKNOWN: no price)."""

    base: float | str | None
    head: float | str | None

    @property
    def known(self) -> bool:
        return UNKNOWN not in (self.base, self.head) and not (self.base is None and self.head is None)

    @property
    def delta(self) -> float | None:
        return (self.head or 0.0) - (self.base or 0.0) if self.known else None

    @property
    def percent(self) -> float | None:
        if not self.known or not self.base:
            return None
        return 100.0 * self.delta / self.base

    def to_json(self) -> dict:
        r = lambda v: round(v, 2) if isinstance(v, float) else v  # noqa: E731
        return {
            "base_monthly_usd": r(self.base),
            "head_monthly_usd": r(self.head),
            "delta_monthly_usd": r(self.delta),
            "delta_pct": None if self.percent is None else round(self.percent, 1),
        }


def _fixed(doc: dict | None) -> float | str | None:
    if doc is None:
        return None
    cost = doc["cost"]
    value = cost.get("fixed_monthly_usd", cost.get("guaranteed_monthly_usd"))
    return UNKNOWN if value is None else float(value)


def _ceiling(doc: dict | None) -> float | str | None:
    """Floor + platform + every elastic/fallback group at its max all month: the most the stack can cost."""
    if doc is None:
        return None
    cost = doc["cost"]
    worst = [p.get("worst_case_monthly_usd") for p in cost["pools"]]
    if any(v is None for v in worst) or cost.get("guaranteed_monthly_usd") is None:
        return UNKNOWN
    return float(sum(worst)) + float(cost.get("platform_known_monthly_usd") or 0.0)


def _side_doc(side) -> dict | None:
    return side.doc if side.ok else None


def _figure(side, fn) -> float | str | None:
    """A side's figure: None where the stack does not exist there, UNKNOWN where its preview failed."""
    if side.missing:
        return None
    return fn(side.doc) if side.ok else UNKNOWN


def fixed_change(d: StackDiff) -> Change:
    return Change(_figure(d.base, _fixed), _figure(d.head, _fixed))


def ceiling_change(d: StackDiff) -> Change:
    return Change(_figure(d.base, _ceiling), _figure(d.head, _ceiling))


def _sum(changes: list[Change]) -> Change:
    if any(not c.known and (c.base, c.head) != (None, None) for c in changes):
        return Change(UNKNOWN, UNKNOWN)
    return Change(sum(c.base or 0.0 for c in changes), sum(c.head or 0.0 for c in changes))


def _money(v: float) -> str:
    return f"${abs(v):,.0f}"


def headline(change: Change, what: str = "Monthly cost") -> str:
    """`Monthly cost will increase by $16,029 (+46 %)`, or why no change can be stated."""
    if change.base is None and change.head is None:
        return f"{what}: no stack on either side"
    if not change.known:
        return f"{what} change unknown (a price is missing on one side; see the notes)"
    if change.base is None or change.base == 0 and change.head:
        return f"{what} will be {_money(change.head)} (from nothing)"
    if change.head is None:
        return f"{what} will decrease by {_money(change.base)} (−100 %) (stack removed)"
    if round(change.delta) == 0:
        return f"{what} will not change ({_money(change.head)})"
    verb = "increase" if change.delta > 0 else "decrease"
    pct = change.percent
    sign = "+" if change.delta > 0 else "−"
    return f"{what} will {verb} by {_money(change.delta)} ({sign}{abs(pct):.0f} %)"


def changed(diffs: list[StackDiff]) -> bool:
    """Whether a comment is worth updating: a resource or any money figure differs on some stack."""
    for d in diffs:
        if d.added or d.removed or d.changed or d.base.missing != d.head.missing or not (d.base.ok and d.head.ok):
            return True
        rows = [*d.pools, {"base": d.totals.get("base"), "head": d.totals.get("head")}, *d.platform]
        if any(r["base"] != r["head"] for r in rows):
            return True
    return False


# --- --fail-above ------------------------------------------------------------------------------------------

_THRESHOLD = re.compile(r"^\s*(?:\$?\s*(?P<usd>\d[\d,]*(?:\.\d+)?)|(?P<pct>\d+(?:\.\d+)?)\s*%)\s*$")


def parse_threshold(text: str) -> tuple[str, float]:
    """'$5000' or '5000' -> ('usd', 5000.0); '10%' -> ('pct', 10.0). ValueError names the accepted forms."""
    m = _THRESHOLD.match(text or "")
    if not m:
        raise ValueError(f"--fail-above {text!r}: give a monthly amount ($5000 or 5000) or a percentage (10%)")
    if m.group("usd") is not None:
        return "usd", float(m.group("usd").replace(",", ""))
    return "pct", float(m.group("pct"))


def exceeds(diffs: list[StackDiff], threshold: tuple[str, float]) -> str | None:
    """Why the fixed monthly cost of all stacks rises above the threshold, or None. An unknown change fails: a
    required check cannot pass on a figure it could not compute."""
    total = _sum([fixed_change(d) for d in diffs])
    kind, limit = threshold
    if not total.known:
        return "the monthly cost change is unknown (a price is missing), so it cannot be checked against --fail-above"
    if kind == "usd" and total.delta > limit:
        return f"monthly cost rises by {_money(total.delta)}, above --fail-above ${limit:,.0f}"
    if kind == "pct":
        pct = total.percent if total.base else (float("inf") if total.delta > 0 else 0.0)
        if pct > limit:
            return f"monthly cost rises by {pct:.1f} %, above --fail-above {limit:g}%"
    return None


# --- renderers ---------------------------------------------------------------------------------------------


def resource_costs(d: StackDiff) -> list[tuple[str, str, str]]:
    """(resource, price model, monthly cell) per priced resource: each pool's node groups and the platform rows."""
    out = []
    base_known = d.base.ok or d.base.missing
    models = {}
    for doc in (_side_doc(d.base), _side_doc(d.head)):
        for p in (doc or {}).get("cost", {}).get("pools", []):
            models[p["pool"]] = p
    for row in d.pools:
        b, h = row["base"] or {}, row["head"] or {}
        p = models.get(row["pool"], {})
        for label, key, model in (
            ("floor node group", "guaranteed_monthly_usd", "guaranteed_price_model"),
            ("spot node group (ceiling)", "elastic_max_monthly_usd", "elastic_price_model"),
            ("on-demand fallback group (ceiling)", "fallback_max_monthly_usd", "fallback_price_model"),
        ):
            if (b.get(key) or 0) == 0 and (h.get(key) or 0) == 0:
                continue
            out.append(
                (
                    f"{row['pool']} {label}",
                    p.get(model, "on_demand").replace("_", " "),
                    cost_diff.money_cell(b.get(key), h.get(key), base_known),
                )
            )
    pmodels = {
        r["item"]: r["price_model"]
        for doc in (_side_doc(d.base), _side_doc(d.head))
        for r in (doc or {}).get("cost", {}).get("platform", [])
    }
    for row in d.platform:
        out.append(
            (
                row["item"],
                pmodels.get(row["item"], "on_demand").replace("_", " "),
                cost_diff.money_cell(row["base"], row["head"], base_known),
            )
        )
    return out


def blockers(d: StackDiff) -> list:
    """The changes of one stack a reviewer must stop at (offline/rollout.py:blockers): the EKS cluster, a floor or
    a reservation replaced or deleted. Only where both sides previewed."""
    if not (d.base.ok and d.head.ok):
        return []
    from offline import rollout

    return rollout.blockers(d.base.doc, d.head.doc)


# The deploy workflow's override (docs/gitops.md, "Rollout blockers"): a trailer of the pushed commit's message.
ACCEPT_TRAILER = "Rollout-Blockers-Accepted"
GUARDRAIL_POLICY = "rollout-blockers"  # guardrails/policies.py


def refused_blockers(diffs: list[StackDiff], accepted: str | None) -> list[str]:
    """The blockers that stop a deploy: every one unless `accepted` (the override's reason) says the change means
    them, and whatever `accepted` says, those CI's deploy role cannot carry out (an administrator applies them)."""
    reason = (accepted or "").strip()
    out = [
        f"{d.stack}: this change {b.sentence()}"
        for d in diffs
        for b in blockers(d)
        if b.needs_administrator or not reason
    ]
    if not reason:
        # A base that could not be previewed (its config no longer validates, its program failed) hides every
        # blocker: unknown is not "none".
        out += [
            f"{d.stack}: the base could not be previewed, so the rollout cannot be checked"
            for d in diffs
            if not d.base.ok and not d.base.missing
        ]
    return out


def guardrail_config(diffs: list[StackDiff], accepted: str | None) -> dict:
    """The guardrails pack's config for `pulumi up --policy-pack-config` (pulumi/actions' policyPackConfigs): the
    rollout blockers the pack reports (guardrails/policies.py:validate_rollout_blockers)."""
    found = [(d, b) for d in diffs for b in blockers(d)]
    return {
        GUARDRAIL_POLICY: {
            "blockers": [f"{d.stack}: {b.sentence()}" for d, b in found if not b.needs_administrator],
            "administrator_blockers": [f"{d.stack}: {b.sentence()}" for d, b in found if b.needs_administrator],
            "accepted": (accepted or "").strip(),
        }
    }


BLOCKER_NOTE = (
    "running nodes and the pods on them go with it; with protect_critical `pulumi up` refuses it until "
    'protection is lifted on purpose (docs/gitops.md, "The cost diff")'
)


def render_markdown(diffs: list[StackDiff], base_label: str, warnings: list[str] | None = None) -> str:
    total = _sum([fixed_change(d) for d in diffs])
    lines = [
        cost_diff.MARKER,
        f"## 💰 {headline(total)}",
        "",
        f"All stacks, `{base_label}` → this change; fixed = guaranteed floors + platform ({HOURS_PER_MONTH} h/month).",
        "",
    ]
    for w in warnings or []:
        lines.append(f"> ⚠️ {w}")
    if warnings:
        lines.append("")
    for d in diffs:
        lines += [f"### stack `{d.stack}`: {headline(fixed_change(d))}", ""]
        stop = blockers(d)
        for b in stop:
            lines.append(f"> ⛔ **Blocker**: this change {b.sentence()}")
        if stop:
            lines += [f"> {BLOCKER_NOTE}", ""]
        ceiling = ceiling_change(d)
        if ceiling.known and round(ceiling.delta or 0) != 0:
            lines += [f"{headline(ceiling, 'Most it can cost (every elastic and fallback node up all month)')}", ""]
        unknown = (_side_doc(d.head) or {}).get("cost", {}).get("platform_unknown") or []
        if unknown:
            lines += [f"Not in these figures (no price in the price source, docs/prices.md): {', '.join(unknown)}.", ""]
        for note in cost_diff._side_notes(d):
            head, *rest = note.split("\n")
            lines += [f"> **{head}**", *[f"> {r.strip()}" for r in rest], ""]
        if d.base.ok or d.head.ok:
            if (d.base.ok or d.base.missing) and (d.head.ok or d.head.missing):
                lines += [f"Resources: {cost_diff.summary(d)}", ""]
            lines.append("| " + " | ".join(cost_diff.HEADERS) + " |")
            lines.append("|---|" + "---:|" * (len(cost_diff.HEADERS) - 1))
            for row in cost_diff.cost_rows(d):
                lines.append("| " + " | ".join(f"**{c}**" if row[0] == "total" else c for c in row) + " |")
            lines.append("")
            priced = resource_costs(d)
            if priced:
                lines += [
                    "<details><summary>monthly cost per resource</summary>",
                    "",
                    "| resource | price model | monthly |",
                    "|---|---|---:|",
                    *[f"| {r} | {m} | {c} |" for r, m, c in priced],
                    "",
                    "</details>",
                    "",
                ]
        lines += cost_diff.node_group_lines(d)  # replaced / rolled node groups, floors flagged (offline/rollout.py)
        lines += cost_diff.resource_lines(d)
    lines.append(
        "Guaranteed = the floor at the rate it is paid (its price model in the per-resource table); elastic max / fallback max = every spot / on-demand "
        "fallback node up all month (ceilings); headroom = budget minus floor and platform (≤: some platform "
        "rows have no price). Offline preview: nothing was created."
    )
    lines += [f"{d.stack}: {src}" for d, src in cost_diff._price_sources(diffs)]
    lines += [line for d in diffs for line in cost_diff.commitment_lines(d)]
    return "\n".join(lines) + "\n"


def render_text(diffs: list[StackDiff], base_label: str, width: int | None = None) -> str:
    lines = [f"GPU cost diff: {base_label} -> working tree"]
    for d in diffs:
        lines += ["", f"stack {d.stack}"]
        lines += [f"  {n}" for note in cost_diff._side_notes(d) for n in note.split("\n")]
        if (d.base.ok or d.base.missing) and (d.head.ok or d.head.missing):
            lines.append(f"  resources: {cost_diff.summary(d)}")
            for r in d.added:
                lines.append(f"    + {r['name']} ({r['type']})")
            for r, keys in d.changed:
                lines.append(f"    ~ {r['name']} ({r['type']}): {', '.join(keys)}")
            for r in d.removed:
                lines.append(f"    - {r['name']} ({r['type']})")
            for step in d.upgrade_steps:  # folded to 80 columns: an add-on line names four pins
                lines += textwrap.wrap(
                    f"upgrade {step}", width=80, initial_indent="  ", subsequent_indent="      ", break_on_hyphens=False
                )
            for change in d.node_groups:
                lines.append(f"  node group: {'FLOOR ' if change.is_floor else ''}{change.sentence()}")
        if d.base.ok or d.head.ok:
            from gpuloan.render import tables  # the one table style; folds to the terminal's width

            t = tables.table(
                None, cost_diff.HEADERS, words=cost_diff.HEADERS[1:]
            )  # "$1,000 → $2,000": wraps at the arrow
            for r in cost_diff.cost_rows(d):
                t.add_row(*r)
            lines.append(tables.to_text(t, width=width).rstrip("\n"))
    lines += [f"{d.stack}: {src}" for d, src in cost_diff._price_sources(diffs)]
    lines += [line for d in diffs for line in cost_diff.commitment_lines(d)]
    return "\n".join(lines) + "\n"


def render_table(
    diffs: list[StackDiff], base_label: str, warnings: list[str] | None = None, width: int | None = None
) -> str:
    lines = [headline(_sum([fixed_change(d) for d in diffs])) + f" (all stacks, {base_label} -> working tree)"]
    lines += [f"warning: {w}" for w in warnings or []]
    for d in diffs:
        lines.append(f"{d.stack}: {headline(fixed_change(d))}")
        lines += [f"BLOCKER {d.stack}: this change {b.sentence()}" for b in blockers(d)]
    return "\n".join(lines) + "\n" + render_text(diffs, base_label, width)


def to_json(diffs: list[StackDiff], base_label: str, warnings: list[str] | None = None) -> dict:
    def stack(d: StackDiff) -> dict:
        return {
            "stack": d.stack,
            "headline": headline(fixed_change(d)),
            "fixed": fixed_change(d).to_json(),
            "ceiling": ceiling_change(d).to_json(),
            "resources": {
                "add": [r["urn"] for r in d.added],
                "remove": [r["urn"] for r in d.removed],
                "change": [{"urn": r["urn"], "inputs": k} for r, k in d.changed],
            },
            "pools": d.pools,
            "totals": d.totals,
            "platform": d.platform,
            "notes": cost_diff._side_notes(d),
            "blockers": [b.sentence() for b in blockers(d)],
            "upgrade_steps": list(d.upgrade_steps),  # a Kubernetes version change, in apply order
        }

    total = _sum([fixed_change(d) for d in diffs])
    return {
        "base": base_label,
        "changed": changed(diffs),
        "headline": headline(total),
        "fixed": total.to_json(),
        "warnings": list(warnings or []),
        "stacks": [stack(d) for d in diffs],
    }


def render_json(diffs: list[StackDiff], base_label: str, warnings: list[str] | None = None) -> str:
    return json_doc.dumps(to_json(diffs, base_label, warnings), sort_keys=True, default=float) + "\n"


RENDERERS = {"markdown": render_markdown, "table": render_table, "json": render_json}
