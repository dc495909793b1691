"""docs/policy.md: its Python example runs and says what it prints; every reason code is documented."""

from __future__ import annotations

import contextlib
import io
import re

from conftest import REPO

from policy.model import Reason

DOC = (REPO / "docs" / "policy.md").read_text()


def test_python_example_runs_and_scales_up_as_documented():
    (block,) = re.findall(r"```python\n(.*?)```", DOC, flags=re.S)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "docs/policy.md", "exec"), {})
    assert "'desired_from': 1" in out.getvalue() and "'desired_to': 3" in out.getvalue()
    assert "SCALE_UP_PENDING" in out.getvalue()


def test_every_reason_code_is_documented():
    for reason in Reason:
        assert f"`{reason.value}`" in DOC, reason


def test_bench_command_is_a_make_target():
    assert "make bench-policy" in DOC
    assert "bench-policy:" in (REPO / "Makefile").read_text()
