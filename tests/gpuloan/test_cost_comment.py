"""The cost-diff report in Infracost's shape (gpuloan/render/cost_comment.py) and the `cost-diff` options around it:
headline, every cost column diffed (the on-demand fallback ceiling included), no comment when nothing changed,
`--format`, `--fail-above`."""

from __future__ import annotations

import copy
import json
import re

import pytest
from conftest import REPO, requires_prices, requires_shared_prices, resolved_prices
from table_checks import split_figures, too_wide_at
from test_cost_diff import _commit, _copy_project, _set

from gpuloan import cli
from offline import diff as cost_diff
from gpuloan.render import cost_comment

FALLBACK = "        max_nodes: 6\n        on_demand_max_nodes: 2\n"


@pytest.fixture(scope="module")
def fallback_raised(tmp_path_factory):
    """prod's training pool: on_demand_max_nodes 2 -> 6 in the last commit; the working tree is that commit."""
    repo = _copy_project(tmp_path_factory.mktemp("proj") / "repo")
    _commit(repo, "fallback of 2")
    _set(repo, "prod", FALLBACK, FALLBACK.replace("on_demand_max_nodes: 2", "on_demand_max_nodes: 6"))
    _commit(repo, "fallback of 6")
    return repo, cost_diff.cost_diff(repo, "HEAD~1", ["prod"])


@requires_prices
def test_raising_the_fallback_ceiling_is_a_money_change(fallback_raised):
    _, (diff,) = fallback_raised
    training = next(r for r in diff.pools if r["pool"] == "training")
    added = training["head"]["fallback_max_monthly_usd"] - training["base"]["fallback_max_monthly_usd"]
    # four more on-demand nodes of the pool's priciest type, all month
    priciest = max(
        resolved_prices().price(t, "us-east-1").ondemand_usd_per_hour for t in ("p4d.24xlarge", "p5.48xlarge")
    )
    assert added == pytest.approx(4 * priciest * 730, abs=0.05)
    assert f"+${added:,.0f}" == "+$160,717"
    row = next(r for r in cost_diff.cost_rows(diff) if r[0] == "training")
    assert row[cost_diff.HEADERS.index("fallback max")].endswith("(+$160,717)")
    md = cost_comment.render_markdown([diff], "HEAD~1")
    assert "### stack `prod`: Monthly cost will not change" in md  # the floor and platform did not move
    assert "Most it can cost (every elastic and fallback node up all month) will increase by $" in md
    assert cost_comment.changed([diff])


@requires_prices
def test_an_unchanged_tree_reports_no_change_and_prints_no_comment(fallback_raised, monkeypatch, capsys):
    repo, _ = fallback_raised
    (diff,) = cost_diff.cost_diff(repo, "HEAD", ["prod"])
    assert diff.added == diff.removed == diff.changed == []  # the Lambda's code included (hashed, not a repr)
    assert not cost_comment.changed([diff])
    assert cost_comment.headline(cost_comment.fixed_change(diff)).startswith("Monthly cost will not change")
    monkeypatch.chdir(repo)
    assert cli.main(["cost-diff", "--base", "HEAD", "-s", "prod", "--format", "markdown"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""  # the workflow leaves the PR comment alone
    assert "nothing to comment" in captured.err


# --- headline, threshold, formats on hand-made preview documents ----------------------------------------------


def _doc(floor: float | None, elastic: float = 100.0, fallback: float = 50.0, platform: list | None = None) -> dict:
    pool = {
        "pool": "p",
        "guaranteed_monthly_usd": floor,
        "elastic_max_monthly_usd": elastic,
        "fallback_max_monthly_usd": fallback,
        "budget_monthly_usd": None,
        "guaranteed_price_model": "on_demand",
        "elastic_price_model": "spot",
        "fallback_price_model": "on_demand",
        "worst_case_monthly_usd": None if floor is None else floor + max(elastic, fallback),
    }
    platform = platform or []
    known = sum(r["monthly_usd"] for r in platform if r["monthly_usd"] is not None)
    unknown = [r["item"] for r in platform if r["monthly_usd"] is None]
    return {
        "resources": [],
        "cost": {
            "pools": [pool],
            "guaranteed_monthly_usd": floor,
            "elastic_max_monthly_usd": elastic,
            "fallback_max_monthly_usd": fallback,
            "budget_monthly_usd": 10_000.0,
            "platform": platform,
            "platform_known_monthly_usd": known,
            "platform_unknown": unknown,
            "fixed_monthly_usd": None if floor is None else floor + known,
            "budget_headroom_monthly_usd": None if floor is None else 10_000.0 - floor - known,
            "budget_headroom_is_upper_bound": bool(unknown),
        },
    }


def _diff(base: dict | None, head: dict | None, stack: str = "s") -> cost_diff.StackDiff:
    side = lambda d: cost_diff.Side(doc=d) if d is not None else cost_diff.Side(missing=True)  # noqa: E731
    return cost_diff.diff_stack(stack, side(base), side(head))


@pytest.mark.parametrize(
    "base, head, expected",
    [
        (1000.0, 1460.0, "Monthly cost will increase by $460 (+46 %)"),
        (1000.0, 900.0, "Monthly cost will decrease by $100 (−10 %)"),
        (1000.0, 1000.0, "Monthly cost will not change ($1,000)"),
        (None, 1000.0, "Monthly cost change unknown (a price is missing on one side; see the notes)"),
    ],
)
def test_headline(base, head, expected):
    assert cost_comment.headline(cost_comment.fixed_change(_diff(_doc(base), _doc(head)))) == expected


def test_new_stack_headline_and_all_stacks_sum():
    diffs = [_diff(None, _doc(500.0), "new"), _diff(_doc(1000.0), _doc(1500.0), "old")]
    assert cost_comment.headline(cost_comment.fixed_change(diffs[0])) == "Monthly cost will be $500 (from nothing)"
    md = cost_comment.render_markdown(diffs, "main")
    assert "## 💰 Monthly cost will increase by $1,000 (+100 %)" in md  # 1000 -> 2000 over both stacks


def test_platform_rows_enter_the_headline_and_the_resource_details():
    eks = lambda usd: {"item": "EKS control plane", "monthly_usd": usd, "price_model": "on_demand"}  # noqa: E731
    d = _diff(_doc(1000.0, platform=[eks(73.0)]), _doc(1000.0, platform=[eks(146.0)]))
    assert cost_comment.headline(cost_comment.fixed_change(d)) == "Monthly cost will increase by $73 (+7 %)"
    md = cost_comment.render_markdown([d], "main")
    assert "| EKS control plane | on demand | $73 → $146 (+$73) |" in md
    assert "| p floor node group | on demand | $1,000 |" in md
    assert "| p on-demand fallback group (ceiling) | on demand | $50 |" in md


def test_unknown_platform_rows_make_the_headroom_an_upper_bound():
    unknown = [{"item": "NAT gateways", "monthly_usd": None, "price_model": "on_demand"}]
    d = _diff(_doc(1000.0, platform=unknown), _doc(2000.0, platform=unknown))
    total = next(r for r in cost_diff.cost_rows(d) if r[0] == "total")
    assert total[cost_diff.HEADERS.index("budget headroom")] == "≤$9,000 → ≤$8,000 (−$1,000)"


@pytest.mark.parametrize(
    "text, parsed",
    [("$5000", ("usd", 5000.0)), ("5,000", ("usd", 5000.0)), ("10%", ("pct", 10.0)), ("2.5 %", ("pct", 2.5))],
)
def test_fail_above_accepts_amounts_and_percentages(text, parsed):
    assert cost_comment.parse_threshold(text) == parsed


def test_fail_above_rejects_anything_else():
    with pytest.raises(ValueError, match=r"\$5000 or 5000\) or a percentage \(10%\)"):
        cost_comment.parse_threshold("lots")


@pytest.mark.parametrize("threshold, fails", [("$400", True), ("$500", False), ("40%", True), ("50%", False)])
def test_fail_above_compares_the_fixed_cost_increase(threshold, fails):
    diffs = [_diff(_doc(1000.0), _doc(1460.0))]
    why = cost_comment.exceeds(diffs, cost_comment.parse_threshold(threshold))
    assert (why is not None) == fails


def test_fail_above_fails_on_an_unknown_change():
    assert "unknown" in cost_comment.exceeds([_diff(_doc(None), _doc(1000.0))], ("usd", 1e9))


def test_json_format_is_one_document_with_the_headline_and_the_changed_flag():
    doc = json.loads(cost_comment.render_json([_diff(_doc(1000.0), _doc(1460.0))], "main", ["replace x"]))
    assert doc["headline"] == "Monthly cost will increase by $460 (+46 %)" and doc["changed"] is True
    assert doc["fixed"] == {
        "base_monthly_usd": 1000.0,
        "head_monthly_usd": 1460.0,
        "delta_monthly_usd": 460.0,
        "delta_pct": 46.0,
    }
    assert doc["warnings"] == ["replace x"]


def test_replace_and_roll_warnings_have_a_slot_in_the_comment():
    md = cost_comment.render_markdown(
        [_diff(_doc(1000.0), _doc(1000.0))], "main", ["training-guaranteed-ng is replaced: its nodes roll"]
    )
    assert "> ⚠️ training-guaranteed-ng is replaced: its nodes roll" in md


def test_a_money_change_alone_counts_as_a_change():
    same = _doc(1000.0)
    assert not cost_comment.changed([_diff(same, copy.deepcopy(same))])
    assert cost_comment.changed([_diff(same, _doc(1000.0, fallback=60.0))])


@requires_prices
@pytest.mark.parametrize("width", [80, 200])
def test_table_format_fits_the_terminal_and_never_splits_a_figure(width, fallback_raised):
    # the table test every command's table passes (tests/gpuloan/test_cli.py), on a change: "$80,358 (+$160,717)" cells
    _, diffs = fallback_raised
    out = cost_comment.render_table(diffs, "HEAD~1", width=width)
    gitops = " ".join((REPO / "docs" / "gitops.md").read_text().split())
    quoted = re.search(
        r"Raising `on_demand_max_nodes` 2 → 6 instead leaves the headline unchanged and shows "
        r"`(\(\+\$[\d,]+\))` in the fallback column",
        gitops,
    ).group(1)
    assert quoted in out  # docs/gitops.md's figure for this change
    assert too_wide_at(out, width) == [] and split_figures(out) == []
    if width == 200:  # a wide terminal shows every column
        assert "left out to fit the terminal" not in out


@requires_prices
def test_table_format_fits_80_columns_and_gates(fallback_raised, monkeypatch, capsys):
    repo, _ = fallback_raised
    monkeypatch.chdir(repo)
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["cost-diff", "--base", "HEAD~1", "-s", "prod", "--format", "table", "--fail-above", "1%"]) == 0
    captured = capsys.readouterr()
    assert too_wide_at(captured.out, 80) == [] and split_figures(captured.out) == []
    assert captured.out.startswith("Monthly cost will not change")  # a ceiling change alone passes --fail-above
    assert "previewing prod" in captured.err  # progress goes to stderr


def test_a_base_previewed_before_content_hashing_does_not_show_the_lambda_code_as_changed():
    def fn(code, digest):
        return {
            "urn": "u",
            "type": "aws:lambda/function:Function",
            "name": "f",
            "inputs": {"code": code, "sourceCodeHash": digest},
            "ignore_changes": [],
            "protect": False,
        }

    old = {"resources": [fn("<pulumi.asset.FileArchive object at 0x7f3a2c1d0e50>", "h1")]}
    same = {"resources": [fn({"asset": "FileArchive", "sha256": "ab" * 32}, "h1")]}
    new_code = {"resources": [fn({"asset": "FileArchive", "sha256": "cd" * 32}, "h2")]}
    assert cost_diff.diff_resources(old, same)[2] == []
    assert [keys for _, keys in cost_diff.diff_resources(old, new_code)[2]] == [["sourceCodeHash"]]


@requires_shared_prices
def test_a_relative_price_file_prices_both_sides(fallback_raised, monkeypatch):
    """The Makefile exports GPULOAN_PRICE_FILE=../shared/data/prices; the base side runs in a temporary worktree."""
    from conftest import SHARED_PRICES

    repo, _ = fallback_raised
    link = repo.parent / "prices"  # beside the checkout, as ../shared/data is beside this one (a link, no copy)
    if not link.exists():
        link.symlink_to(SHARED_PRICES, target_is_directory=True)
    monkeypatch.chdir(repo)
    monkeypatch.setenv("GPULOAN_PRICE_FILE", "../prices")
    (diff,) = cost_diff.cost_diff(repo, "HEAD", ["prod"])
    assert diff.base.ok and diff.head.ok, (diff.base.error, diff.head.error)
