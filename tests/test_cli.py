"""The command line as a Pulumi user expects it: -s/--stack everywhere (PULUMI_STACK, the selected stack),
--version, progress on stderr, quiet when piped into `head`, tables that fit the terminal (COLUMNS=80)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import REPO, SHARED_TRACES, requires_shared_prices, requires_shared_traces

from gpuloan import cli, stack_arg

GPULOAN = [sys.executable, "-m", "gpuloan"]
TABLE_WIDTH = 80


def _run(args: list[str], columns: int | None = None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"COLUMNS": str(columns)} if columns else {})}
    env.pop("PULUMI_STACK", None)
    return subprocess.run(GPULOAN + args, cwd=kw.pop("cwd", REPO), env=env, capture_output=True, text=True,
                          timeout=600, **kw)


def _too_wide(out: str) -> list[str]:
    """Lines wider than the terminal, except the one-line price source (a path, kept whole for copy and paste)."""
    return [line for line in out.splitlines()
            if len(line) > TABLE_WIDTH and not line.lstrip().startswith(("prices:", "dev: prices:", "prod: prices:"))]


def test_version():
    result = _run(["--version"])
    assert result.returncode == 0 and result.stdout.startswith("gpuloan ")
    assert result.stdout.split()[1][0].isdigit()


# --- naming the stack ----------------------------------------------------------------------------------------


def _workspace(home, project_dir, stack: str) -> None:
    project_file = (project_dir / "Pulumi.yaml").resolve()
    digest = hashlib.sha1(str(project_file).encode()).hexdigest()  # noqa: S324 (the Pulumi CLI's key)
    ws = home / "workspaces"
    ws.mkdir(parents=True)
    (ws / f"gpuloan-{digest}-workspace.json").write_text(json.dumps({"stack": stack}))


def test_stack_comes_from_option_then_positional_then_env_then_the_selected_stack(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text("name: gpuloan\nruntime: python\n")
    for s in ("dev", "prod"):
        (tmp_path / f"Pulumi.{s}.yaml").write_text("config: {}\n")
    home = tmp_path / "pulumi-home"
    _workspace(home, tmp_path, "acme/gpuloan/prod")
    env = {"PULUMI_HOME": str(home)}
    ns = lambda **kw: SimpleNamespace(**{"stack_option": None, "stack_positional": None, **kw})  # noqa: E731
    assert stack_arg.resolve(ns(stack_option="dev"), tmp_path, env) == "dev"
    assert stack_arg.resolve(ns(stack_positional="dev"), tmp_path, env) == "dev"
    assert stack_arg.resolve(ns(), tmp_path, {**env, "PULUMI_STACK": "dev"}) == "dev"
    assert stack_arg.resolve(ns(), tmp_path, env) == "prod"  # `pulumi stack select acme/gpuloan/prod`
    with pytest.raises(stack_arg.NoStackError, match=r"-s STACK.*stacks in this project: dev, prod"):
        stack_arg.resolve(ns(), tmp_path, {"PULUMI_HOME": str(tmp_path / "none")})
    with pytest.raises(stack_arg.NoStackError, match="two stacks named"):
        stack_arg.resolve(ns(stack_option="dev", stack_positional="prod"), tmp_path, env)


@pytest.mark.parametrize("argv", [["validate"], ["preview", "--json"], ["prices", "show"]])
def test_no_stack_is_a_clear_error_listing_the_stacks(argv, tmp_path):
    result = subprocess.run(
        GPULOAN + argv, cwd=REPO, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in {**os.environ, "PULUMI_HOME": str(tmp_path)}.items() if k != "PULUMI_STACK"})
    assert result.returncode == 2
    assert "no stack given" in result.stderr and "stacks in this project: dev, prod" in result.stderr


def test_s_and_the_positional_form_mean_the_same(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert cli.main(["validate", "-s", "dev"]) == 0
    by_option = capsys.readouterr().out
    assert cli.main(["validate", "dev"]) == 0
    assert capsys.readouterr().out == by_option and by_option.startswith("dev: valid")
    monkeypatch.setenv("PULUMI_STACK", "dev")
    assert cli.main(["validate"]) == 0
    assert capsys.readouterr().out == by_option


# --- output --------------------------------------------------------------------------------------------------


def test_piping_into_head_ends_quietly():
    # --json: far more than a pipe buffer (64 KiB), so the writer is still writing when head has gone
    result = subprocess.run(f"{sys.executable} -m gpuloan preview -s prod --json | head -n 1", shell=True, cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr
    assert result.stdout == "{\n"


@requires_shared_prices
def test_preview_fits_80_columns_and_counts_like_pulumi():
    result = _run(["preview", "-s", "prod"], columns=80)
    assert result.returncode == 0, result.stderr
    assert _too_wide(result.stdout) == []
    assert "Resources: + " in result.stdout and " to create" in result.stdout
    assert "running the prod program offline" in result.stderr and "running" not in result.stdout  # progress
    summary = _run(["preview", "-s", "prod", "--summary"], columns=80).stdout
    assert summary.startswith("Resources: + ") and "Estimated monthly cost" in summary


@requires_shared_prices
@requires_shared_traces
def test_simulate_fits_80_columns():
    trace = SHARED_TRACES / "itp" / "cluster05.csv"
    result = _run(["simulate", "--trace", str(trace), "-s", "prod", "--pool", "training", "--auto-size",
                   "--days", "1:7"], columns=80)
    assert result.returncode == 0, result.stderr
    assert _too_wide(result.stdout) == [] and "gpuloan-defaults" in result.stdout  # a policy name never folds


@pytest.mark.parametrize("name, message", [("plot.gif", "must end in .png, .svg, .html"),
                                            ("no-such-folder/plot.png", "does not exist")])
def test_plot_path_is_checked_before_the_run(tmp_path, name, message):
    result = _run(["simulate", "--trace", str(tmp_path / "missing.csv"), "-s", "dev", "--plot", str(tmp_path / name)])
    assert result.returncode == 2
    assert message in result.stderr and "missing.csv" not in result.stderr  # refused before the trace is read


@requires_shared_prices
@requires_shared_traces
def test_plot_html_is_written_after_the_table_and_named(tmp_path):
    trace = SHARED_TRACES / "itp" / "cluster05.csv"
    out = tmp_path / "c05.html"
    result = _run(["simulate", "--trace", str(trace), "-s", "prod", "--pool", "training", "--auto-size",
                   "--days", "1:3", "--plot", str(out)], columns=120)
    assert result.returncode == 0, result.stderr
    assert f"wrote the plot to {out}" in result.stderr and "gpuloan" in result.stdout
    page = out.read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page and "<script" not in page
