"""`gpuloan preview`: the offline plan of a stack (resources under mocks) and its monthly cost estimate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuloan import costs, offline
from stacks import config as config_mod

# Inputs worth showing per resource in the tree; the JSON output has every input.
KEY_INPUTS = (
    "nodeGroupName", "capacityType", "instanceTypes", "amiType", "scalingConfig", "labels", "taints",
    "instanceType", "instanceCount", "availabilityZone", "instanceMatchCriteria", "version", "chart",
    "repositoryOpts", "budgetType", "limitAmount", "runtime", "architectures", "reservedConcurrentExecutions",
    "imageTagMutability", "cidrBlock", "scheduleExpression", "metricName", "threshold", "addonName",
    "addonVersion", "value", "role", "topic", "endpoint", "protocol",
)


def validated_config(stack_config: dict[str, Any], source: str) -> config_mod.GpuLoanConfig:
    return config_mod.from_stack_yaml({"config": stack_config}, source)


def preview_document(stack: str, stack_config: dict[str, Any], program: Path | None = None) -> dict[str, Any]:
    """The `gpuloan preview --json` document. Raises ConfigError before running the program when config is bad."""
    cfg = validated_config(stack_config, f"Pulumi.{stack}.yaml")
    recording = offline.run_program(stack, stack_config, program)
    return {
        "stack": stack,
        "resources": [r.to_json() for r in recording.resources],
        "outputs": recording.outputs,
        "cost": costs.stack_cost(cfg).to_json(),
    }


def _short(value: Any, width: int = 90) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def render(doc: dict[str, Any], console) -> None:
    """Print the resource tree grouped by component, then the cost table."""
    from rich.table import Table
    from rich.tree import Tree

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
    for r in roots:
        add(tree, r)
    console.print(tree)

    cost = doc["cost"]
    table = Table(title=f"Estimated monthly cost ({cost['region']}, 730 h/month)")
    for col in ("pool", "team", "guaranteed (fixed)", "elastic max (spot)", "fallback max (on-demand)", "budget"):
        table.add_column(col, justify="left" if col in ("pool", "team") else "right")
    money = lambda v: "unknown" if v is None else f"${v:,.0f}"  # noqa: E731
    for p in cost["pools"]:
        g = (f"{p['guaranteed_nodes']}× {p['guaranteed_instance_type']} {money(p['guaranteed_monthly_usd'])} "
             f"({p['guaranteed_price_model']})" if p["guaranteed_nodes"] else "—")
        e = (f"0–{p['elastic_max_nodes']} nodes {money(p['elastic_max_monthly_usd'])}" if p["elastic_max_nodes"] else "—")
        f = (f"0–{p['fallback_max_nodes']} nodes {money(p['fallback_max_monthly_usd'])}" if p["fallback_max_nodes"] else "—")
        budget = "—" if p["budget_monthly_usd"] is None else money(p["budget_monthly_usd"])  # no pool budget
        table.add_row(p["pool"], p["team"], g, e, f, budget)
    table.add_row("[bold]total[/]", "", money(cost["guaranteed_monthly_usd"]), money(cost["elastic_max_monthly_usd"]),
                  money(cost["fallback_max_monthly_usd"]), money(cost["budget_monthly_usd"]))
    console.print(table)
    for p in cost["pools"]:
        notes = "; ".join(n for n in (p["guaranteed_note"], p["elastic_note"]) if n)
        if notes:
            console.print(f"  [dim]{p['pool']}: {notes}[/]", soft_wrap=True)
        if p["guaranteed_rate_source"]:
            console.print(f"  [dim]{p['pool']} floor rate ({p['guaranteed_price_model']}): "
                          f"{p['guaranteed_rate_source']}[/]", soft_wrap=True)
    # Without any price source the one reason and fix is the price line below; otherwise each gap has its reason.
    for line in cost["unknown_prices"] if cost["has_price_source"] else ():
        console.print(f"  [yellow]cost unknown[/] {line}", soft_wrap=True)
    # Always said, so a reader knows how old the figures are (or that there are none, and how to get them).
    console.print(f"  [dim]{cost['price_source']}[/]", soft_wrap=True)
    console.print("  [dim]elastic figures are ceilings (every elastic node up all month); the policy keeps actual "
                  "elastic spend under the budget when enforcement is cap_elastic[/]")
