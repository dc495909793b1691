"""CUDA image compatibility: named valid and invalid image matrices through the real config entry point."""

from __future__ import annotations

import pytest
from conftest import stack_config, resolved_prices

from pricing import checks
from config import compat, config, versions


def _parse(stack: str, images: list[dict], pools: list[dict] | None = None):
    cfg = stack_config(stack)
    cfg["gpuloan:images"] = images
    if pools is not None:
        cfg["gpuloan:pools"] = pools
    return checks.from_stack_yaml({"config": cfg}, stack, prices=resolved_prices())


def _img(cuda: str, python: str = "3.11", torch: str | None = None, tag: str | None = None, **extra) -> dict:
    img = {"name": "train", "cuda_version": cuda, "python_version": python, **extra}
    if torch:
        img["pytorch"] = {"version": torch, "cuda_tag": tag}
    return img


def _pool(*types: str) -> list[dict]:
    return [
        {
            "name": "gpu",
            "team": "ml",
            "tier": "experiment",
            "elastic": {"instance_types": list(types), "capacity": "spot", "max_nodes": 2},
        }
    ]


# (name, stack, image, pools (None: the stack's own), expected path, fragments the message must contain)
INVALID = [
    (
        "the original notes: CUDA 12.0 base with cu118 wheels",
        "dev",
        _img("12.0.0", torch="2.5.1", tag="cu118"),
        None,
        "images[0].pytorch.cuda_tag",
        ["cu118", "CUDA 11.8", "12.0.0", "set cuda_version to 11.8.0", "cuda_version 12.4.1 with cuda_tag cu124"],
    ),
    (
        "newer base than the wheel",
        "prod",
        _img("12.6.3", torch="2.5.1", tag="cu124"),
        None,
        "images[0].pytorch.cuda_tag",
        ["cu124", "12.6.3", "set cuda_version to 12.4.1"],
    ),
    (
        "wheel tag the release never shipped",
        "dev",
        _img("12.6.3", torch="2.5.1", tag="cu126"),
        None,
        "images[0].pytorch.cuda_tag",
        ["no cu126 wheels", "cu118, cu121, cu124"],
    ),
    (
        "python too new for the pin",
        "dev",
        _img("12.4.1", python="3.13", torch="2.5.1", tag="cu124"),
        None,
        "images[0].python_version",
        ["3.9 to 3.12"],
    ),
    (
        "python gpuloan does not pin",
        "dev",
        _img("12.4.1", python="3.8"),
        None,
        "images[0].python_version",
        ["3.10, 3.11, 3.12, 3.13"],
    ),
    (
        "unreleased torch patch",
        "dev",
        _img("12.4.1", torch="2.5.7", tag="cu124"),
        None,
        "images[0].pytorch.version",
        ["never released", "2.5.0, 2.5.1"],
    ),
    (
        "torch minor not in the table",
        "dev",
        _img("12.8.1", torch="2.15.0", tag="cu128"),
        None,
        "images[0].pytorch.version",
        ["not in gpuloan's compatibility table", "TORCH_RELEASES"],
    ),
    (
        "CUDA not in the table",
        "dev",
        _img("10.2.0"),
        None,
        "images[0].cuda_version",
        ["not in gpuloan's compatibility table", "12.4.1"],
    ),
    (
        "hopper needs CUDA 11.8",
        "prod",
        _img("11.7.1", torch="2.0.1", tag="cu117"),
        None,
        "images[0].cuda_version",
        ["H100 (hopper)", "pools[0] (training)", "p5.48xlarge", ">= 11.8", "11.8.0"],
    ),
    (
        "ada needs CUDA 11.8",
        "dev",
        _img("11.7.1", torch="2.0.1", tag="cu117"),
        _pool("g6.xlarge"),
        "images[0].cuda_version",
        ["L4 (ada)", ">= 11.8"],
    ),
    (
        "blackwell needs CUDA 12.8",
        "dev",
        _img("12.6.3", torch="2.6.0", tag="cu126"),
        _pool("p6-b200.48xlarge"),
        "images[0].cuda_version",
        ["B200 (blackwell)", ">= 12.8", "12.8.1"],
    ),
    (
        "blackwell needs cu128+ wheels even on a 12.8 base",
        "dev",
        _img("12.8.1", torch="2.6.0", tag="cu126"),
        _pool("p6-b200.48xlarge"),
        "images[0].pytorch.cuda_tag",
        ["no kernels", "blackwell", "pick another PyTorch"],
    ),
    (
        "kepler was dropped in CUDA 12",
        "dev",
        _img("12.4.1"),
        _pool("p2.xlarge"),
        "images[0].cuda_version",
        ["K80 (kepler)", "CUDA 12.0 dropped kepler"],
    ),
    (
        "volta has no kernels in cu128 wheels",
        "dev",
        _img("12.8.1", torch="2.7.1", tag="cu128"),
        _pool("p3.2xlarge"),
        "images[0].pytorch.cuda_tag",
        ["V100 (volta)", "use cuda_tag cu126"],
    ),
]


@pytest.mark.parametrize("name,stack,image,pools,path,fragments", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_image_is_rejected_with_path_and_fix(name, stack, image, pools, path, fragments):
    with pytest.raises(config.ConfigError) as err:
        _parse(stack, [image], pools)
    matching = [msg for p, msg in err.value.problems if p == path]
    assert matching, f"no problem at {path}: {err.value.problems}"
    assert any(all(f in msg for f in fragments) for msg in matching), matching


VALID = [
    ("shipped dev image", "dev", _img("12.4.1", torch="2.5.1", tag="cu124"), None),
    ("cu118 on its own base", "dev", _img("11.8.0", torch="2.5.1", tag="cu118"), None),
    ("python only, no framework", "dev", _img("12.6.3", python="3.13"), None),
    ("packages only", "dev", _img("12.4.1", packages=["numpy==2.1.3"]), None),
    (
        "blackwell with cu128",
        "dev",
        _img("12.8.1", python="3.12", torch="2.7.1", tag="cu128"),
        _pool("p6-b200.48xlarge"),
    ),
    ("CUDA 13 on the R580 driver", "prod", _img("13.0.1", python="3.12", torch="2.9.1", tag="cu130"), None),
    ("cu118 still covers kepler", "dev", _img("11.8.0", torch="2.5.1", tag="cu118"), _pool("p2.xlarge")),
    ("volta on cu126", "dev", _img("12.6.3", torch="2.7.1", tag="cu126"), _pool("p3.2xlarge")),
]


@pytest.mark.parametrize("name,stack,image,pools", VALID, ids=[c[0] for c in VALID])
def test_valid_image_matrix_passes(name, stack, image, pools):
    cfg = _parse(stack, [image], pools)
    assert cfg.images[0].cuda_version == image["cuda_version"]


def test_every_image_problem_is_reported_at_once():
    with pytest.raises(config.ConfigError) as err:
        _parse(
            "dev",
            [
                _img("12.4.1", python="3.13", torch="2.5.1", tag="cu126"),
                _img("12.0.0", torch="2.5.1", tag="cu118") | {"name": "second"},
            ],
        )
    paths = {p for p, _ in err.value.problems}
    assert {"images[0].pytorch.cuda_tag", "images[0].python_version", "images[1].pytorch.cuda_tag"} <= paths


# --- the driver rule, against drivers other than the shipped constant ----------------------------------------
@pytest.mark.parametrize(
    "cuda,driver,ok,native",
    [
        ((12, 4), (550, 54, 14), True, True),  # the toolkit's own driver
        ((12, 4), (535, 104, 5), True, False),  # minor-version compatibility inside CUDA 12
        ((12, 9), (525, 60, 13), True, False),  # the CUDA 12 family minimum
        ((12, 0), (520, 61, 5), False, False),  # below the family minimum
        ((13, 0), (575, 51, 3), False, False),  # CUDA 13 needs the R580 branch
        ((13, 0), (580, 65, 6), True, True),
        ((11, 8), (580, 159, 3), True, True),  # newer drivers run older toolkits
    ],
)
def test_driver_supports(cuda, driver, ok, native):
    verdict = compat.driver_supports(cuda, driver)
    assert (verdict.ok, verdict.native) == (ok, native)


def test_old_node_driver_rejects_cuda13_with_the_driver_named():
    cfg = _parse("dev", [_img("12.4.1")])
    bumped = cfg.model_copy(update={"images": [config.Image(name="xx", cuda_version="13.0.1", python_version="3.12")]})
    problems = compat.image_problems(bumped, driver=(570, 172, 8))
    assert [p for p, _ in problems] == ["images[0].cuda_version"]
    assert "needs NVIDIA driver >= 580" in problems[0][1] and "570.172.08" in problems[0][1]
    assert "use cuda_version 12.9.1 or older" in problems[0][1]
    assert compat.image_problems(bumped) == []  # the shipped R580 driver runs it


# --- the tables stay consistent with each other and with the catalog --------------------------------------
def test_every_wheel_tag_has_a_driver_row():
    for release in compat.TORCH_RELEASES.values():
        for tag in release.cuda_tags:
            assert compat.cuda_of_tag(tag) in compat.TOOLKIT_DRIVER, tag


def test_every_pinned_cuda_image_has_a_driver_row_and_runs_on_the_node_driver():
    driver = compat.parse_version(versions.EKS_AL2023_NVIDIA_DRIVER_VERSION)
    for mm, patch in versions.CUDA_IMAGE_PATCH.items():
        assert compat.parse_version(patch)[:2] == mm
        assert compat.driver_supports(mm, driver).ok, patch
        assert mm[0] in versions.CUDA_IMAGE_UBUNTU


def test_every_nvidia_architecture_in_the_catalog_has_a_cuda_range():
    arches = {t.architecture for t in resolved_prices().instance_types().values() if t.is_nvidia}
    assert arches and arches <= set(compat.ARCH_CUDA)


def test_cuda_tag_round_trip():
    for tag in ("cu117", "cu118", "cu121", "cu124", "cu128", "cu130"):
        assert compat.tag_of_cuda(compat.cuda_of_tag(tag)) == tag
    assert compat.cuda_of_tag("cu118") == (11, 8) and compat.cuda_of_tag("cu130") == (13, 0)
