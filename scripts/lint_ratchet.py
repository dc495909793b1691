"""The static checks' recorded debt, which may only shrink (issue 34; `make lint` runs this).

Two ratchets, both read from scripts/lint_debt.toml:
- mypy: the error count per package. More errors than recorded fails; fewer fails too, until the record is lowered
  (`--update` writes the lower counts, never higher ones), so that a fixed error cannot come back unnoticed.
- complexity: the functions above ruff's C901 limit (`[tool.ruff.lint.mccabe]` in pyproject.toml). A function
  that is not on the list fails; so does a listed one now under the limit, until it is taken off the list.

The formatter and ruff's other rules need no ratchet: `ruff check` passes as configured, and
`ruff format --check .` holds the whole repository to the formatter.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEBT_FILE = ROOT / "scripts" / "lint_debt.toml"
# mypy's "path:line: error: message  [code]"; the package is the path's first folder (or the file at the root).
MYPY_ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+: error: ")


def package_of(path: str) -> str:
    parts = Path(path).parts
    return parts[0] if len(parts) > 1 else path


def mypy_counts(packages: list[str]) -> Counter[str]:
    """Errors per package from one mypy run over them (its settings: pyproject.toml [tool.mypy])."""
    run = subprocess.run([sys.executable, "-m", "mypy", *packages], cwd=ROOT, capture_output=True, text=True)
    if run.returncode not in (0, 1):  # 2: mypy itself failed (bad config, crash), not a type error count
        sys.exit(f"mypy failed (exit {run.returncode}):\n{run.stdout}{run.stderr}")
    counts: Counter[str] = Counter({package: 0 for package in packages})
    for line in run.stdout.splitlines():
        if m := MYPY_ERROR.match(line):
            counts[package_of(m["path"])] += 1
    return counts


def complex_functions() -> set[str]:
    """`path:function` of every function above the C901 limit, as ruff reports it."""
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "C901", "--output-format", "json", "--exit-zero", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    found = set()
    for finding in json.loads(run.stdout):
        # "`wake` is too complex (56 > 25)": the function's name is between the first pair of backticks
        name = finding["message"].split("`")[1]
        found.add(f"{Path(finding['filename']).relative_to(ROOT).as_posix()}:{name}")
    return found


def write_mypy_record(text: str, lowered: dict[str, int]) -> str:
    for package, count in lowered.items():
        text = re.sub(rf'^("?{re.escape(package)}"?\s*=\s*)\d+', rf"\g<1>{count}", text, count=1, flags=re.M)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write lower mypy counts into the record")
    args = parser.parse_args(argv)
    debt = tomllib.loads(DEBT_FILE.read_text())
    recorded: dict[str, int] = debt["mypy"]
    problems, notes = [], []

    counts = mypy_counts(sorted(recorded))
    for package, allowed in sorted(recorded.items()):
        if counts[package] > allowed:
            # `python -m mypy <package>` lists them; the new ones are the ones to fix
            problems.append(f"mypy: {package} has {counts[package]} errors, {allowed} recorded")
        elif counts[package] < allowed:
            notes.append(f"mypy: {package} is down to {counts[package]} errors from {allowed}")
    lowered = {p: counts[p] for p, allowed in recorded.items() if counts[p] < allowed}
    if args.update and lowered:
        DEBT_FILE.write_text(write_mypy_record(DEBT_FILE.read_text(), lowered))
        notes.append(f"wrote the lower counts to {DEBT_FILE.name}")
        lowered = {}
    elif lowered:
        notes.append("lower the record: scripts/lint_ratchet.py --update")

    listed = set(debt["complexity"]["functions"])
    found = complex_functions()
    for function in sorted(found - listed):
        problems.append(f"complexity: over the limit, not recorded: {function}")
    for function in sorted(listed - found):
        notes.append(f"complexity: under the limit now, take it off the list: {function}")

    for line in problems + notes:
        print(line, file=sys.stderr)
    stale = listed - found
    print(
        f"mypy: {sum(counts.values())} errors ({sum(recorded.values())} recorded); complexity: "
        f"{len(found)} functions over the limit ({len(listed)} recorded)"
    )
    return 1 if problems or stale or lowered else 0


if __name__ == "__main__":
    sys.exit(main())
