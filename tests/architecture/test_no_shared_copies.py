"""No file in the repository is a copy of the public data beside it (../shared/data): the data is read by path,
never committed (docs/prices.md). Compared by content hash, also after normalising line endings and trailing
blanks, so a copy saved by another editor is still caught; and line by line, so a file holding part of a table (a
subset of a trace, some price rows) is caught too.

The one allowed exception is the price snapshot shipped in the package (pricing/sources/snapshot/): generated from
the public price tables by scripts/make_price_snapshot.py, with their provenance inside, in the price file format
(not their bytes); tests/pricing/test_price_snapshot.py checks it is what the script gives."""

from __future__ import annotations

import hashlib
import subprocess

import pytest
from conftest import REPO, SHARED_DATA

from pricing.sources.pricebook import SNAPSHOT_FILE

SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "build", "node_modules"}


def _digests(data: bytes) -> set[str]:
    normalised = b"\n".join(line.rstrip() for line in data.replace(b"\r\n", b"\n").split(b"\n")).strip()
    return {hashlib.sha256(data).hexdigest(), "n:" + hashlib.sha256(normalised).hexdigest()}


def _repository_files() -> list:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True
    )
    if listed.returncode == 0:
        return [REPO / name for name in listed.stdout.decode().split("\0") if name]
    return [p for p in REPO.rglob("*") if not SKIP_DIRS & set(p.relative_to(REPO).parts)]


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data is absent: nothing to compare against")
def test_no_repository_file_is_a_copy_of_shared_data():
    shared: dict[str, str] = {}
    for p in SHARED_DATA.rglob("*"):
        if p.is_file() and p.stat().st_size > 0:
            for d in _digests(p.read_bytes()):
                shared[d] = str(p.relative_to(SHARED_DATA))
    copies = []
    for p in _repository_files():
        if p.is_file() and p.stat().st_size > 0:
            hits = {shared[d] for d in _digests(p.read_bytes()) if d in shared}
            copies += [f"{p.relative_to(REPO)} = ../shared/data/{h}" for h in sorted(hits)]
    assert copies == [], "read these by path instead of copying them:\n" + "\n".join(copies)


# Generated from the shared price tables, with provenance: the one copy of prices the project may carry.
ALLOWED_DERIVED = {SNAPSHOT_FILE.relative_to(REPO).as_posix(): "scripts/make_price_snapshot.py"}
SHARED_ROWS_ALLOWED = 5  # a doc may quote a few rows of a table to explain it


def _data_rows(path) -> set[bytes]:
    lines = path.read_bytes().replace(b"\r\n", b"\n").split(b"\n")[1:]  # the header is not data
    return {line.strip() for line in lines if len(line.strip()) > 20}


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data is absent: nothing to compare against")
def test_no_repository_file_holds_rows_of_a_shared_table():
    rows: dict[bytes, str] = {}
    for p in SHARED_DATA.rglob("*.csv"):
        rows.update(dict.fromkeys(_data_rows(p), str(p.relative_to(SHARED_DATA))))
    partial = []
    for p in _repository_files():
        name = p.relative_to(REPO).as_posix()
        if not p.is_file() or name in ALLOWED_DERIVED or p.stat().st_size > 50_000_000:
            continue
        hits = [rows[line] for line in _data_rows(p) if line in rows]
        if len(hits) > SHARED_ROWS_ALLOWED:
            partial.append(f"{name}: {len(hits)} rows of ../shared/data/{hits[0]}")
    assert partial == [], "read these by path (or generate them, as the price snapshot is):\n" + "\n".join(partial)


def test_the_allowed_exception_is_the_generated_snapshot_only():
    for name, script in ALLOWED_DERIVED.items():
        assert (REPO / name).is_file() and (REPO / script).is_file()
        assert script in (REPO / name).read_text()  # it names the script that generated it
