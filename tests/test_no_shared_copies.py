"""No file in the repository is a copy of the public data beside it (../shared/data): the data is read by path,
never committed (docs/prices.md). Compared by content hash, also after normalising line endings and trailing
blanks, so a copy saved by another editor is still caught."""

from __future__ import annotations

import hashlib
import subprocess

import pytest
from conftest import REPO, SHARED_DATA

SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "build", "node_modules"}


def _digests(data: bytes) -> set[str]:
    normalised = b"\n".join(line.rstrip() for line in data.replace(b"\r\n", b"\n").split(b"\n")).strip()
    return {hashlib.sha256(data).hexdigest(), "n:" + hashlib.sha256(normalised).hexdigest()}


def _repository_files() -> list:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True)
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
