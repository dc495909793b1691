"""policy.shards (issue 41): every pool in exactly one shard, refused by validate with the pool and field named."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml
from conftest import REPO, stack_config

from config import config


def _problems(shards) -> list[tuple[str, str]]:
    cfg = stack_config("prod")
    cfg["gpuloan:policy"] = {**cfg.get("gpuloan:policy", {}), "shards": shards}
    try:
        config.from_stack_yaml({"config": cfg}, "Pulumi.prod.yaml")
    except config.ConfigError as err:
        return err.problems
    return []


def _normalize(path: str) -> str:
    return re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path)  # pydantic's pools.0.x as pools[0].x


GOOD = [{"name": "train", "pools": ["training", "research"]}, {"name": "serve", "pools": ["inference"]}]


def test_shards_covering_every_pool_once_are_accepted():
    assert _problems(GOOD) == []
    assert _problems([]) == []  # absent or empty: one invocation decides every pool, as before


@pytest.mark.parametrize(
    "shards,path,fragment",
    [
        (
            [{"name": "train", "pools": ["training"]}, {"name": "serve", "pools": ["inference"]}],
            "pools[2].name",
            "pool 'research' is in no shard",
        ),
        (
            [
                {"name": "train", "pools": ["training", "research"]},
                {"name": "serve", "pools": ["inference", "training"]},
            ],
            "policy.shards[1].pools[1]",
            "pool 'training' is in two shards, 'train' and 'serve'",
        ),
        (
            [{"name": "train", "pools": ["training", "research", "inference"]}, {"name": "serve", "pools": []}],
            "policy.shards[1].pools",
            "at least 1",
        ),
        (
            [{"name": "aa", "pools": ["training", "research"]}, {"name": "aa", "pools": ["inference"]}],
            "policy.shards[1].name",
            "shard name 'aa' is used twice",
        ),
        (
            [{"name": "aa", "pools": ["training", "research", "inference", "nosuch"]}],
            "policy.shards[0].pools[3]",
            "pool 'nosuch' is not a pool of this environment",
        ),
    ],
    ids=["pool in no shard", "pool in two shards", "empty shard", "duplicate shard name", "unknown pool"],
)
def test_bad_shards_are_refused_naming_pool_and_field(shards, path, fragment):
    problems = _problems(shards)
    assert any(_normalize(p) == path and fragment in m for p, m in problems), problems


def test_validate_command_names_the_pool_in_no_shard(tmp_path):
    cfg = stack_config("prod")
    cfg["gpuloan:policy"] = {**cfg["gpuloan:policy"], "shards": GOOD[:1]}
    stack = tmp_path / "Pulumi.prod.yaml"
    stack.write_text(yaml.safe_dump({"config": cfg}, sort_keys=False))
    result = subprocess.run(
        [sys.executable, "-m", "gpuloan", "validate", str(stack)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pools[1].name" in result.stderr and "pool 'inference' is in no shard" in result.stderr
