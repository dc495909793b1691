"""Facts about GPU instance types that config validation needs offline: GPUs per instance, GPU model, memory per GPU.

Written by hand from AWS's own specification page, "Amazon EC2 instance type specifications: Accelerated
computing" (https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html), section "Accelerators": one line per
family (GPU model, GiB per GPU as that page gives it) and the GPU count of each size. Why a table and not an API
call: `gpuloan validate` and `preview` must work without credentials, and these facts change only when AWS launches
a family (then this table gains a line). Types not listed here (a family newer than this file) are looked up with
EC2 DescribeInstanceTypes by `gpuloan prices refresh` and cached beside the prices (pricing/sources/pricebook.py), so a
user is never blocked on a release of gpuloan. Those facts are not global state: whoever reads the price book passes
its `instance_facts` in (the `facts` argument below, `config.parse(..., instance_facts=...)`).

The facts are the config's (validation needs them before any price), so the table lives at the bottom layer.
Stdlib only: the policy pack (guardrails/) imports it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

# GPU architecture per GPU model; CUDA support rules (config/compat.py) key on the architecture.
GPU_ARCHITECTURE = {
    "K80": "kepler",
    "M60": "maxwell",
    "V100": "volta",
    "T4": "turing",
    "T4G": "turing",
    "A10G": "ampere",
    "A100": "ampere",
    "L4": "ada",
    "L40S": "ada",
    "H100": "hopper",
    "H200": "hopper",
    "B200": "blackwell",
    "B300": "blackwell",
    "RTX-PRO-SERVER-6000": "blackwell",
    "RTX-PRO-4500": "blackwell",
    "RADEON-PRO-V520": "amd",
    "GAUDI-HL-205": "gaudi",
}


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    gpu_model: str
    gpu_memory_gib: float  # per GPU
    cpu_architecture: str = "x86_64"  # "arm64" for Graviton hosts (g5g)

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def architecture(self) -> str:
        return GPU_ARCHITECTURE.get(self.gpu_model, "unknown")

    @property
    def is_nvidia(self) -> bool:
        return self.architecture not in ("amd", "gaudi", "unknown")

    def to_json(self) -> dict:
        return {
            "gpus": self.gpus,
            "gpu_model": self.gpu_model,
            "gpu_memory_gib": self.gpu_memory_gib,
            "cpu_architecture": self.cpu_architecture,
        }


# family: (GPU model, GiB per GPU, CPU architecture, {size: GPUs})
_FAMILIES: dict[str, tuple[str, float, str, dict[str, int]]] = {
    # previous generation, still listed by AWS
    "p2": ("K80", 12, "x86_64", {"xlarge": 1, "8xlarge": 8, "16xlarge": 16}),
    "g3": ("M60", 8, "x86_64", {"4xlarge": 1, "8xlarge": 2, "16xlarge": 4}),
    "g3s": ("M60", 8, "x86_64", {"xlarge": 1}),
    # current generation, NVIDIA
    "p3": ("V100", 16, "x86_64", {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8}),
    "p3dn": ("V100", 32, "x86_64", {"24xlarge": 8}),
    "p4d": ("A100", 40, "x86_64", {"24xlarge": 8}),
    "p4de": ("A100", 80, "x86_64", {"24xlarge": 8}),
    "p5": ("H100", 80, "x86_64", {"4xlarge": 1, "48xlarge": 8}),
    "p5e": ("H200", 141, "x86_64", {"48xlarge": 8}),
    "p5en": ("H200", 141, "x86_64", {"48xlarge": 8}),
    "p6-b200": ("B200", 179, "x86_64", {"48xlarge": 8}),
    "p6-b300": ("B300", 268, "x86_64", {"48xlarge": 8}),
    "g4dn": (
        "T4",
        16,
        "x86_64",
        {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1, "12xlarge": 4, "metal": 8},
    ),
    "g5": (
        "A10G",
        24,
        "x86_64",
        {
            "xlarge": 1,
            "2xlarge": 1,
            "4xlarge": 1,
            "8xlarge": 1,
            "16xlarge": 1,
            "12xlarge": 4,
            "24xlarge": 4,
            "48xlarge": 8,
        },
    ),
    "g5g": ("T4G", 16, "arm64", {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 2, "metal": 2}),
    "g6": (
        "L4",
        24,
        "x86_64",
        {
            "xlarge": 1,
            "2xlarge": 1,
            "4xlarge": 1,
            "8xlarge": 1,
            "16xlarge": 1,
            "12xlarge": 4,
            "24xlarge": 4,
            "48xlarge": 8,
        },
    ),
    "gr6": ("L4", 24, "x86_64", {"4xlarge": 1, "8xlarge": 1}),
    "g6e": (
        "L40S",
        48,
        "x86_64",
        {
            "xlarge": 1,
            "2xlarge": 1,
            "4xlarge": 1,
            "8xlarge": 1,
            "16xlarge": 1,
            "12xlarge": 4,
            "24xlarge": 4,
            "48xlarge": 8,
        },
    ),
    "g7": (
        "RTX-PRO-4500",
        32,
        "x86_64",
        {"2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "12xlarge": 2, "24xlarge": 4, "48xlarge": 8},
    ),
    "g7e": (
        "RTX-PRO-SERVER-6000",
        96,
        "x86_64",
        {"2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "12xlarge": 2, "24xlarge": 4, "48xlarge": 8},
    ),
    # other accelerators: listed so validation can say "not NVIDIA" instead of "unknown"
    "g4ad": ("RADEON-PRO-V520", 8, "x86_64", {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 2, "16xlarge": 4}),
    "dl1": ("GAUDI-HL-205", 32, "x86_64", {"24xlarge": 8}),
}

KNOWN: dict[str, InstanceType] = {
    f"{family}.{size}": InstanceType(f"{family}.{size}", gpus, model, float(mem), arch)
    for family, (model, mem, arch, sizes) in _FAMILIES.items()
    for size, gpus in sizes.items()
}


# Facts read from EC2 for types newer than KNOWN (a price book's `instance_facts`); KNOWN wins where both have one.
InstanceFacts = Mapping[str, InstanceType]


def lookup(name: str, facts: InstanceFacts | None = None) -> InstanceType | None:
    """The facts of one instance type: the table's, else those read from EC2 (`facts`), else None."""
    return KNOWN.get(name) or (facts or {}).get(name)


def known_type(name: str, facts: InstanceFacts | None = None) -> InstanceType:
    """lookup() of a type the config has validated (config/config.py refuses unknown types): a KeyError naming
    the type if it is unknown all the same, not an AttributeError on None further on."""
    itype = lookup(name, facts)
    if itype is None:
        raise KeyError(f"unknown GPU instance type '{name}'")
    return itype


def known(facts: InstanceFacts | None = None) -> dict[str, InstanceType]:
    """Every GPU type gpuloan knows: the table plus the facts read from EC2."""
    return {**(facts or {}), **KNOWN}


def suggest(name: str, facts: InstanceFacts | None = None, n: int = 3) -> list[str]:
    """Close matches for a mistyped instance type (for error messages)."""
    return difflib.get_close_matches(name, sorted(known(facts)), n=n, cutoff=0.6)
