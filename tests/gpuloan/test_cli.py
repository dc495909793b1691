"""The command line as a Pulumi user expects it: -s/--stack everywhere (PULUMI_STACK, the selected stack),
--version, progress on stderr, quiet when piped into `head`, tables that fit the terminal (COLUMNS=80)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from types import SimpleNamespace
from pricing import checks

import pytest
from conftest import GPULOAN, REPO, SHARED_TRACES, requires_shared_prices, requires_shared_traces, resolved_prices

from gpuloan import cli, stack_arg
from table_checks import split_figures as _split_figures, too_wide_at as _too_wide_at

TABLE_WIDTH = 80


def _run(args: list[str], columns: int | None = None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"COLUMNS": str(columns)} if columns else {})}
    env.pop("PULUMI_STACK", None)
    return subprocess.run(
        GPULOAN + args, cwd=kw.pop("cwd", REPO), env=env, capture_output=True, text=True, timeout=600, **kw
    )


def _too_wide(out: str) -> list[str]:
    """Lines wider than the terminal, except the one-line price source (a path, kept whole for copy and paste)."""
    return [
        line
        for line in out.splitlines()
        if len(line) > TABLE_WIDTH and not line.lstrip().startswith(("prices:", "dev: prices:", "prod: prices:"))
    ]


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
        GPULOAN + argv,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in {**os.environ, "PULUMI_HOME": str(tmp_path)}.items() if k != "PULUMI_STACK"},
    )
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
    result = subprocess.run(
        f"{sys.executable} -m gpuloan preview -s prod --json | head -n 1",
        shell=True,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
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
    result = _run(
        ["simulate", "--trace", str(trace), "-s", "prod", "--pool", "training", "--auto-size", "--days", "1:7"],
        columns=80,
    )
    assert result.returncode == 0, result.stderr
    assert _too_wide(result.stdout) == [] and "gpuloan-defaults" in result.stdout  # a policy name never folds


@pytest.mark.parametrize(
    "name, message", [("plot.gif", "must end in .png, .svg, .html"), ("no-such-folder/plot.png", "does not exist")]
)
def test_plot_path_is_checked_before_the_run(tmp_path, name, message):
    result = _run(["simulate", "--trace", str(tmp_path / "missing.csv"), "-s", "dev", "--plot", str(tmp_path / name)])
    assert result.returncode == 2
    assert message in result.stderr and "missing.csv" not in result.stderr  # refused before the trace is read


@requires_shared_prices
@requires_shared_traces
def test_plot_html_is_written_after_the_table_and_named(tmp_path):
    trace = SHARED_TRACES / "itp" / "cluster05.csv"
    out = tmp_path / "c05.html"
    result = _run(
        [
            "simulate",
            "--trace",
            str(trace),
            "-s",
            "prod",
            "--pool",
            "training",
            "--auto-size",
            "--days",
            "1:3",
            "--plot",
            str(out),
        ],
        columns=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"wrote the plot to {out}" in result.stderr and "gpuloan" in result.stdout
    page = out.read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page and "<script" not in page


# --- the project from a subdirectory, -C/--cwd ---------------------------------------------------------------


def test_a_subdirectory_of_the_project_finds_its_stacks_as_pulumi_does():
    result = _run(["validate", "-s", "dev"], cwd=REPO / "docs")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("dev: valid")
    listed = _run(["validate"], cwd=REPO / "docs")  # no stack: the error lists the project's stacks, not docs/'s
    assert listed.returncode == 2 and "dev, prod" in listed.stderr


def test_cwd_option_runs_as_if_started_there(tmp_path):
    result = _run(["-C", str(REPO / "docs" / "workloads"), "validate", "-s", "prod"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("prod: valid")
    missing = _run(["--cwd", str(tmp_path / "nowhere"), "validate", "-s", "dev"], cwd=tmp_path)
    assert missing.returncode == 2 and "--cwd" in missing.stderr and "No such file" in missing.stderr


def test_outside_any_project_the_error_names_the_working_directory(tmp_path):
    result = _run(["validate", "-s", "dev"], cwd=tmp_path)
    assert result.returncode == 2 and f"no stack file {tmp_path.resolve()}/Pulumi.dev.yaml" in result.stderr


# --- one family of options -----------------------------------------------------------------------------------


def _subparsers():
    import argparse

    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, action.choices


def test_every_option_of_every_command_says_what_it_does():
    parser, commands = _subparsers()
    missing = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, sub in [("gpuloan", parser), *commands.items()]
        for a in sub._actions
        if not (a.help or "").strip() and a.dest != "command" and not a.option_strings == []
    ]
    assert missing == []


def test_advise_and_simulate_share_stack_seed_and_simulation_options():
    _, commands = _subparsers()
    advise = commands["advise"].parse_args([])  # -s is not required: $PULUMI_STACK / the selected stack, as elsewhere
    simulate = commands["simulate"].parse_args(["--trace", "t.csv"])
    shared = (
        "stack_option",
        "seed",
        "provisioning_delay",
        "checkpoint_interval",
        "metric_delay",
        "spot_episodes_per_week",
        "placement",
        "price_file",
    )
    assert {k: getattr(advise, k) for k in shared} == {k: getattr(simulate, k) for k in shared}
    helps = {name: {a.dest: a.help for a in commands[name]._actions} for name in ("advise", "simulate")}
    assert {k: helps["advise"][k] for k in shared} == {k: helps["simulate"][k] for k in shared}


def test_placement_help_names_the_stacks_own_default_not_least_allocated_alone():
    _, commands = _subparsers()
    text = next(a.help for a in commands["simulate"]._actions if a.dest == "placement")
    assert "bin_packing" in text and "least_allocated (the default" not in text


# --- the platform table --------------------------------------------------------------------------------------


def _platform_text(unknown_items: int) -> str:
    import io

    from gpuloan import preview
    from gpuloan.render import tables

    rows = [
        {
            "item": f"item {i}",
            "quantity": 1,
            "unit": "month",
            "usd_per_unit": None if i < unknown_items else 2.0,
            "monthly_usd": None if i < unknown_items else 2.0,
            "price_model": "on_demand",
        }
        for i in range(3)
    ]
    cost = {
        "platform": rows,
        "platform_known_monthly_usd": 2.0 * (3 - unknown_items),
        "platform_unknown": [r["item"] for r in rows if r["monthly_usd"] is None],
        "fixed_monthly_usd": 10.0,
        "budget_headroom_monthly_usd": 90.0,
        "budget_headroom_is_upper_bound": unknown_items > 0,
    }
    buf = io.StringIO()
    preview.render_platform(cost, tables.console(file=buf))
    return next(line for line in buf.getvalue().splitlines() if line.startswith("total"))


def test_platform_total_says_unknown_when_nothing_is_priced():
    assert _platform_text(3).split() == ["total", "unknown"]
    assert _platform_text(1).split() == ["total", "$4.00", "+", "unknown"]
    assert _platform_text(0).split() == ["total", "$6.00"]


@requires_shared_prices
def test_advise_names_its_plot_on_stderr_like_simulate(tmp_path, monkeypatch, capsys):
    series = tmp_path / "demand.csv"
    series.write_text("minute,gpus_demanded\n" + "".join(f"{m},{16 if m % 1440 < 720 else 8}\n" for m in range(1440)))
    png = tmp_path / "advice.png"
    monkeypatch.chdir(REPO)
    assert cli.main(["advise", "-s", "prod", "--pool", "training", "--series", str(series), "--plot", str(png)]) == 0
    captured = capsys.readouterr()
    assert f"wrote the plot to {png}" in captured.err and str(png) not in captured.out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- YAML syntax errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, where, line, caret_col",
    [
        (
            "config:\n  gpuloan:region: us-east-1\n  gpuloan:pools: [a, b\n  gpuloan:x: 1\n",
            ":4:12:",
            "  gpuloan:x: 1",
            11,
        ),
        ("config:\n  a: b: c\n", ":2:7:", "  a: b: c", 6),
    ],
)
def test_yaml_syntax_error_shows_file_line_column_and_the_line_with_a_caret(tmp_path, text, where, line, caret_col):
    bad = tmp_path / "Pulumi.broken.yaml"
    bad.write_text(text)
    result = _run(["validate", "-s", str(bad)])
    assert result.returncode == 2
    err = result.stderr.splitlines()
    assert err[0].startswith(f"error: Pulumi.broken.yaml{where} invalid YAML: ")
    shown = next(i for i, s in enumerate(err) if s.endswith(f"| {line}"))
    caret = err[shown + 1]
    assert caret.endswith("^") and caret.index("^") - caret.index("|") - 2 == caret_col


def test_yaml_unclosed_quote_shows_the_line_that_opened_it(tmp_path):
    bad = tmp_path / "Pulumi.broken.yaml"
    bad.write_text('config:\n  gpuloan:region: "us-east-1\n')
    result = _run(["validate", "-s", str(bad)])
    assert result.returncode == 2 and '   2 |   gpuloan:region: "us-east-1' in result.stderr


# --- make bench-config ---------------------------------------------------------------------------------------


def test_bench_config_measures_a_valid_hundred_pool_config_with_a_large_kueue_cohort():
    from scripts.bench_config import hundred_pools
    from config import scheduling

    cfg = checks.parse(
        hundred_pools(), prices=resolved_prices()
    )  # raises ConfigError (the Kueue 64-flavor rule) on an invalid config
    assert len(cfg.pools) == 100 and cfg.scheduling.kueue.enabled
    widest = max(len(scheduling.pool_queue(cfg, p).flavors) for p in cfg.pools)
    assert 40 < widest <= scheduling.MAX_FLAVORS_PER_GROUP  # borrowing across teams is still in the measurement


# --- every command's table fits the terminal and keeps its figures whole ---------------------------------------


def _cluster05(*extra: str) -> list[str]:
    return [
        "simulate",
        "--trace",
        str(SHARED_TRACES / "itp" / "cluster05.csv"),
        "-s",
        "prod",
        "--pool",
        "training",
        "--auto-size",
        "--days",
        "1:2",
        *extra,
    ]


# cost-diff and cost-report pass the same checks (table_checks.py) in tests/gpuloan/test_cost_comment.py and
# tests/gpuloan/test_cost_report.py, where their git history and Cost Explorer emulator are set up.
TABLE_COMMANDS = {
    "prices show": ["prices", "show", "-s", "prod"],
    "preview": ["preview", "-s", "prod", "--summary"],
    "simulate": _cluster05("--what-if"),
    "simulate --seeds": _cluster05("--seeds", "2"),
    "simulate --sweep-floor": _cluster05("--sweep-floor"),
    "advise": [
        "advise",
        "-s",
        "prod",
        "--pool",
        "training",
        "--trace",
        str(SHARED_TRACES / "itp" / "cluster02.csv"),
        "--days",
        "0:0",
    ],
}


@requires_shared_prices
@requires_shared_traces
@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("name", list(TABLE_COMMANDS))
def test_every_commands_table_fits_the_terminal_and_never_splits_a_figure(name, width):
    result = _run(TABLE_COMMANDS[name], columns=width)
    assert result.returncode == 0, result.stderr
    assert _too_wide_at(result.stdout, width) == []
    assert _split_figures(result.stdout) == []
    if width == 200:  # a wide terminal shows every column
        assert "left out to fit the terminal" not in result.stdout


@requires_shared_prices
@requires_shared_traces
def test_simulate_at_80_columns_shows_each_policys_total_whole_and_names_what_it_left_out():
    doc = json.loads(_run(_cluster05("--what-if", "--json")).stdout)
    out = _run(_cluster05("--what-if"), columns=80).stdout
    for r in doc["policies"]:
        row = next(line for line in out.splitlines() if line.startswith(r["name"] + " "))
        assert f" {r['total_cost_usd']:,.0f} " in row
    assert "left out to fit the terminal: lost GPU-h" in " ".join(out.split())


def test_split_figure_detector_sees_a_folded_figure():
    # the detector the table test relies on, on the output this issue reported
    assert _split_figures("gpuloan   1,1    0\n           03\n") != []
    assert _split_figures("gpuloan     29,\n            511\n") != []
    prose = "gpuloan-defaults vs karpenter: gpuloan-defaults dominated (cost +0.8 % ± $0,\np95_wait_minutes +0.00)\n"
    assert _split_figures(prose) == []  # prose wrapped after a figure's comma
    assert _split_figures("gpuloan   1,103    0  0.7/5.7/5.9  $29,511.07\n") == []
