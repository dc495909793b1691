"""One table style for every command that prints one (preview, simulate, advise, cost-diff, cost-report, the
benchmark).

Tables take the real terminal width (rich reads the terminal, else $COLUMNS, else 80) and never run past it, and a
number is never split across lines: a figure column does not wrap (`no_wrap`), a column of several words per cell
wraps between words only, and when the columns still do not fit, whole columns are left out by priority (the
least important first) with a line saying which, so `COLUMNS=80 gpuloan ...` fits 80 and shows whole figures.
"""

from __future__ import annotations

import io
from typing import Iterable, Sequence

from rich import box
from rich.console import Console
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text


def console(file=None, stderr: bool = False) -> Console:
    # soft_wrap off: rich wraps text to the width; tables fit by leaving out columns (see `fit`).
    return Console(file=file, stderr=stderr, soft_wrap=False)


def table(
    title: str | None,
    columns: Sequence[str],
    left: Iterable[str] = (),
    whole: Iterable[str] = (),
    words: Iterable[str] = (),
    drop: Sequence[str] | None = None,
) -> Table:
    """A table with `columns`; those in `left` (labels) are left-aligned, the others (figures) right-aligned.

    A figure column never wraps. Columns in `words` (cells of several words, such as "2× p4d.24xlarge $19,735")
    and label columns wrap between words, never inside one; label columns in `whole` (short names a reader looks
    up) never wrap. `drop` lists the columns to leave out, first to last, when the table is too wide for the
    terminal (default: from the last column towards the second; the first is never left out). A header with a
    newline stays as narrow as its longest line."""
    left = set(left) or {columns[0]}
    whole, words = set(whole), set(words)
    # A rule under the header and above the total, no vertical borders: two characters between columns, so eight
    # columns of figures still fit 80.
    t = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        header_style="bold",
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
    )
    for c in columns:
        wraps = (c in left or c in words) and c not in whole
        t.add_column(
            c, justify="left" if c in left else "right", no_wrap=not wraps, overflow="fold" if wraps else "ellipsis"
        )
    t.drop_order = list(drop) if drop is not None else list(reversed(columns[1:]))  # type: ignore[attr-defined]
    return t


def _atom_width(cell, no_wrap: bool) -> int:
    """The narrowest a cell can be without splitting a figure or a word: its longest line when it may not wrap,
    else its longest word."""
    text = Text.from_markup(cell) if isinstance(cell, str) else cell
    plain = text.plain if isinstance(text, Text) else str(text)
    parts = plain.split("\n") if no_wrap else plain.split()
    return max((cell_len(p) for p in parts), default=0)


def _min_width(t: Table) -> int:
    # rich's own Measurement gives a no_wrap column the width of its longest word, not of its longest line, and
    # lets the table squeeze below that by folding; so the minimum is computed here from the cells themselves,
    # with rich's padding and border widths (rich pinned in requirements.txt).
    total = t._extra_width
    for i, col in enumerate(t.columns):
        cells = [col.header, *col._cells] if t.show_header else list(col._cells)
        atom = max((_atom_width(c, col.no_wrap) for c in cells), default=0)
        total += max(atom, col.min_width or 0) + t._get_padding_width(i)
    return total


def fit(t: Table, width: int) -> list[str]:
    """Leave out columns of `t` in its drop order until its narrowest rendering fits `width` (every figure whole,
    every word whole). Returns the headers left out, in the order they were dropped."""
    dropped: list[str] = []
    order = list(getattr(t, "drop_order", reversed([str(c.header) for c in t.columns[1:]])))
    while _min_width(t) > width and order:
        name = order.pop(0)
        index = next((i for i, c in enumerate(t.columns) if c.header == name), None)
        if index is None or len(t.columns) == 1:
            continue
        del t.columns[index]
        for i, col in enumerate(t.columns):  # rich pads and measures a column by its _index: keep them in step
            col._index = i
        dropped.append(name)
    return dropped


def left_out_note(dropped: Sequence[str]) -> str | None:
    if not dropped:
        return None
    names = ", ".join(" ".join(d.replace("-\n", "").split()) for d in dropped)  # "interrup-\ntions": one word
    return f"(left out to fit the terminal: {names}; widen it, set COLUMNS, or use --json)"


def print_table(out: Console, t: Table) -> None:
    """Print `t` fitted to the console's width, then the note naming any column left out."""
    note = left_out_note(fit(t, out.width))
    out.print(t)
    if note:
        out.print(note, style="dim")


def to_text(*renderables, width: int | None = None) -> str:
    """Render to plain text (no colour codes) at the terminal's width, for commands that build a string; tables are
    fitted to that width as `print_table` does."""
    buf = io.StringIO()
    width = width or Console().width
    out = Console(file=buf, width=width, color_system=None, soft_wrap=False)
    for r in renderables:
        if isinstance(r, Table):
            print_table(out, r)
        else:
            out.print(r)
    return buf.getvalue()
