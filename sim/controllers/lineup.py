"""The rows a comparison runs on one pool: our policy (and its what-if variants) beside the baselines."""

from __future__ import annotations

import dataclasses

from sim.pool import PoolSpec
from sim.controllers.base import Controller
from sim.controllers.baselines import FloorOnly, StaticPeak, ThresholdScript
from sim.controllers.gpuloan import INSTANT_IDLE_NAME, INSTANT_IDLE_NO_KEEP_NAME, WARM_UP_NAME, GpuLoan, pool_settings
from sim.controllers.karpenter import Karpenter


def what_if_policies() -> list[Controller]:
    """Our policy with the stack's settings, the two what-ifs that bound a faster release signal, and karpenter:
    the rows of scripts/benchmark.py --what-if."""
    return [
        GpuLoan("gpuloan"),
        GpuLoan(INSTANT_IDLE_NAME, instant_idle=True),
        GpuLoan(INSTANT_IDLE_NO_KEEP_NAME, instant_idle=True, keep_for_next_job=False),
        Karpenter(),
    ]


def all_policies(spec: PoolSpec, warm_up: bool = False, what_if: bool = False) -> list[Controller]:
    """Every policy on `spec`; `warm_up` adds our policy with the stack's settings and warm-up on (a row to
    measure whether warm-up pays on a trace before turning it on); `what_if` the two instant-idle what-ifs."""
    out: list[Controller] = [GpuLoan("gpuloan"), GpuLoan("gpuloan-defaults", defaults=True), StaticPeak(), FloorOnly()]
    if warm_up:
        out.insert(2, GpuLoan(WARM_UP_NAME, settings=dataclasses.replace(pool_settings(spec), warm_up=True)))
    if what_if:
        out[2:2] = what_if_policies()[1:3]
    if spec.has_spot or spec.has_on_demand:
        out += [Karpenter(), ThresholdScript()]
    return out
