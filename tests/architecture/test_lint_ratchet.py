"""scripts/lint_ratchet.py: the recorded static-check debt may only shrink (issue 34).

mypy and ruff are stood in for by their findings (the tool runs are `make lint`'s business); what is under test is
the comparison with the record and the `--update` that only lowers it.
"""

from __future__ import annotations

from collections import Counter

import pytest

from scripts import lint_ratchet

RECORD = """# comment kept
[mypy]
config = 5
policy = 2

[complexity]
functions = [
    "sim/policies.py:wake",  # 40
]
"""


@pytest.fixture
def record(tmp_path, monkeypatch):
    path = tmp_path / "lint_debt.toml"
    path.write_text(RECORD)
    monkeypatch.setattr(lint_ratchet, "DEBT_FILE", path)
    return path


def _found(monkeypatch, mypy: dict[str, int], complex_functions: set[str]):
    monkeypatch.setattr(lint_ratchet, "mypy_counts", lambda packages: Counter(mypy))
    monkeypatch.setattr(lint_ratchet, "complex_functions", lambda: set(complex_functions))


def test_as_recorded_passes(record, monkeypatch, capsys):
    _found(monkeypatch, {"config": 5, "policy": 2}, {"sim/policies.py:wake"})
    assert lint_ratchet.main([]) == 0
    assert "7 errors (7 recorded)" in capsys.readouterr().out


def test_a_new_mypy_error_fails_and_names_the_package(record, monkeypatch, capsys):
    _found(monkeypatch, {"config": 5, "policy": 3}, {"sim/policies.py:wake"})
    assert lint_ratchet.main([]) == 1
    assert "mypy: policy has 3 errors, 2 recorded" in capsys.readouterr().err


def test_fewer_errors_fail_until_update_lowers_the_record_and_never_raises_it(record, monkeypatch):
    _found(monkeypatch, {"config": 3, "policy": 2}, {"sim/policies.py:wake"})
    assert lint_ratchet.main([]) == 1  # a fixed error must leave the record, or it could come back unnoticed
    assert lint_ratchet.main(["--update"]) == 0
    text = record.read_text()
    assert "config = 3" in text and "policy = 2" in text and text.startswith("# comment kept")
    _found(monkeypatch, {"config": 4, "policy": 2}, {"sim/policies.py:wake"})
    assert lint_ratchet.main(["--update"]) == 1 and "config = 3" in record.read_text()


def test_a_new_complex_function_fails_and_a_split_one_must_leave_the_list(record, monkeypatch, capsys):
    _found(monkeypatch, {"config": 5, "policy": 2}, {"sim/policies.py:wake", "policy/tick.py:observe"})
    assert lint_ratchet.main([]) == 1
    assert "over the limit, not recorded: policy/tick.py:observe" in capsys.readouterr().err
    _found(monkeypatch, {"config": 5, "policy": 2}, set())
    assert lint_ratchet.main([]) == 1
    assert "take it off the list: sim/policies.py:wake" in capsys.readouterr().err


def test_errors_are_counted_by_the_package_of_their_file():
    assert lint_ratchet.package_of("advise/org_advisor.py") == "advise"
    assert lint_ratchet.package_of("pricing/cost_model/billing.py") == "pricing"
    assert lint_ratchet.MYPY_ERROR.match("policy/tick.py:106: error: Need type annotation  [var-annotated]")
    assert not lint_ratchet.MYPY_ERROR.match("policy/state.py:207: note: By default the bodies ...")
