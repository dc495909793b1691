"""One table style for every command that prints one (preview, simulate, cost-diff, cost-report, the benchmark).

Tables take the real terminal width (rich reads the terminal, else $COLUMNS, else 80) and fold long cells onto
more lines instead of forcing a width: a row never runs past the terminal, `COLUMNS=80 gpuloan ...` fits 80.
"""

from __future__ import annotations

import io
from typing import Iterable, Sequence

from rich import box
from rich.console import Console
from rich.table import Table


def console(file=None, stderr: bool = False) -> Console:
    # soft_wrap off: rich wraps text to the width; tables fold their cells.
    return Console(file=file, stderr=stderr, soft_wrap=False)


def table(title: str | None, columns: Sequence[str], left: Iterable[str] = (), whole: Iterable[str] = ()) -> Table:
    """A table with `columns`; those in `left` (labels) are left-aligned, the others (numbers) right-aligned.
    Columns in `whole` (short names a reader looks up) never fold; the others give way first. A header with a
    newline stays as narrow as its longest line."""
    left = set(left) or {columns[0]}
    whole = set(whole)
    # A rule under the header and above the total, no vertical borders: two characters between columns, so eight
    # columns of figures still fit 80 without splitting a figure.
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False,
              show_edge=False, collapse_padding=True)
    for c in columns:
        t.add_column(c, justify="left" if c in left else "right", overflow="fold", no_wrap=c in whole)
    return t


def to_text(*renderables, width: int | None = None) -> str:
    """Render to plain text (no colour codes) at the terminal's width, for commands that build a string."""
    buf = io.StringIO()
    width = width or Console().width
    Console(file=buf, width=width, color_system=None, soft_wrap=False).print(*renderables)
    return buf.getvalue()
