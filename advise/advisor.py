"""How big should a pool's floor be, and how should it be paid? (`gpuloan advise`; docs/floor.md)

For every floor size from 0 nodes to the pool's peak (floor + elastic max, kept constant: nodes move between the
floor and the elastic part), the pool is simulated over the demand with the real policy (sim/runner.py: spot with
interruptions and shortages, on-demand fallback). The elastic part's cost and the service do not depend on how
the floor is paid, so one simulation per size serves every payment; the floor's cost is then

    floor nodes x rate of the payment x 730 h            (a floor is billed every hour, used or not)

and the monthly cost of a point is that plus the simulated elastic spend scaled to a 730-hour month.

Service per point: p95 job wait (job traces), unmet share of the GPU-hours an instant, infinite cluster would
have served by the horizon (metrics.oracle_gpu_hours), and interruptions of
production work. Production work is interrupted only where the shipped objects let it run on spot: Kueue admits
production work to spot only in a pool listed in scheduling.kueue.production_spot_pools (config/scheduling.py
production_work_on_spot, the rule the organization advisor's environment simulator uses). Where it may: the
simulator runs every job on whatever node is free, so the share of jobs that is production work
(ServiceTarget.production_share_pct; by default all of a production-tier pool) is charged with that share of the
interrupted jobs — the expected count when production jobs are a random share of the jobs. Where it may not, no
production work is interrupted (on-demand and floor nodes are not reclaimed); a pool whose whole demand is
production work then runs on its floor and on-demand fallback only, as Kueue would run it.

The recommendation is the cheapest (size, payment) whose service meets the target, checked before it is printed:
- a floor whose last node the demand needs 0 % of the time is not recommended while a smaller floor meets the
  target; when none does, the target forces it and the summary says so;
- its monthly cost is stated against the pool budget and the environment budget, and one over either is flagged;
- jobs larger than the pool's peak are counted with their sizes;
- a recommendation dearer than another point that is no worse on unmet work and waits is called dominated, with
  the target that point misses.
A break-even in words says, per payment, how busy a committed node must be to beat renting the same hours on
demand (and on spot).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from sim import pool as simpool
from sim import metrics, runner
from sim.environment import production_share_pct
from sim.engine import MINUTES_PER_MONTH, SimSettings, default_horizon
from sim.controllers.gpuloan import GpuLoan
from pricing.sources import floor_pricing
from pricing.sources import catalog
from config.config import ElasticCapacity, GpuLoanConfig, ServiceTarget
from pricing.cost_model.billing import HOURS_PER_MONTH
from pricing.cost_model.floor_bill import floor_payment_equivalent
from config.scheduling import production_work_on_spot

MAX_POINTS = 25  # floor sizes simulated at most (a larger pool is swept in even steps, the peak included)
# A floor node the demand needs less than this share of the time is "needed 0 % of the time" (the summary rounds
# to whole percent): it is not recommended unless the target forces it.
UNNEEDED_SHARE = 0.005


class AdviceError(ValueError):
    """The pool cannot be advised on (no demand, no prices, no floor type ...)."""


def production_share(cfg: GpuLoanConfig, pool_name: str, override_pct: float | None = None) -> float:
    """Share (0..1) of the pool's demand that is production work: the CLI flag, else the pool's service target,
    else 1 for a production-tier pool and 0 for the others."""
    pct = override_pct if override_pct is not None else production_share_pct(cfg.pool(pool_name))
    if not 0 <= pct <= 100:
        raise AdviceError(f"production share must be between 0 and 100 %, got {pct}")
    return pct / 100


def payment_rates(prices: catalog.Prices, cfg: GpuLoanConfig, pool_name: str, floor_type: str) -> tuple[dict, dict]:
    """payment -> FloorRate for every payment the price book (or the user, for the configured payment) prices;
    payment -> why not, for the others."""
    pool = cfg.pool(pool_name)
    g = pool.guaranteed
    rates, missing = {}, {}
    for payment in floor_pricing.PAYMENTS:
        user = g.rate if (g is not None and g.instance_type == floor_type and g.price_model == payment) else None
        r = floor_pricing.floor_rate(
            prices, floor_type, cfg.region, payment, user.usd_per_hour if user else None, user.source if user else None
        )
        if r is None:
            missing[payment] = floor_pricing.missing_rate_reason(prices, floor_type, cfg.region, payment)
        else:
            rates[payment] = r
    return rates, missing


def floor_sizes(peak_nodes: int) -> list[int]:
    step = max(1, math.ceil(peak_nodes / (MAX_POINTS - 1)))
    return sorted(set(range(0, peak_nodes + 1, step)) | {peak_nodes})


def busy_share_by_node(profile: list[int], gpus_per_node: int, nodes: int) -> list[float]:
    """For k = 1..nodes: the share of minutes in which demand needs at least k nodes (the k-th floor node's
    busy share if the floor's nodes are filled first)."""
    if not profile:
        return [0.0] * nodes
    counts = [0] * (nodes + 2)
    for gpus in profile:
        k = min(nodes + 1, math.ceil(gpus / gpus_per_node))
        counts[k] += 1
    out, above = [], len(profile)
    for k in range(1, nodes + 1):
        above -= counts[k - 1]
        out.append(above / len(profile))
    return out


def break_even_words(instance_type: str, payment: str, rate: float, ondemand: float, spot: float | None) -> str:
    """'a reserved_1yr p4d.24xlarge pays for itself when it is busy more than 62 % of the hours ...'"""
    share = rate / ondemand
    text = (
        f"a {payment} {instance_type} at ${rate:,.2f}/h pays for itself when it is busy more than "
        f"{100 * share:.0f} % of the hours (against on-demand at ${ondemand:,.2f}/h)"
    )
    if share >= 1:
        text = f"a {payment} {instance_type} at ${rate:,.2f}/h never beats on-demand at ${ondemand:,.2f}/h"
    if spot:
        s = rate / spot
        text += (
            f"; against spot at ${spot:,.2f}/h it never does"
            if s >= 1
            else f"; against spot at ${spot:,.2f}/h, busy more than {100 * s:.0f} %"
        )
    return text


def _meets(point: dict, target: ServiceTarget, jobs: bool) -> list[str]:
    """The targets a point misses (empty: it meets them all)."""
    missed = []
    if jobs and point["p95_wait_minutes"] is not None and point["p95_wait_minutes"] > target.p95_wait_minutes:
        missed.append(f"p95 wait {point['p95_wait_minutes']:g} min > {target.p95_wait_minutes:g}")
    if point["unmet_pct"] > target.unmet_pct:
        missed.append(f"unmet {point['unmet_pct']:.2f} % > {target.unmet_pct:g} %")
    if point["production_interruptions_per_month"] > target.production_interruptions_per_month + 1e-9:
        missed.append(
            f"{point['production_interruptions_per_month']:.1f} production interruptions/month > "
            f"{target.production_interruptions_per_month:g}"
        )
    return missed


def _run_size(args) -> tuple[int, dict]:
    spec, trace, settings, horizon, n = args
    _, m = runner.run_one(simpool.with_floor(spec, n), trace, GpuLoan(), settings, horizon)
    return n, m


def _simulate(spec, trace, settings: SimSettings, horizon: int, sizes: list[int], jobs: int):
    """(size, metrics) per floor size, in order; `jobs` > 1 runs the sizes in that many processes (each run is
    independent and seeded the same way, so the results do not depend on `jobs`)."""
    work = [(spec, trace, settings, horizon, n) for n in sizes]
    if jobs <= 1 or len(sizes) <= 1:
        yield from map(_run_size, work)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # fork: the workers inherit the specs and their price book, no re-reading per process.
    with ProcessPoolExecutor(max_workers=min(jobs, len(sizes)), mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(_run_size, work)


def advise(
    prices: catalog.Prices,
    cfg: GpuLoanConfig,
    pool_name: str,
    trace,
    *,
    target: ServiceTarget | None = None,
    production_share_pct: float | None = None,
    settings: SimSettings = SimSettings(),
    sizes: list[int] | None = None,
    peak_from_demand: bool = False,
    jobs: int = 1,
    progress=None,
) -> dict:
    """The advice document of one pool (every point, the recommendation, break-evens); JSON-ready."""
    prices = prices.with_config(cfg)  # the config's own instance_prices for the types the book lacks
    try:
        spec = simpool.spec_from_config(prices, cfg, pool_name)
    except simpool.PoolError as err:
        raise AdviceError(str(err)) from None
    pool = cfg.pool(pool_name)
    target = target or pool.service_target
    share = production_share(cfg, pool_name, production_share_pct)
    horizon = default_horizon(trace)
    if horizon <= 0 or not (getattr(trace, "jobs", None) or any(getattr(trace, "gpus_demanded", ()))):
        raise AdviceError(f"demand {trace.name} has no GPU demand to size a floor from")
    # The stack's budget cap was set for its own floor; simulated under other floors it would measure the
    # mismatch, not the floor. Each point says instead whether it fits the budget.
    spec = replace(spec, budget_monthly_usd=None)
    if peak_from_demand:
        # The pool's peak (floor + elastic max) sized to the demand's peak, types and prices kept: for demand the
        # stack was not sized for (another cluster's trace, a team that has outgrown its elastic max).
        spec = simpool.auto_size(spec, trace, horizon_minutes=horizon, floor_nodes=0)
    production_on_spot = production_work_on_spot(cfg, pool)
    if not production_on_spot and share >= 1 and spec.capacity == ElasticCapacity.spot_then_on_demand:
        # All of the demand is production work that Kueue keeps off spot: it runs on the floor and the on-demand
        # fallback only (config/scheduling.py pool_flavors), so that is the pool simulated.
        spec = replace(spec, capacity=ElasticCapacity.on_demand)
    floor_type = spec.floor_type or spec.on_demand_type or spec.spot_type
    rates, missing = payment_rates(prices, cfg, pool_name, floor_type)
    if not rates:
        raise AdviceError(f"no rate for a {floor_type} floor: " + "; ".join(f"{p}: {m}" for p, m in missing.items()))
    scale = MINUTES_PER_MONTH / horizon  # simulated spend -> a 730-hour month
    jobs = hasattr(trace, "jobs")
    profile = simpool.demand_profile(trace, horizon)
    demand_gpu_hours = sum(profile) / 60
    oracle_hours = metrics.oracle_gpu_hours(trace, horizon)
    points = []
    sizes = sizes if sizes is not None else floor_sizes(spec.floor_peak_nodes)
    t0 = time.perf_counter()
    for i, (n, m) in enumerate(_simulate(spec, trace, settings, horizon, sizes, jobs)):
        elastic = (m["elastic_spot_cost_usd"] + m["elastic_on_demand_cost_usd"]) * scale
        # Unmet: the work an instant, infinite cluster would have done by the horizon, less the useful work done
        # (the simulator's own unmet figure also counts the tail of jobs still running at the horizon, which no
        # floor size changes).
        unmet = max(0.0, oracle_hours - m["gpu_hours_served"])
        point = {
            "floor_nodes": n,
            "floor_gpus": n * spec.floor_node_gpus,
            "elastic_monthly_usd": round(elastic, 2),
            "elastic_spot_monthly_usd": round(m["elastic_spot_cost_usd"] * scale, 2),
            "elastic_on_demand_monthly_usd": round(m["elastic_on_demand_cost_usd"] * scale, 2),
            "monthly_usd": {p: round(n * r.usd_per_hour * HOURS_PER_MONTH + elastic, 2) for p, r in rates.items()},
            "p95_wait_minutes": m["p95_wait_minutes"],
            "unmet_gpu_hours": round(unmet, 3),
            "unmet_pct": round(100 * unmet / oracle_hours, 3) if oracle_hours else 0.0,
            "jobs_interrupted": m["jobs_interrupted"],
            "spot_interruptions": m["interruptions"],
            # production work is interrupted only where it may run on spot (production_work_on_spot); elsewhere
            # its nodes are the floor and on-demand, which are not reclaimed
            "production_interruptions_per_month": round(m["jobs_interrupted"] * share * scale, 2)
            if production_on_spot
            else 0.0,
        }
        point["misses"] = _meets(point, target, jobs)
        point["meets_target"] = not point["misses"]
        points.append(point)
        if progress is not None:
            progress(i + 1, len(sizes))
    sweep_seconds = time.perf_counter() - t0
    busy = busy_share_by_node(profile, spec.floor_node_gpus, spec.floor_peak_nodes)
    best = choose(points, busy)
    current_nodes = pool.guaranteed.nodes if pool.guaranteed else 0
    current_payment = floor_payment_equivalent(prices, cfg, pool) if pool.guaranteed else None
    od = rates.get(floor_pricing.ON_DEMAND)
    spot = spec.spot_usd_per_hour if spec.has_spot else None
    budget = pool.budget.monthly_usd if pool.budget else None
    env_budget = cfg.budget.monthly_usd if cfg.budget else None
    doc = {
        "pool": pool_name,
        "region": cfg.region,
        "demand": trace.name,
        "demand_format": getattr(trace, "fmt", "series"),
        "horizon_minutes": horizon,
        "demand_gpu_hours": round(demand_gpu_hours, 3),
        "floor_instance_type": floor_type,
        "gpus_per_node": spec.gpus_per_node,
        "floor_gpus_per_node": spec.floor_node_gpus,  # the floor's own size (smaller in a multi-size pool)
        "peak_nodes": spec.peak_nodes,
        "peak_from_demand": peak_from_demand,
        "elastic": {
            "capacity": str(spec.capacity),
            "spot_type": spec.spot_type,
            "spot_usd_per_hour": spec.spot_usd_per_hour,
            "on_demand_type": spec.on_demand_type,
            "on_demand_usd_per_hour": spec.on_demand_usd_per_hour,
        },
        "production_share": share,
        # whether Kueue lets this pool's production work run on spot (scheduling.kueue.production_spot_pools)
        "production_on_spot": production_on_spot,
        "target": target.model_dump(),
        "rates": {
            p: {"usd_per_hour": r.usd_per_hour, "basis": r.basis, "source": r.source, "billing": r.billing}
            for p, r in rates.items()
        },
        "no_rate": missing,
        "current": {"floor_nodes": current_nodes, "payment": current_payment},
        "budget_monthly_usd": budget,
        "environment_budget_monthly_usd": env_budget,
        "jobs_larger_than_pool": runner.jobs_larger_than(trace, spec.peak_gpus),
        "points": points,
        "node_busy_share": [round(b, 4) for b in busy],
        "break_even": {
            p: break_even_words(floor_type, p, r.usd_per_hour, od.usd_per_hour, spot)
            for p, r in rates.items()
            if od is not None and p != floor_pricing.ON_DEMAND
        },
        "seed": settings.seed,
        "sweep_seconds": round(sweep_seconds, 3),
        "jobs": jobs,
    }
    if best is None:
        doc["recommendation"] = None
        doc["summary"] = (
            f"no floor from 0 to {spec.floor_peak_nodes} nodes meets the target with this pool's elastic "
            "capacity; raise elastic.max_nodes (or try --peak-from-demand) or relax service_target"
        )
    else:
        n, p, usd = best
        current = next((pt for pt in points if pt["floor_nodes"] == current_nodes), None)
        now_usd = current["monthly_usd"].get(current_payment) if current and current_payment else None
        over_pool = bool(budget is not None and usd > budget)
        over_env = bool(env_budget is not None and usd > env_budget)
        rec_point = next(pt for pt in points if pt["floor_nodes"] == n)
        doc["recommendation"] = {
            "floor_nodes": n,
            "floor_gpus": n * spec.floor_node_gpus,
            "payment": p,
            "monthly_usd": usd,
            "current_monthly_usd": now_usd,
            "pool_budget_monthly_usd": budget,
            "environment_budget_monthly_usd": env_budget,
            "over_pool_budget": over_pool,
            "over_environment_budget": over_env,
            "over_budget": over_pool or over_env,
            "forced_unneeded_node": False,
            "dominated_by": dominated_by(rec_point, usd, points, busy),
        }
        words = f"floor of {n} x {floor_type}" + (f" paid {p}" if n else " (no floor)")
        doc["summary"] = f"cheapest meeting the target: {words}, ${usd:,.0f}/month"
        if now_usd is not None:
            doc["summary"] += f" (today's {current_nodes} x {current_payment}: ${now_usd:,.0f}/month)"
        if n and n <= len(busy):
            doc["summary"] += f"; its last floor node is needed {100 * busy[n - 1]:.0f} % of the time"
            if _unneeded_last_node(n, busy):
                # only when no floor without such a node meets the target (useful was empty): say what forces it
                smaller = [pt for pt in points if pt["floor_nodes"] < n]
                why = "; ".join(smaller[-1]["misses"]) if smaller else "no smaller floor was simulated"
                doc["recommendation"]["forced_unneeded_node"] = True
                doc["summary"] += (
                    f", kept only because the service target forces it (no floor without such a "
                    f"node meets the target; {smaller[-1]['floor_nodes'] if smaller else n - 1} "
                    f"node(s): {why})"
                )
        doc["budget_lines"] = budget_lines(usd, budget, env_budget)
        doc["verdict"] = _verdict(doc["recommendation"])
    return doc


def choose(points: list[dict], busy: list[float]) -> tuple[int, str, float] | None:
    """(floor nodes, payment, monthly USD) of the cheapest point meeting the target, never one whose last floor
    node the demand needs 0 % of the time (busy: each node's share) while a point without such a node meets it."""
    meeting = [pt for pt in points if pt["meets_target"]]
    useful = [pt for pt in meeting if not _unneeded_last_node(pt["floor_nodes"], busy)]
    best = None
    for pt in useful or meeting:
        for p, usd in pt["monthly_usd"].items():
            if best is None or usd < best[2] - 1e-9:
                best = (pt["floor_nodes"], p, usd)
    return best


def _unneeded_last_node(n: int, busy: list[float]) -> bool:
    """The n-th floor node is needed less than UNNEEDED_SHARE of the time (0 nodes: nothing to be unneeded)."""
    return 0 < n <= len(busy) and busy[n - 1] < UNNEEDED_SHARE


def dominated_by(rec: dict, usd: float, points: list[dict], busy: list[float]) -> list[dict]:
    """Points cheaper than the recommendation (at their cheapest payment) and no worse on unmet work and p95 wait:
    the recommendation is dominated by them on those terms; each with the targets it misses. A point with a floor
    node the demand never needs is no baseline (choose() never recommends one either)."""
    out = []
    for pt in points:
        if pt is rec or _unneeded_last_node(pt["floor_nodes"], busy):
            continue
        cheapest = min(pt["monthly_usd"].values())
        waits_no_worse = (
            pt["p95_wait_minutes"] is None
            or rec["p95_wait_minutes"] is None
            or pt["p95_wait_minutes"] <= rec["p95_wait_minutes"]
        )
        if cheapest < usd - 0.005 and pt["unmet_gpu_hours"] <= rec["unmet_gpu_hours"] and waits_no_worse:
            out.append({"floor_nodes": pt["floor_nodes"], "monthly_usd": cheapest, "misses": pt["misses"]})
    return out


def budget_lines(usd: float, pool_budget: float | None, env_budget: float | None) -> list[dict]:
    """The recommendation's monthly cost against each budget: {"scope", "budget_monthly_usd", "text", "over"}."""
    out: list[dict] = []
    for scope, budget in (("pool", pool_budget), ("environment", env_budget)):
        if budget is None:
            out.append(
                {
                    "scope": scope,
                    "budget_monthly_usd": None,
                    "over": False,
                    "text": f"${usd:,.0f}/month against the {scope} budget: none set",
                }
            )
            continue
        over = usd > budget
        text = f"${usd:,.0f}/month against the {scope} budget ${budget:,.0f}: {100 * usd / budget:.0f} %"
        if over:
            text = f"OVER the {scope} budget: ${usd:,.0f}/month is ${usd - budget:,.0f} above ${budget:,.0f}"
        out.append({"scope": scope, "budget_monthly_usd": budget, "over": over, "text": text})
    return out


def _verdict(rec: dict) -> str:
    """One line: dominated, over a budget, forced, or clean."""
    parts = []
    if rec["dominated_by"]:
        d = min(rec["dominated_by"], key=lambda x: x["monthly_usd"])
        parts.append(
            f"dominated: a floor of {d['floor_nodes']} node(s) costs ${d['monthly_usd']:,.0f}/month, less, "
            f"with no more unmet work and no longer p95 wait"
            + (f" (it misses {'; '.join(d['misses'])})" if d["misses"] else "")
        )
    if rec["over_budget"]:
        parts.append(
            "over "
            + " and ".join(
                s
                for s, o in (
                    ("the pool budget", rec["over_pool_budget"]),
                    ("the environment budget", rec["over_environment_budget"]),
                )
                if o
            )
        )
    if rec["forced_unneeded_node"]:
        parts.append("its last floor node is kept only because the target forces it")
    return "verdict: " + ("; ".join(parts) if parts else "meets the target, within every budget, not dominated")
