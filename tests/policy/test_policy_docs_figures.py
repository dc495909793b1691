"""docs/policy.md quotes the deep run of the policy's property tests: the count it quotes is the true one.

Issue 42 item 3: the doc said "10 passed" while tests/policy/test_policy_properties.py held 13 properties.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEEP_FILES = ("tests/policy/test_policy_properties.py", "tests/policy/test_policy_state_faults.py")


def _properties() -> list[str]:
    """The Hypothesis properties: the test functions decorated with @given."""
    tree = ast.parse((REPO / DEEP_FILES[0]).read_text())
    return [
        f.name
        for f in tree.body
        if isinstance(f, ast.FunctionDef)
        and f.name.startswith("test_")
        and any(isinstance(d, ast.Call) and getattr(d.func, "id", "") == "given" for d in f.decorator_list)
    ]


def _collected() -> int:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", *DEEP_FILES],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    return int(re.search(r"(\d+) tests? collected", out).group(1))


def _deep_sentence() -> str:
    doc = (REPO / "docs" / "policy.md").read_text()
    section = doc.split("## Safety rules", 1)[1].split("| guarantee |", 1)[0]
    return " ".join(section.split())


def test_the_doc_names_every_property():
    found = re.search(r"the (\d+) properties", _deep_sentence(), re.IGNORECASE)
    assert found, "docs/policy.md, Safety rules: no 'the N properties'"
    assert int(found.group(1)) == len(_properties()), _properties()


def test_the_quoted_deep_run_ran_every_test_of_its_command():
    sentence = _deep_sentence()
    for path in DEEP_FILES:
        assert path in sentence, f"the quoted command does not name {path}"
    quoted = [int(n) for n in re.findall(r"`(\d+) passed in [\d.]+s", sentence)]
    assert quoted, "docs/policy.md, Safety rules: no quoted '`N passed in S s`'"
    assert set(quoted) == {_collected()}, (quoted, _collected())
