"""`gpuloan preview`: the offline plan of a stack (resources under mocks) and its monthly cost estimate."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from offline import runner as offline
from pricing.cost_model import costs, platform_costs
from config import config as config_mod
from pricing import checks
from pricing.sources.catalog import Prices
from pricing.cost_model import spot_spread
from pricing.cost_model.billing import HOURS_PER_MONTH

# Inputs worth showing per resource in the tree; the JSON output has every input.
KEY_INPUTS = (
    "nodeGroupName",
    "nodeGroupNamePrefix",
    "updateConfig",
    "capacityType",
    "instanceTypes",
    "amiType",
    "scalingConfig",
    "labels",
    "taints",
    "instanceType",
    "instanceCount",
    "availabilityZone",
    "instanceMatchCriteria",
    "version",
    "chart",
    "repositoryOpts",
    "budgetType",
    "limitAmount",
    "runtime",
    "architectures",
    "reservedConcurrentExecutions",
    "imageTagMutability",
    "cidrBlock",
    "scheduleExpression",
    "metricName",
    "threshold",
    "addonName",
    "addonVersion",
    "value",
    "role",
    "topic",
    "endpoint",
    "protocol",
    "kubeSchedulerConfig",
)


def validated_config(prices: Prices, stack_config: dict[str, Any], source: str) -> config_mod.GpuLoanConfig:
    return checks.from_stack_yaml({"config": stack_config}, source, prices=prices)


def preview_document(
    prices: Prices, stack: str, stack_config: dict[str, Any], program: Path | None = None
) -> dict[str, Any]:
    """The `gpuloan preview --json` document. Raises ConfigError before running the program when config is bad.

    A Pulumi secret (`secure:`) is opaque offline: the program runs with a placeholder its field accepts
    (config/secret_values.py), the paths are listed under `unchecked_secrets`, and the figures that depend on one
    are null with the reason under `cost.secret_figures` (never the placeholder's value)."""
    source = f"Pulumi.{stack}.yaml"
    cfg = validated_config(prices, stack_config, source)
    stack_config, unchecked = config_mod.with_secret_placeholders(stack_config, source)
    recording = offline.run_program(stack, stack_config, program, prices=prices)
    prices = prices.with_config(cfg)  # the config's own instance_prices for the types the book lacks
    # Registration order follows the async resolution of outputs and varies run to run; URN order does not.
    resources = sorted((r.to_json() for r in recording.resources), key=lambda r: r["urn"])
    cost = costs.stack_cost(prices, cfg).to_json()
    platform = platform_costs.platform_costs(prices, cfg, resources)
    known, unknown = platform_costs.total(platform)
    cost["platform"] = [row.to_json() for row in platform]
    cost["platform_known_monthly_usd"] = known
    cost["platform_unknown"] = unknown
    floor = cost["guaranteed_monthly_usd"]
    # The fixed monthly bill: the floor plus the platform rows that have a price (the unknown ones are listed).
    cost["fixed_monthly_usd"] = None if floor is None else round(floor + known, 2)
    # The environment budget pays for the platform too; with unknown platform rows the headroom is an upper bound.
    cost["budget_headroom_monthly_usd"] = (
        None if floor is None else round(cost["budget_monthly_usd"] - floor - known, 2)
    )
    cost["budget_headroom_is_upper_bound"] = bool(unknown)
    cost["spot_spread"] = spread_document(prices, cfg)
    hide_secret_figures(cost, unchecked)
    return round_money(
        {
            "stack": stack,
            "resources": resources,
            "outputs": recording.outputs,
            "cost": cost,
            "unchecked_secrets": unchecked,
        }
    )


SECRET = "secret"  # what a figure derived from a Pulumi secret shows instead of the placeholder's value


def hide_secret_figures(cost: dict[str, Any], unchecked: list[str]) -> None:
    """Null every figure a secret feeds (a budget, or a pool's costs) and say which in `cost.secret_figures`
    (pool name or "total" -> fields), so no output shows a placeholder as if it were the stack's value."""
    from config import secret_values

    hidden: dict[str, list[str]] = {}
    budget_fields = ["budget_monthly_usd", "budget_headroom_monthly_usd"]
    money_fields = [
        "guaranteed_monthly_usd",
        "elastic_max_monthly_usd",
        "fallback_max_monthly_usd",
        "fixed_monthly_usd",
        "budget_headroom_monthly_usd",
    ]
    for path in unchecked:
        which = secret_values.budget_secret(path)
        if which is None:
            hidden.setdefault("total", []).extend(budget_fields)
        elif which is not False and which < len(cost["pools"]):
            hidden.setdefault(cost["pools"][which]["pool"], []).append("budget_monthly_usd")
        elif secret_values.touches_money(path):
            pools = [
                cost["pools"][int(m)]["pool"]
                for m in re.findall(r"^pools\[(\d+)\]", path)
                if int(m) < len(cost["pools"])
            ] or [p["pool"] for p in cost["pools"]]
            for name in pools:
                hidden.setdefault(name, []).extend(money_fields[:3])
            hidden.setdefault("total", []).extend(money_fields)
    for p in cost["pools"]:
        for f in hidden.get(p["pool"], []):
            p[f] = None
    for f in hidden.get("total", []):
        cost[f] = None
    cost["secret_figures"] = {k: sorted(set(v)) for k, v in hidden.items()}


def spread_document(prices: Prices, cfg: config_mod.GpuLoanConfig) -> dict[str, Any]:
    """Per pool with spot, the figures price-capacity-optimized decides on; and the advisories (dominated types)."""
    pools = []
    for p in cfg.pools:
        if not spot_spread.launches_spot(p):
            continue
        rows = spot_spread.pool_figures(prices, cfg, p)
        # one spot group per node size (config/node_sizes.py): a multi-size pool says so and what picks the size
        pools.append(
            {
                "pool": p.name,
                "types": [r.to_json() for r in rows],
                "summary": spot_spread.summary(rows),
                "spot_groups": [
                    {"gpus_per_node": gpus, "instance_types": [r.instance_type for _, r in g]}
                    for gpus, g in spot_spread.by_size(rows)
                ],
                "size_choice": spot_spread.SIZE_CHOICE if spot_spread.is_multi_size(rows) else None,
            }
        )
    return {
        "pools": pools,
        "advisories": [{"path": a.path, "message": a.message} for a in spot_spread.advisories(prices, cfg)],
    }


def round_money(value: Any, key: str = "") -> Any:
    """Money to cents (monthly figures) and hourly or per-unit rates to 6 significant digits (a Lambda request
    costs fractions of a millionth), so float noise never changes the bytes of `preview --json` between runs."""
    if isinstance(value, dict):
        return {k: round_money(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [round_money(v, key) for v in value]
    if isinstance(value, float) and not isinstance(value, bool):
        if key.endswith("_usd"):
            return round(value, 2)
        if "usd_per" in key:
            return float(f"{value:.6g}")
    return value


def _short(value: Any, width: int = 90) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def render(doc: dict[str, Any], console, summary: bool = False) -> None:
    """Print the resource tree grouped by component (not with `summary`), the count line, then the cost tables."""
    from rich.tree import Tree

    from gpuloan.render import tables

    resources = doc["resources"]
    by_parent: dict[str, list[dict]] = {}
    for r in resources:
        by_parent.setdefault(r["parent"], []).append(r)
    known = {r["urn"] for r in resources}
    roots = [r for r in resources if r["parent"] not in known]

    def add(node: Tree, r: dict) -> None:
        flags = []
        if r["ignore_changes"]:
            flags.append(f"[yellow]ignore_changes={','.join(r['ignore_changes'])}[/]")
        if r["protect"]:
            flags.append("[red]protect[/]")
        label = f"[bold]{r['name']}[/] [dim]{r['type']}[/] {' '.join(flags)}"
        child = node.add(label)
        for key in KEY_INPUTS:
            if key in r["inputs"] and r["inputs"][key] not in (None, "", [], {}):
                child.add(f"[cyan]{key}[/]: {_short(r['inputs'][key])}")
        for c in by_parent.get(r["urn"], []):
            add(child, c)

    tree = Tree(f"[bold]stack {doc['stack']}[/] — {len(resources)} resources (offline preview, nothing is created)")
    # Pulumi's count line: everything is new to an offline preview (it has no state to compare with).
    counts = f"+ {len(resources)} to create"
    for r in roots:
        add(tree, r)
    if not summary:
        console.print(tree)
    console.print(f"[bold]Resources:[/] [green]{counts}[/] (stack {doc['stack']}, offline preview, nothing is created)")

    cost = doc["cost"]
    table = tables.table(
        f"Estimated monthly cost ({cost['region']}, {HOURS_PER_MONTH} h/month)",
        ("pool", "team", "guaranteed\n(fixed)", "elastic max\n(spot)", "fallback max\n(on-demand)", "budget"),
        left=("pool", "team"),
        words=("guaranteed\n(fixed)", "elastic max\n(spot)", "fallback max\n(on-demand)"),
    )
    money = lambda v: "unknown" if v is None else f"${v:,.0f}"  # noqa: E731
    secret = cost.get("secret_figures") or {}
    for p in cost["pools"]:
        g = (
            f"{p['guaranteed_nodes']}× {p['guaranteed_instance_type']} {money(p['guaranteed_monthly_usd'])} "
            f"({' + '.join([p['guaranteed_price_model'], *(p.get('guaranteed_commitments') or [])])})"
            if p["guaranteed_nodes"]
            else "—"
        )
        e = f"0–{p['elastic_max_nodes']} nodes {money(p['elastic_max_monthly_usd'])}" if p["elastic_max_nodes"] else "—"
        f = (
            f"0–{p['fallback_max_nodes']} nodes {money(p['fallback_max_monthly_usd'])}"
            if p["fallback_max_nodes"]
            else "—"
        )
        budget = (
            ("—" if p["budget_monthly_usd"] is None else money(p["budget_monthly_usd"]))
            if "budget_monthly_usd" not in secret.get(p["pool"], ())
            else SECRET
        )  # no pool budget, or a secret one
        table.add_row(p["pool"], p["team"], g, e, f, budget)
    if cost.get("commitments") or cost.get("unused_commitment_monthly_usd") is None:
        # A commitment bills every hour of its term: what no floor used belongs to no pool, and is fixed all the same.
        table.add_row("commitments (unused)", "", money(cost.get("unused_commitment_monthly_usd")), "—", "—", "—")
    table.add_row(
        "[bold]total[/]",
        "",
        money(cost["guaranteed_monthly_usd"]),
        money(cost["elastic_max_monthly_usd"]),
        money(cost["fallback_max_monthly_usd"]),
        SECRET if "budget_monthly_usd" in secret.get("total", ()) else money(cost["budget_monthly_usd"]),
    )
    tables.print_table(console, table)
    for path in doc.get("unchecked_secrets") or []:
        console.print(
            f"  [yellow]not checked[/] {path}: a Pulumi secret (`secure:`), opaque offline: previewed with "
            "a placeholder, the figures it feeds are not shown",
            soft_wrap=True,
        )
    render_platform(cost, console)
    for p in cost["pools"]:
        notes = "; ".join(n for n in (p["guaranteed_note"], p["elastic_note"]) if n)
        if notes:
            console.print(f"  [dim]{p['pool']}: {notes}[/]")  # folds to the terminal's width
        if p["guaranteed_rate_source"]:
            console.print(
                f"  [dim]{p['pool']} floor rate ({p['guaranteed_price_model']}): {p['guaranteed_rate_source']}[/]"
            )
    for c in cost.get("commitments") or []:
        console.print(
            f"  [dim]commitment {c['name']} ({c['kind']}, {c['status']}; {c['source']}): fee "
            f"{money(c['fee_monthly_usd'])}/month, {money(c['used_monthly_usd'])} covering floor hours, "
            f"{money(c['unused_monthly_usd'])} unused by the floors; rates: {c['rates']}[/]"
        )
    render_spread(cost, console)
    # Without any price source the one reason and fix is the price line below; otherwise each gap has its reason.
    for line in cost["unknown_prices"] if cost["has_price_source"] else ():
        console.print(f"  [yellow]cost unknown[/] {line}", soft_wrap=True)
    # Always said, so a reader knows how old the figures are (or that there are none, and how to get them).
    console.print(f"  [dim]{cost['price_source']}[/]", soft_wrap=True)
    console.print(
        "  [dim]elastic figures are ceilings (every elastic node up all month); the policy keeps actual "
        "elastic spend under the budget when enforcement is cap_elastic[/]"
    )


def render_spread(cost: dict[str, Any], console) -> None:
    """Per pool with spot, one line of what EC2's price-capacity-optimized strategy weighs for its launches
    (docs/capacity.md, "How spot launches are spread"), then each advisory (a dominated type) with its path."""
    spread = cost.get("spot_spread") or {"pools": [], "advisories": []}
    for p in spread["pools"]:
        if p.get("size_choice"):
            console.print(
                f"  [dim]{p['pool']} spot, {p['size_choice']}; each group spread by price and capacity "
                f"over: {p['summary']}[/]"
            )
        else:
            console.print(f"  [dim]{p['pool']} spot, spread by price and capacity over: {p['summary']}[/]")
    for a in spread["advisories"]:
        console.print(f"  [yellow]spot advisory[/] {a['path']}: {a['message']}")  # folds like the notes


def render_platform(cost: dict[str, Any], console) -> None:
    """The platform rows (EKS, NAT, system nodes, volumes, KMS, CloudWatch, Lambda) and the fixed monthly total."""
    from gpuloan.render import tables

    rows = cost.get("platform") or []
    if not rows:
        return
    money = lambda v: "unknown" if v is None else f"${v:,.2f}"  # noqa: E731
    table = tables.table(
        "Platform (monthly)",
        ("item", "quantity", "rate", "monthly", "price model"),
        left=("item", "price model"),
        words=("quantity",),
        drop=("price model", "rate", "quantity"),
    )
    for r in rows:
        rate = "unknown" if r["usd_per_unit"] is None else f"${r['usd_per_unit']:g}/{r['unit']}"
        table.add_row(
            r["item"],
            f"{r['quantity']:,.6g} {r['unit']}",
            rate,
            money(r["monthly_usd"]),
            r["price_model"].replace("_", " "),
        )
    known = cost["platform_known_monthly_usd"]
    if len(cost["platform_unknown"]) >= len(rows):  # nothing priced: "$0.00 + unknown" would read as a figure
        total = "unknown"
    else:
        total = money(known) + (" + unknown" if cost["platform_unknown"] else "")
    table.add_row("[bold]total[/]", "", "", total, "")
    tables.print_table(console, table)
    fixed, headroom = cost.get("fixed_monthly_usd"), cost.get("budget_headroom_monthly_usd")
    bound = "at most " if cost.get("budget_headroom_is_upper_bound") else ""
    if "budget_headroom_monthly_usd" in (cost.get("secret_figures") or {}).get("total", ()):
        headroom, bound = None, ""
        money = lambda v, m=money: SECRET if v is None else m(v)  # noqa: E731
    # An unknown figure stays "unknown": "unknown + unknown platform items" or "at most unknown" read as figures.
    console.print(
        f"  fixed monthly (floor + platform): {money(fixed)}"
        + (" + unknown platform items" if cost["platform_unknown"] and fixed is not None else "")
        + f"; budget headroom: {bound if headroom is not None else ''}{money(headroom)}"
    )
    if cost["platform_unknown"]:
        console.print(
            f"  [yellow]platform cost unknown[/] for {', '.join(cost['platform_unknown'])}: the price "
            "source has no platform rates for them (docs/prices.md#platform-rates)"
        )
