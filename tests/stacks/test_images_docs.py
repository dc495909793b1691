"""docs/images.md: the supported matrix is the one the rules use, and its project-image example lints clean."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

from config import compat

DOC = REPO / "docs" / "images.md"


def test_supported_matrix_matches_the_compatibility_tables():
    assert compat.matrix_markdown() in DOC.read_text(), (
        'docs/images.md is stale: paste `python -c "from stacks import compat; print(compat.matrix_markdown())"`'
    )


def test_project_image_example_passes_hadolint(tmp_path):
    (block,) = re.findall(r"```dockerfile\n(.*?)```", DOC.read_text(), flags=re.S)
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(block)
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.findall(r"^USER\s+(\S+)", block, re.M)[-1] == "10001:10001"


def test_doc_names_the_files_it_describes():
    text = DOC.read_text()
    for path in ("images/base/Dockerfile", "images/framework/Dockerfile", "config/compat.py", "config/versions.py"):
        assert path in text and (REPO / path).exists(), path
