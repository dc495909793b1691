"""Checks on a command's text output: lines that overflow the terminal, figures a table broke across lines.
Used by the table tests of every command (tests/gpuloan/test_cli.py, test_cost_comment.py, test_cost_report.py)."""

from __future__ import annotations

import re

# The one-line price source is a path, kept whole for copy and paste; it is the one line allowed to be wider.
PRICE_LINE_PREFIXES = ("prices:", "dev: prices:", "prod: prices:")

_NUMBER = re.compile(r"(?<![\w.,/-])\$?\d[\d,.]*")


def split_figures(out: str) -> list[str]:
    """Figures a table broke: a thousands group that is not three digits ("1,1" above "03"), a trailing separator,
    a leading zero that is the tail of a folded figure, or rich's ellipsis for a cut cell."""
    bad = []
    lines = out.splitlines()
    for n, line in enumerate(lines):
        if line.lstrip().startswith(PRICE_LINE_PREFIXES):
            continue
        below = lines[n + 1] if n + 1 < len(lines) else ""
        if "…" in line:
            bad.append(line)
        for token in _NUMBER.findall(line):
            figure = token.lstrip("$")
            if figure.endswith((",", ".")):
                end = line.rstrip()
                # "29," ending a cell's line with digits right below it: the rest of the figure folded there
                if end.endswith(token) and any(c.isdigit() for c in below[len(end) - len(token) : len(end) + 1]):
                    bad.append(f"{token!r} in {line!r}")
                figure = figure.rstrip(",.")  # else punctuation after the figure ("± $2, p95")
            if "," in figure and not re.fullmatch(r"\d{1,3}(,\d{3})+(\.\d+)?", figure):
                bad.append(f"{token!r} in {line!r}")
            elif re.fullmatch(r"0\d+", figure):
                bad.append(f"{token!r} in {line!r}")
    return bad


def too_wide_at(out: str, width: int) -> list[str]:
    return [
        line for line in out.splitlines() if len(line) > width and not line.lstrip().startswith(PRICE_LINE_PREFIXES)
    ]
