"""CUDA image compatibility: driver x CUDA x PyTorch wheel x Python x GPU architecture, checked before deploy.

The original design notes built a CUDA 12.0 image and installed cu118 PyTorch wheels into it; nothing caught
it until a job crashed on a node. Here every image of the config is checked against these tables when the
config is validated (`config.config.parse` runs `images_rule` below), so a mismatched image is a
config error with a path and a fix, never a broken pod.

Each table names its source. Update a table by adding a row with the same kind of source; the tests in
tests/config/test_compat.py pin the decisions the tables lead to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from config import versions
from config.instance_types import InstanceType
from config.version_numbers import Version, fmt, parse_version

if TYPE_CHECKING:  # annotations only: config imports this module to run its rule
    from config import config


def fmt_driver(version: Version) -> str:
    """NVIDIA writes driver versions with two-digit parts after the branch: 580.65.06, 570.26."""
    return ".".join([str(version[0]), *(f"{p:02d}" for p in version[1:])])


def cuda_of_tag(tag: str) -> Version:
    """'cu124' -> (12, 4); 'cu118' -> (11, 8); 'cu130' -> (13, 0). The last digit is the minor version."""
    digits = tag.removeprefix("cu")
    return (int(digits[:-1]), int(digits[-1]))


def tag_of_cuda(cuda: Version) -> str:
    return f"cu{cuda[0]}{cuda[1]}"


# --- 1. CUDA toolkit -> NVIDIA driver (Linux x86_64) ---------------------------------------------------------
# Source: NVIDIA CUDA Toolkit Release Notes, "CUDA Toolkit and Corresponding Driver Versions" (Table 3,
# https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/) — the driver each toolkit's GA release shipped with.
TOOLKIT_DRIVER: dict[Version, Version] = {
    (11, 7): (515, 43, 4),
    (11, 8): (520, 61, 5),
    (12, 0): (525, 60, 13),
    (12, 1): (530, 30, 2),
    (12, 2): (535, 54, 3),
    (12, 3): (545, 23, 6),
    (12, 4): (550, 54, 14),
    (12, 5): (555, 42, 2),
    (12, 6): (560, 28, 3),
    (12, 8): (570, 26),
    (12, 9): (575, 51, 3),
    (13, 0): (580, 65, 6),
}
# Source: NVIDIA "CUDA Compatibility", Minor Version Compatibility, Table 1
# (https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html): an application built
# with any toolkit of a major family runs (without features that need a newer driver, e.g. PTX JIT of newer
# PTX) on a driver at or above the family's minimum.
MINOR_COMPAT_MIN_DRIVER: dict[int, Version] = {
    11: (450, 80, 2),
    12: (525, 60, 13),
    13: (580,),
}


@dataclass(frozen=True)
class DriverVerdict:
    ok: bool
    native: bool  # the driver is at least the toolkit's own driver: every feature works
    needed: Version  # the minimum driver that makes `ok` true


def driver_supports(cuda: Version, driver: Version) -> DriverVerdict:
    """Can a node with `driver` run an image built on CUDA `cuda` (major, minor)?"""
    mm = cuda[:2]
    native_min = TOOLKIT_DRIVER.get(mm)
    family_min = MINOR_COMPAT_MIN_DRIVER.get(mm[0])
    if native_min is not None and driver >= native_min:
        return DriverVerdict(True, True, native_min)
    if family_min is not None and driver >= family_min:
        return DriverVerdict(True, False, family_min)
    return DriverVerdict(False, False, family_min or native_min or (10**6,))


# --- 2. GPU architecture -> CUDA range ------------------------------------------------------------------------
@dataclass(frozen=True)
class ArchSupport:
    compute_capabilities: str
    min_cuda: Version
    removed_in: Version | None  # first CUDA major.minor that can no longer build for it
    note: str = ""


# Source: NVIDIA CUDA GPU compute capability list (https://developer.nvidia.com/cuda-gpus) and the CUDA Toolkit
# release notes: sm_80 since 11.0, sm_86 since 11.1, sm_89/sm_90 since 11.8, sm_100/sm_120 since 12.8, sm_103
# since 12.9; Kepler (sm_35/37) removed in 12.0; Maxwell, Pascal and Volta offline compilation removed in 13.0.
ARCH_CUDA: dict[str, ArchSupport] = {
    "kepler": ArchSupport("3.7 (K80)", (5, 0), (12, 0)),
    "maxwell": ArchSupport("5.2 (M60)", (6, 5), (13, 0)),
    "volta": ArchSupport("7.0 (V100)", (9, 0), (13, 0)),
    "turing": ArchSupport("7.5 (T4)", (10, 0), None),
    "ampere": ArchSupport("8.0 (A100), 8.6 (A10G)", (11, 1), None, "sm_86 (A10G) needs 11.1; sm_80 alone 11.0"),
    "ada": ArchSupport("8.9 (L4, L40S)", (11, 8), None),
    "hopper": ArchSupport("9.0 (H100, H200)", (11, 8), None),
    "blackwell": ArchSupport("10.0 (B200), 10.3 (B300), 12.0 (RTX PRO 6000)", (12, 8), None),
}
# Per-model exceptions inside an architecture (same sources).
MODEL_MIN_CUDA: dict[str, Version] = {"B300": (12, 9)}


def cuda_range_for(gpu_model: str, architecture: str) -> tuple[Version, Version | None] | None:
    support = ARCH_CUDA.get(architecture)
    if support is None:
        return None
    return MODEL_MIN_CUDA.get(gpu_model, support.min_cuda), support.removed_in


# --- 3. PyTorch release -> CUDA wheel tags and Python versions -------------------------------------------------
@dataclass(frozen=True)
class TorchRelease:
    python_min: Version
    python_max: Version
    cuda_tags: tuple[str, ...]
    patches: tuple[int, ...]  # released patch versions of this minor


# Source: PyTorch RELEASE.md "Release Compatibility Matrix"
# (https://github.com/pytorch/pytorch/blob/main/RELEASE.md#release-compatibility-matrix), stable Python range
# only (experimental versions are not offered); released patch versions from PyPI's torch release history.
TORCH_RELEASES: dict[Version, TorchRelease] = {
    (2, 0): TorchRelease((3, 8), (3, 11), ("cu117", "cu118"), (0, 1)),
    (2, 1): TorchRelease((3, 8), (3, 11), ("cu118", "cu121"), (0, 1, 2)),
    (2, 2): TorchRelease((3, 8), (3, 11), ("cu118", "cu121"), (0, 1, 2)),
    (2, 3): TorchRelease((3, 8), (3, 11), ("cu118", "cu121"), (0, 1)),
    (2, 4): TorchRelease((3, 8), (3, 12), ("cu118", "cu121", "cu124"), (0, 1)),
    (2, 5): TorchRelease((3, 9), (3, 12), ("cu118", "cu121", "cu124"), (0, 1)),
    (2, 6): TorchRelease((3, 9), (3, 13), ("cu118", "cu124", "cu126"), (0,)),
    (2, 7): TorchRelease((3, 9), (3, 13), ("cu118", "cu126", "cu128"), (0, 1)),
    (2, 8): TorchRelease((3, 9), (3, 13), ("cu126", "cu128", "cu129"), (0,)),
    (2, 9): TorchRelease((3, 10), (3, 14), ("cu126", "cu128", "cu130"), (0, 1)),
}


# GPU architectures the PyTorch CUDA wheels carry kernels for, by wheel CUDA version.
# Source: `torch.cuda.get_arch_list()` of the official builds, tabulated in moi90/pytorch_compute_capabilities
# (table.md): cu118 builds include sm_37..sm_90; cu12.1-12.6 builds sm_50..sm_90 (no sm_37, no sm_100);
# cu12.8+ builds sm_75..sm_120 (Maxwell/Pascal/Volta dropped, Blackwell added).
def torch_wheel_architectures(cuda: Version) -> frozenset[str]:
    if cuda < (12, 0):
        return frozenset({"kepler", "maxwell", "volta", "turing", "ampere", "ada", "hopper"})
    if cuda < (12, 8):
        return frozenset({"maxwell", "volta", "turing", "ampere", "ada", "hopper"})
    return frozenset({"turing", "ampere", "ada", "hopper", "blackwell"})


# --- 4. Python versions gpuloan can put into an image --------------------------------------------------------
def image_python_versions() -> list[str]:
    return sorted(versions.IMAGE_PYTHON_PATCH, key=parse_version)


# --- the rule ------------------------------------------------------------------------------------------------
def _pool_gpus(cfg: config.GpuLoanConfig) -> list[tuple[InstanceType, str]]:
    """One entry per GPU model any pool may run: (an instance type of it, "H100 in pools[0] (training): p5.48xlarge")."""
    by_model: dict[str, tuple[InstanceType, dict[str, list[str]]]] = {}
    for i, pool in enumerate(cfg.pools):
        names = ([pool.guaranteed.instance_type] if pool.guaranteed else []) + (
            list(pool.elastic.instance_types) if pool.elastic else []
        )
        for name in dict.fromkeys(names):
            itype = cfg.instance_type(name)
            if itype is None:
                continue
            _, pools = by_model.setdefault(itype.gpu_model, (itype, {}))
            pools.setdefault(f"pools[{i}] ({pool.name})", []).append(name)
    out = []
    for model, (itype, pools) in by_model.items():
        where = "; ".join(f"{p}: {', '.join(types)}" for p, types in pools.items())
        out.append((itype, f"{model} ({itype.architecture}) in {where}"))
    return out


def _cuda_choices_for(release: TorchRelease, driver: Version) -> list[str]:
    """'12.4.1 (cu124)'-style suggestions: wheel tags of a release whose CUDA the node driver runs."""
    out = []
    for tag in release.cuda_tags:
        cuda = cuda_of_tag(tag)
        if driver_supports(cuda, driver).ok and cuda in versions.CUDA_IMAGE_PATCH:
            out.append(f"cuda_version {versions.CUDA_IMAGE_PATCH[cuda]} with cuda_tag {tag}")
    return out


def image_problems(cfg: config.GpuLoanConfig, driver: Version | None = None) -> list[tuple[str, str]]:
    """Every compatibility problem of cfg.images against the node driver and the pools' GPUs."""
    driver = driver or parse_version(versions.EKS_AL2023_NVIDIA_DRIVER_VERSION)
    driver_text = f"{fmt_driver(driver)} ({versions.EKS_AL2023_NVIDIA_DRIVER_SOURCE_NAME})"
    gpus = _pool_gpus(cfg)
    problems: list[tuple[str, str]] = []
    for j, img in enumerate(cfg.images):
        at = f"images[{j}]"
        cuda_full = parse_version(img.cuda_version)
        cuda = cuda_full[:2]

        if img.python_version not in versions.IMAGE_PYTHON_PATCH:
            problems.append(
                (
                    f"{at}.python_version",
                    f"gpuloan pins Python {', '.join(image_python_versions())} for "
                    f"images (config/versions.py IMAGE_PYTHON_PATCH); {img.python_version} is not one of them",
                )
            )

        if cuda not in TOOLKIT_DRIVER:
            known = ", ".join(versions.CUDA_IMAGE_PATCH[v] for v in sorted(versions.CUDA_IMAGE_PATCH))
            problems.append(
                (
                    f"{at}.cuda_version",
                    f"CUDA {img.cuda_version} is not in gpuloan's compatibility table; use one of {known}",
                )
            )
        else:
            verdict = driver_supports(cuda, driver)
            if not verdict.ok:
                runnable = [
                    versions.CUDA_IMAGE_PATCH[v]
                    for v in sorted(versions.CUDA_IMAGE_PATCH)
                    if driver_supports(v, driver).ok
                ]
                problems.append(
                    (
                        f"{at}.cuda_version",
                        f"CUDA {img.cuda_version} needs NVIDIA driver >= "
                        f"{fmt_driver(verdict.needed)}, but GPU nodes run driver {driver_text}; "
                        f"use cuda_version {runnable[-1] if runnable else '(none)'} or older",
                    )
                )

        for itype, where in gpus:
            rng = cuda_range_for(itype.gpu_model, itype.architecture)
            if rng is None:
                continue
            lo, removed = rng
            if cuda < lo:
                problems.append(
                    (
                        f"{at}.cuda_version",
                        f"{where} needs CUDA >= {fmt(lo)}, the image has CUDA "
                        f"{img.cuda_version}: raise cuda_version to "
                        f"{versions.CUDA_IMAGE_PATCH.get(max(lo, (11, 8)), fmt(lo))} or newer",
                    )
                )
            elif removed is not None and cuda >= removed:
                problems.append(
                    (
                        f"{at}.cuda_version",
                        f"{where}: CUDA {fmt(removed)} dropped {itype.architecture} "
                        f"GPUs, the image has CUDA {img.cuda_version}: use a CUDA < {fmt(removed)} image "
                        "or move the pool to newer GPUs",
                    )
                )

        if img.pytorch is not None:
            problems.extend(_pytorch_problems(img, at, cuda, driver, gpus))
    return problems


def _pytorch_problems(img, at: str, cuda: Version, driver: Version, gpus) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    tv = parse_version(img.pytorch.version)
    release = TORCH_RELEASES.get(tv[:2])
    if release is None:
        known = ", ".join(fmt(v) for v in sorted(TORCH_RELEASES))
        return [
            (
                f"{at}.pytorch.version",
                f"PyTorch {img.pytorch.version} is not in gpuloan's compatibility table "
                f"(known: {known}); add a row to config/compat.py TORCH_RELEASES with its source",
            )
        ]
    if tv[2] not in release.patches:
        released = ", ".join(f"{fmt(tv[:2])}.{p}" for p in release.patches)
        problems.append(
            (
                f"{at}.pytorch.version",
                f"PyTorch {img.pytorch.version} was never released; released {fmt(tv[:2])}.x versions: {released}",
            )
        )

    tag = img.pytorch.cuda_tag
    wheel_cuda = cuda_of_tag(tag)
    choices = _cuda_choices_for(release, driver)
    if tag not in release.cuda_tags:
        problems.append(
            (
                f"{at}.pytorch.cuda_tag",
                f"PyTorch {img.pytorch.version} has no {tag} wheels; it ships "
                f"{', '.join(release.cuda_tags)}: use " + "; or ".join(choices),
            )
        )
    elif wheel_cuda != cuda:
        fixes = []
        if wheel_cuda in versions.CUDA_IMAGE_PATCH and driver_supports(wheel_cuda, driver).ok:
            fixes.append(f"set cuda_version to {versions.CUDA_IMAGE_PATCH[wheel_cuda]} (keeps {tag})")
        if tag_of_cuda(cuda) in release.cuda_tags:
            fixes.append(f"set cuda_tag to {tag_of_cuda(cuda)} (keeps CUDA {fmt(cuda)})")
        else:
            # Offer a newer pair in the image's CUDA major (the usual intent), or any pair if the tag can't be kept.
            newer = [
                c
                for c in choices
                if c.startswith(f"cuda_version {cuda[0]}.") and cuda_of_tag(c.rsplit(" ", 1)[-1]) > wheel_cuda
            ]
            if newer or not fixes:
                fixes.append(f"use {(newer or choices or ['a supported pair'])[-1]}")
        problems.append(
            (
                f"{at}.pytorch.cuda_tag",
                f"{tag} wheels are built for CUDA {fmt(wheel_cuda)} but the "
                f"image's base is CUDA {img.cuda_version} (cuda_version); they must match: " + ", or ".join(fixes),
            )
        )

    py = parse_version(img.python_version)
    if not release.python_min <= py <= release.python_max:
        problems.append(
            (
                f"{at}.python_version",
                f"PyTorch {img.pytorch.version} supports Python "
                f"{fmt(release.python_min)} to {fmt(release.python_max)}; set python_version within that "
                "range or pick a PyTorch release that supports " + img.python_version,
            )
        )

    if tag in release.cuda_tags:
        covered = torch_wheel_architectures(wheel_cuda)
        for itype, where in gpus:
            if itype.architecture in ARCH_CUDA and itype.architecture not in covered:
                better = [
                    t for t in release.cuda_tags if itype.architecture in torch_wheel_architectures(cuda_of_tag(t))
                ]
                hint = (
                    f"use cuda_tag {better[-1]} (with a matching cuda_version)"
                    if better
                    else f"no wheel of PyTorch {fmt(tv[:2])} supports them: pick another PyTorch release"
                )
                problems.append(
                    (f"{at}.pytorch.cuda_tag", f"PyTorch {tag} wheels carry no kernels for {where}: {hint}")
                )
    return problems


def images_rule(cfg: config.GpuLoanConfig) -> list[tuple[str, str]]:
    """The config rule (config/config.py runs it with the other cross-field rules)."""
    return image_problems(cfg)


def matrix_markdown() -> str:
    """The supported matrix as docs/images.md shows it (a test keeps the doc in step with these tables)."""
    driver = parse_version(versions.EKS_AL2023_NVIDIA_DRIVER_VERSION)
    lines = ["| PyTorch | Python | wheel tag -> `cuda_version` | GPU architectures with kernels |", "|---|---|---|---|"]
    for tv, rel in sorted(TORCH_RELEASES.items()):
        pairs = ", ".join(
            f"{t} -> {versions.CUDA_IMAGE_PATCH.get(cuda_of_tag(t), fmt(cuda_of_tag(t)) + '.x')}" for t in rel.cuda_tags
        )
        arches = "; ".join(
            f"{t}: {', '.join(a for a in ARCH_CUDA if a in torch_wheel_architectures(cuda_of_tag(t)))}"
            for t in rel.cuda_tags
        )
        lines.append(
            f"| {fmt(tv)}.{'/'.join(str(p) for p in rel.patches)} | {fmt(rel.python_min)}-"
            f"{fmt(rel.python_max)} | {pairs} | {arches} |"
        )
    lines += ["", f"| CUDA | driver it shipped with | runs on the node driver {fmt_driver(driver)} |", "|---|---|---|"]
    for cuda, drv in sorted(TOOLKIT_DRIVER.items()):
        verdict = driver_supports(cuda, driver)
        how = "yes" if verdict.native else ("yes (minor-version compatibility)" if verdict.ok else "no")
        lines.append(f"| {fmt(cuda)} | >= {fmt_driver(drv)} | {how} |")
    lines += ["", "| GPU architecture | compute capability | CUDA |", "|---|---|---|"]
    for arch, sup in ARCH_CUDA.items():
        rng = f">= {fmt(sup.min_cuda)}" + (f", < {fmt(sup.removed_in)}" if sup.removed_in else "")
        extra = ", ".join(f"{m} >= {fmt(v)}" for m, v in MODEL_MIN_CUDA.items() if m in sup.compute_capabilities)
        lines.append(f"| {arch} | {sup.compute_capabilities} | {rng}{' (' + extra + ')' if extra else ''} |")
    return "\n".join(lines) + "\n"
