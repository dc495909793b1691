"""Exit codes a script can rely on, the same meaning across commands, each listed in its --help with an example
(issue 37, item 4; gpuloan/exit_codes.py)."""

from __future__ import annotations

import re
import shlex

import pytest
from conftest import REPO

from gpuloan import cli, exit_codes


def _parsers():
    """(words, parser) of every command and verb."""
    parser = cli.build_parser()
    out = [([], parser)]
    for name, sub in next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices.items():
        out.append(([name], sub))
        verbs = [a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction"]
        for verb, p in verbs[0].choices.items() if verbs else ():
            out.append(([name, verb], p))
    return out


@pytest.mark.parametrize(
    "words,parser", _parsers(), ids=lambda x: " ".join(x) or "gpuloan" if isinstance(x, list) else ""
)
def test_every_help_lists_its_exit_codes_and_one_example_in_80_columns(words, parser, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = parser.format_help()
    assert "\nexit codes:\n  0  " in text
    example = text.split("\nexample:\n", 1)[1]
    command = " ".join(example.split())
    assert command.startswith(" ".join([".venv/bin/gpuloan", *words])), command
    if not any(a.__class__.__name__ == "_SubParsersAction" for a in parser._actions):  # a verb's own options
        options = {s for a in parser._actions for s in a.option_strings}
        used = [w.split("=")[0] for w in shlex.split(command.split(" >")[0]) if w.startswith("-")]
        assert set(used) <= options, used
    assert [line for line in text.splitlines() if len(line) > 80] == []
    for code in map(int, re.findall(r"^  (\d)  ", text, re.M)):
        assert code in (exit_codes.OK, exit_codes.PARTIAL, exit_codes.BAD_INPUT, exit_codes.AWS_FAILED, 4)


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    for key in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.chdir(REPO)
    yield


@pytest.mark.parametrize(
    "argv",
    [
        ["prices", "refresh", "-s", "dev", "--output", "/dev/null"],
        ["cost-report", "-s", "dev", "--month", "2026-11"],
        ["advise", "-s", "dev", "--history-days", "7"],
        ["advise", "-s", "prod", "--org", "--history-days", "7"],
    ],
    ids=["prices refresh", "cost-report", "advise history", "advise org"],
)
def test_no_credentials_is_the_same_exit_everywhere(argv, no_credentials, capsys):
    assert exit_codes.credentials_missing()
    assert cli.main(argv) == exit_codes.BAD_INPUT
    assert "no AWS credentials" in capsys.readouterr().err
