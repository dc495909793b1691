"""Trace readers: GPU demand as jobs or as a per-minute series, format detected from the CSV header.

Three formats (the header decides; column order does not matter, extra columns are ignored):
- ITP jobs (Microsoft's public ITP traces, see docs/simulator.md): `job_id,submission_time,duration,num_gpu` (seconds, seconds, GPUs);
- generic jobs: `submit_s,duration_s,gpus` (an optional `job_id` column names the jobs);
- demand series: `minute,gpus_demanded` (fluid model: unmet demand carries over as backlog).

Every bad row is reported with its file, line and column, all at once (up to a limit), before a simulation starts.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

SECONDS_PER_MINUTE = 60
MINUTES_PER_DAY = 1440
MAX_REPORTED_PROBLEMS = 20

ITP_COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")
GENERIC_COLUMNS = ("submit_s", "duration_s", "gpus")
SERIES_COLUMNS = ("minute", "gpus_demanded")


class TraceError(ValueError):
    """A trace file that cannot be read; `problems` lists (where, message) pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = "\n".join(f" - {where}: {msg}" for where, msg in problems)
        super().__init__(f"{len(problems)} problem(s) in trace {source}:\n{lines}")


@dataclass(frozen=True)
class Job:
    job_id: str
    submit_s: float
    duration_s: float
    gpus: int

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.duration_s / 3600


@dataclass(frozen=True)
class JobsTrace:
    name: str
    fmt: str  # "itp" or "generic"
    jobs: tuple[Job, ...]  # sorted by submit time (stable: file order breaks ties)

    kind = "jobs"

    @property
    def demand_gpu_hours(self) -> float:
        return sum(j.gpu_hours for j in self.jobs)

    def window(self, first_day: int, last_day: int) -> "JobsTrace":
        """Jobs submitted in days first_day..last_day (inclusive, day 0 = the trace's time origin), re-based so
        first_day starts at 0. A job running into the window from before it is not included (it ran elsewhere)."""
        lo, hi = first_day * MINUTES_PER_DAY * 60, (last_day + 1) * MINUTES_PER_DAY * 60
        jobs = tuple(Job(j.job_id, j.submit_s - lo, j.duration_s, j.gpus) for j in self.jobs if lo <= j.submit_s < hi)
        return JobsTrace(f"{self.name}[days {first_day}:{last_day}]", self.fmt, jobs)

    @property
    def span_minutes(self) -> int:
        return int(max((j.submit_s for j in self.jobs), default=0) // 60) + 1


@dataclass(frozen=True)
class SeriesTrace:
    name: str
    gpus_demanded: tuple[int, ...]  # one entry per minute from minute 0; missing minutes are 0

    kind = "series"
    fmt = "series"

    @property
    def demand_gpu_hours(self) -> float:
        return sum(self.gpus_demanded) / 60

    def window(self, first_day: int, last_day: int) -> "SeriesTrace":
        lo, hi = first_day * MINUTES_PER_DAY, (last_day + 1) * MINUTES_PER_DAY
        return SeriesTrace(f"{self.name}[days {first_day}:{last_day}]", self.gpus_demanded[lo:hi])

    @property
    def span_minutes(self) -> int:
        return len(self.gpus_demanded)


Trace = JobsTrace | SeriesTrace


def detect_format(header: list[str]) -> str:
    cols = {c.strip().lower() for c in header}
    if set(ITP_COLUMNS) <= cols:
        return "itp"
    if set(GENERIC_COLUMNS) <= cols:
        return "generic"
    if set(SERIES_COLUMNS) <= cols:
        return "series"
    return ""


def _number(text: str, where: str, column: str, problems: list, *, integer: bool = False, positive: bool = False):
    try:
        value = float(text)
    except (TypeError, ValueError):
        problems.append((where, f"{column} is '{text}', not a number"))
        return None
    if value != value or value in (float("inf"), float("-inf")):
        problems.append((where, f"{column} is '{text}', not a finite number"))
        return None
    if value < 0 or (positive and value == 0):
        problems.append((where, f"{column} is {text}; it must be {'positive' if positive else '>= 0'}"))
        return None
    if integer and value != int(value):
        problems.append((where, f"{column} is {text}; it must be a whole number of GPUs"))
        return None
    return int(value) if integer else value


def read_trace(path: str | Path) -> Trace:
    """Read a jobs or demand-series CSV; raises TraceError naming every bad line (up to 20)."""
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise TraceError(source, [(source, "no such file")])
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise TraceError(source, [(f"{source}:1", "empty file: expected a header line")]) from None
        fmt = detect_format(header)
        if not fmt:
            raise TraceError(
                source,
                [
                    (
                        f"{source}:1",
                        f"unknown header {','.join(header)!r}; expected one of "
                        f"{','.join(ITP_COLUMNS)!r} (ITP jobs), {','.join(GENERIC_COLUMNS)!r} "
                        f"(generic jobs) or {','.join(SERIES_COLUMNS)!r} (demand series)",
                    )
                ],
            )
        index = {c.strip().lower(): i for i, c in enumerate(header)}
        rows = list(reader)
    problems: list[tuple[str, str]] = []
    name = path.stem
    if fmt == "series":
        trace = _series(name, source, index, rows, problems)
    else:
        trace = _jobs(name, source, fmt, index, rows, problems)
    if problems:
        extra = len(problems) - MAX_REPORTED_PROBLEMS
        shown = problems[:MAX_REPORTED_PROBLEMS]
        if extra > 0:
            shown.append((source, f"... and {extra} more"))
        raise TraceError(source, shown)
    return trace


def _cells(row: list[str], index: dict[str, int], columns: tuple[str, ...], where: str, problems: list):
    if len(row) < len(index):
        problems.append((where, f"{len(row)} field(s), the header has {len(index)}"))
        return None
    return [row[index[c]].strip() for c in columns]


def _jobs(name, source, fmt, index, rows, problems) -> JobsTrace:
    cols = ITP_COLUMNS[1:] if fmt == "itp" else GENERIC_COLUMNS
    has_id = "job_id" in index
    jobs: list[Job] = []
    for n, row in enumerate(rows, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        where = f"{source}:{n}"
        cells = _cells(row, index, cols, where, problems)
        if cells is None:
            continue
        submit = _number(cells[0], where, cols[0], problems)
        duration = _number(cells[1], where, cols[1], problems, positive=True)
        gpus = _number(cells[2], where, cols[2], problems, integer=True, positive=True)
        if None in (submit, duration, gpus):
            continue
        job_id = row[index["job_id"]].strip() if has_id else f"job-{n - 1}"
        jobs.append(Job(job_id or f"job-{n - 1}", submit, duration, gpus))
    if not jobs and not problems:
        problems.append((source, "no jobs in the file"))
    jobs.sort(key=lambda j: j.submit_s)
    return JobsTrace(name, fmt, tuple(jobs))


def _series(name, source, index, rows, problems) -> SeriesTrace:
    demand: dict[int, int] = {}
    for n, row in enumerate(rows, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        where = f"{source}:{n}"
        cells = _cells(row, index, SERIES_COLUMNS, where, problems)
        if cells is None:
            continue
        minute = _number(cells[0], where, "minute", problems, integer=True)
        gpus = _number(cells[1], where, "gpus_demanded", problems, integer=True)
        if minute is None or gpus is None:
            continue
        if minute in demand:
            problems.append((where, f"minute {minute} appears twice"))
            continue
        demand[minute] = gpus
    if not demand and not problems:
        problems.append((source, "no rows in the file"))
    if problems:
        return SeriesTrace(name, ())
    series = [0] * (max(demand) + 1)
    for minute, gpus in demand.items():
        series[minute] = gpus
    return SeriesTrace(name, tuple(series))


def parse_days(text: str) -> tuple[int, int]:
    """'1:57' -> (1, 57): days counted from 0, both ends included."""
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise ValueError(f"--days must look like A:B (e.g. 1:57), got '{text}'") from None
    if a < 0 or b < a:
        raise ValueError(f"--days {text}: need 0 <= A <= B")
    return a, b
