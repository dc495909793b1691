"""docs/policy.md: its Python example runs and says what it prints; every reason code is documented."""

from __future__ import annotations

import contextlib
import io
import re

from conftest import REPO

from policy.terms import Reason

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


def test_safety_rules_name_tests_that_exist():
    """docs/policy.md's "Safety rules" table says which test proves each guarantee: every name it cites must be
    a test function or a named engine case, so the table cannot silently point at nothing."""
    import re

    text = DOC
    section = text.split("## Safety rules", 1)[1].split("\n## ", 1)[0]
    cited = set()
    for row in section.splitlines():
        if row.startswith("|") and not row.startswith("|---"):
            cited |= set(re.findall(r"`([a-z][a-z0-9_]+)`", row.rsplit("|", 2)[-2]))
    assert len(cited) >= 25
    sources = "\n".join(p.read_text() for p in (REPO / "tests").rglob("test_*.py"))
    # a case's name may sit on the line after `Case(` where the formatter splits the call
    cases = set(re.findall(r'Case\(\s*"([a-z0-9_]+)"', sources))
    missing = sorted(n for n in cited if f"def {n}(" not in sources and n not in cases)
    assert not missing, missing
