"""policy.shards in the Pulumi program (issue 41): one EventBridge Scheduler schedule per shard, each sending
{"shard": name}; without shards the one schedule of every pool, as before; IAM unchanged."""

from __future__ import annotations

import json

from conftest import run_stack, stack_config

from stacks.policy_function.function import SCHEDULE_NAME_MAX, schedule_specs
from config import config

SHARDS = [{"name": "train", "pools": ["training", "research"]}, {"name": "serve", "pools": ["inference"]}]


def _sharded_prod():
    cfg = stack_config("prod")
    cfg["gpuloan:policy"] = {**cfg["gpuloan:policy"], "shards": SHARDS}
    return run_stack("prod", cfg)


def _schedules(rec) -> dict[str, dict]:
    return {r.name: r.inputs for r in rec.of_type("aws:scheduler/schedule:Schedule")}


def test_one_schedule_per_shard_each_naming_its_shard(recorded):
    rec = _sharded_prod()
    schedules = _schedules(rec)
    assert set(schedules) == {"prod-policy-schedule-train", "prod-policy-schedule-serve"}
    for shard in ("train", "serve"):
        sched = schedules[f"prod-policy-schedule-{shard}"]
        assert json.loads(sched["target"]["input"]) == {"shard": shard}
        assert sched["name"] == f"gpuloan-prod-policy-tick-{shard}"
        assert sched["scheduleExpression"] == "rate(1 minute)"
        assert sched["target"]["retryPolicy"]["maximumRetryAttempts"] == 0
    # The same role and permissions as the unsharded stack: the scheduler may invoke this function only, and the
    # function's own policy does not change with shards (one role for every shard's invocation).
    plain = recorded("prod")
    assert rec.named("prod-policy-scheduler-policy").inputs == plain.named("prod-policy-scheduler-policy").inputs
    assert rec.named("prod-policy-policy").inputs == plain.named("prod-policy-policy").inputs


def test_without_shards_the_single_schedule_is_unchanged(recorded):
    schedules = _schedules(recorded("prod"))
    assert set(schedules) == {"prod-policy-schedule"}
    assert schedules["prod-policy-schedule"]["name"] == "gpuloan-prod-policy-tick"
    assert json.loads(schedules["prod-policy-schedule"]["target"]["input"]) == {}


def test_packaged_settings_carry_the_shards():
    from test_policy_function import _packaged_settings

    rec = _sharded_prod()
    settings = _packaged_settings("prod", rec.named("prod-policy-fn").inputs)
    assert [(s.name, s.pools) for s in settings.shards] == [
        ("train", ("training", "research")),
        ("serve", ("inference",)),
    ]
    assert [p.name for p in settings.shard("serve").pools] == ["inference"]


def test_long_schedule_names_stay_within_the_scheduler_limit_and_distinct():
    cfg = stack_config("prod")
    data = {k.split(":", 1)[1]: v for k, v in cfg.items() if k.startswith("gpuloan:")}
    long_a, long_b = "a" * 30 + "x1", "a" * 30 + "x2"
    data["environment"] = "e" * 32
    data["policy"] = {
        **data["policy"],
        "shards": [{"name": long_a, "pools": ["training", "research"]}, {"name": long_b, "pools": ["inference"]}],
    }
    parsed = config.GpuLoanConfig.model_validate(data)
    specs = schedule_specs("x-policy", f"gpuloan-{parsed.environment}-policy", parsed)
    names = [s[1] for s in specs]
    assert all(len(n) <= SCHEDULE_NAME_MAX for n in names) and len(set(names)) == 2
