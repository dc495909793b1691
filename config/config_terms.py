"""The config's vocabulary: its enumerations and the set-aside context (a leaf: stdlib only).

config/config.py re-exports all of these (read them as `config.config.Tier`); they live here so the modules whose
rules config runs (config/scheduling.py) can use them without importing config, which imports them.
"""

from __future__ import annotations

from contextvars import ContextVar
from enum import StrEnum

# The terms the policy function's settings carry are defined once, in the policy (the bottom layer, stdlib only).
from policy.terms import Enforcement, Tier, Workload  # noqa: F401  (re-exported)

# Names and teams of the pools that config.parse set aside during a partial run of the cross-field rules (pools
# whose own shape errors are reported already; empty otherwise).
SET_ASIDE: ContextVar[frozenset[str]] = ContextVar("SET_ASIDE", default=frozenset())


class Reservation(StrEnum):
    none = "none"
    odcr = "odcr"
    capacity_block = "capacity_block"


class FloorPayment(StrEnum):
    on_demand = "on_demand"
    reserved_1yr = "reserved_1yr"
    reserved_3yr = "reserved_3yr"
    savings_plan = "savings_plan"
    capacity_block = "capacity_block"


class CommitmentKind(StrEnum):
    """Billing discounts the organization buys (pricing/cost_model/billing.py KINDS; applied in this order)."""

    reserved_instances = "reserved_instances"
    ec2_instance_savings_plan = "ec2_instance_savings_plan"
    compute_savings_plan = "compute_savings_plan"


class CommitmentStatus(StrEnum):
    held = "held"  # bought: its fee is billed every hour of its term
    planned = "planned"  # not bought yet: priced as if it were, to see what buying it would do


class PaymentOption(StrEnum):
    no_upfront = "no_upfront"
    partial_upfront = "partial_upfront"
    all_upfront = "all_upfront"


class ElasticCapacity(StrEnum):
    spot = "spot"
    on_demand = "on_demand"
    spot_then_on_demand = "spot_then_on_demand"


class MigStrategy(StrEnum):
    none = "none"
    single = "single"
    mixed = "mixed"


class FairSharingPreemption(StrEnum):
    """Kueue's fair-sharing preemption strategies (v0.19.2 apis/config/v1beta2/configuration_types.go:734-739)."""

    less_than_or_equal_to_final_share = "LessThanOrEqualToFinalShare"  # rule S2-a
    less_than_initial_share = "LessThanInitialShare"  # rule S2-b


# The lists Kueue v0.19.2 accepts (pkg/config/validation.go:385-396 `validStrategySets`); any other is refused
# by the controller at start, so gpuloan refuses it first.
FAIR_SHARING_PREEMPTION_SETS = (
    (FairSharingPreemption.less_than_or_equal_to_final_share,),
    (FairSharingPreemption.less_than_initial_share,),
    (FairSharingPreemption.less_than_or_equal_to_final_share, FairSharingPreemption.less_than_initial_share),
)
