"""`simulate --seeds` at 80 columns: no `mean ± sd` cell and no header splits over two lines; columns that do not
fit are left out and named (issue 37, item 4)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO

TRACE = "docs/examples/org-demand/training.csv"


def test_seeds_table_keeps_every_cell_and_header_whole_at_80_columns():
    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuloan",
            "simulate",
            "-s",
            "prod",
            "--pool",
            "training",
            "--trace",
            TRACE,
            "--days",
            "0:6",
            "--auto-size",
            "--seeds",
            "2",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    lines = out.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("─"))
    header, rows = lines[rule - 2 : rule], []
    for line in lines[rule + 1 :]:
        if not line.strip() or line.startswith("("):
            break
        rows.append(line)
    assert all(len(line) <= 80 for line in lines)
    assert rows and all(re.match(r"^[a-z][\w-]+", r) for r in rows)  # no continuation line under a row
    columns = len(re.findall(r"\S+ ± \S+", rows[0]))
    assert columns >= 3 and all(len(re.findall(r"\S+ ± \S+", r)) == columns for r in rows)
    assert "cost/ora\n" not in out and not any(h.rstrip().endswith(("ora", "interrup-")) for h in header)
    assert "left out to fit the terminal" in out
