"""Chargeback: one month's billed spend per pool, split into guaranteed (fixed) and elastic (usage) cost.

Reads Cost Explorer's GetCostAndUsage for the environment (filter: tag gpuloan:environment), grouped by the
tags gpuloan:pool and gpuloan:tier (config/tags.py puts them on every resource and activates them as
cost-allocation tags). Spend without a pool tag (shared platform: control plane, NAT, system nodes; or anything
untagged) is its own row. Budgets come from the stack config. The boto3 client is injected (STYLE.md 3).

Cost Explorer charges per request (USD 0.01): one report is one request per result page.
"""

from __future__ import annotations

import csv
import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config import tags
from config.config import GpuLoanConfig
from gpuloan.loan_bill import LoanBill

METRIC = "AmortizedCost"  # what the budgets track (stacks/spend/budgets.py COST_METRIC): report and mails agree
UNTAGGED = "(no pool tag)"
TIER_GUARANTEED = "guaranteed"
TIER_ELASTIC = "elastic"
MAX_PAGES = 100  # a runaway NextPageToken loop must not keep spending USD 0.01 a call


class CostReportError(Exception):
    """A problem the user can fix (bad month, missing stack file, API refusal); the message says which."""


@dataclass(frozen=True)
class Period:
    month: str  # YYYY-MM
    start: dt.date
    end: dt.date  # exclusive, as Cost Explorer wants it
    partial: bool  # the month is not over: figures are month-to-date

    @property
    def as_time_period(self) -> dict[str, str]:
        return {"Start": self.start.isoformat(), "End": self.end.isoformat()}


def _today() -> dt.date:
    return dt.date.today()


def parse_month(text: str, today: dt.date | None = None) -> Period:
    today = today or _today()
    match = re.fullmatch(r"(\d{4})-(\d{2})", text or "")
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise CostReportError(f"--month '{text}': write the month as YYYY-MM, e.g. {today:%Y-%m}")
    start = dt.date(int(match.group(1)), int(match.group(2)), 1)
    next_month = dt.date(start.year + start.month // 12, start.month % 12 + 1, 1)
    if start > today:
        raise CostReportError(f"--month {text} has not started yet (today is {today.isoformat()})")
    # A running month is queried up to today inclusive (Cost Explorer's end is exclusive and may not pass the
    # next month's first day), so the printed period says what the figures cover. On the 1st, start < end still.
    end = min(next_month, today + dt.timedelta(days=1))
    return Period(text, start, end, partial=end < next_month)


def request(environment: str, period: Period, page_token: str | None = None) -> dict[str, Any]:
    req: dict[str, Any] = {
        "TimePeriod": period.as_time_period,
        "Granularity": "MONTHLY",
        "Metrics": [METRIC],
        "Filter": {"Tags": {"Key": tags.TAG_ENVIRONMENT, "Values": [environment], "MatchOptions": ["EQUALS"]}},
        "GroupBy": [{"Type": "TAG", "Key": tags.TAG_POOL}, {"Type": "TAG", "Key": tags.TAG_TIER}],
    }
    if page_token:
        req["NextPageToken"] = page_token
    return req


@dataclass
class Fetched:
    amounts: dict[tuple[str, str], float]  # (pool, tier) -> USD; "" = tag absent
    pages: int
    estimated: bool
    currency: str = "USD"


def _tag_value(key: str) -> str:
    # Cost Explorer group keys look like "gpuloan:pool$training"; "gpuloan:pool$" means "no such tag".
    return key.split("$", 1)[1] if "$" in key else ""


def fetch(ce, environment: str, period: Period) -> Fetched:
    """Every page of GetCostAndUsage for the month, summed per (pool, tier)."""
    from botocore.exceptions import BotoCoreError, ClientError

    amounts: dict[tuple[str, str], float] = {}
    token: str | None = None
    pages, estimated, currency = 0, False, "USD"
    while True:
        try:
            resp = ce.get_cost_and_usage(**request(environment, period, token))
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            msg = err.response.get("Error", {}).get("Message", str(err))
            hint = ""
            if code in ("AccessDeniedException", "AccessDenied"):
                hint = " (the caller needs ce:GetCostAndUsage; Cost Explorer must be enabled for the account)"
            raise CostReportError(f"Cost Explorer refused the query: {code} {msg}{hint}") from None
        except BotoCoreError as err:
            raise CostReportError(f"could not reach Cost Explorer: {err}") from None
        pages += 1
        for result in resp.get("ResultsByTime", []):
            estimated = estimated or bool(result.get("Estimated"))
            for group in result.get("Groups", []):
                keys = group.get("Keys", [])
                pool = _tag_value(keys[0]) if keys else ""
                tier = _tag_value(keys[1]) if len(keys) > 1 else ""
                metric = group.get("Metrics", {}).get(METRIC, {})
                currency = metric.get("Unit", currency)
                amounts[(pool, tier)] = amounts.get((pool, tier), 0.0) + float(metric.get("Amount", 0) or 0)
        token = resp.get("NextPageToken")
        if not token:
            return Fetched(amounts, pages, estimated, currency)
        if pages >= MAX_PAGES:
            raise CostReportError(f"Cost Explorer kept paginating after {MAX_PAGES} pages; stopped to limit cost")


def tag_status(ce, keys: tuple[str, ...] = tags.COST_ALLOCATION_KEYS) -> dict[str, str] | None:
    """Activation status of the tag keys ('Active' / 'Inactive' / 'missing'), or None when it cannot be read
    (no permission, or an endpoint that does not implement ListCostAllocationTags)."""
    try:
        resp = ce.list_cost_allocation_tags(TagKeys=list(keys), Type="UserDefined")
    except Exception:  # noqa: BLE001 - advisory only; the report stands without it
        return None
    found = {t["TagKey"]: t.get("Status", "") for t in resp.get("CostAllocationTags", [])}
    return {k: found.get(k, "missing") for k in keys}


@dataclass(frozen=True)
class Row:
    pool: str
    team: str
    guaranteed_usd: float
    elastic_usd: float
    other_usd: float  # pool-tagged spend with neither tier (e.g. the pool's own budget) or an unknown tier
    budget_usd: float | None
    note: str = ""

    @property
    def total_usd(self) -> float:
        return self.guaranteed_usd + self.elastic_usd + self.other_usd

    @property
    def pct_of_budget(self) -> float | None:
        return None if not self.budget_usd else 100.0 * self.total_usd / self.budget_usd


@dataclass
class Report:
    environment: str
    period: Period
    rows: list[Row]
    untagged: Row
    total: Row
    messages: list[str] = field(default_factory=list)
    pages: int = 1
    currency: str = "USD"
    loan: LoanBill | None = None  # who used whose floor (gpuloan/loan_bill.py); None: not read (no Kueue)

    @property
    def all_rows(self) -> list[Row]:
        return [*self.rows, self.untagged, self.total]

    def borrowed_usd(self, row: Row) -> float:
        return (
            0.0
            if self.loan is None or row is self.untagged
            else (self.loan.borrowed_usd(row.pool) if row is not self.total else 0.0)
        )

    def lent_credit_usd(self, row: Row) -> float:
        return (
            0.0
            if self.loan is None or row is self.untagged
            else (self.loan.lent_credit_usd(row.pool) if row is not self.total else 0.0)
        )

    def after_loan_usd(self, row: Row) -> float:
        """The row's bill with the loan moved: borrowed hours paid, lent hours credited. In cents, so that the
        pools' figures add up to Cost Explorer's total exactly (every transfer is counted on both sides)."""
        cents = (
            round(row.total_usd * 100) + round(self.borrowed_usd(row) * 100) - round(self.lent_credit_usd(row) * 100)
        )
        return cents / 100


def build_report(
    cfg: GpuLoanConfig,
    period: Period,
    fetched: Fetched,
    status: dict[str, str] | None = None,
    loan: LoanBill | None = None,
) -> Report:
    by_pool: dict[str, dict[str, float]] = {}
    for (pool, tier), usd in fetched.amounts.items():
        slot = tier if tier in (TIER_GUARANTEED, TIER_ELASTIC) else "other"
        by_pool.setdefault(pool, {}).setdefault(slot, 0.0)
        by_pool[pool][slot] += usd

    def row(pool: str, team: str, budget: float | None, note: str = "") -> Row:
        parts = by_pool.get(pool, {})
        return Row(
            pool,
            team,
            parts.get(TIER_GUARANTEED, 0.0),
            parts.get(TIER_ELASTIC, 0.0),
            parts.get("other", 0.0),
            budget,
            note,
        )

    rows = [row(p.name, p.team, p.budget.monthly_usd if p.budget else None) for p in cfg.pools]
    configured = {p.name for p in cfg.pools}
    for pool in sorted(set(by_pool) - configured - {""}):
        rows.append(row(pool, "?", None, "not in the stack config (removed or renamed pool?)"))
    untagged = row("", "", None)
    untagged = Row(
        UNTAGGED,
        "",
        untagged.guaranteed_usd,
        untagged.elastic_usd,
        untagged.other_usd,
        None,
        "shared platform (control plane, NAT, system nodes) and spend without a pool tag",
    )
    every = [*rows, untagged]
    total = Row(
        "total",
        "",
        sum(r.guaranteed_usd for r in every),
        sum(r.elastic_usd for r in every),
        sum(r.other_usd for r in every),
        cfg.budget.monthly_usd,
        f"environment {cfg.environment}",
    )

    messages: list[str] = []
    month, env = period.month, cfg.environment
    inactive = sorted(k for k, s in (status or {}).items() if s != "Active")
    if inactive:
        messages.append(
            f"cost-allocation tag(s) not active: {', '.join(inactive)}. Activate them once the "
            "stack's resources have run for a day: `budget.activate_cost_allocation_tags: true` and "
            "`pulumi up`, or the `aws ce update-cost-allocation-tags-status` command of docs/budgets.md; "
            "AWS needs up to 24 hours, and activation only applies from then on."
        )
    if not fetched.amounts or abs(total.total_usd) < 0.005:
        messages.append(
            f"No spend tagged {tags.TAG_ENVIRONMENT}={env} in {month}. Either nothing ran that month, "
            f"or the {tags.TAG_ENVIRONMENT} cost-allocation tag was not active yet (activation takes "
            "up to 24 hours and is not retroactive)."
        )
    elif all(r.total_usd == 0 for r in rows) and untagged.total_usd > 0:
        messages.append(
            f"None of the {month} spend carries a {tags.TAG_POOL} value, so it cannot be split per "
            f"pool: the {tags.TAG_POOL} cost-allocation tag is probably not active yet (up to 24 hours "
            "after activation, and only for spend from then on)."
        )
    if period.partial:
        messages.append(f"{month} is not over: figures are month to date (up to {period.end - dt.timedelta(days=1)}).")
    if fetched.estimated:
        messages.append("Cost Explorer marks these figures as estimated: they can still change until the bill closes.")
    if fetched.currency != "USD":
        messages.append(f"amounts are in {fetched.currency}; budgets are in USD.")
    if loan is not None:
        messages += loan_messages(loan)
    return Report(env, period, rows, untagged, total, messages, fetched.pages, fetched.currency, loan)


def loan_messages(loan: LoanBill) -> list[str]:
    """Which days of the loan are estimated and from what, which have no figures at all."""
    out = list(loan.messages)
    by_reason: dict[str, list[dt.date]] = {}
    for day, why in sorted(loan.estimated_days.items()):
        by_reason.setdefault(why, []).append(day)
    for why, days in by_reason.items():
        out.append(f"loan figures estimated on {_day_ranges(days)}: {why}")
    if loan.missing_days:
        out.append(
            f"no LoanGpus samples on {_day_ranges(loan.missing_days)}: nothing borrowed is charged on "
            "those days (the policy function did not publish them: not deployed yet, or no Kueue status)"
        )
    return out


def _day_ranges(days: list[dt.date]) -> str:
    spans: list[list[dt.date]] = []
    for d in sorted(days):
        if spans and (d - spans[-1][1]).days == 1:
            spans[-1][1] = d
        else:
            spans.append([d, d])
    return ", ".join(str(a) if a == b else f"{a} to {b}" for a, b in spans)


def _usd(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}%"


HEADERS = ("pool", "team", "guaranteed_usd", "elastic_usd", "other_usd", "total_usd", "budget_usd", "pct_of_budget")
LOAN_HEADERS = ("borrowed_cost_usd", "lent_credit_usd", "total_after_loan_usd")  # empty without the loan's figures


def render_table(report: Report, width: int | None = None) -> str:
    from rich.text import Text

    from gpuloan.render import tables  # the one table style of every command; folds to the terminal's width

    show_other = any(r.other_usd for r in report.all_rows)
    # Two-line headers keep the columns as narrow as their figures (a table of eight columns fits 80).
    header = (
        ["pool", "team", "guaranteed\n(fixed)", "elastic\n(usage)"]
        + (["other"] if show_other else [])
        + ["total", "budget", "% of\nbudget"]
    )
    title = (
        f"gpuloan cost report: environment {report.environment}, {report.period.month} "
        f"({report.period.start} to {report.period.end - dt.timedelta(days=1)})\n"
        f"{report.currency}, {METRIC}, from Cost Explorer"
    )
    t = tables.table(None, header, left=("pool", "team"))
    for r in report.all_rows:
        cells = [r.pool, r.team, _usd(r.guaranteed_usd), _usd(r.elastic_usd)]
        cells += [_usd(r.other_usd)] if show_other else []
        # A budget is a round figure set in the config: whole dollars (one column narrower)
        cells += [_usd(r.total_usd), "-" if r.budget_usd is None else f"{r.budget_usd:,.0f}", _pct(r.pct_of_budget)]
        t.add_row(*cells, end_section=r is report.all_rows[-2])  # a rule above the total
    notes = [f"{r.pool}: {r.note}" for r in [*report.rows, report.untagged] if r.note] + report.messages
    parts: list = [t]
    if report.loan is not None:
        parts.append(_loan_table(report, tables))
    # The notes wrap to the terminal as the table fits it (Text: a note's brackets are not rich markup).
    body = tables.to_text(*parts, *(Text(f"note: {n}") for n in notes), width=width)
    return "\n".join([title, body.rstrip("\n")])


def _hours(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _loan_table(report: Report, tables):
    """Who used whose floor: GPU-hours, and the bill with the loan moved (borrower pays, owner credited)."""
    loan = report.loan
    assert loan is not None
    t = tables.table(
        "the loan: floors used by other pools (Kueue status, LoanGpus)",
        [
            "pool",
            "own floor\nGPU-h",
            "lent\nGPU-h",
            "borrowed\nGPU-h",
            "borrowed\n(pays)",
            "lent\n(credit)",
            "total after\nthe loan",
        ],
        left=("pool",),
    )
    for r in report.all_rows:
        named = r is not report.untagged and r is not report.total
        t.add_row(
            r.pool,
            _hours(loan.own_floor_gpu_hours.get(r.pool)) if named else "",
            _hours(loan.lent_gpu_hours(r.pool)) if named else "",
            _hours(loan.borrowed_gpu_hours(r.pool)) if named else "",
            _usd(report.borrowed_usd(r)),
            _usd(report.lent_credit_usd(r)),
            _usd(report.after_loan_usd(r)),
            end_section=r is report.all_rows[-2],
        )
    return t


def to_json(report: Report) -> dict:
    """`cost-report --json`: the rows as numbers, with the period and the notes."""
    return {
        "environment": report.environment,
        "month": report.period.month,
        "start": str(report.period.start),
        "end_exclusive": str(report.period.end),
        "currency": report.currency,
        "metric": METRIC,
        "rows": [
            {
                "pool": r.pool,
                "team": r.team,
                "guaranteed_usd": round(r.guaranteed_usd, 2),
                "elastic_usd": round(r.elastic_usd, 2),
                "other_usd": round(r.other_usd, 2),
                "total_usd": round(r.total_usd, 2),
                "budget_usd": None if r.budget_usd is None else round(r.budget_usd, 2),
                "pct_of_budget": None if r.pct_of_budget is None else round(r.pct_of_budget, 1),
                "note": r.note,
            }
            for r in report.all_rows
        ],
        "messages": list(report.messages),
        "loan": None if report.loan is None else loan_json(report),
    }


def loan_json(report: Report) -> dict:
    """The loan per pool (month) and per pool and day, with the rates and the estimated days."""
    loan = report.loan
    assert loan is not None
    pools = []
    for r in report.all_rows:
        named = r is not report.untagged and r is not report.total
        pools.append(
            {
                "pool": r.pool,
                "team": r.team,
                "own_floor_gpu_hours": round(loan.own_floor_gpu_hours.get(r.pool, 0.0), 2) if named else None,
                "lent_gpu_hours": round(loan.lent_gpu_hours(r.pool), 2) if named else None,
                "borrowed_gpu_hours": round(loan.borrowed_gpu_hours(r.pool), 2) if named else None,
                "idle_floor_gpu_hours": (
                    None
                    if not named or loan.idle_floor_gpu_hours(r.pool) is None
                    else round(loan.idle_floor_gpu_hours(r.pool) or 0.0, 2)
                ),
                "borrowed_cost_usd": report.borrowed_usd(r),
                "lent_credit_usd": report.lent_credit_usd(r),
                "total_usd": round(r.total_usd, 2),
                "total_after_loan_usd": report.after_loan_usd(r),
            }
        )
    return {
        "rates_usd_per_gpu_hour": {p: None if v is None else round(v, 6) for p, v in sorted(loan.rates.items())},
        "pools": pools,
        "days": daily_rows(report),
        "estimated_days": [{"day": str(d), "from": why} for d, why in sorted(loan.estimated_days.items())],
        "missing_days": [str(d) for d in loan.missing_days],
    }


DAILY_HEADERS = (
    "day",
    "pool",
    "team",
    "borrowed_gpu_hours",
    "lent_gpu_hours",
    "borrowed_cost_usd",
    "lent_credit_usd",
    "estimated",
)


def daily_rows(report: Report) -> list[dict]:
    """One row per pool and day with a transfer: what it paid for borrowed floor hours, what it was credited."""
    loan = report.loan
    if loan is None:
        return []
    teams = {r.pool: r.team for r in report.rows}
    out: dict[tuple[dt.date, str], dict] = {}
    for t in loan.transfers:
        for pool, side in ((t.borrower, "borrowed"), (t.owner, "lent")):
            row = out.setdefault(
                (t.day, pool),
                {
                    "day": str(t.day),
                    "pool": pool,
                    "team": teams.get(pool, "?"),
                    "borrowed_gpu_hours": 0.0,
                    "lent_gpu_hours": 0.0,
                    "borrowed_cost_usd": 0.0,
                    "lent_credit_usd": 0.0,
                    "estimated": t.estimated,
                },
            )
            row[f"{side}_gpu_hours"] = round(row[f"{side}_gpu_hours"] + t.gpu_hours, 2)
            key = "borrowed_cost_usd" if side == "borrowed" else "lent_credit_usd"
            row[key] = round(row[key] + t.usd, 2)
    return [out[k] for k in sorted(out)]


def write_daily_csv(report: Report, path: Path) -> int:
    rows = daily_rows(report)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=DAILY_HEADERS)
        w.writeheader()
        w.writerows(rows)
    return len(rows)


def write_csv(report: Report, path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("month", *HEADERS, "note", *LOAN_HEADERS))
        for r in report.all_rows:
            pct = r.pct_of_budget
            loan = (
                ("", "", "")
                if report.loan is None
                else (
                    f"{report.borrowed_usd(r):.2f}",
                    f"{report.lent_credit_usd(r):.2f}",
                    f"{report.after_loan_usd(r):.2f}",
                )
            )
            w.writerow(
                (
                    report.period.month,
                    r.pool,
                    r.team,
                    f"{r.guaranteed_usd:.2f}",
                    f"{r.elastic_usd:.2f}",
                    f"{r.other_usd:.2f}",
                    f"{r.total_usd:.2f}",
                    "" if r.budget_usd is None else f"{r.budget_usd:.2f}",
                    "" if pct is None else f"{pct:.1f}",
                    r.note,
                    *loan,
                )
            )
