"""Every shell command shown in README.md and docs/ runs as written, or is classified as needing what a test
machine lacks; figures quoted from a command's output are what it prints today.

The commands are read from the fenced shell blocks (tests/doc_commands.py). Each one runs with bash from the
repository root, after the `export` lines its page shows above it, with no other price source (as from a fresh
clone: conftest's GPULOAN_PRICE_FILE is removed, so prices come from the snapshot shipped in the package) and
`.venv/bin` not on PATH, and must exit 0 (or as a `# exits N` comment says). Fast commands run in `make test`;
SLOW ones only under the deep profile (`make test-deep`); those in CANNOT_RUN are checked as far as this machine
can. A command that reads the public data beside the project (../shared/data) skips with conftest's marker where
that is absent, as on GitHub's runners; every other command runs in both passes of .ci/run (with ../shared and
with an empty folder for it), and the README's newcomer commands also run here with nothing beside the clone."""

from __future__ import annotations

import functools
import os
import re
import resource
import shlex
import subprocess
import typing
from dataclasses import dataclass

import pytest
from conftest import (
    GPULOAN,
    REPO,
    SHARED_DATA,
    requires_prices,
    requires_shared_prices,
    requires_shared_traces,
    resolved_prices,
)
from doc_commands import SHELL_LANGS, DocCommand, blocks, commands_of, doc_pages, shell_commands, split_comment

DEEP = os.environ.get("GPULOAN_HYPOTHESIS_PROFILE") == "deep"
COMMANDS = shell_commands(REPO)

# What this machine lacks, by command prefix (whitespace runs read as one space). These are not run; each is still
# checked as far as it can be here (test_a_command_that_cannot_run_here_names_what_exists). A new row is reviewed:
# say what the command needs that a test machine cannot have.
CANNOT_RUN = {
    "pulumi ": "the Pulumi CLI and a state backend (preview and up: an AWS account)",
    "gh ": "the GitHub CLI, logged in to a repository of yours",
    "for env in dev prod; do gh ": "the GitHub CLI, logged in to a repository of yours",
    "aws ": "AWS credentials and a cluster that publishes GPU metrics",
    "git add ": "commits to your repository",
    "kubectl ": "a cluster with Kueue and a workload waiting on a drained Capacity Block (docs/floor.md)",
    ".venv/bin/gpuloan prices refresh ": "AWS credentials (the Price List API)",
    ".venv/bin/gpuloan cost-report ": "AWS credentials (Cost Explorer; tests/gpuloan/test_cost_report.py runs it against moto)",
    ".venv/bin/gpuloan advise -s prod --history-days ": "AWS credentials (the stack's own CloudWatch metrics)",
    ".venv/bin/gpuloan advise -s prod --org ": "AWS credentials (every pool's own CloudWatch metrics; tests/advise/test_org_advisor.py runs it against moto)",
    "python -m venv guardrails/venv ": "PyPI, for the policy pack's own venv (tests/guardrails/test_guardrails.py runs its rules)",
    "make test": "it runs this suite, which would recurse (its recipe is checked with make -n)",
    "make install": "it (re)installs .venv, which this suite runs in (its recipe is checked with make -n)",
}

# Commands over ~20 s on the 2-core machine: they run under the deep profile only (`make test-deep`). Wall time
# measured on that machine, and what takes it.
SLOW = {
    ".venv/bin/gpuloan cost-diff --base HEAD$": "25 s: two offline previews of each of the two stacks",
    "make bench-policy": "13 s, and its timing targets hold on an unloaded machine only",
    "make benchmark": "1 min unloaded, 3 under load: 150 simulations of 57 days",
    "make bench-what-if": "30 s unloaded: 60 simulations of 57 days",
    "make bench-advise": "12 s unloaded, 30 s under load: 20 simulations of a month, and a timing benchmark",
    "make bench-org": "about 15 minutes per rotation and seed: 72 fluid advisor runs, then 10 simulations of 57 "
    "days over the ten ITP clusters per rotation and seed (nine of them; one took 928 s on the "
    "loaded shared 2-core machine, docs/benchmarks.md)",
    "make bench-capacity-block": "40 simulated Capacity Blocks, before and after",
    "make bench-sizes": "1 min unloaded, 2 under load: 30 simulations of 57 days",
    "make bench-scale-tick": "100 CPU-s: ticks of 50, 100 and 200 pools against moto, 100 ms a call",
    ".venv/bin/python scripts/bench_scale_tick.py --pools 200": "50 CPU-s: a tick of 200 pools against moto, profiled",
    ".venv/bin/gpuloan advise -s /tmp/advise16/": "256 CPU-s: 10 simulations of 16 pools over 3 weeks "
    "(docs/simulator.md)",
    # docs/policy.md's scripts/bench_off_spot.py, the only documented command that starts so (the key stops before
    # the price file's path: a shared path here would count as this module reading ../shared, see
    # tests/architecture/test_shared_data_markers.py)
    "GPULOAN_PRICE_FILE=": "15 CPU-s alone, over 20 beside the suite's second worker (2026-12-06): "
    "simulations of three pools over 14 days, each policy",
}
# A command not in SLOW must stay under this many CPU-seconds (its own and its children's), or be listed there.
FAST_CPU_LIMIT_S = 20


def _flat(text: str) -> str:
    return " ".join(text.split())


def _row(table: dict[str, str], cmd: DocCommand) -> str | None:
    """The row whose key starts the command; a key ending in `$` is the whole command."""
    text = _flat(cmd.text)
    return next(
        (key for key in table if (text == key[:-1] if key.endswith("$") else (text + " ").startswith(key))), None
    )


def _page_exports(cmd: DocCommand) -> list[str]:
    """The `export` lines shown above the command on its page (a reader runs them first, in the same shell)."""
    return [c.text for c in COMMANDS if c.page == cmd.page and c.line < cmd.line and c.text.startswith("export ")]


def _make_recipe(target: str) -> str:
    recipe = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)*)", (REPO / "Makefile").read_text(), re.M)
    return recipe.group(1) if recipe else ""


def _shared_marks(cmd: DocCommand) -> list:
    """conftest's marker for each piece of ../shared/data the command (or an export it runs after) names; and a skip
    naming a file that is absent though its folder is there."""
    text = " ".join([*_page_exports(cmd), cmd.text])
    named = set(re.findall(r"\.\./shared/data/[^\s'\"]*", text))
    target = re.match(r"make ([a-z][a-z-]*)$", cmd.text)
    if target and "$(TRACES)" in _make_recipe(target.group(1)):  # `make benchmark` reads the traces and prices
        named |= {"../shared/data/traces", "../shared/data/prices"}
    marks = []
    if any(p.startswith("../shared/data/prices") for p in named):
        marks.append(requires_shared_prices)
    if any(p.startswith("../shared/data/traces") for p in named):
        marks.append(requires_shared_traces)
    missing = sorted(p for p in named if not (SHARED_DATA / p.removeprefix("../shared/data/")).exists())
    if missing:
        marks.append(pytest.mark.skip(reason=f"{', '.join(missing)} is absent"))
    return marks


def _param(cmd: DocCommand):
    marks = _shared_marks(cmd)
    if _row(SLOW, cmd) and not DEEP:
        marks.append(pytest.mark.skip(reason=f"slow ({SLOW[_row(SLOW, cmd)]}): deep profile only, make test-deep"))
    return pytest.param(cmd, id=f"{cmd.page}:{cmd.line}", marks=marks)


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    cpu_s: float


def _env(shared_data: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GPULOAN_PRICE_FILE", "PULUMI_STACK", "COLUMNS")}
    # `make` reads the shared data where the suite does (an empty folder in .ci/run's second pass).
    shared = shared_data or str(SHARED_DATA)
    return {**env, "COLUMNS": "80", "SHARED_DATA": shared, "GPULOAN_SHARED_DATA": shared}


def run_documented(cmd: DocCommand, shared_data: str | None = None) -> Run:
    """Run it as a reader would: bash in the repository root, after the page's exports; once per session (pages
    that show the same command after the same exports share the run). `shared_data`: another folder for the
    public data (an empty one: a clone with nothing beside it)."""
    return _run_script("\n".join([*_page_exports(cmd), cmd.text]), shared_data)


@functools.cache
def _run_script(script: str, shared_data: str | None = None) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        ["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=1200, env=_env(shared_data)
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Run(result.returncode, result.stdout, result.stderr, cpu_s)


def documented(page: str, pattern: str) -> DocCommand:
    """The one command of `page` that matches the regular expression `pattern`."""
    (cmd,) = [c for c in COMMANDS if c.page == page and re.search(pattern, c.text)]
    return cmd


RUNNABLE = [c for c in COMMANDS if not _row(CANNOT_RUN, c)]


@pytest.mark.parametrize("cmd", [_param(c) for c in RUNNABLE])
def test_documented_command_runs_as_written(cmd):
    run = run_documented(cmd)
    assert run.returncode == cmd.expected_exit, (
        f"{cmd} exited {run.returncode}, the doc says {cmd.expected_exit}:\n{run.stdout[-1500:]}\n{run.stderr[-1500:]}"
    )
    if not _row(SLOW, cmd):
        assert run.cpu_s < FAST_CPU_LIMIT_S, f"{cmd} took {run.cpu_s:.1f} CPU-s: list it in SLOW (deep profile only)"


def _readme_newcomer_commands() -> list:
    """The README's two commands (`make test` aside: it is this suite) and every "Five minutes with it" command."""
    text = (REPO / "README.md").read_text()
    five = text.split("## Five minutes with it", 1)[1].split("\n## ", 1)[0]
    lines = {c.line for c in COMMANDS if c.page == "README.md"}
    start = text[: text.index("## Five minutes with it")].count("\n") + 1
    end = start + five.count("\n")
    picked = [c for c in COMMANDS if c.page == "README.md" and (c.text == "make preview" or start <= c.line <= end)]
    assert lines and len(picked) >= 6
    return [
        pytest.param(
            c,
            id=f"README.md:{c.line}",
            marks=[pytest.mark.skip(reason="slow: deep profile only")] if _row(SLOW, c) and not DEEP else [],
        )
        for c in picked
    ]


@pytest.fixture(scope="module")
def nothing_beside(tmp_path_factory) -> str:
    """An empty folder standing in for ../shared/data: what a fresh clone has beside it."""
    return str(tmp_path_factory.mktemp("no-shared-data"))


@pytest.mark.parametrize("cmd", _readme_newcomer_commands())
def test_readme_commands_print_dollars_with_nothing_beside_the_clone(cmd, nothing_beside):
    """Issue 37, item 3: the newcomer's commands name no ../shared path and print dollars from the price snapshot
    shipped in the package, and validate leaves no rule unchecked."""
    assert "../shared" not in cmd.text and not _page_exports(cmd)
    run = run_documented(cmd, nothing_beside)
    assert run.returncode == 0, f"{cmd}:\n{run.stdout[-1500:]}\n{run.stderr[-1500:]}"
    assert re.search(r"\$\d[\d,]*", run.stdout), run.stdout[-1500:]
    assert "not checked" not in run.stdout
    if "validate" not in cmd.text:
        assert re.search(r"^\s*(?:[\w-]+: )?prices: gpuloan snapshot of \d{4}-\d\d-\d\d", run.stdout, re.M), run.stdout[
            -800:
        ]


def test_every_fenced_block_says_what_it_holds():
    """A block without a language could hide a command from these tests: `bash` for commands, `text` for output."""
    unnamed = [f"{b.page}:{b.line}" for b in blocks(REPO) if not b.lang]
    assert unnamed == []


def test_every_command_is_run_or_classified_and_every_row_is_used():
    assert len(COMMANDS) > 40 and {c.page for c in COMMANDS} >= {"README.md", "docs/simulator.md", "docs/gitops.md"}
    for table in (CANNOT_RUN, SLOW):
        unused = [prefix for prefix in table if not any(_row(table, c) == prefix for c in COMMANDS)]
        assert unused == [], "a row no documented command uses: remove it"
    assert not [c for c in COMMANDS if _row(CANNOT_RUN, c) and _row(SLOW, c)]


def _gpuloan_help(argv: list[str]) -> str:
    """`--help` of the subcommand (`prices refresh` is two words)."""
    words = [a for a in argv[1:3] if not a.startswith("-")]
    for n in (len(words), 1):
        result = subprocess.run([*GPULOAN, *words[:n], "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
        if result.returncode == 0:
            return result.stdout
    raise AssertionError(result.stderr)


def _config_path_exists(path: str) -> bool:
    """`budget.alert_emails[0]`: each name is a field of the config model (config/config.py)."""
    from pydantic import BaseModel

    from config.config import GpuLoanConfig

    model: typing.Any = GpuLoanConfig
    for name in re.sub(r"\[\d+\]", "", path).split("."):
        if not (isinstance(model, type) and issubclass(model, BaseModel) and name in model.model_fields):
            return False
        model = model.model_fields[name].annotation
        while typing.get_args(model):  # list[X], X | None: look inside
            model = next(
                (a for a in typing.get_args(model) if isinstance(a, type) and issubclass(a, BaseModel)),
                typing.get_args(model)[0],
            )
    return True


WORKFLOWS = "\n".join(p.read_text() for p in sorted((REPO / ".github" / "workflows").glob("*.yml")))


@pytest.mark.parametrize("cmd", [pytest.param(c, id=f"{c.page}:{c.line}") for c in COMMANDS if _row(CANNOT_RUN, c)])
def test_a_command_that_cannot_run_here_names_what_exists(cmd, recorded):
    """What can be checked without the tool: the subcommand and flags exist, the make recipe resolves, the stack
    output and config key are the program's, the GitHub variable or secret is one the workflows read."""
    argv = shlex.split(_flat(cmd.text).split(" && ")[0].split("; do ")[-1])
    if argv[0].endswith("gpuloan"):
        help_text = _gpuloan_help(argv)
        for flag in [a.split("=")[0] for a in argv[2:] if a.startswith("--")]:
            assert flag in help_text, f"{cmd}: {flag} is not an option"
    elif argv[0] == "make":
        assert subprocess.run(["make", "-n", *argv[1:]], cwd=REPO, capture_output=True, timeout=60).returncode == 0
    elif argv[:3] == ["pulumi", "stack", "output"]:
        assert argv[3] in recorded("dev").outputs, f"{cmd}: the program exports no {argv[3]}"
    elif argv[:4] == ["pulumi", "config", "set", "--path"]:
        namespace, _, path = argv[4].partition(":")
        assert namespace == "gpuloan" and _config_path_exists(path), f"{cmd}: no config key {argv[4]}"
    elif argv[:2] in (["gh", "variable"], ["gh", "secret"]):
        kind = "vars" if argv[1] == "variable" else "secrets"
        assert f"{kind}.{argv[3]}" in WORKFLOWS, f"{cmd}: no workflow reads {kind}.{argv[3]}"
    assert CANNOT_RUN[_row(CANNOT_RUN, cmd)]  # and the reason is given


def test_the_command_reader_joins_continuations_and_loops_and_keeps_comments_apart():
    body = (
        "make preview   # creates .venv\n"
        'gh api --method PUT "repos/o/r/environments/prod" \\\n  -F "x=#notacomment"  # a comment\n'
        "\n# a comment line\n"
        'for env in dev prod; do\n  gh api "$env"\ndone\n'
        ".venv/bin/gpuloan validate -s broken  # exits 2: the file names a missing pool\n"
    )
    cmds = commands_of(body, "p.md", 10)
    assert [(c.line, c.text, c.comment) for c in cmds] == [
        (10, "make preview", "creates .venv"),
        (11, 'gh api --method PUT "repos/o/r/environments/prod" \\\n-F "x=#notacomment"', "a comment"),
        (15, 'for env in dev prod; do\ngh api "$env"\ndone', ""),
        (18, ".venv/bin/gpuloan validate -s broken", "exits 2: the file names a missing pool"),
    ]
    assert [c.expected_exit for c in cmds] == [0, 0, 0, 2]
    assert split_comment("echo 'a # b' # c") == ("echo 'a # b'", "c")
    assert SHELL_LANGS >= {"bash", "sh"}


def test_readme_two_commands_are_make_preview_and_make_test():
    first = next(b for b in blocks(REPO) if b.page == "README.md" and b.lang in SHELL_LANGS)
    assert [c.text for c in commands_of(first.body)] == ["make preview", "make test"]


def test_make_preview_validates_and_prices_the_dev_stack():
    run = run_documented(documented("README.md", r"^make preview$"))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "dev: valid" in run.stdout and "Estimated monthly cost" in run.stdout


def test_make_test_runs_the_suite():
    # Running it for real from inside the suite would recurse; `make -n` shows what it runs.
    result = subprocess.run(["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "-m pytest" in result.stdout


def test_ci_runs_the_readme_test_command():
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_config_reference_is_current():
    from gpuloan.commands.schema import config_markdown

    assert (REPO / "docs" / "config.md").read_text() == config_markdown(), (
        "run `make schema` to regenerate docs/config.md"
    )


# --- figures and claims quoted in the docs, checked against what the code does -------------------------------


def test_make_help_shows_every_documented_line_of_every_target():
    makefile = (REPO / "Makefile").read_text()
    documented = [
        line[3:].split(": ", 1)[-1].strip() if re.match(r"## [a-z-]+: ", line) else line[3:].strip()
        for line in makefile.splitlines()
        if line.startswith("## ")
    ]
    shown = subprocess.run(["make", "help"], cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    shown_text = [line.strip() for line in shown.splitlines()]
    missing = [d for d in documented if not any(s.endswith(d) for s in shown_text)]
    assert documented and missing == []  # a continuation line ("## about 36 minutes ...") is shown too


def test_make_help_fits_80_columns():
    shown = subprocess.run(["make", "help"], cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    assert shown and [line for line in shown.splitlines() if len(line) > 80] == []


def test_bench_org_states_one_duration_everywhere():
    """The Makefile's help, the benchmarks page and this suite's SLOW row say the same, and the run quoted on the
    page took that long."""
    said = [
        re.search(r"about (\d+) minutes", text).group(1)
        for text in (
            _make_help_line("bench-org"),
            _flat_doc("docs/benchmarks.md").split("make bench-org #")[1][:120],
            SLOW["make bench-org"],
        )
    ]
    quoted_s = float(re.search(r"bench-org: ([\d.]+) s wall in all", _flat_doc("docs/benchmarks.md")).group(1))
    assert len(set(said)) == 1 and round(quoted_s / 60) == int(said[0]), said


def test_floor_doc_shows_its_first_command_within_its_first_40_lines():
    assert min(c.line for c in COMMANDS if c.page == "docs/floor.md") <= 40


def test_kubernetes_doc_installs_kubernetes_validate_before_running_it():
    """It is a dev tool (requirements-dev.txt): `make install` / `make preview` leave it out of .venv."""
    page = [c.text for c in COMMANDS if c.page == "docs/kubernetes.md"]
    first = next(i for i, text in enumerate(page) if text.startswith(".venv/bin/kubernetes-validate"))
    assert "make dev-install" in page[:first]
    assert "kubernetes-validate" in (REPO / "requirements-dev.txt").read_text()
    assert "kubernetes-validate" not in (REPO / "requirements.txt").read_text()


def test_docs_say_a_pool_may_mix_sizes_as_validate_accepts():
    from pricing import checks
    from conftest import stack_config

    cfg = stack_config("prod")
    cfg["gpuloan:pools"][1]["elastic"]["instance_types"] = ["g6e.xlarge", "g6e.12xlarge"]  # 1 and 4 GPUs, one model
    checks.from_stack_yaml({"config": cfg}, "prod", prices=resolved_prices())  # valid: no ConfigError
    for page in ("docs/capacity.md", "docs/config.md"):
        text = _flat_doc(page)
        assert "refuses a list that mixes them" not in text and "have the same GPUs per node, and the same" not in text
        assert "several sizes" in text, page


def test_capacity_doc_describes_one_spot_group_per_size_as_the_advisory_does():
    """Issue 37: the spot advisory for a multi-size pool is per size's group; the doc says what the code does."""
    from pricing.cost_model import spot_spread

    text = _flat_doc("docs/capacity.md")
    spread = text.split("## How spot launches are spread")[1].split("## Labels and taints")[0].replace("**", "")
    assert "one spot group per size" in spread and "another listed type of its size" in spread
    assert "lowest price per GPU that the pending pods use" in spread
    assert "across sizes:" in spread and "spot_groups" in spread and "size_choice" in spread
    assert "lowest price per GPU that the pending pods use" in spot_spread.SIZE_CHOICE


def test_config_doc_capacity_row_says_production_work_stays_off_spot():
    row = next(
        line for line in (REPO / "docs" / "config.md").read_text().splitlines() if line.startswith("| `capacity` |")
    )
    assert "production_spot_pools" in row and "off spot" in row and "prices its elastic nodes at on-demand" in row


def _make_help_line(target: str) -> str:
    shown = subprocess.run(["make", "help"], cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    return " ".join(shown.split(f"  {target} ", 1)[1].split("\n  ")[0:2])


def test_config_reference_names_what_a_map_holds():
    from gpuloan.commands.schema import _type_name
    from config.config import InstancePrice

    assert _type_name(dict[str, InstancePrice]) == "map of string to InstancePrice"
    assert "| `instance_prices` | map of string to InstancePrice |" in (REPO / "docs" / "config.md").read_text()


def test_floor_doc_states_how_many_floor_sizes_advise_tries():
    from advise import advisor

    text = " ".join((REPO / "docs" / "floor.md").read_text().split())
    every, most = re.search(
        r"every size up to (\d+) nodes, a larger peak in even steps of at most (\d+) sizes", text
    ).groups()
    assert advisor.floor_sizes(int(every)) == list(range(int(every) + 1))
    assert len(advisor.floor_sizes(int(every) + 1)) < int(every) + 2  # one more node and sizes are skipped
    assert int(most) == advisor.MAX_POINTS and len(advisor.floor_sizes(1000)) <= int(most) + 1


def test_policy_doc_quotes_the_real_zip_size():
    from stacks.policy_function.package import build_zip

    quoted = float(re.search(r"zip: ([\d.]+) KiB", (REPO / "docs" / "policy.md").read_text()).group(1))
    assert quoted == round(len(build_zip()) / 1024, 1)


def test_simulator_doc_quotes_the_real_trace_error(tmp_path):
    text = " ".join((REPO / "docs" / "simulator.md").read_text().split())
    quoted = re.search(r"`trace\.csv:3: ([^`]+)`", text).group(1)
    bad = tmp_path / "trace.csv"
    bad.write_text("submit_s,duration_s,gpus\n0,600,8\nx,600,8\n")
    result = subprocess.run(
        [*GPULOAN, "simulate", "--trace", str(bad), "-s", "dev"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and f"{bad}:3: {quoted}" in result.stderr


@requires_prices  # the docs' commands price with the snapshot
def test_budgets_doc_quotes_the_real_headroom():
    quoted = re.search(r"`budget headroom: at most (\$[\d,.]+)`", (REPO / "docs" / "budgets.md").read_text()).group(1)
    out = run_documented(documented("docs/budgets.md", r"^\.venv/bin/gpuloan preview -s prod$")).stdout
    assert f"budget headroom: at most {quoted}" in _flat(out)


def _flat_doc(page: str) -> str:
    return _flat((REPO / page).read_text())


def _advise_json(cmd: DocCommand) -> dict:
    import json

    argv = [a for a in shlex.split(cmd.text) if not a.startswith("--plot") and not a.endswith(".png")]
    run = run_documented(DocCommand(cmd.page, cmd.line, shlex.join([*argv, "--json"]), ""))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)["pools"][0]


@requires_shared_prices
@requires_shared_traces
def test_floor_doc_hand_check_quotes_the_first_commands_figures():
    text = _flat_doc("docs/floor.md")
    cmd = documented("docs/floor.md", r"^\.venv/bin/gpuloan advise .*--trace")
    doc = _advise_json(cmd)
    two = next(p for p in doc["points"] if p["floor_nodes"] == 2)
    elastic, total, printed = re.search(
        r"at 2 floor nodes the elastic part costs \$([\d,.]+)/month, so `reserved_1yr` "
        r"costs 2 × 13\.5171 × 730 \+ [\d,.]+ = \$([\d,.]+) \(the table prints "
        r"\$([\d,]+)\)",
        text,
    ).groups()
    assert (elastic, total) == (f"{two['elastic_monthly_usd']:,.2f}", f"{two['monthly_usd']['reserved_1yr']:,.2f}")
    assert re.search(rf"^2 +[\d,]+ +{printed} ", run_documented(cmd).stdout, re.M)  # the table of the command itself
    peak, step = re.search(
        r"The peak from that week's demand is (\d+) nodes, so the sweep tries every (\w+) size", text
    ).groups()
    assert doc["peak_nodes"] == int(peak) and step == "second"
    assert [p["floor_nodes"] for p in doc["points"]] == list(range(0, int(peak) + 1, 2))
    per_month, below = re.search(
        r"interrupt production work \(([\d.]+) interruptions a month\) at every floor below "
        r"(\d+) nodes",
        text,
    ).groups()
    assert {p["production_interruptions_per_month"] for p in doc["points"] if p["floor_nodes"] < int(below)} == {
        float(per_month)
    }
    rec = re.search(r"a floor of (\d+) nodes paid `(\w+)`, \$([\d,]+)/month", text).groups()
    r = doc["recommendation"]
    assert (str(r["floor_nodes"]), r["payment"], f"{r['monthly_usd']:,.0f}") == rec


@requires_prices  # the docs' commands price with the snapshot
def test_floor_doc_quotes_the_preview_of_the_training_floor():
    text = _flat_doc("docs/floor.md")
    cell, unused, line = re.search(
        r"shows it as `(2× p4d\.24xlarge \$[\d,]+ \([^)]+\))` .*?, `(commitments \(unused\) "
        r"\$[\d,]+)`, and the line `([^`]+)…",
        text,
    ).groups()
    # the same command as budgets.md's (one run serves both)
    out = _flat(run_documented(documented("docs/budgets.md", r"^\.venv/bin/gpuloan preview -s prod$")).stdout)
    # at 80 columns the cell folds over lines, its parts in order between the row's other cells
    parts = re.match(r"(2×) (p4d\.24xlarge) (\$[\d,]+) \((\w+) \+ ([\w-]+)\)", cell).groups()
    assert re.search(
        r"training research " + r" .*?".join(re.escape(x) for x in (*parts[:4], "+", parts[4] + ")")), out
    ), cell
    label, usd = unused.split(" $")
    assert re.search(r"commitments .*?" + re.escape(f"${usd}") + r" .*?\(unused\)", out), unused
    # the quoted line elides with "…"; the notes fold at 80 columns, mid-word too: compare without whitespace
    squeezed, at = re.sub(r"\s+", "", out), 0
    for piece in (re.sub(r"\s+", "", x) for x in line.split("…") if x.strip()):
        at = squeezed.index(piece, at) + len(piece)  # each quoted piece, in order


@requires_shared_prices
@requires_shared_traces
def test_simulator_doc_quotes_the_sweep_examples_frontier():
    text = _flat_doc("docs/simulator.md")
    low, low_usd, low_p95, high, high_usd = re.search(
        r"the frontier runs from floor (\d+) \(about \$([\d,]+), p95 ([\d.]+) min, level with karpenter\) to floor "
        r"(\d+) \(about \$([\d,]+), no wait\)",
        text,
    ).groups()
    out = run_documented(documented("docs/simulator.md", r"--sweep-floor")).stdout
    rows = {int(r[0]): r for r in (line.split() for line in out.splitlines()) if r and r[0].isdigit()}
    about = lambda usd: f"{round(int(usd.replace(',', '')), -2):,}"  # noqa: E731
    assert (about(rows[int(low)][2]), rows[int(low)][4]) == (low_usd, low_p95)
    assert (about(rows[int(high)][2]), float(rows[int(high)][4])) == (high_usd, 0.0)
    assert all(float(rows[n][4]) == 0.0 for n in rows if n > int(high))  # "floors 6 and 7 ... no shorter wait"


@pytest.mark.skipif(not DEEP, reason="make bench-policy is SLOW: deep profile only")
def test_policy_doc_quotes_the_bench_lines_counts_and_zip():
    quoted = re.search(
        r"`decide 100 pools x 32 nodes: [\d.]+ ms (?:\(target < 20\) )?\| (AWS calls per tick[^|]+)\| (zip: [\d.]+ KiB)",
        _flat_doc("docs/policy.md"),
    ).groups()
    out = run_documented(documented("docs/policy.md", r"^make bench-policy$")).stdout
    assert quoted[0] in out and quoted[1] in out


@pytest.mark.parametrize("cmd", [_param(documented("docs/benchmarks.md", r"^make bench-advise$"))])  # SLOW
def test_benchmarks_doc_quotes_the_advisors_verdict_on_the_month(cmd):
    floor, payment, usd, today, today_usd, share = re.search(
        r"Its verdict on that month: (\d+) floor nodes paid (\w+), (\$[\d,]+)/month, the cheapest floor that meets the "
        r"production pool's service target \(today's (\d+ × \w+), (\$[\d,]+), does not\); its last floor node is "
        r"needed (\d+) % of the time",
        _flat_doc("docs/benchmarks.md"),
    ).groups()
    out = run_documented(cmd).stdout
    assert (
        f"cheapest meeting the target: floor of {floor} x p4d.24xlarge paid {payment}, {usd}/month (today's "
        f"{today.replace('×', 'x')}: {today_usd}/month); its last floor node is needed {share} % of the time"
    ) in out


# A fenced block right after `<!-- output of: COMMAND -->` is what COMMAND prints at 80 columns: every line of the
# block must be a line of its output today (the block may leave lines out, never change one). A longer stretch of a
# page (tables between prose) opens with `<!-- output of: COMMAND (a note) -->` and closes with
# `<!-- end of output -->`: each table row in it must be a line COMMAND prints.
OUTPUT_MARK = re.compile(r"<!-- output of: (.+?) -->\n```\w*\n(.*?)```", re.S)
OUTPUT_REGION = re.compile(r"<!-- output of: ([^(\n]+?)(?: \([^)\n]*\))? -->\n(?!```)(.*?)<!-- end of output -->", re.S)


def _output_blocks() -> list:
    found = []
    for path in doc_pages(REPO):
        page, text = str(path.relative_to(REPO)), path.read_text()
        marked = [
            (command, [r for r in block.splitlines() if r.strip()]) for command, block in OUTPUT_MARK.findall(text)
        ]
        marked += [
            (command, [r for r in region.splitlines() if r.startswith("|")])
            for command, region in OUTPUT_REGION.findall(text)
        ]
        for command, rows in marked:
            # the command as one of the page's shell blocks shows it (so it also runs as written), or as marked
            cmd = next((c for c in COMMANDS if c.page == page and c.text == command), DocCommand(page, 0, command, ""))
            marks = _shared_marks(cmd)
            if _row(SLOW, cmd) and not DEEP:
                marks.append(pytest.mark.skip(reason=f"slow ({SLOW[_row(SLOW, cmd)]}): deep profile only"))
            found.append(pytest.param(cmd, rows, id=f"{page}:{command[:50]}", marks=marks))
    return found


@pytest.mark.parametrize("cmd,rows", _output_blocks())
def test_documented_output_is_what_the_command_prints(cmd, rows):
    assert cmd.line, f"{cmd.page}: `{cmd.text}` is marked as output but no shell block of the page shows it"
    assert rows, "an output mark with nothing under it"
    run = run_documented(cmd)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = {line.rstrip() for line in run.stdout.splitlines()}
    stale = [row for row in rows if row.rstrip() not in lines]
    assert stale == [], f"{cmd.page}: the output of `{cmd.text}` changed; regenerate the block"


def test_the_readme_cost_table_and_the_benchmark_tables_are_marked_as_command_output():
    marked = {(p.values[0].page, p.values[0].text): len(p.values[1]) for p in _output_blocks()}
    assert marked[("docs/benchmarks.md", "make benchmark")] > 100
    assert marked[("docs/benchmarks.md", "make bench-what-if")] > 40
    assert any(
        p.values[0].page == "README.md" and "preview -s prod --summary" in p.values[0].text for p in _output_blocks()
    )


# --- commands quoted in prose (`gpuloan simulate --warm-up`, `make bench-sim`) name what exists ----------------

INLINE_COMMAND = re.compile(r"`((?:\.venv/bin/)?gpuloan [a-z][^`]*|make [a-z][a-z-]*)`")


def _subcommands(parser) -> dict:
    import argparse

    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def test_commands_quoted_in_prose_name_real_subcommands_options_and_make_targets():
    from gpuloan.cli import build_parser

    targets = set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(), re.M))
    wrong = []
    for path in doc_pages(REPO):
        for quoted in INLINE_COMMAND.findall(path.read_text()):
            words = quoted.split()
            if words[0] == "make":
                if words[1] not in targets:
                    wrong.append(f"{path.name}: `{quoted}`: no make target {words[1]}")
                continue
            if words[1] == "vs":  # `gpuloan vs karpenter: ...` is a line of output, not a command
                continue
            parser = build_parser()
            for word in words[1:]:
                if word.startswith("-") or word not in _subcommands(parser):
                    break
                parser = _subcommands(parser)[word]
            if parser.prog == "gpuloan":
                wrong.append(f"{path.name}: `{quoted}`: no subcommand {words[1]}")
                continue
            options = {s for a in parser._actions for s in a.option_strings}
            wrong += [
                f"{path.name}: `{quoted}`: {parser.prog} has no {w}"
                for w in words
                if w.startswith("-") and w.split("=")[0] not in options
            ]
    assert wrong == []
