"""Dotted version numbers as tuples ('1.33' -> (1, 33)), so they compare in order (a leaf: stdlib only).

Used by the config rules (config/config.py) and the CUDA compatibility tables (config/compat.py). Versions here are
plain dotted integers (Kubernetes, CUDA, driver), never pre-releases, so no general version parser is needed.
"""

from __future__ import annotations

Version = tuple[int, ...]


def parse_version(text: str) -> Version:
    return tuple(int(part) for part in text.split("."))


def fmt(version: Version) -> str:
    return ".".join(str(p) for p in version)
