"""`simulate --plot FILE`: checked before the run (a bad path must not cost a long simulation), written after the
results table, and the path written said. Formats: png, svg, and html (the SVG inside one self-contained page)."""

from __future__ import annotations

import html
import tempfile
from pathlib import Path

FORMATS = ("png", "svg", "html")


def check(path: str) -> str | None:
    """Why `path` cannot be written as a plot, or None."""
    p = Path(path)
    fmt = p.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        return f"--plot {path}: the file name must end in .{', .'.join(FORMATS)} (the format follows the suffix)"
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        return f"--plot {path}: the folder {folder} does not exist"
    if p.is_dir():
        return f"--plot {path}: is a folder; give a file name"
    return None


def write(plot_fn, doc: dict, path: str) -> Path:
    """Draw with `plot_fn(doc, file)` (png and svg by suffix); html wraps the SVG in one page. Returns the file."""
    out = Path(path)
    if out.suffix.lower() != ".html":
        plot_fn(doc, str(out))
        return out
    with tempfile.TemporaryDirectory() as tmp:
        svg = Path(tmp) / "plot.svg"
        plot_fn(doc, str(svg))
        body = svg.read_text()
    title = html.escape(f"gpuloan simulate: {doc.get('trace', '')}")
    out.write_text(
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>\n'
        f"<body>\n{body}\n</body></html>\n"
    )
    return out
