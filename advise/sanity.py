"""The sanity check every organization advice passes before it is printed as advice (issue 36; the charter's
"Every recommendation passes a sanity check before it is printed").

A document whose figures contradict each other is a defect of the model or of the advisor, not advice: it is
printed with what failed and why, and without the recommendation (gpuloan/commands/advise_org.py). Checked, in the
default scenario and in each shortage scenario:
- no cost, and no part of a bill, is negative;
- a `+savings-plan` row never costs more than the same layout without it (a plan that saves nothing is not
  bought: advise/org_advisor.py `with_plan`);
- the fluid bound (sim/fluid.py: the same floors, lent, free repacking, no boots, the best commitment in
  hindsight, on the per-team deployment: each pool's own capacity types and node limits) never costs more than a
  setup of that deployment and the same floors that served at least as much work (gpuloan, floors-not-lent,
  team-floors): a bound a real layout beats is not a bound. Where that setup left more work unmet than the bound,
  the two are not the same work: that is a note, not a failure. gpuloan's shared layout is another deployment
  (interruptible work of every team spot-first in shared pools, whatever its pool's capacity type), so the bound
  says nothing about it;
- no recommended floor is over the stack's node limit (config.config.Guaranteed.nodes), the limit `setup_problems`
  refuses before any simulation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Rounding of the figures (cents; GPU-hours to 3 decimals) is not a contradiction.
COST_TOLERANCE_USD = 1.0
UNMET_TOLERANCE_GPU_HOURS = 0.5
# the setups run on the deployment the fluid bound runs (a pool per team, the same floors)
SAME_DEPLOYMENT_AS_BOUND = ("gpuloan", "floors-not-lent", "team-floors")


@dataclass
class Sanity:
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict:
        return {"passed": self.passed, "failures": self.failures, "notes": self.notes}


def floor_node_limit() -> int:
    """The stack's limit on a floor's nodes, read from the config model (not a copy of the number)."""
    from config.config import Guaranteed

    return next(m.le for m in Guaranteed.model_fields["nodes"].metadata if getattr(m, "le", None) is not None)


def check(doc: dict) -> Sanity:
    """The advice document's contradictions (`Sanity.failures`) and the comparisons it cannot make (`notes`)."""
    out = Sanity()
    rec = doc["recommendation"]
    scenarios = {
        "default": {
            "recommendation_report": rec["report"],
            "shared_layout_report": (rec.get("layouts") or {}).get("gpuloan-shared"),
            "baselines": doc["baselines"],
        }
    }
    scenarios.update(doc.get("scenarios") or {})
    for name, sc in scenarios.items():
        rows = [r for r in (sc.get("recommendation_report"), sc.get("shared_layout_report"), *sc["baselines"]) if r]
        by_name = {r["name"]: r for r in rows}
        where = f"scenario {name}"
        for r in rows:
            if r["total_cost_usd"] < 0:
                out.failures.append(f"{where}: {r['name']} costs ${r['total_cost_usd']:,.2f}, below zero")
            for kind, usd in (r.get("by_purchase_usd") or {}).items():
                if usd < 0:
                    out.failures.append(f"{where}: {r['name']}'s {kind} bill is ${usd:,.2f}, below zero")
        for plain in ("karpenter", "karpenter-shared"):
            a, b = by_name.get(plain), by_name.get(f"{plain}+savings-plan")
            if a and b and b["total_cost_usd"] > a["total_cost_usd"] + COST_TOLERANCE_USD:
                out.failures.append(
                    f"{where}: {b['name']} costs ${b['total_cost_usd']:,.0f}, more than {plain} without the plan "
                    f"(${a['total_cost_usd']:,.0f}): a plan that saves nothing is not bought"
                )
        bound = by_name.get("fluid-bound")
        if bound:
            for r in rows:
                if r is bound or r["name"] not in SAME_DEPLOYMENT_AS_BOUND:
                    continue
                if bound["total_cost_usd"] <= r["total_cost_usd"] + COST_TOLERANCE_USD:
                    continue
                more_unmet = r["unmet_gpu_hours"] - bound["unmet_gpu_hours"]
                if more_unmet > UNMET_TOLERANCE_GPU_HOURS:
                    out.notes.append(
                        f"{where}: the fluid bound (${bound['total_cost_usd']:,.0f}) is above {r['name']} "
                        f"(${r['total_cost_usd']:,.0f}), which left {more_unmet:,.0f} GPU-hours more unmet: not "
                        "the same work, so no bound on it"
                    )
                    continue
                out.failures.append(
                    f"{where}: the fluid bound costs ${bound['total_cost_usd']:,.0f}, more than {r['name']} "
                    f"(${r['total_cost_usd']:,.0f}) with the same floors and no more work unmet: a bound a real "
                    "layout beats is not a bound"
                )
    limit = floor_node_limit()
    for pool, f in rec["floors"].items():
        if f["nodes"] > limit:
            out.failures.append(
                f"pool '{pool}': a floor of {f['nodes']} nodes is over the stack's limit of "
                f"{limit} (pools[].guaranteed.nodes)"
            )
    return out
