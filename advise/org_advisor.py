"""The organization's advisor: every pool's floor and one commitment for the whole environment, chosen together,
and the price of each guarantee (`gpuloan advise -s STACK --demand DIR`; docs/floor.md, "The loan for an
organization").

No look-ahead. The history is split at `sizing_hours`: everything the advisor recommends is computed from the hours
before it (demands cut there, `PoolDemand.head`), and every figure it reports is measured on the hours after it,
as a user buys a commitment on the past and lives with the future:
1. floors: each production-tier pool gets the guarantee its service needs: by default the `guarantee_percentile`
   (90) of its hourly production GPUs over the sizing window, in whole nodes (rounded up); other tiers get none
   (their work may be interrupted, so it borrows instead);
2. commitment: the environment is run with those floors, idle floor lent, and the commitment is what Cost
   Explorer would recommend from the last `lookback_days` of that run's eligible usage before the end of the
   sizing window (advise/commitment_choice.py reads nothing later), bought at the end of the sizing window;
3. report: the whole history is run with that setup and with each baseline, all billed (billing.bill) on the
   report window only, each baseline's commitment chosen the way its author would have chosen it.

Setups (`baselines`, each by name):
- `karpenter`: no floors; production on on-demand, the rest spot-first (spot, then on-demand while spot is short);
- `karpenter+savings-plan`: the same plus the Cost Explorer commitment of its own sizing-window usage: the
  cheapest setup *without* any guarantee; every price of a guarantee is measured against it. A plan that saves
  nothing is not bought: where the commitment would bill more over the report window than `karpenter` without it,
  the row is `karpenter`'s, with no commitment and `plan_not_bought` saying what it would have cost (this one
  decision looks at the report window; it only makes the baseline cheaper, so the price of a guarantee is never
  understated by it);
- `team-floors`: the same floors, nothing lent, each team paying for itself (the per-pool `guaranteed.payment`
  model, as a careful team would do it): its own RIs, what Cost Explorer recommends from that team's usage alone
  (RI sharing off), which always covers the team's floor (a floor is billed every hour, so each of its RIs pays);
- `floors-not-lent`: the same floors and a Cost Explorer commitment sized on the resulting usage, nothing lent
  (what lending is worth: gpuloan against it);
- `fluid-bound`: the same floors, lent, in the fluid model (sim/fluid.py: free repacking, no boots), with the best
  commitment in hindsight over the report window: the limit of what lending and a shared commitment can do; its
  price is measured against the fluid model's no-floor run with its own hindsight commitment.
The recommendation's own result is `recommendation.report` (same keys).

How a setup runs: through a `Runner`: `fluid_runner` (every figure says `"model": "fluid"`) or
`environment_runner`, which runs each setup through the environment simulator (sim/environment.py: whole nodes,
boots, Kueue lending and reclaim, spot events, the per-pool controllers; `"model": "simulated"`). The simulated
runner measures the report window inside ONE run over the whole history (`REPORT_WINDOW_NOTE`), takes the
sizing window's usage for the commitments from the hours before the window of the same run, runs identical
simulations once (EnvironmentRunner's cache) and runs the shortage scenarios as the simulator's shortage windows.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from typing import Protocol

from pricing.cost_model import billing
from pricing.sources.catalog import Prices
from advise import commitment_choice, sanity
from sim import fluid, org_loan
from sim.fluid import PoolPrices, Scenario
from sim.demand import EXPERIMENT, PRODUCTION, TIERS, PoolDemand
from sim.metrics import EnvironmentRun, PoolMetrics, percentile

DEFAULT_PERCENTILE = 90.0
KARPENTER, KARPENTER_SP = "karpenter", "karpenter+savings-plan"
KARPENTER_SHARED, KARPENTER_SHARED_SP = "karpenter-shared", "karpenter-shared+savings-plan"
TEAM_FLOORS, NOT_LENT, FLUID_BOUND, GPULOAN = "team-floors", "floors-not-lent", "fluid-bound", "gpuloan"
BASELINES = (KARPENTER, KARPENTER_SP, KARPENTER_SHARED, KARPENTER_SHARED_SP, TEAM_FLOORS, NOT_LENT, FLUID_BOUND)
# the layouts a setup runs in: gpuloan's per-pool controllers; Karpenter with one NodePool per team; Karpenter
# with two NodePools for the whole organization (shared_layout)
CONTROLLER_GPULOAN, CONTROLLER_KARPENTER, CONTROLLER_KARPENTER_SHARED = "gpuloan", "karpenter", "karpenter-shared"
# gpuloan with the floors in their teams' production pools and every other job in two shared pools beside them
CONTROLLER_GPULOAN_SHARED = "gpuloan-shared"
GPULOAN_LAYOUTS = {
    CONTROLLER_GPULOAN: "a pool per team",
    CONTROLLER_GPULOAN_SHARED: (
        "shared pools (production on-demand, interruptible spot-first, borrowing the floors) beside the production "
        "pools that hold the floors"
    ),
}
KARPENTER_CONTROLLERS = (CONTROLLER_KARPENTER, CONTROLLER_KARPENTER_SHARED)

# The on-demand shortage scenario: for episodes at this rate and mean length, no new capacity of the instance type
# can be launched (InsufficientInstanceCapacity), only reserved capacity is there. No public source gives how often
# this happens for a GPU family, so it is a named scenario with its rate stated, reported apart from the default,
# like sim/engine.py's SPOT_SHORTAGE (one 3-hour spot-unavailable episode a week), which the spot scenario uses.
ON_DEMAND_SHORTAGE = {"episodes_per_week": 1.0, "mean_hours": 6.0}


# How the simulated mode measures the report window (docs/floor.md; the `--json` document's `report_window_note`).
REPORT_WINDOW_NOTE = (
    "one run over the whole history, floors (and their Kueue quotas) there from its first hour; cost: the hourly "
    "usage of the report window's hours, billed with the commitments in force then; production interruptions, "
    "reclaim preemptions and their lost work: those that happen in the window; p95 waits: jobs submitted in the "
    "window (a job never started counts with its wait up to the end); unmet GPU-hours: the work of jobs "
    "submitted in the window not served by the end of the run (work due by then: a job still running at the end "
    "is not counted for its hours beyond it, as the fluid model's demand ends there)"
)


class OrgAdviceError(ValueError):
    """The environment cannot be advised on (no production pool, no sizing window, no rates ...)."""


class Runner(Protocol):
    """Runs the environment: every pool's demand, these floors, lent or not, under one controller."""

    model: str

    def __call__(
        self,
        demands: dict[str, PoolDemand],
        floors_nodes: dict[str, int],
        *,
        lend: bool,
        controller: str,
        scenario: Scenario,
        report_from_hour: int,
    ) -> EnvironmentRun: ...


@dataclass(frozen=True)
class OrgInputs:
    demands: dict[str, PoolDemand]  # the whole history, sizing window first
    prices: dict[str, PoolPrices]
    ri_rates: dict[tuple[str, str], float]  # (type, region) -> the commitment's rate per instance-hour
    term: str  # e.g. "reserved_3yr": the rates' term, for the report
    sizing_hours: int
    lookback_days: int = 30
    guarantee_percentile: float = DEFAULT_PERCENTILE
    rate_sources: dict[str, str] = field(default_factory=dict)

    @property
    def hours(self) -> int:
        return max(d.hours for d in self.demands.values())


@dataclass
class FluidRunner:
    """The fluid model as a runner: what every setup runs through until sim/environment.py lands."""

    prices: dict[str, PoolPrices]
    model: str = fluid.MODEL

    def __call__(self, demands, floors_nodes, *, lend, controller, scenario, report_from_hour):
        # The controller does not matter in the fluid model (no boots, no idle timeouts): that is what it bounds.
        return fluid.run(
            demands, self.prices, floors_nodes, lend=lend, scenario=scenario, report_from_hour=report_from_hour
        )


def fluid_runner(prices: dict[str, PoolPrices]) -> FluidRunner:
    return FluidRunner(prices)


def pool_prices(price_book: Prices, cfg) -> dict[str, PoolPrices]:
    """pool -> what the fluid bound runs it on: the instance type of its floor (else of its elastic groups), that
    type's on-demand rate, its spot rate where the pool runs spot, and its node groups' limit on elastic GPUs
    (sim/pool.py `PoolSpec.elastic_max_nodes`, the simulator's own cap), so that the bound runs the deployment the
    simulated rows run (issue 36). The one construction of the bound's inputs: `gpuloan advise --demand` and every
    benchmark build them here. ValueError naming the pool where the book has no price for its type."""
    from sim import pool as simpool

    out = {}
    for p in cfg.pools:
        spec = simpool.spec_from_config(price_book, cfg, p.name)
        itype = spec.floor_type or spec.on_demand_type or spec.spot_type
        if itype is None:
            raise ValueError(f"pool '{p.name}': no instance type (neither a floor nor an elastic group)")
        price = price_book.price(itype, cfg.region)
        if price is None:
            raise ValueError(f"pool '{p.name}': {price_book.missing_price_reason(itype, cfg.region)}")
        out[p.name] = PoolPrices(
            itype,
            cfg.region,
            spec.gpus_per_node,
            price.ondemand_usd_per_hour,
            spec.spot_usd_per_hour if spec.has_spot else None,
            spec.elastic_max_nodes * spec.gpus_per_node,
        )
    return out


def karpenter_config(cfg):
    """The stack as a careful Karpenter team runs it (issue 36): every pool's NodePool allows both capacity types,
    production pods select `karpenter.sh/capacity-type: on-demand` (the stack keeps production off spot:
    scheduling.kueue.production_spot_pools) and every other pod goes spot first, on-demand while spot is short.
    A pool configured `on_demand` only (gpuloan's production pools often are) gets `spot_then_on_demand` here,
    so its interruptible work uses spot as Karpenter's would."""
    from config.config_terms import ElasticCapacity

    pools = []
    for pool in cfg.pools:
        e = pool.elastic
        if e is not None and e.capacity == ElasticCapacity.on_demand:
            e = e.model_copy(update={"capacity": ElasticCapacity.spot_then_on_demand})
        pools.append(pool.model_copy(update={"elastic": e}))
    return cfg.model_copy(update={"pools": pools})


SHARED_PRODUCTION, SHARED_REST = "org-production", "org-interruptible"


@dataclass(frozen=True)
class SharedLayout:
    """`karpenter-shared`: two NodePools for the whole organization, packing across teams: one on-demand for
    production pods, one spot-first (on-demand while spot is short) for every other pod (per instance type, where
    the pools run several). Simulated as two pools, each job of every team in the one its class picks; the class
    of each job is the one the per-team run gives it (sim/demand.py production_flags with the team's pool
    name, share and seed), so both layouts run the same jobs as the same classes; a demand series is split each
    minute as the simulator splits it (sim/demand.py split_gpus), its production GPUs to the production pool, the
    rest to the other, each summed minute by minute with the series of its class. `source[pool][k]`: the team pool job k came from."""

    cfg: object
    traces: dict
    source: dict


def shared_layout(price_book: Prices, cfg, traces: dict, seed: int, *, keep_floors: bool = False) -> SharedLayout:
    """The organization's work in shared pools (SharedLayout). `keep_floors` (gpuloan's shared layout): every
    pool with a floor stays, its team's production jobs on it, and everything else goes to the two shared pools;
    the interruptible one borrows the idle floors through Kueue as an experiment-tier queue does."""
    from sim import pool as simpool
    from config.scheduling import production_share_pct
    from sim.demand import production_flags, split_series
    from sim.traces import Job, JobsTrace, SeriesTrace

    types: list[str] = []
    jobs: dict[str, list] = {}
    series: dict[str, list[int]] = {}
    members: dict[str, list] = {}  # pool of the layout -> the team pools it serves
    kept = {p.name for p in cfg.pools if keep_floors and p.guaranteed is not None and p.guaranteed.nodes}
    for p in cfg.pools:
        if p.name not in traces:
            continue  # a pool without demand in this environment (the simulator runs the pools it is given)
        spec = simpool.spec_from_config(price_book, cfg, p.name)
        itype = str(spec.floor_type or spec.on_demand_type or spec.spot_type)
        if itype not in types:
            types.append(itype)
        suffix = "" if len(types) == 1 else f"-{types.index(itype) + 1}"
        trace, share = traces[p.name], production_share_pct(p)

        def home(prod: bool) -> str:
            if prod and p.name in kept:
                return p.name
            return (SHARED_PRODUCTION if prod else SHARED_REST) + suffix

        if isinstance(trace, JobsTrace):
            flags = production_flags(trace, share / 100, seed, p.name) or [False] * len(trace.jobs)
            for j, prod in zip(trace.jobs, flags):
                name = home(prod)
                jobs.setdefault(name, []).append((j, p.name))
                members.setdefault(name, [])
                if p not in members[name]:
                    members[name].append(p)
        else:
            # each minute split as the per-team run splits it (sim/demand.py split_gpus): production to the
            # production pool (or the team's kept floor), the rest to the other
            for prod, part in zip((True, False), split_series(trace.gpus_demanded, share / 100)):
                if not any(part):
                    continue
                name = home(prod) + ("" if prod and p.name in kept else "-series")
                acc = series.setdefault(name, [])
                acc.extend([0] * (len(part) - len(acc)))
                for t, g in enumerate(part):
                    acc[t] += g
                members.setdefault(name, []).append(p)
    for p in cfg.pools:
        if p.name in kept and p.name in traces and p.name not in members:
            # a floor whose team has no production work here (a job trace or a series at a share of 0 %): the
            # floor is still bought, billed and lent, so its pool stays, with no work of its own (issue 36: it vanished, and gpuloan-shared was billed with no floor at all)
            members[p.name] = [p]
            jobs[p.name] = []
    traces_out: dict[str, JobsTrace | SeriesTrace] = {}
    source: dict[str, list[str]] = {}
    for name, items in jobs.items():
        items.sort(key=lambda r: r[0].submit_s)  # a trace is in submission order
        traces_out[name] = JobsTrace(
            name, "generic", tuple(Job(f"{src}/{j.job_id}", j.submit_s, j.duration_s, j.gpus) for j, src in items)
        )
        source[name] = [src for _, src in items]
    for name, acc in series.items():
        traces_out[name] = SeriesTrace(name, tuple(acc))
    data = cfg.model_dump(mode="json", exclude_unset=True)
    data["pools"] = []
    for name, pools in members.items():
        if name in kept:  # the team's pool, its floor and its own elastic capacity, running its production only
            doc = pools[0].model_dump(mode="json", exclude_unset=True)
            doc["service_target"] = {**doc.get("service_target", {}), "production_share_pct": 100.0}
            data["pools"].append(doc)
            continue
        prod = name.startswith(SHARED_PRODUCTION)
        base = next((q for q in pools if q.elastic is not None), None)
        if base is None:
            raise OrgAdviceError(f"shared layout: pool '{pools[0].name}' has no elastic capacity")
        doc = base.model_dump(mode="json", exclude_unset=True)
        doc.pop("guaranteed", None)
        doc.pop("budget", None)
        capacity = "on_demand" if prod else "spot_then_on_demand"
        elastic = {k: v for k, v in doc["elastic"].items() if not (prod and k == "back_to_spot")}
        elastic.update(
            capacity=capacity, max_nodes=min(500, sum(q.elastic.max_nodes for q in pools if q.elastic is not None))
        )
        data["pools"].append(
            {
                **doc,
                "name": name,
                "team": "org",
                "tier": PRODUCTION if prod else EXPERIMENT,
                "elastic": elastic,
                "service_target": {**doc.get("service_target", {}), "production_share_pct": 100.0 if prod else 0.0},
            }
        )
    kueue = data.get("scheduling", {}).get("kueue", {})
    teams = kueue.get("teams") or {}
    kueue["teams"] = {t: v for t, v in teams.items() if t in {d["team"] for d in data["pools"]}}
    if not kueue["teams"]:
        kueue.pop("teams", None)
    shared = type(cfg).model_validate(data)
    return SharedLayout(shared, traces_out, source)


def setup_config(cfg, floors_nodes: dict[str, int], *, lend: bool, check: bool = True):
    """The stack as one setup runs it: each pool's floor set to the setup's size (a pool given a floor it did not
    have gets a capacity reservation of its instance type; a pool left without one loses `guaranteed`), and, for
    a setup that does not lend, every team's `lending_limit_pct` at 0 (docs/scheduling.md). A new reservation
    is placed in the cluster's first AZ (the simulator does not model AZs; a reservation needs one). `check`: the
    result goes through the stack's own validation (`config_problems`: a floor above the 64-node limit, a Kueue
    limit ...), refused with every problem; a floorless pool without elastic capacity is refused either way."""
    from config.config import Guaranteed, Reservation

    pools = []
    for pool in cfg.pools:
        k = floors_nodes.get(pool.name, 0)
        if k == 0:
            if pool.elastic is None:
                raise OrgAdviceError(f"pool '{pool.name}' has no elastic capacity: it cannot run without a floor")
            pools.append(pool.model_copy(update={"guaranteed": None}))
            continue
        g = pool.guaranteed
        itype = g.instance_type if g else pool.elastic.instance_types[0]
        g = (
            g.model_copy(update={"nodes": k})
            if g
            else Guaranteed(
                instance_type=itype,
                nodes=k,
                reservation=Reservation.odcr,
                availability_zone=cfg.cluster.availability_zones[0],
            )
        )
        pools.append(pool.model_copy(update={"guaranteed": g}))
    kueue = cfg.scheduling.kueue
    if not lend:
        teams = {p.team: kueue.sharing(p.team).model_copy(update={"lending_limit_pct": 0}) for p in cfg.pools}
        kueue = kueue.model_copy(update={"teams": {**kueue.teams, **teams}})
    scheduling = cfg.scheduling.model_copy(update={"kueue": kueue})
    out = cfg.model_copy(update={"pools": pools, "scheduling": scheduling})
    problems = config_problems(out) if check else []
    if problems:
        raise OrgAdviceError(_problem_lines(problems, f"the setup's stack (floors {_held(floors_nodes)})"))
    return out


def config_problems(cfg, instance_facts=None) -> list[tuple[str, str]]:
    """(path, message) of every rule of the stack's own validation (config.parse: node limits, Kueue limits,
    quotas ...) that a setup's config breaks, each path with its pool's name: the one check of what a setup may
    be, made up front by `setup_problems` and again by `setup_config`."""
    from config.config import ConfigError, parse

    try:
        parse(cfg.model_dump(mode="json", exclude_unset=True), "setup", instance_facts=instance_facts)
    except ConfigError as err:
        names = [p.name for p in cfg.pools]

        def named(path: str) -> str:
            m = re.match(r"^pools\[(\d+)\]", path)
            if m and int(m.group(1)) < len(names):
                return f"{path} (pool '{names[int(m.group(1))]}')"
            return path

        return [(named(path), msg) for path, msg in err.problems]
    return []


def _held(floors_nodes) -> str:
    return ", ".join(f"{n} {k}" for n, k in floors_nodes.items() if k) or "none"


def _problem_lines(problems, where: str) -> str:
    lines = "\n".join(f" - {path}: {msg}" for path, msg in problems)
    return f"{len(problems)} problem(s) in {where}:\n{lines}"


@dataclass
class EnvironmentRunner:
    """The simulated run: every setup through `simulate` (sim.environment.simulate_environment by default), called
    as

        simulate(price_book, cfg, demands, controller, settings, horizon_minutes, window_from_minute=...)

    with `price_book` the prices of the command that built the runner (sim/pool.py prices the pools with them),
    `cfg` = `setup_config(stack, floors, lend=...)`, `demands` the pools' traces (dict pool -> sim.traces
    trace) cut at the run's horizon, `controller` "gpuloan" or "karpenter" (the per-pool controllers), `settings`
    the stack's SimSettings with the scenario's shortage windows (`scenario_settings`) and `window_from_minute`
    the report window's first minute. ONE run over the whole horizon measures the report window: the result must
    have
    - `.hourly_usage`: list of billing.Usage, hours from the start of the run (the report bills hours from the
      window on; the commitments are chosen from the hours before it: no second run over the sizing window);
    - `.pools[name]` with production_interruptions, unmet_gpu_hours, unmet_production_gpu_hours,
      floor_gpu_hours, floor_owned_gpu_hours, floor_lent_gpu_hours measured over the report window of that run
      (events that happened in it; unmet = work of jobs submitted in it not served by the end of the run);
    - `.pending_by_tier` (optional): tier -> sim.metrics.pending_summary of the total pending minutes per
      job (first wait plus every re-wait) of the jobs submitted in the report window.
    Floors are there from minute 0 of the run (a floor's Kueue quota and its reservation exist from day 0 of the
    history, as if it had been bought before it: the sizing window's usage then includes the floor, which is what
    the commitment is sized on). Identical simulations run once: the runs are cached by what the simulator sees
    (floors, lending, controller, horizon, report window, scenario; the runner's traces and seed are fixed), so
    setups that differ only in billing (karpenter and karpenter+savings-plan; team-floors and floors-not-lent;
    another term) share one run; `run_scenarios` runs a setup once up to the report window and branches there
    into the shortage scenarios. `runs` counts simulations, `hits` answers from the cache.
    """

    price_book: Prices
    cfg: object
    traces: dict
    settings: object
    prices: dict[str, PoolPrices]
    simulate: object
    model: str = "simulated"
    use_cache: bool = True  # False: every call simulates (the reference the cache is tested against)
    cache: dict = field(default_factory=dict)
    runs: int = 0
    hits: int = 0
    progress: object = None  # called with the number of simulations run so far, after each (the CLI's stderr)
    stack_cfg: object = None  # the stack without environment_runner's production shares: what setups are checked on

    def key(self, hours: int, floors_nodes, lend: bool, controller: str, scenario: Scenario, report_from_hour: int):
        floors = tuple(sorted((n, k) for n, k in floors_nodes.items() if k))
        return (
            hours,
            report_from_hour,
            floors,
            bool(lend and floors),
            controller,
            scenario.spot_short_hours,
            scenario.on_demand_short_hours,
            getattr(self.settings, "seed", None),
        )

    def __call__(self, demands, floors_nodes, *, lend, controller, scenario, report_from_hour):
        hours = max(d.hours for d in demands.values())
        if not 0 <= report_from_hour <= hours:
            raise OrgAdviceError(f"report window from hour {report_from_hour}: outside the run's {hours} hours")
        key = self.key(hours, floors_nodes, lend, controller, scenario, report_from_hour)
        hit = self.cache.get(key) if self.use_cache else None
        if hit is not None:
            self.hits += 1
            return hit
        cfg, cut, sim_controller, reduce = self._layout(floors_nodes, lend, controller, hours)
        result = self.simulate(
            self.price_book,
            cfg,
            cut,
            sim_controller,
            scenario_settings(self.settings, scenario),
            hours * 60,
            window_from_minute=report_from_hour * 60,
            **reduce,
        )
        self.runs += 1
        if self.progress is not None:
            self.progress(self.runs)
        run = self._run_of(result, demands, hours)
        if self.use_cache:
            self.cache[key] = run
        return run

    def _layout(self, floors_nodes, lend: bool, controller: str, hours: int):
        # the floors checked on the stack as its user wrote it (a floor over the node limit, a Kueue limit ...);
        # `cfg` may carry the advice's what-if production shares, which the user does not deploy
        setup_config(self.stack_cfg if self.stack_cfg is not None else self.cfg, floors_nodes, lend=lend)
        return setup_layout(
            self.price_book,
            self.cfg,
            self.traces,
            floors_nodes,
            lend,
            controller,
            hours,
            getattr(self.settings, "seed", 1),
            check=False,
        )

    def _run_of(self, result, demands, hours: int) -> EnvironmentRun:
        """The simulation's result as the advisor reads it."""
        # the shared layout runs the organization's pools, not the teams'
        names = list(result.pools) if set(result.pools) != set(demands) else list(demands)
        return EnvironmentRun(
            self.model,
            hours,
            list(result.hourly_usage),
            {n: _metrics_of(result.pools[n]) for n in names},
            {n: d.tier for n, d in demands.items()},
            getattr(result, "pending_by_tier", None),
        )

    def run_scenarios(self, demands, floors_nodes, *, lend, controller, scenarios, report_from_hour) -> list:
        """The setup in the default scenario and in each of `scenarios`, into the cache, each as `__call__` would
        give it. With the environment simulator, one run up to the report window branches there into the
        scenarios (sim/environment.py simulate_branches: their shortage hours all lie in the window, so the runs
        are the same up to it): the part before the window is simulated once."""
        scenarios = [sc for sc in scenarios if sc.spot_short_hours or sc.on_demand_short_hours]
        hours = max(d.hours for d in demands.values())
        default = Scenario()
        todo = [
            sc
            for sc in [default, *scenarios]
            if self.key(hours, floors_nodes, lend, controller, sc, report_from_hour) not in self.cache
        ]
        early = any(h < report_from_hour for sc in todo for h in sc.spot_short_hours | sc.on_demand_short_hours)
        import os

        if (
            self.simulate is not simulate_with_environment
            or not todo
            or early
            or not self.use_cache
            or not hasattr(os, "fork")
        ):  # branching forks the process (POSIX); elsewhere: separate runs
            return [
                self(
                    demands,
                    floors_nodes,
                    lend=lend,
                    controller=controller,
                    scenario=sc,
                    report_from_hour=report_from_hour,
                )
                for sc in [default, *scenarios]
            ]
        cfg, cut, sim_controller, reduce = self._layout(floors_nodes, lend, controller, hours)
        branches = (
            [(_hour_windows(sc.spot_short_hours), _hour_windows(sc.on_demand_short_hours)) for sc in todo[1:]]
            if todo[0] is default
            else None
        )
        if branches is None:  # the default run is cached already: branch from a fresh run of the first scenario
            return [
                self(
                    demands,
                    floors_nodes,
                    lend=lend,
                    controller=controller,
                    scenario=sc,
                    report_from_hour=report_from_hour,
                )
                for sc in [default, *scenarios]
            ]
        own, others = simulate_branches_with_environment(
            self.price_book,
            cfg,
            cut,
            sim_controller,
            self.settings,
            hours * 60,
            report_from_hour * 60,
            branches,
            **reduce,
        )
        self.runs += 1
        if self.progress is not None:
            self.progress(self.runs)
        for sc, result in zip(todo, [own, *others]):
            self.cache[self.key(hours, floors_nodes, lend, controller, sc, report_from_hour)] = self._run_of(
                result, demands, hours
            )
        return [
            self(
                demands, floors_nodes, lend=lend, controller=controller, scenario=sc, report_from_hour=report_from_hour
            )
            for sc in [default, *scenarios]
        ]

    def sizing_usage(self, demands, floors_nodes, *, lend, controller, sizing_hours):
        """The hourly usage Cost Explorer would have seen at the end of the sizing window: the hours before it of
        the whole run (the default scenario's, cached for the report; a shortage scenario only touches the report
        window, and a run's hours before the window do not depend on what comes after)."""
        run = self(
            demands, floors_nodes, lend=lend, controller=controller, scenario=Scenario(), report_from_hour=sizing_hours
        )
        return [u for u in run.hourly_usage if u.hour < sizing_hours]


def setup_layout(
    price_book: Prices,
    cfg,
    traces: dict,
    floors_nodes,
    lend: bool,
    controller: str,
    hours: int,
    seed: int,
    *,
    check: bool = True,
):
    """(config, traces cut at the horizon, the per-pool controller, extra arguments of `simulate`) of a setup:
    gpuloan's config as the setup sets it; Karpenter's with both capacity types (karpenter_config); the shared
    layout's two pools (shared_layout), the pending time measured per team tier of each job. `check`: as
    setup_config's."""
    cut = {n: _cut(t, hours) for n, t in traces.items()}
    own = setup_config(cfg, floors_nodes, lend=lend, check=check)
    if controller == CONTROLLER_GPULOAN:
        return own, cut, controller, {}
    if controller == CONTROLLER_GPULOAN_SHARED:
        layout = shared_layout(price_book, own, cut, seed, keep_floors=True)
        sim_controller = CONTROLLER_GPULOAN
    else:
        kcfg = karpenter_config(own)
        if controller == CONTROLLER_KARPENTER:
            return kcfg, cut, controller, {}
        if controller != CONTROLLER_KARPENTER_SHARED:
            raise OrgAdviceError(
                f"controller '{controller}': one of {CONTROLLER_GPULOAN}, "
                f"{CONTROLLER_GPULOAN_SHARED}, {', '.join(KARPENTER_CONTROLLERS)}"
            )
        layout, sim_controller = shared_layout(price_book, kcfg, cut, seed), CONTROLLER_KARPENTER
    tiers = _pool_tiers(cfg)
    job_tiers = {n: [tiers[src] for src in srcs] for n, srcs in layout.source.items()}
    return layout.cfg, layout.traces, sim_controller, {"job_tiers": job_tiers} if job_tiers else {}


def setup_problems(
    price_book: Prices,
    cfg,
    traces: dict,
    inputs: "OrgInputs",
    *,
    seed: int = 1,
    instance_facts=None,
    per_pool_prices: bool = True,
) -> list[tuple[str, str]]:
    """Every refusal that the config and the demand alone decide, before anything is simulated (issue 36): the
    floors the advisor sizes (`size_floors` on the sizing window) put into every distinct setup's config
    (`simulations`: gpuloan per team and shared, floors not lent, Karpenter per team and shared, each floor
    dropped once), each through the stack's own validation (`config_problems`). (path, message) pairs, each
    naming its pool and the setup, each problem once."""
    hours = inputs.hours
    if not 0 < inputs.sizing_hours < hours:
        return []  # recommend refuses this with its reason
    out: dict[tuple[str, str], str] = {}
    for floors, lend, controller, _ in simulations(inputs, seed=seed, per_pool_prices=per_pool_prices):
        where = describe_setup((floors, lend, controller, []))
        try:
            # the stack with the setup's floors is what the user would deploy: all of its rules apply; the
            # Karpenter and shared layouts derived from it are models of other deployments (their synthetic pools
            # need not meet gpuloan's naming rules), so they only have to build
            found = config_problems(setup_config(cfg, floors, lend=lend, check=False), instance_facts)
            if not found:
                setup_layout(price_book, cfg, traces, floors, lend, controller, hours, seed, check=False)
        except ValueError as err:  # OrgAdviceError, or pydantic's ValidationError of a shared layout's config
            found = [(where, str(err).splitlines()[0])]
        for problem in found:
            out.setdefault(problem, where)
    return [(path, f"{msg} ({where})") for (path, msg), where in out.items()]


def _pool_tiers(cfg) -> dict[str, str]:
    """Pool name -> its tier, of a stack config."""
    return {str(p.name): str(p.tier) for p in cfg.pools}


def _metrics_of(src) -> PoolMetrics:
    """One pool's window figures of a simulation, as the advisor reads them: the simulator's (`_reduce`) and the
    fluid model's are PoolMetrics already; another `simulate` may return any object with some of its fields (the
    others keep PoolMetrics' defaults)."""
    if isinstance(src, PoolMetrics):
        return src
    return PoolMetrics(**{f.name: getattr(src, f.name) for f in fields(PoolMetrics) if hasattr(src, f.name)})


def scenario_settings(settings, scenario: Scenario):
    """The SimSettings a scenario runs with: its shortage hours as the simulator's shortage windows (minutes).
    Spot short: no spot launch; on-demand short: no elastic launch of the pool's type at all (on-demand, and spot
    with it, as the fluid model's scenario), in every pool of the run; floors are reserved and keep running."""
    from dataclasses import replace

    if not (scenario.spot_short_hours or scenario.on_demand_short_hours):
        return settings
    return replace(
        settings,
        spot_unavailable_windows=_hour_windows(scenario.spot_short_hours),
        on_demand_unavailable_windows=_hour_windows(scenario.on_demand_short_hours),
    )


def _hour_windows(hours) -> tuple[tuple[int, int], ...]:
    """A set of hours as [start, end) minute windows, consecutive hours merged."""
    out: list[list[int]] = []
    for h in sorted(hours):
        if out and out[-1][1] == h * 60:
            out[-1][1] = (h + 1) * 60
        else:
            out.append([h * 60, (h + 1) * 60])
    return tuple((a, b) for a, b in out)


def _cut(trace, hours: int):
    """The trace up to `hours` (what a run of that horizon may see)."""
    from sim.traces import JobsTrace, SeriesTrace

    if isinstance(trace, SeriesTrace):
        return SeriesTrace(trace.name, trace.gpus_demanded[: hours * 60])
    return JobsTrace(trace.name, trace.fmt, tuple(j for j in trace.jobs if j.submit_s < hours * 3600))


def with_production_share(cfg, production_share: dict[str, float] | float | None):
    """The stack with `production_share` (0..1, per pool or one for all) written into each pool's
    service_target.production_share_pct, so the simulator classes as production the share the fluid profiles
    (sim/demand.py) were built with; None: the stack as it is."""
    if production_share is None:
        return cfg
    share = production_share if isinstance(production_share, dict) else {p.name: production_share for p in cfg.pools}
    pools = [
        p.model_copy(
            update={
                "service_target": p.service_target.model_copy(
                    update={"production_share_pct": round(100 * share[p.name], 6)}
                )
            }
        )
        if p.name in share
        else p
        for p in cfg.pools
    ]
    return cfg.model_copy(update={"pools": pools})


def environment_runner(
    price_book: Prices,
    cfg,
    traces: dict,
    settings,
    prices: dict[str, PoolPrices],
    simulate=None,
    production_share: dict[str, float] | float | None = None,
    use_cache: bool = True,
) -> EnvironmentRunner:
    """The simulated run (EnvironmentRunner); `simulate` defaults to `simulate_with_environment` (the environment
    simulator, sim/environment.py). `production_share` (0..1, per pool or one for all) is written into each pool's
    service_target.production_share_pct, so the simulator classes as production the share the fluid profiles
    (sim/demand.py) were built with."""
    return EnvironmentRunner(
        price_book,
        with_production_share(cfg, production_share),
        traces,
        settings,
        prices,
        simulate or simulate_with_environment,
        use_cache=use_cache,
        stack_cfg=cfg,
    )


@dataclass
class _SimulatedRun:
    hourly_usage: list
    pools: dict
    pending_by_tier: dict | None


def simulate_with_environment(
    price_book: Prices,
    cfg,
    demands,
    controller: str,
    settings,
    horizon_minutes: int,
    *,
    window_from_minute: int = 0,
    job_tiers: dict | None = None,
) -> _SimulatedRun:
    """One setup through sim.environment.simulate_environment, in the shape EnvironmentRunner reads: billing
    usage records of the whole run, per-pool figures of the report window (sim/environment.py
    `_window_figures`), the p95 wait per tier of the jobs submitted in the window."""
    from sim.environment import simulate_environment

    result = simulate_environment(
        price_book, cfg, demands, _factory(controller), settings, horizon_minutes, window_from_minute=window_from_minute
    )
    return _reduce(result, job_tiers)


def simulate_branches_with_environment(
    price_book: Prices,
    cfg,
    demands,
    controller: str,
    settings,
    horizon_minutes: int,
    window_from_minute: int,
    branches,
    job_tiers: dict | None = None,
) -> tuple[_SimulatedRun, list]:
    """The run and its branches (sim.environment.simulate_branches), each in EnvironmentRunner's shape."""
    from functools import partial

    from sim.environment import simulate_branches

    return simulate_branches(
        price_book,
        cfg,
        demands,
        _factory(controller),
        settings,
        horizon_minutes,
        window_from_minute,
        branches,
        partial(_reduce, job_tiers=job_tiers),
    )


def _factory(controller: str):
    from sim.controllers.gpuloan import GpuLoan
    from sim.controllers.karpenter import Karpenter

    factories = {CONTROLLER_GPULOAN: lambda spec: GpuLoan(), CONTROLLER_KARPENTER: lambda spec: Karpenter()}
    if controller not in factories:
        raise OrgAdviceError(f"controller '{controller}': one of {', '.join(factories)}")
    return factories[controller]


def _reduce(result, job_tiers: dict | None = None) -> _SimulatedRun:
    """An EnvironmentResult in EnvironmentRunner's shape (picklable: a branch's child sends it to the parent).
    `job_tiers` (the shared layout): pool -> the tier of the team each of its jobs came from; the pending time is
    then summarized per those tiers, not per the shared pools' own."""
    from dataclasses import asdict

    # every PoolMetrics field is in the window figures (sim/environment.py `_window_figures`); unmet guaranteed
    # production: GPU-hours that waited while the pool's own floor had room not running production
    # (_track_production_wait), the guarantee not kept
    pools = {
        name: PoolMetrics(**{f.name: m["window"][f.name] for f in fields(PoolMetrics)})
        for name, m in result.pools.items()
    }
    usage = [billing.Usage(**asdict(r)) for r in result.usage]
    pending = result.environment["window"]["pending_minutes_by_tier"]
    if job_tiers is not None:
        from sim.metrics import pending_summary

        by_tier: dict[str, list[float]] = {}
        start = result.environment["window"]["from_minute"]
        for name, tiers in job_tiers.items():
            w = result.sims[name].workload
            for minutes, submit_s, tier in zip(
                w.pending_minutes(result.environment["horizon_minutes"]), w.submit_s, tiers
            ):
                if submit_s >= start * 60:
                    by_tier.setdefault(tier, []).append(minutes)
        pending = {t: pending_summary(v) for t, v in sorted(by_tier.items(), key=lambda kv: TIERS.index(kv[0]))}
    return _SimulatedRun(usage, pools, pending)


def size_floors(demands: dict[str, PoolDemand], prices: dict[str, PoolPrices], pct: float) -> dict[str, int]:
    """Each production pool's floor: the pct-th percentile of its hourly production GPUs, in whole nodes (up)."""
    if not 0 <= pct <= 100:
        raise OrgAdviceError(f"guarantee percentile must be between 0 and 100, got {pct}")
    out = {}
    for n, d in demands.items():
        if d.tier != PRODUCTION:
            out[n] = 0
            continue
        gpus = percentile(d.production_gpus, pct)
        out[n] = math.ceil(round(gpus, 6) / prices[n].gpus_per_node)
    return out


def _heads(demands: dict[str, PoolDemand], hours: int) -> dict[str, PoolDemand]:
    return {n: d.head(hours) for n, d in demands.items()}


def _shift(c: billing.Commitment, by: int) -> billing.Commitment:
    from dataclasses import replace

    return replace(c, start_hour=max(0, c.start_hour - by), end_hour=None if c.end_hour is None else c.end_hour - by)


def report_bill(run: EnvironmentRun, commitments, report_from: int) -> billing.Bill:
    """The bill of the report window: hours from `report_from` on, commitments in force there."""
    usage = [
        billing.Usage(
            u.hour - report_from, u.pool, u.instance_type, u.region, u.purchase, u.instance_hours, u.usd_per_hour
        )
        for u in run.hourly_usage
        if u.hour >= report_from
    ]
    return billing.bill(usage, [_shift(c, report_from) for c in commitments], hours=run.hours - report_from)


def _utilization(b: billing.Bill, names) -> float | None:
    fee = sum(b.commitment_fee_usd.get(n, 0.0) for n in names)
    return None if fee <= 0 else round(sum(b.commitment_used_usd.get(n, 0.0) for n in names) / fee, 4)


def measure(
    name: str, run: EnvironmentRun, bill: billing.Bill, commitments, floors: dict[str, int], model: str
) -> dict:
    """One setup's figures over the report window (the JSON keys of `--json`)."""
    pools = run.pools.values()
    floor = sum(m.floor_gpu_hours for m in pools)
    tiers = sorted(set(run.tiers.values()), key=TIERS.index) if run.tiers else []
    pending: dict[str, dict | None] = dict(run.pending_by_tier or {}) or {t: None for t in tiers}
    return {
        "name": name,
        "model": model,
        "total_cost_usd": round(bill.total_usd, 2),
        "production_interruptions": sum(m.production_interruptions for m in pools),
        "unmet_gpu_hours": round(sum(m.unmet_gpu_hours for m in pools), 3),
        "unmet_production_gpu_hours": round(sum(m.unmet_production_gpu_hours for m in pools), 3),
        "unmet_guaranteed_production_gpu_hours": _sum_or_none(m.unmet_guaranteed_production_gpu_hours for m in pools),
        "production_waiting_gpu_hours": _sum_or_none(m.production_waiting_gpu_hours for m in pools),
        "reclaim_preemptions": sum(m.reclaim_preemptions for m in pools),
        "reclaim_lost_gpu_hours": round(sum(m.reclaim_lost_gpu_hours for m in pools), 3),
        "priority_preemptions": sum(m.priority_preemptions for m in pools),
        "priority_lost_gpu_hours": round(sum(m.priority_lost_gpu_hours for m in pools), 3),
        "scheduler_preemptions": sum(m.scheduler_preemptions for m in pools),
        "scheduler_lost_gpu_hours": round(sum(m.scheduler_lost_gpu_hours for m in pools), 3),
        # total pending minutes per job (first wait plus every re-wait), p95 / p99 / max per tier; None: not
        # measured (the fluid model has no queue)
        "pending_by_tier": {
            t: v or {"p95_pending_minutes": None, "p99_pending_minutes": None, "max_pending_minutes": None}
            for t, v in pending.items()
        },
        "floor_utilization": None
        if floor <= 0
        else {
            "owned": round(sum(m.floor_owned_gpu_hours for m in pools) / floor, 4),
            "lent": round(sum(m.floor_lent_gpu_hours for m in pools) / floor, 4),
        },
        "commitment_utilization": _utilization(bill, [c.name for c in commitments]),
        "floors_nodes": {n: k for n, k in floors.items() if k},
        "commitment_ri_count": sum(c.count for c in commitments),
        "by_purchase_usd": {k: round(v, 2) for k, v in sorted(bill.by_purchase_usd.items())},
        "unused_commitment_usd": round(bill.unused_commitment_usd, 2),
    }


def _sum_or_none(values) -> float | None:
    """The sum, or None when any part was not measured."""
    xs = list(values)
    return None if any(x is None for x in xs) else round(sum(xs), 3)


@dataclass
class SetupResult:
    doc: dict
    run: EnvironmentRun
    bill: billing.Bill


def _team_commitments(inputs: OrgInputs, runner: Runner, floors: dict[str, int]) -> list[billing.Commitment]:
    """Each team buys its own RIs: what Cost Explorer would recommend from that team's own usage alone (RI
    sharing off), never fewer than its floor's nodes (a floor is used every hour, so each of its RIs pays)."""
    usage = _sizing_usage(inputs, runner, floors, False, CONTROLLER_GPULOAN)
    out = []
    for n in inputs.demands:
        own = [u for u in usage if u.pool == n]
        c = commitment_choice.cost_explorer(
            own, inputs.ri_rates, inputs.sizing_hours, inputs.lookback_days, name=f"team-ri-{n}"
        )
        out.extend(c.commitments)
    return out


def _team_bill(run: EnvironmentRun, commitments, report_from: int) -> billing.Bill:
    """Paid per team: each team's RIs cover only its own usage (RI sharing off), one bill per pool, summed."""
    total = billing.Bill(hours=run.hours - report_from)
    for n in run.pools:
        own = [c for c in commitments if c.name.startswith(f"team-ri-{n}-")]
        sub = EnvironmentRun(run.model, run.hours, [u for u in run.hourly_usage if u.pool == n])
        b = report_bill(sub, own, report_from)
        for k, v in b.by_pool_usd.items():
            total.by_pool_usd[k] += v
        for k, v in b.by_purchase_usd.items():
            total.by_purchase_usd[k] += v
        for k, v in b.commitment_fee_usd.items():
            total.commitment_fee_usd[k] += v
        for k, v in b.commitment_used_usd.items():
            total.commitment_used_usd[k] += v
        total.unused_commitment_usd += b.unused_commitment_usd
        total.without_commitments_usd += b.without_commitments_usd
    return total


def recommend(inputs: OrgInputs, runner: Runner) -> tuple[dict[str, int], commitment_choice.Choice]:
    """Floors and commitment from the sizing window alone (the demands are cut there before anything reads them)."""
    s = inputs.sizing_hours
    if not 0 < s < inputs.hours:
        raise OrgAdviceError(
            f"the sizing window ({s} h) must be longer than 0 and shorter than the history "
            f"({inputs.hours} h): the advisor sizes on the first part and reports on the rest"
        )
    heads = _heads(inputs.demands, s)
    floors = size_floors(heads, inputs.prices, inputs.guarantee_percentile)
    usage = _sizing_usage(inputs, runner, floors, True, CONTROLLER_GPULOAN)
    return floors, commitment_choice.cost_explorer(usage, inputs.ri_rates, s, inputs.lookback_days)


def _sizing_usage(inputs: OrgInputs, runner: Runner, floors, lend: bool, controller: str) -> list[billing.Usage]:
    """The setup's hourly usage over the sizing window, what a commitment is chosen from. A runner with
    `sizing_usage` (EnvironmentRunner) reads it from the hours before the window of its one whole-horizon run;
    otherwise the runner runs the sizing window alone (the fluid model: its hours do not depend on later ones)."""
    own = getattr(runner, "sizing_usage", None)
    if own is not None:
        return own(inputs.demands, floors, lend=lend, controller=controller, sizing_hours=inputs.sizing_hours)
    heads = _heads(inputs.demands, inputs.sizing_hours)
    return runner(heads, floors, lend=lend, controller=controller, scenario=Scenario(), report_from_hour=0).hourly_usage


def _ce_choice(inputs: OrgInputs, runner: Runner, floors, lend: bool, controller: str):
    usage = _sizing_usage(inputs, runner, floors, lend, controller)
    return commitment_choice.cost_explorer(usage, inputs.ri_rates, inputs.sizing_hours, inputs.lookback_days)


def scenario_for(name: str, hours: int, from_hour: int, seed: int) -> Scenario:
    """A named scenario's shortage hours, in the report window only (the sizing window saw the default)."""
    from sim.engine import SPOT_SHORTAGE

    if name == "default":
        return Scenario()
    if name == "spot-shortage":
        hs = fluid.episode_hours(
            hours,
            SPOT_SHORTAGE["spot_unavailable_episodes_per_week"],
            SPOT_SHORTAGE["spot_unavailable_mean_hours"],
            seed,
        )
        return Scenario(name, spot_short_hours=frozenset(h for h in hs if h >= from_hour))
    if name == "on-demand-shortage":
        hs = fluid.episode_hours(
            hours, ON_DEMAND_SHORTAGE["episodes_per_week"], ON_DEMAND_SHORTAGE["mean_hours"], seed + 1000
        )
        return Scenario(name, on_demand_short_hours=frozenset(h for h in hs if h >= from_hour))
    raise OrgAdviceError(f"unknown scenario '{name}' (default, spot-shortage, on-demand-shortage)")


SCENARIOS = ("default", "spot-shortage", "on-demand-shortage")


def simulations(
    inputs: OrgInputs, *, scenarios=SCENARIOS, seed: int = 1, per_pool_prices: bool = True
) -> list[tuple[dict[str, int], bool, str, list[Scenario]]]:
    """The distinct simulated setups `evaluate` asks its runner for, each as (floors, lend, controller, scenarios):
    `simulated_setups` of the recommended floors, each in every scenario; with
    `per_pool_prices`, the recommended floors less each production pool's own, in the default scenario. They are
    independent of each other: `prefill` runs them at once."""
    s, hours = inputs.sizing_hours, inputs.hours
    fl = size_floors(_heads(inputs.demands, s), inputs.prices, inputs.guarantee_percentile)
    scs = [scenario_for(n, hours, s, seed) for n in scenarios]
    out: list[tuple[dict[str, int], bool, str, list[Scenario]]] = [
        (f, lend, controller, scs) for f, lend, controller in simulated_setups(inputs.demands, fl)
    ]
    if per_pool_prices:
        out += [(dict(fl, **{n: 0}), True, CONTROLLER_GPULOAN, [Scenario()]) for n, k in fl.items() if k]
    return out


def prefill(
    runner: EnvironmentRunner,
    inputs: OrgInputs,
    engine=None,
    *,
    scenarios=SCENARIOS,
    seed: int = 1,
    per_pool_prices: bool = True,
) -> None:
    """Runs every simulation `evaluate(inputs, runner, ...)` will ask for on `engine` (sim/parallel.py: local
    processes, Ray, or this process) into the runner's cache, so that evaluate only reads it. The runner goes to
    each worker once, without its cache; each setup comes back as the cache entries it made."""
    from dataclasses import replace

    from sim import parallel

    if not 0 < inputs.sizing_hours < inputs.hours:
        return  # evaluate refuses these inputs itself, with the reason
    todo = simulations(inputs, scenarios=scenarios, seed=seed, per_pool_prices=per_pool_prices)
    bare = replace(runner, cache={}, runs=0, hits=0, progress=None)
    for cache, runs in parallel.run_all(
        todo,
        _simulate_setup,
        shared=(bare, inputs.demands, inputs.sizing_hours),
        engine=engine,
        describe=describe_setup,
        label="advise: simulations",
    ):
        runner.cache.update(cache)
        runner.runs += runs


def describe_setup(setup) -> str:
    """A setup as an error names it: `setup gpuloan, floors lent (training 2, infer 1)`."""
    floors, lend, controller, scenarios = setup
    held = ", ".join(f"{n} {k}" for n, k in floors.items() if k) or "none"
    shortages = sum(1 for sc in scenarios if sc.spot_short_hours or sc.on_demand_short_hours)
    return f"setup {controller}, floors {'lent' if lend else 'not lent'} ({held})" + (
        f", default and {shortages} shortage scenario(s)" if shortages else ""
    )


def _simulate_setup(shared, setup) -> tuple[dict, int]:
    """One setup in every scenario on a worker (sim/parallel.py): the cache entries it made and its run count."""
    runner, demands, sizing_hours = shared
    runner.cache, runner.runs, runner.hits = {}, 0, 0
    floors, lend, controller, scenarios = setup
    if any(sc.spot_short_hours or sc.on_demand_short_hours for sc in scenarios):
        runner.run_scenarios(
            demands, floors, lend=lend, controller=controller, scenarios=scenarios, report_from_hour=sizing_hours
        )
    else:  # the default scenario alone: the plain run evaluate would make
        runner(demands, floors, lend=lend, controller=controller, scenario=Scenario(), report_from_hour=sizing_hours)
    return runner.cache, runner.runs


def evaluate(
    inputs: OrgInputs, runner: Runner, *, scenarios=SCENARIOS, seed: int = 1, per_pool_prices: bool = True
) -> dict:
    """The advice document: the recommendation, every baseline and the price of each guarantee, per scenario."""
    s, hours = inputs.sizing_hours, inputs.hours
    prerun = getattr(runner, "run_scenarios", None)
    if prerun is not None and 0 < s < hours:
        # every scenario of each simulated setup from one run up to the report window (EnvironmentRunner), before
        # anything asks for one of them alone
        for f, lend, controller, scs in simulations(inputs, scenarios=scenarios, seed=seed, per_pool_prices=False):
            prerun(inputs.demands, f, lend=lend, controller=controller, scenarios=scs, report_from_hour=s)
    floors, choice = recommend(inputs, runner)
    shared_choice = _ce_choice(inputs, runner, floors, True, CONTROLLER_GPULOAN_SHARED)
    if not any(floors.values()):
        raise OrgAdviceError(
            "no production pool needs a floor at this percentile (no production-tier pool, or "
            "no production demand in the sizing window)"
        )
    no_floors = {n: 0 for n in inputs.demands}
    ksp = _ce_choice(inputs, runner, no_floors, False, CONTROLLER_KARPENTER)
    kssp = _ce_choice(inputs, runner, no_floors, False, CONTROLLER_KARPENTER_SHARED)
    nl = _ce_choice(inputs, runner, floors, False, CONTROLLER_GPULOAN)
    team = _team_commitments(inputs, runner, floors)
    fprices = getattr(runner, "prices", inputs.prices)
    out_scenarios = {}
    default_run: EnvironmentRun | None = None
    for sc_name in scenarios:
        sc = scenario_for(sc_name, hours, s, seed)

        def go(fl, lend, controller, commitments, name, bill_fn=report_bill, r=runner, model=runner.model):
            run = r(inputs.demands, fl, lend=lend, controller=controller, scenario=sc, report_from_hour=s)
            b = bill_fn(run, commitments, s)
            return SetupResult(measure(name, run, b, commitments, fl, model), run, b)

        def with_plan(controller, plain, choice, name):
            with_it = go(no_floors, False, controller, choice.commitments, name)
            if with_it.doc["total_cost_usd"] <= plain.doc["total_cost_usd"]:
                return with_it
            # A plan that saves nothing is not bought (Cost Explorer recommends none): the row without it.
            lost = round(with_it.doc["total_cost_usd"] - plain.doc["total_cost_usd"], 2)
            without = go(no_floors, False, controller, [], name)
            without.doc["plan_not_bought"] = {
                "reserved_instances": sum(c.count for c in choice.commitments),
                "would_cost_usd_more": lost,
                "why": "the commitment Cost Explorer sizes on the sizing window would bill more than no commitment "
                "over the report window: a plan that saves nothing is not bought",
            }
            return without

        k = go(no_floors, False, CONTROLLER_KARPENTER, [], KARPENTER)
        k_sp = with_plan(CONTROLLER_KARPENTER, k, ksp, KARPENTER_SP)
        ks = go(no_floors, False, CONTROLLER_KARPENTER_SHARED, [], KARPENTER_SHARED)
        ks_sp = with_plan(CONTROLLER_KARPENTER_SHARED, ks, kssp, KARPENTER_SHARED_SP)
        tf = go(floors, False, CONTROLLER_GPULOAN, team, TEAM_FLOORS, bill_fn=_team_bill)
        notlent = go(floors, False, CONTROLLER_GPULOAN, nl.commitments, NOT_LENT)
        ours = go(floors, True, CONTROLLER_GPULOAN, choice.commitments, GPULOAN)
        ours_shared = go(floors, True, CONTROLLER_GPULOAN_SHARED, shared_choice.commitments, CONTROLLER_GPULOAN_SHARED)
        frun = fluid_runner(fprices)
        bound, bound0 = _bound(inputs, frun, floors, sc), _bound(inputs, frun, no_floors, sc)
        base = k_sp.doc["total_cost_usd"]
        for r in (k, k_sp, ks, ks_sp, tf, notlent, ours, ours_shared):
            r.doc["price_of_guarantee_pct"] = _pct(r.doc["total_cost_usd"], base)
            # the same, against the cheapest setup a careful team runs without a guarantee (issue 36)
            r.doc["price_over_shared_pct"] = _pct(r.doc["total_cost_usd"], ks_sp.doc["total_cost_usd"])
        bound.doc["price_of_guarantee_pct"] = _pct(bound.doc["total_cost_usd"], bound0.doc["total_cost_usd"])
        bound.doc["no_floor_total_cost_usd"] = bound0.doc["total_cost_usd"]
        ours.doc["dominated_by"] = dominated_by(ours.doc, [k.doc, k_sp.doc, ks.doc, ks_sp.doc, tf.doc, notlent.doc])
        tf.doc["commitment_sharing"] = "off: each team's RIs cover its own usage only"
        notlent.doc["commitment_sharing"] = "on: one commitment for the organization, AWS's default (docs/aws-rules.md)"
        ours_shared.doc["layout"] = GPULOAN_LAYOUTS[CONTROLLER_GPULOAN_SHARED]
        ours.doc["layout"] = GPULOAN_LAYOUTS[CONTROLLER_GPULOAN]
        if sc_name == "default" or default_run is None:
            default_run = ours.run
        out_scenarios[sc_name] = {
            "shortage_hours": len(sc.spot_short_hours | sc.on_demand_short_hours),
            "recommendation_report": ours.doc,
            "shared_layout_report": ours_shared.doc,
            "baselines": [k.doc, k_sp.doc, ks.doc, ks_sp.doc, tf.doc, notlent.doc, bound.doc],
        }
    default = out_scenarios.get("default") or next(iter(out_scenarios.values()))
    assert default_run is not None  # scenarios is never empty: the default document needs one
    loan = org_loan.per_pool(default_run, choice.commitments, s, _shift)  # the recommendation's default scenario
    rec = {
        "floors": {
            n: {
                "nodes": k,
                "gpus": k * inputs.prices[n].gpus_per_node,
                "instance_type": inputs.prices[n].instance_type,
                "tier": inputs.demands[n].tier,
            }
            for n, k in floors.items()
        },
        # each pool's loan over the report window: what it ran on its own floor, lent, borrowed, in GPU-hours and
        # dollars at the lender's floor rate, and the reclaims it suffered (sim/org_loan.py)
        "pools": loan,
        "commitment": choice.to_json(),
        "report": default["recommendation_report"],
        "price_of_guarantee_pct": default["recommendation_report"]["price_of_guarantee_pct"],
        "price_of_guarantee_usd": round(
            default["recommendation_report"]["total_cost_usd"] - default["baselines"][1]["total_cost_usd"], 2
        ),
        # against the cheapest layout a careful team runs without a guarantee: two shared NodePools and their plan
        "price_over_shared_pct": default["recommendation_report"]["price_over_shared_pct"],
        "price_over_shared_usd": round(
            default["recommendation_report"]["total_cost_usd"] - default["baselines"][3]["total_cost_usd"], 2
        ),
    }
    # the layouts gpuloan runs in (issue 36): which is cheaper for this demand, same floors, each with its own
    # Cost Explorer commitment
    shared_report = default["shared_layout_report"]
    cheaper = min((rec["report"], shared_report), key=lambda r: r["total_cost_usd"])
    rec["layouts"] = {
        CONTROLLER_GPULOAN: {
            "layout": GPULOAN_LAYOUTS[CONTROLLER_GPULOAN],
            "total_cost_usd": rec["report"]["total_cost_usd"],
        },
        CONTROLLER_GPULOAN_SHARED: shared_report,
    }
    name = CONTROLLER_GPULOAN if cheaper is rec["report"] else CONTROLLER_GPULOAN_SHARED
    rec["cheaper_layout"] = (
        f"{name}: {GPULOAN_LAYOUTS[name]} (${rec['report']['total_cost_usd']:,.0f} in a pool "
        f"per team, ${shared_report['total_cost_usd']:,.0f} shared, over the report window)"
    )
    rec["dominated_by_scenario"] = {n: sc["recommendation_report"]["dominated_by"] for n, sc in out_scenarios.items()}
    rec["verdict"] = verdict(rec["dominated_by_scenario"])
    if per_pool_prices:
        rec["price_of_each_guarantee"] = _each_guarantee(
            inputs, runner, floors, choice, default["recommendation_report"]["total_cost_usd"]
        )
    doc = {
        "model": runner.model,
        "model_note": (
            "fluid model (sim/fluid.py): free repacking, no boots; production interruptions are 0 and "
            "waits are not measured by construction. Not a simulation: --model simulated runs the "
            "environment simulator"
        )
        if runner.model == fluid.MODEL
        else "simulated environment",
        "report_window_note": (
            REPORT_WINDOW_NOTE
            if runner.model != fluid.MODEL
            else "the fluid model's hours from the report window on (sim/fluid.py run)"
        ),
        "term": inputs.term,
        "rate_sources": inputs.rate_sources,
        "sizing_window_hours": s,
        "report_window_hours": hours - s,
        "lookback_days": inputs.lookback_days,
        "guarantee_percentile": inputs.guarantee_percentile,
        "recommendation": rec,
        "baselines": default["baselines"],
        "scenarios": {k: v for k, v in out_scenarios.items() if k != "default"},
    }
    # figures that contradict each other are no advice (advise/sanity.py): the document says what failed
    checked = sanity.check(doc)
    doc["sanity_check"] = checked.to_json()
    if not checked.passed:
        rec["withheld"] = "not advice: the figures failed the sanity check (sanity_check.failures): " + "; ".join(
            checked.failures
        )
    return doc


# What a setup is judged on beside cost (and each tier's p95 wait): less is better for each (a figure not
# measured, None, never dominates). Unmet production work is reported beside it, not a key: a guarantee that
# leaves more work unmet and makes production wait longer is dominated even if a few production GPU-hours fewer
# go unmet.
DOMINANCE_KEYS = ("unmet_gpu_hours", "production_interruptions")


def dominated_by(ours: dict, setups: list[dict]) -> list[str]:
    """Setups (of the same model; not the fluid bound, which is no setup to buy) that cost less than `ours` and are
    no worse on unmet work and production interruptions, nor on any p95 wait both measure: `ours` is dominated
    by them."""
    out = []
    for b in setups:
        if b["total_cost_usd"] >= ours["total_cost_usd"]:
            continue
        if any(b[k] is None or ours[k] is None or b[k] > ours[k] + 1e-9 for k in DOMINANCE_KEYS):
            continue
        waits_b, waits_o = _p95_pending(b), _p95_pending(ours)
        if any((wb := waits_b.get(t)) is not None and w is not None and wb > w + 1e-9 for t, w in waits_o.items()):
            continue
        out.append(b["name"])
    return out


def _p95_pending(setup: dict) -> dict[str, float | None]:
    """Tier -> p95 total pending minutes of a setup's document (empty when not measured)."""
    return {t: (v or {}).get("p95_pending_minutes") for t, v in (setup.get("pending_by_tier") or {}).items()}


def verdict(dominated: dict[str, list[str]]) -> str:
    """The recommendation's verdict over the scenarios measured (scenario -> setups that dominate it there): a
    guarantee is insurance, so it is called dominated only where it is dominated in every scenario."""
    where = {n: d for n, d in dominated.items() if d}
    if where and len(where) == len(dominated):
        common = sorted(set.intersection(*(set(d) for d in where.values()))) or sorted(
            {x for d in where.values() for x in d}
        )
        return (
            f"dominated by {', '.join(common)}: cheaper and no worse on unmet work, production "
            f"interruptions and p95 waits in every scenario measured ({', '.join(dominated)})"
        )
    if where:
        parts = "; ".join(f"{n}: {', '.join(d)}" for n, d in where.items())
        better = ", ".join(n for n in dominated if n not in where)
        return (
            f"dominated where capacity is not short (cheaper and no worse there: {parts}); the guarantee "
            f"does better in: {better}"
        )
    return "not dominated: no setup is both cheaper and no worse on unmet work, production interruptions and p95 waits"


def simulated_setups(demands, floors: dict[str, int]) -> list[tuple[dict[str, int], bool, str]]:
    """The distinct simulations behind every setup of `evaluate` (floors, lend, controller): the floors lent
    (gpuloan, in a pool per team and in shared pools beside the floors), the floors not lent (team-floors,
    floors-not-lent), Karpenter per team and shared (each with and without its plan). Terms and plans change only billing."""
    none = {n: 0 for n in demands}
    return [
        (floors, True, CONTROLLER_GPULOAN),
        (floors, True, CONTROLLER_GPULOAN_SHARED),
        (floors, False, CONTROLLER_GPULOAN),
        (none, False, CONTROLLER_KARPENTER),
        (none, False, CONTROLLER_KARPENTER_SHARED),
    ]


def _bound(inputs: OrgInputs, frun: FluidRunner, floors, sc: Scenario) -> SetupResult:
    s = inputs.sizing_hours
    run = frun(inputs.demands, floors, lend=True, controller=CONTROLLER_GPULOAN, scenario=sc, report_from_hour=s)
    best = commitment_choice.hindsight(run.hourly_usage, inputs.ri_rates, s, run.hours)
    b = report_bill(run, best.commitments, s)
    return SetupResult(measure(FLUID_BOUND, run, b, best.commitments, floors, fluid.MODEL), run, b)


def _each_guarantee(inputs: OrgInputs, runner: Runner, floors, choice, total: float) -> dict:
    """Per production pool: what the environment would pay without that pool's floor (the others kept, the
    commitment re-chosen the same way): the price of that one guarantee."""
    out = {}
    s = inputs.sizing_hours
    for n, k in floors.items():
        if not k:
            continue
        fl = dict(floors, **{n: 0})
        c = _ce_choice(inputs, runner, fl, True, CONTROLLER_GPULOAN)
        run = runner(
            inputs.demands, fl, lend=True, controller=CONTROLLER_GPULOAN, scenario=Scenario(), report_from_hour=s
        )
        without = report_bill(run, c.commitments, s).total_usd
        out[n] = {"floor_nodes": k, "usd": round(total - without, 2), "pct_of_total": _pct(total, without)}
    return out


def _pct(x: float, base: float) -> float | None:
    return None if base <= 0 else round(100 * (x - base) / base, 3)
