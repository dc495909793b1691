"""The loan per pool of a simulated environment, in GPU-hours and dollars: what `advise --demand` reports so a team
sees before deploying what lending will cost or earn it (the same bill `gpuloan cost-report` draws from the
policy function's LoanGpus metric, gpuloan/loan_bill.py).

A borrower pays for the hours its work ran on another pool's floor at that floor's effective rate per GPU-hour:
the floors' report window billed alone with the organization's commitments, as the preview bills a stack's
floors (pricing/cost_model/floor_bill.py: floors first to the commitments), divided by the floor's GPU-hours. The owner is
credited the same; idle floor stays with the owner. Each (borrower, lender) pair is rounded to the cent once and
counted on both sides, so lent credit and borrowed cost are equal over the organization, cent for cent.
"""

from __future__ import annotations

from pricing.cost_model import billing
from sim.metrics import EnvironmentRun

FLOOR_PURCHASES = (billing.RESERVED, billing.CAPACITY_BLOCK)


def floor_rates(run: EnvironmentRun, commitments, report_from: int, shift) -> dict[str, float]:
    """Lender pool -> USD per floor GPU-hour over the report window (floors billed alone with the commitments)."""
    usage = [
        billing.Usage(
            u.hour - report_from, u.pool, u.instance_type, u.region, u.purchase, u.instance_hours, u.usd_per_hour
        )
        for u in run.hourly_usage
        if u.hour >= report_from and u.purchase in FLOOR_PURCHASES
    ]
    bill = billing.bill(usage, [shift(c, report_from) for c in commitments], hours=run.hours - report_from)
    out = {}
    for name, m in run.pools.items():
        if m.floor_gpu_hours > 0:
            out[name] = bill.by_pool_usd.get(name, 0.0) / m.floor_gpu_hours
    return out


def per_pool(run: EnvironmentRun, commitments, report_from: int, shift) -> dict[str, dict]:
    """Pool -> own_floor_gpu_hours, lent_gpu_hours, borrowed_gpu_hours, borrowed_cost_usd, lent_credit_usd,
    reclaim_preemptions, reclaim_lost_gpu_hours (the report window)."""
    rates = floor_rates(run, commitments, report_from, shift)
    cents_paid: dict[str, int] = {n: 0 for n in run.pools}
    cents_credited: dict[str, int] = {n: 0 for n in run.pools}
    for borrower, m in run.pools.items():
        for lender, hours in sorted(m.borrowed_gpu_hours_from.items()):
            cents = round(hours * rates.get(lender, 0.0) * 100)
            cents_paid[borrower] += cents
            cents_credited[lender] = cents_credited.get(lender, 0) + cents
    out = {}
    for name, m in run.pools.items():
        out[name] = {
            "own_floor_gpu_hours": round(m.floor_owned_gpu_hours, 3),
            "lent_gpu_hours": round(m.floor_lent_gpu_hours, 3),
            "borrowed_gpu_hours": round(m.borrowed_gpu_hours, 3),
            "borrowed_cost_usd": cents_paid[name] / 100,
            "lent_credit_usd": cents_credited.get(name, 0) / 100,
            "reclaim_preemptions": m.reclaim_preemptions,
            "reclaim_lost_gpu_hours": round(m.reclaim_lost_gpu_hours, 3),
        }
    return out
