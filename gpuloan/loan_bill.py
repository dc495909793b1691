"""The loan's bill: who used whose floor, in dollars per pool and day, from the policy function's LoanGpus metric.

A floor is billed to its owner whether it is used or not (Cost Explorer, `gpuloan:tier=guaranteed`). The hours
another pool's work ran on it (`LoanGpus`, Use=borrowed, published each tick from Kueue's ClusterQueue status,
policy/loan_usage.py) move from the owner's bill to the borrower's: the borrower pays them at the floor's effective
rate per GPU-hour, the owner is credited the same, and the floor's idle hours stay with the owner. The rate is the
floor's month as the preview bills it, the organization's commitments applied (pricing/cost_model/floor_bill.py), divided by its
GPU-hours (HOURS_PER_MONTH x the floor's GPUs in Kueue's units). Each transfer is rounded to the cent once and
counted on both sides, so the pools' totals after the loan add up to Cost Explorer's bill to the cent.

A day's GPU-hours are the day's mean of the samples x 24 (each tick publishes a value, zeros included). A day with
fewer samples than ticks is estimated from the samples it has (listed, with how many); a day with none charges
nothing (listed too).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from config import scheduling
from config.config import GpuLoanConfig
from pricing.cost_model.billing import HOURS_PER_MONTH
from pricing.cost_model.floor_bill import billing_key, floor_bill
from pricing.sources.catalog import Prices
from policy import metric_names as M
from policy.loan_usage import USE_BORROWED, USE_OWN_FLOOR
from advise.demand_history import fetch as fetch_metrics

SECONDS_PER_DAY = 86_400
QUERIES_PER_CALL = 500  # GetMetricData's limit


class LoanBillError(Exception):
    """The loan's metrics could not be read; the report stands without the loan, saying so."""


@dataclass(frozen=True)
class Series:
    """One LoanGpus series: `pool` uses `flavor` (the floor of `owner`) as `use`."""

    pool: str
    use: str
    flavor: str
    owner: str


def series(cfg: GpuLoanConfig) -> list[Series]:
    """The series the report needs: each floor's own use, and each queue's borrowing of another pool's floor."""
    if not cfg.scheduling.kueue.enabled:
        return []
    plan = scheduling.plan(cfg)
    floors = {f.name: f.pool for f in plan.flavors if f.kind == scheduling.FLOOR}
    out = []
    for q in plan.queues:
        for qf in q.flavors:
            if qf.flavor not in floors:
                continue
            owner = floors[qf.flavor]
            out.append(Series(q.pool, USE_OWN_FLOOR if owner == q.pool else USE_BORROWED, qf.flavor, owner))
    return out


def _query(cfg: GpuLoanConfig, s: Series, stat: str, qid: str) -> dict:
    dims = {M.DIM_ENVIRONMENT: cfg.environment, M.DIM_POOL: s.pool, M.DIM_USE: s.use, M.DIM_FLAVOR: s.flavor}
    return {
        "Id": qid,
        "ReturnData": True,
        "MetricStat": {
            "Metric": {
                "Namespace": M.NAMESPACE,
                "MetricName": M.LOAN_GPUS,
                "Dimensions": [{"Name": k, "Value": v} for k, v in dims.items()],
            },
            "Period": SECONDS_PER_DAY,
            "Stat": stat,
        },
    }


@dataclass(frozen=True)
class DayUse:
    gpu_hours: float | None  # None: no sample that day
    samples: int


def read(cloudwatch, cfg: GpuLoanConfig, start: dt.date, end: dt.date) -> dict[Series, dict[dt.date, DayUse]]:
    """Per series and day of [start, end): the GPU-hours and the number of samples behind them."""
    wanted = series(cfg)
    queries = []
    for i, s in enumerate(wanted):
        queries += [_query(cfg, s, "Average", f"avg{i}"), _query(cfg, s, "SampleCount", f"n{i}")]
    t0 = dt.datetime.combine(start, dt.time(), dt.timezone.utc)
    t1 = dt.datetime.combine(end, dt.time(), dt.timezone.utc)
    got: dict[str, dict[dt.datetime, float]] = {}
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        for k in range(0, len(queries), QUERIES_PER_CALL):
            got.update(fetch_metrics(cloudwatch, queries[k : k + QUERIES_PER_CALL], t0, t1))
    except ClientError as err:
        error = err.response.get("Error", {})
        raise LoanBillError(
            f"CloudWatch refused GetMetricData: {error.get('Code', '')} "
            f"{error.get('Message', err)} (the caller needs cloudwatch:GetMetricData)"
        ) from None
    except BotoCoreError as err:
        raise LoanBillError(f"could not reach CloudWatch: {err}") from None
    out: dict[Series, dict[dt.date, DayUse]] = {}
    for i, s in enumerate(wanted):
        days: dict[dt.date, DayUse] = {}
        counts = {t.date(): int(v) for t, v in got.get(f"n{i}", {}).items()}
        for t, mean in got.get(f"avg{i}", {}).items():
            days[t.date()] = DayUse(mean * 24, counts.get(t.date(), 0))
        out[s] = days
    return out


@dataclass(frozen=True)
class Transfer:
    """One day's borrowing of one floor: `borrower` pays `usd`, `owner` is credited the same."""

    day: dt.date
    borrower: str
    owner: str
    gpu_hours: float
    usd: float  # rounded to the cent; None-free: a floor without a rate transfers nothing (a message says so)
    estimated: str = ""  # why the day's figure is an estimate, "" when every tick's sample is there


@dataclass
class LoanBill:
    rates: dict[str, float | None]  # owner pool -> USD per GPU-hour of its floor (None: unknown)
    transfers: list[Transfer]
    own_floor_gpu_hours: dict[str, float]
    floor_gpu_hours: dict[str, float]  # what each floor had in the period (its GPUs x the period's hours)
    estimated_days: dict[dt.date, str]  # day -> from what its figures are estimated
    missing_days: list[dt.date]  # days with no sample at all: nothing charged
    messages: list[str] = field(default_factory=list)

    def borrowed_usd(self, pool: str) -> float:
        return round(sum(t.usd for t in self.transfers if t.borrower == pool), 2)

    def lent_credit_usd(self, pool: str) -> float:
        return round(sum(t.usd for t in self.transfers if t.owner == pool), 2)

    def borrowed_gpu_hours(self, pool: str) -> float:
        return sum(t.gpu_hours for t in self.transfers if t.borrower == pool)

    def lent_gpu_hours(self, pool: str) -> float:
        return sum(t.gpu_hours for t in self.transfers if t.owner == pool)

    def idle_floor_gpu_hours(self, pool: str) -> float | None:
        if pool not in self.floor_gpu_hours:
            return None
        return max(
            0.0, self.floor_gpu_hours[pool] - self.own_floor_gpu_hours.get(pool, 0.0) - self.lent_gpu_hours(pool)
        )


def floor_rates(prices: Prices, cfg: GpuLoanConfig) -> dict[str, float | None]:
    """Owner pool -> its floor's effective USD per GPU-hour (Kueue's units), the commitments applied as the preview
    bills them; None where a rate is unknown."""
    bill = floor_bill(prices, cfg)
    out: dict[str, float | None] = {}
    for i, pool in enumerate(cfg.pools):
        gpus = scheduling.floor_life_gpus(cfg, pool)
        if not gpus:
            continue
        monthly = bill.pool_usd(billing_key(cfg, i))
        out[pool.name] = None if monthly is None else monthly / HOURS_PER_MONTH / gpus
    return out


def build(
    prices: Prices,
    cfg: GpuLoanConfig,
    used: dict[Series, dict[dt.date, DayUse]],
    start: dt.date,
    end: dt.date,
    today: dt.date | None = None,
) -> LoanBill:
    """The transfers of [start, end). `today`: a day not over is estimated as far as its ticks go."""
    rates = floor_rates(prices, cfg)
    expected = SECONDS_PER_DAY // 60 // cfg.policy.schedule_minutes  # one sample per tick
    days = [start + dt.timedelta(days=k) for k in range((end - start).days)]
    transfers: list[Transfer] = []
    own: dict[str, float] = {}
    estimated: dict[dt.date, str] = {}
    missing: list[dt.date] = []
    messages: list[str] = []
    for day in days:
        uses = [(s, d[day]) for s, d in used.items() if day in d and d[day].gpu_hours is not None]
        if not uses and used:
            missing.append(day)
            continue
        short = [u.samples for _, u in uses if u.samples < expected]
        why = []
        if day == today:
            why.append("the day is not over: its ticks so far, scaled to 24 hours")
        elif short:
            why.append(
                f"{min(short)} of {expected} ticks' samples at worst, the mean scaled to 24 hours (the "
                "policy function missed ticks or the metrics lag)"
            )
        if len(uses) < len(used):
            why.append(
                f"{len(used) - len(uses)} of {len(used)} series without a sample (a queue's status was "
                "unreadable): not charged"
            )
        if why:
            estimated[day] = "; ".join(why)
        for s, u in uses:
            hours = u.gpu_hours or 0.0
            if s.use == USE_OWN_FLOOR:
                own[s.pool] = own.get(s.pool, 0.0) + hours
                continue
            rate = rates.get(s.owner)
            if rate is None or hours <= 0:
                continue
            transfers.append(Transfer(day, s.pool, s.owner, hours, round(hours * rate, 2), estimated.get(day, "")))
    unknown = sorted(p for p, r in rates.items() if r is None)
    if unknown:
        messages.append(
            f"floor rate unknown for {', '.join(unknown)}: hours borrowed there are not charged "
            "(give the floor's rate, docs/floor.md)"
        )
    hours = len(days) * 24
    floor_hours = {
        p.name: float(scheduling.floor_life_gpus(cfg, p) * hours)
        for p in cfg.pools
        if scheduling.floor_life_gpus(cfg, p)
    }
    return LoanBill(rates, transfers, own, floor_hours, estimated, missing, messages)
