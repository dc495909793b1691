"""The README's commands and the command examples in docs/ run as written."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, SHARED_DATA, requires_shared_prices

# Examples that need what a test machine cannot have; each says why, and is still parsed for its subcommand.
NEEDS_AWS_MARK = "# needs AWS"


def _bash_blocks(path: Path) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S)


def _commands(block: str) -> list[str]:
    return [line.split("  #")[0].strip() if NEEDS_AWS_MARK not in line else line.strip()
            for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


PRICE_EXPORT = re.compile(r"^export GPULOAN_PRICE_FILE=(\S+)", flags=re.M)


def page_price_file(name: str) -> str | None:
    """The `export GPULOAN_PRICE_FILE=...` a page shows at its top (in a bash block): its commands run with it."""
    path = REPO / name if name == "README.md" else REPO / "docs" / name
    found = [m for block in _bash_blocks(path) for m in PRICE_EXPORT.findall(block)]
    return found[0] if found else None


def _gpuloan_examples() -> list[tuple[str, str]]:
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in _bash_blocks(path):
            for cmd in _commands(block):
                if re.match(r"^(\.venv/bin/)?gpuloan |^python -m gpuloan ", cmd):
                    found.append((path.name, cmd))
    return found


def test_readme_two_commands_are_make_preview_and_make_test():
    two = _commands(_bash_blocks(REPO / "README.md")[0])
    assert two == ["make preview", "make test"]


def test_make_preview_runs_as_written():
    result = subprocess.run(["make", "preview"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "dev: valid" in result.stdout
    assert "Estimated monthly cost" in result.stdout


def test_make_test_runs_the_suite():
    # Running it for real from inside the suite would recurse; `make -n` shows what it runs.
    result = subprocess.run(["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "-m pytest" in result.stdout


def test_ci_runs_the_readme_test_command():
    assert "make test" in (REPO / ".ci" / "run").read_text()


EXAMPLES = _gpuloan_examples()


def _example(doc: str, cmd: str):
    """An example that reads the public data beside the project (../shared/data) skips where that is absent."""
    args = [a.split("=", 1)[-1] for a in shlex.split(cmd.split(NEEDS_AWS_MARK)[0])] + [page_price_file(doc) or ""]
    # Checked where the tests look for the data (GPULOAN_SHARED_DATA), so hiding it skips these as a clone without it.
    missing = [a for a in args if a.startswith("../shared/data")
               and not (SHARED_DATA / a.removeprefix("../shared/data").lstrip("/")).exists()]
    marks = pytest.mark.skip(reason=f"{', '.join(missing)} is absent") if missing else ()
    return pytest.param(doc, cmd, id=f"{doc}:{cmd[:60]}", marks=marks)


@pytest.mark.parametrize("doc,cmd", [_example(d, c) for d, c in EXAMPLES])
def test_documented_gpuloan_command_runs(doc, cmd):
    argv = shlex.split(cmd.split(NEEDS_AWS_MARK)[0])
    if argv[0] == "gpuloan":
        argv[0] = str(REPO / ".venv" / "bin" / "gpuloan")
    elif argv[0] == "python":
        argv[0] = str(REPO / ".venv" / "bin" / "python")
    else:
        argv[0] = str(REPO / argv[0])
    if NEEDS_AWS_MARK in cmd:
        # Cannot reach AWS here: check that the command and its flags parse (--help of the subcommand).
        result = subprocess.run([argv[0], argv[1], "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        for flag in [a for a in argv[2:] if a.startswith("--")]:
            assert flag.split("=")[0] in result.stdout, f"{flag} is not an option of `gpuloan {argv[1]}`"
        return
    # As written from a fresh clone: no price variable but the one the page exports (conftest sets one for the
    # suite), no project price file (this repository commits none: its prices are ../shared's, not AWS's).
    env = {k: v for k, v in os.environ.items() if k != "GPULOAN_PRICE_FILE"}
    if page_price_file(doc):
        env["GPULOAN_PRICE_FILE"] = page_price_file(doc)
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, f"{doc}: `{cmd}` failed:\n{result.stdout[-1500:]}\n{result.stderr[-1500:]}"


def test_config_reference_is_current():
    from gpuloan.cmd_schema import config_markdown

    assert (REPO / "docs" / "config.md").read_text() == config_markdown(), "run `make schema` to regenerate docs/config.md"


@requires_shared_prices
def test_readme_cost_table_matches_the_real_preview():
    readme = (REPO / "README.md").read_text()
    block = readme.split("`.venv/bin/gpuloan preview -s prod\n--summary`, 80 columns) it shows:", 1)[1].split("```", 2)[1]
    rows = [line for line in block.splitlines() if line.strip()]
    assert any(r.startswith("total") for r in rows) and any(r.startswith("training") for r in rows)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = subprocess.run([str(REPO / ".venv" / "bin" / "gpuloan"), "preview", "-s", "prod", "--summary"], cwd=REPO,
                         capture_output=True, text=True, timeout=300, env={**env, "COLUMNS": "80"}).stdout
    lines = [line.rstrip() for line in out.splitlines()]
    for row in rows:
        assert row in lines, f"README row is stale (prices or config changed?): {row}"


# --- figures and claims quoted in the docs, checked against what the code does -------------------------------


def test_make_help_shows_every_documented_line_of_every_target():
    makefile = (REPO / "Makefile").read_text()
    documented = [line[3:].split(": ", 1)[-1].strip() if re.match(r"## [a-z-]+: ", line) else line[3:].strip()
                  for line in makefile.splitlines() if line.startswith("## ")]
    shown = subprocess.run(["make", "help"], cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    shown_text = [line.strip() for line in shown.splitlines()]
    missing = [d for d in documented if not any(s.endswith(d) for s in shown_text)]
    assert documented and missing == []  # a continuation line ("## about 36 minutes ...") is shown too


def test_config_reference_names_what_a_map_holds():
    from gpuloan.cmd_schema import _type_name
    from stacks.config import InstancePrice

    assert _type_name(dict[str, InstancePrice]) == "map of string to InstancePrice"
    assert "| `instance_prices` | map of string to InstancePrice |" in (REPO / "docs" / "config.md").read_text()


def test_floor_doc_states_how_many_floor_sizes_advise_tries():
    from sim import advisor

    text = " ".join((REPO / "docs" / "floor.md").read_text().split())
    every, most = re.search(r"every size up to (\d+) nodes, a larger peak in even steps of at most (\d+) sizes", text).groups()
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
    result = subprocess.run([str(REPO / ".venv" / "bin" / "gpuloan"), "simulate", "--trace", str(bad), "-s", "dev"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and f"{bad}:3: {quoted}" in result.stderr


@requires_shared_prices
def test_budgets_doc_quotes_the_real_headroom():
    quoted = re.search(r"`budget headroom: at most (\$[\d,.]+)`", (REPO / "docs" / "budgets.md").read_text()).group(1)
    env = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run([str(REPO / ".venv" / "bin" / "gpuloan"), "preview", "-s", "prod", "--summary"], cwd=REPO,
                         capture_output=True, text=True, timeout=300, env=env).stdout
    assert f"budget headroom: at most {quoted}" in out


@requires_shared_prices
@pytest.mark.skipif(os.environ.get("GPULOAN_HYPOTHESIS_PROFILE") != "deep" or not (REPO.parent / "shared" / "data" /
                    "traces").is_dir(), reason="a week of advise (about a minute): deep profile only")
def test_floor_doc_hand_check_quotes_the_first_commands_figures():
    import json

    text = " ".join((REPO / "docs" / "floor.md").read_text().split())
    elastic = re.search(r"at 2 floor nodes the elastic part costs \$([\d,.]+)/month", text).group(1)
    rec = re.search(r"a floor of (\d+) nodes paid `(\w+)`, \$([\d,]+)/month", text).groups()
    cmd = next(c for d, c in EXAMPLES if d == "floor.md" and c.startswith("gpuloan advise") and "--trace" in c)
    argv = [str(REPO / ".venv" / "bin" / "gpuloan")] + shlex.split(cmd)[1:]
    argv = [a for a in argv if not a.startswith("--plot") and not a.endswith(".png")] + ["--json"]
    doc = json.loads(subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900).stdout)["pools"][0]
    two = next(p for p in doc["points"] if p["floor_nodes"] == 2)
    assert f"{two['elastic_monthly_usd']:,.2f}" == elastic
    r = doc["recommendation"]
    assert (str(r["floor_nodes"]), r["payment"], f"{r['monthly_usd']:,.0f}") == rec


# A fenced block right after `<!-- output of: COMMAND -->` is what COMMAND prints at 80 columns: every line of the
# block must be a line of its output today (the block may leave lines out, never change one).
OUTPUT_MARK = re.compile(r"<!-- output of: (.+?) -->\n```\w*\n(.*?)```", re.S)


def _output_blocks() -> list:
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for cmd, block in OUTPUT_MARK.findall(path.read_text()):
            found.append(pytest.param(path.name, cmd, block, id=f"{path.name}:{cmd[:50]}"))
    return found


@requires_shared_prices
@pytest.mark.parametrize("doc,cmd,block", _output_blocks())
def test_documented_output_is_what_the_command_prints(doc, cmd, block):
    argv = shlex.split(cmd)
    argv[0] = str(REPO / argv[0])
    env = {**{k: v for k, v in os.environ.items() if k != "COLUMNS"}, "COLUMNS": "80"}
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, env=env).stdout
    lines = {line.rstrip() for line in out.splitlines()}
    stale = [row for row in block.splitlines() if row.strip() and row.rstrip() not in lines]
    assert stale == [], f"{doc}: the output of `{cmd}` changed; regenerate the block"


def test_the_readme_cost_table_is_marked_as_command_output():
    assert any(d == "README.md" and "preview -s prod --summary" in p.values[1] for p in _output_blocks()
               for d in [p.values[0]])
