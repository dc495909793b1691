"""Config hardening (issue 14): each named invalid stack file is refused by `gpuloan validate` with exit 2, the
offending path in the message and no traceback; the YAML-level cases are refused while loading, before any config
is built; the Pulumi program itself refuses a region mismatch."""

from __future__ import annotations

import argparse

import pytest
import yaml

from conftest import run_stack, stack_config, resolved_prices
from gpuloan.commands import validate as cmd_validate
from gpuloan import stackfile
from offline import document_limits
from offline import runner as offline
from pricing import checks
from config import config

GOOD_DEV = (stackfile.Path(__file__).resolve().parents[2] / "Pulumi.dev.yaml").read_text()


def _with(stack: str, edit) -> str:
    cfg = stack_config(stack)
    edit(cfg)
    return yaml.safe_dump({"config": cfg}, sort_keys=False)


def _pool(cfg, **changes):
    cfg["gpuloan:pools"][0].update(changes)


def _tags(n: int) -> dict[str, str]:
    return {f"k{i}": "v" for i in range(n)}


# name -> (stack file text, expected path in the message, expected fragment)
CASES = {
    "namespace typo": (
        GOOD_DEV + "  gpulaon:policy:\n    dry_run: true\n",
        "gpulaon:policy",
        "did you mean 'gpuloan:policy'",
    ),
    "unknown key suggests": (
        _with("dev", lambda c: c["gpuloan:policy"].update(dry_rn=True)),
        "policy.dry_rn",
        "did you mean 'dry_run'",
    ),
    "unknown nested key suggests": (
        _with("dev", lambda c: c["gpuloan:cluster"].update(vpc_cdr="10.0.0.0/16")),
        "cluster.vpc_cdr",
        "did you mean 'vpc_cidr'",
    ),
    "duplicate key": (
        GOOD_DEV.replace("    dry_run: false\n", "    dry_run: true\n    dry_run: false\n"),
        "config.gpuloan:policy.dry_run",
        "duplicate key",
    ),
    "duplicate top-level config key": (
        GOOD_DEV + "  gpuloan:region: us-west-2\n",
        "config.gpuloan:region",
        "duplicate key",
    ),
    "endpoint open through a union": (
        _with("dev", lambda c: c["gpuloan:cluster"].update(public_endpoint_cidrs=["0.0.0.0/1", "128.0.0.0/1"])),
        "cluster.public_endpoint_cidrs",
        "cover the whole internet",
    ),
    "endpoint open through four quarters": (
        _with(
            "dev",
            lambda c: c["gpuloan:cluster"].update(
                public_endpoint_cidrs=["0.0.0.0/2", "64.0.0.0/2", "128.0.0.0/2", "192.0.0.0/2"]
            ),
        ),
        "cluster.public_endpoint_cidrs",
        "cover the whole internet",
    ),
    "team is kube-system": (_with("dev", lambda c: _pool(c, team="kube-system")), "pools[0].team", "namespace"),
    "team is kube-anything": (_with("dev", lambda c: _pool(c, team="kube-extra")), "pools[0].team", "kube-*"),
    "team is default": (_with("dev", lambda c: _pool(c, team="default")), "pools[0].team", "namespace"),
    "team is Kueue's namespace": (_with("dev", lambda c: _pool(c, team="kueue-system")), "pools[0].team", "namespace"),
    "team is the GPU operator's namespace": (
        _with("dev", lambda c: _pool(c, team="gpu-operator")),
        "pools[0].team",
        "namespace",
    ),
    "team is the metrics add-on's namespace": (
        _with("dev", lambda c: _pool(c, team="amazon-cloudwatch")),
        "pools[0].team",
        "namespace",
    ),
    "aws: tag key": (
        _with("dev", lambda c: c["gpuloan:default_tags"].update({"AWS:owner": "x"})),
        "default_tags",
        "reserved aws: prefix",
    ),
    "eks: tag key": (
        _with("dev", lambda c: c["gpuloan:default_tags"].update({"eks:cluster-name": "x"})),
        "default_tags",
        "set by EKS itself",
    ),
    "too many tags": (
        _with("dev", lambda c: c.update({"gpuloan:default_tags": _tags(45)})),
        "default_tags",
        "AWS allows 50 per resource",
    ),
    "non-string key": (
        GOOD_DEV.replace("    cost-center: ml-platform\n", "    cost-center: ml-platform\n    7: x\n"),
        "config.gpuloan:default_tags.7",
        "not a string",
    ),
    "non-string value for a string map": (
        _with("dev", lambda c: c["gpuloan:default_tags"].update({"team": [1]})),
        "default_tags.team",
        "valid string",
    ),
    "deep nesting": (GOOD_DEV + "  gpuloan:extra: " + "[" * 200 + "]" * 200 + "\n", "", "nested too deeply"),
    "billion laughs": (
        GOOD_DEV
        + "".join(
            f"  gpuloan:l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10 if i else ['"lol"'] * 10) + "]\n"
            for i in range(9)
        ),
        "",
        "expands to more than 100,000 values",
    ),
    "recursive alias": (GOOD_DEV + "  gpuloan:loop: &loop [1, *loop]\n", "", "contains itself"),
}


def _validate(tmp_path, capsys, text: str | bytes) -> tuple[int, str]:
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    code = cmd_validate.run(argparse.Namespace(stack_option=str(path), stack_positional=None))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("name", CASES)
def test_invalid_stack_file_is_refused_cleanly(tmp_path, capsys, name):
    text, path, fragment = CASES[name]
    code, err = _validate(tmp_path, capsys, text)
    assert code == cmd_validate.EXIT_INVALID, err
    assert "Traceback" not in err
    assert fragment in err, err
    assert path in err, err


def test_invalid_utf8_is_refused_cleanly(tmp_path, capsys):
    code, err = _validate(tmp_path, capsys, GOOD_DEV.encode().replace(b"ml-platform", b"ml-\xffplatform", 1))
    assert code == cmd_validate.EXIT_INVALID and "Traceback" not in err
    assert "not valid UTF-8 (byte 0xff" in err


def test_the_shipped_stacks_load_strictly():
    for stack in ("dev", "prod"):
        doc = stackfile.load(stackfile.Path(__file__).resolve().parents[2] / f"Pulumi.{stack}.yaml")
        assert doc == {"config": stack_config(stack)}


def test_billion_laughs_is_refused_before_it_is_expanded(monkeypatch):
    # The refusal comes from the node graph; constructing the document (which would share, then json.dumps would
    # expand) is never reached.
    called = []
    monkeypatch.setattr(yaml.SafeLoader, "construct_document", lambda self, node: called.append(1))
    with pytest.raises(stackfile.StackFileError, match="expands to more than"):
        stackfile.loads(CASES["billion laughs"][0])
    assert called == []


def test_a_namespace_far_from_gpuloan_is_left_to_its_owner():
    # kubernetes:, aws:, pulumi: and other providers' keys are theirs, not typos.
    assert config.namespace_problems(["aws:region", "kubernetes:context", "pulumi:tags", "docker-build:x"]) == []
    assert [p for p, _ in config.namespace_problems(["gpuloa:budget", "gpu-loan:pools"])] == [
        "gpuloa:budget",
        "gpu-loan:pools",
    ]


def test_the_program_refuses_a_region_mismatch_before_any_resource(monkeypatch):
    cfg = stack_config("dev")
    cfg["aws:region"] = "us-west-2"
    registered = []
    original = offline.OfflineMocks.new_resource
    monkeypatch.setattr(
        offline.OfflineMocks, "new_resource", lambda self, args: registered.append(args.typ) or original(self, args)
    )
    with pytest.raises(Exception) as err:
        run_stack("dev", cfg)
    assert "aws:region is us-west-2" in str(err.value)
    assert registered == []


def test_the_program_refuses_a_namespace_typo(monkeypatch):
    cfg = stack_config("dev")
    cfg["gpulaon:policy"] = {"dry_run": True}
    with pytest.raises(Exception) as err:
        run_stack("dev", cfg)
    assert "did you mean 'gpuloan:policy'" in str(err.value)


# --- issue 24: inputs that used to pass silently ---------------------------------------------------------------


def _region(cfg, region):
    cfg.update({"aws:region": region, "gpuloan:region": region})


CASES_24 = {
    "nonexistent region": (_with("dev", lambda c: _region(c, "us-east-9")), "region", "is not an AWS region"),
    "environment reads as a boolean": (
        _with("dev", lambda c: c.update({"gpuloan:environment": "true"})),
        "environment",
        "YAML boolean",
    ),
    "duplicate alert email": (
        _with(
            "dev",
            lambda c: c["gpuloan:budget"].update(alert_emails=["ml-platform@example.com", "ML-Platform@example.com"]),
        ),
        "budget.alert_emails[1]",
        "twice",
    ),
    "duplicate pool alert email": (
        _with(
            "prod", lambda c: c["gpuloan:pools"][0]["budget"].update(alert_emails=["a@example.com", "a@example.com"])
        ),
        "pools[0].budget.alert_emails[1]",
        "twice",
    ),
    "private CIDR for the public endpoint": (
        _with("dev", lambda c: c["gpuloan:cluster"].update(public_endpoint_cidrs=["10.1.0.0/16"])),
        "cluster.public_endpoint_cidrs[0]",
        "private or reserved",
    ),
    "GPU type for system nodes": (
        _with("dev", lambda c: c["gpuloan:cluster"]["system_nodes"].update(instance_type="g6.xlarge")),
        "cluster.system_nodes.instance_type",
        "is a GPU type",
    ),
    "unknown type for system nodes": (
        _with("dev", lambda c: c["gpuloan:cluster"]["system_nodes"].update(instance_type="m7i.huge")),
        "cluster.system_nodes.instance_type",
        "not an EC2 instance type",
    ),
    "MIG mixed with Kueue": (
        _with("prod", lambda c: c["gpuloan:gpu_operator"].update(mig_strategy="mixed")),
        "gpu_operator.mig_strategy",
        "never admitted",
    ),
    "NUL byte": (GOOD_DEV.replace("ml-platform", "ml-\x00platform", 1), "Pulumi.dev.yaml", "is not allowed in YAML"),
}


@pytest.mark.parametrize("name", CASES_24)
def test_issue_24_inputs_are_refused_cleanly(tmp_path, capsys, name):
    text, path, fragment = CASES_24[name]
    code, err = _validate(tmp_path, capsys, text)
    assert code == cmd_validate.EXIT_INVALID, err
    assert "Traceback" not in err
    assert fragment in err, err
    assert path in err, err


def test_regions_of_every_partition_are_known():
    assert {"us-east-1", "eu-central-1", "us-gov-west-1", "cn-north-1"} <= config.known_regions()
    assert "us-east-9" not in config.known_regions()


def test_the_program_run_in_process_refuses_a_billion_laughs_config(monkeypatch):
    """Issue 42 item 3: offline.run_program (a caller in process, without the CLI's reading of the stack file)
    took a config whose YAML aliases are shared objects and json.dumps expanded it (4 GB for the CLI case above).
    It is refused with the stack file's own limits before anything expands it or a resource is declared."""
    laughs = "".join(
        f"  gpuloan:l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10 if i else ['"lol"'] * 10) + "]\n" for i in range(7)
    )  # 10 million values: seconds to expand, far past the limit
    cfg = yaml.safe_load(GOOD_DEV + laughs)["config"]
    expanded = []
    monkeypatch.setattr(offline, "config_to_pulumi", lambda c: expanded.append(1) or {})
    with pytest.raises(document_limits.DocumentTooLarge, match="expands to more than 100,000 values"):
        offline.run_program("dev", cfg)
    assert expanded == []


def test_the_program_run_in_process_refuses_a_config_that_contains_itself():
    cfg = stack_config("dev")
    loop: list = [1]
    loop.append(loop)
    cfg["gpuloan:loop"] = loop
    with pytest.raises(document_limits.DocumentTooLarge, match="contains itself"):
        offline.run_program("dev", cfg)


@pytest.mark.parametrize(
    "key, value, bad",
    [
        ("team\x00", "x", "U+0000"),
        ("team", "ml\x00", "U+0000"),
        ("team", "ml\u200bplatform", "U+200B"),
        ("cost\u200bcenter", "x", "U+200B"),
        ("team", "ml\tplatform", "U+0009"),
        ("team", "a,b", "U+002C"),
    ],
)
def test_a_tag_with_a_character_aws_refuses_is_refused_before_any_resource(key, value, bad):
    """Issue 42 item 3: AWS tag keys and values allow Unicode letters, digits, spaces and _ . : / = + - @ only;
    a NUL or a zero-width space used to pass validation and fail the tagging call mid-deployment."""
    cfg = stack_config("dev")
    cfg["gpuloan:default_tags"] = {**cfg["gpuloan:default_tags"], key: value}
    with pytest.raises(config.ConfigError) as raised:
        checks.from_stack_yaml({"config": cfg}, "Pulumi.dev.yaml", prices=resolved_prices())
    assert "default_tags" in str(raised.value) and bad in str(raised.value)


def test_tags_in_any_script_with_spaces_and_the_allowed_symbols_pass():
    cfg = stack_config("dev")
    cfg["gpuloan:default_tags"] = {
        "Kostenstelle": "Forschung & Entwicklung".replace("&", "+"),
        "チーム": "機械学習",
        "path/to:key=v+1-@x_y.z": "",
        "owner": "a b\u00a0c",
    }
    checks.from_stack_yaml({"config": cfg}, "Pulumi.dev.yaml", prices=resolved_prices())
