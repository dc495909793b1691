"""The one typed config of a gpuloan environment (the `gpuloan:` namespace of Pulumi.<env>.yaml).

Two passes, both before any resource exists:
1. pydantic checks shape, types, ranges and per-field rules (unknown keys are errors: extra="forbid");
2. `cross_field_problems` checks rules that span fields (AZs, reservations, budgets vs. floor cost, ...).
Every problem carries its path (`pools[1].elastic.max_nodes`) and all problems of a pass are reported at once.
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import re
import unicodedata
from collections import Counter
from enum import StrEnum
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    EmailStr,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from config import compat, instance_types, scheduling, versions
from config.instance_types import InstanceFacts, InstanceType

# The config's vocabulary lives in a leaf module so the rule modules (scheduling) can use it without importing
# this one; re-exported here, where every reader looks for it.
from config.config_terms import (
    SET_ASIDE,
    CommitmentKind,
    CommitmentStatus,
    FAIR_SHARING_PREEMPTION_SETS,
    ElasticCapacity,  # noqa: F401
    Enforcement,
    FairSharingPreemption,
    FloorPayment,
    MigStrategy,
    PaymentOption,
    Reservation,
    Tier,
    Workload,
)
from config.names import GENERATED_SUFFIX_LENGTH, NODE_GROUP_PREFIX_MAX, node_group_name_prefix
from config.node_sizes import node_sizes, pool_sizes, size_suffix
from config.names import GPU_METRICS_AGENT_NAMESPACE, GPU_OPERATOR_NAMESPACE, KUEUE_NAMESPACE
from config.version_numbers import fmt as fmt_version
from config.version_numbers import parse_version

SLUG = r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$"
AWS_REGION = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"
AZ_SUFFIX = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$")
RESERVATION_ID = r"^cr-[0-9a-f]{8,17}$"
# EKS scales a Capacity Block node group to 0 forty minutes before the block ends (its scheduled action "Amazon EKS
# Node Group Capacity Scaledown Before Reservation End"; EC2 starts shutting the instances down 30 minutes before).
# One value for the program, the config rules and the policy function (policy/capacity_blocks.py).
from policy.capacity_blocks import EKS_SCALEDOWN_BEFORE_END as CAPACITY_BLOCK_SCALEDOWN_BEFORE_END  # noqa: E402

# AWS Budgets limits: notifications per budget and email subscribers per notification.
MAX_BUDGET_NOTIFICATIONS = 10
MAX_BUDGET_EMAILS = 10


# AWS allows 50 user tags per resource; gpuloan adds up to 6 of its own (config/tags.py pool_tags + Name).
MAX_TAGS_PER_RESOURCE = 50
GPULOAN_TAGS_PER_RESOURCE = 6


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


# The key of pydantic's validation context under which parse() hands the validators the instance facts read from
# EC2 (a price book's `instance_facts`): passed in, never read from global state.
INSTANCE_FACTS = "instance_facts"


def _facts(info: ValidationInfo | None) -> InstanceFacts | None:
    context = info.context if info is not None else None
    return context.get(INSTANCE_FACTS) if isinstance(context, dict) else None


def _known_gpu_instance(name: str, facts: InstanceFacts | None = None) -> str:
    itype = instance_types.lookup(name, facts)
    if itype is None:
        close = instance_types.suggest(name, facts)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown GPU instance type '{name}' (not in gpuloan's table of GPU types nor in the "
            f"facts `gpuloan prices refresh -s STACK` reads from EC2){hint}"
        )
    if itype.architecture == "unknown":
        # A family newer than config/instance_types.py, its facts read from EC2: CUDA rules need its architecture.
        raise ValueError(
            f"'{name}' has {itype.gpu_model} GPUs, which gpuloan has no CUDA support "
            "rules for yet (config/instance_types.py GPU_ARCHITECTURE)"
        )
    if not itype.is_nvidia:
        raise ValueError(f"'{name}' has {itype.gpu_model} accelerators; gpuloan supports NVIDIA GPUs only")
    return name


GpuInstanceType = Annotated[str, Field(min_length=1)]
Slug = Annotated[str, Field(pattern=SLUG)]
Percent = Annotated[float, Field(ge=0, le=100)]
ThresholdPct = Annotated[float, Field(gt=0, le=1000)]


class SystemNodes(Strict):
    """Small on-demand, non-GPU, untainted nodes for CoreDNS, operators and metrics agents."""

    instance_type: str = Field(
        "m7i.large", pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", description="Non-GPU instance type."
    )
    nodes: int = Field(2, ge=1, le=20, description="Fixed size of the system node group.")


# EKS advanced control plane configuration (kube-scheduler scoring) exists from Kubernetes 1.31 (docs/aws-rules.md).
BIN_PACKING_MIN_VERSION = (1, 31)


class NewCluster(Strict):
    mode: Literal["new"] = Field("new", description="`new`: gpuloan creates the VPC and the EKS cluster.")
    kubernetes_version: str = Field(
        versions.DEFAULT_KUBERNETES_VERSION,
        pattern=r"^1\.(2[89]|3\d)$",
        description="EKS Kubernetes version (one with pinned add-ons, config/versions.py; EKS upgrades one minor version at a time).",
    )
    vpc_cidr: str = Field("10.40.0.0/16", description="IPv4 CIDR of the new VPC (/16 to /20).")
    availability_zones: list[str] = Field(
        min_length=2,
        max_length=6,
        description="AZs for subnets and nodes (EKS needs two or more; lettered a-f; the order does not matter: each AZ's subnets sit at its letter's slot).",
    )
    public_endpoint_cidrs: list[str] = Field(
        default_factory=list,
        description="CIDRs allowed to reach the public API endpoint; empty means a private endpoint only.",
    )
    system_nodes: SystemNodes = SystemNodes()
    bin_packing: bool = Field(
        False,
        description='Set the cluster\'s kube-scheduler to bin-pack (EKS advanced control plane configuration: NodeResourcesFit scoring MostAllocated, nvidia.com/gpu weighted 3, cpu and memory 1; Kubernetes 1.31 or later). A pod then goes to the fullest node it fits, so partly used GPU nodes fill before empty ones and empty nodes can be released; the default scheduler spreads pods over the emptiest nodes. Cluster-wide: CPU pods pack too. Changed in place, without replacing the cluster (docs/capacity.md, "Bin packing").',
    )

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr(cls, v: str) -> str:
        net = ipaddress.ip_network(v, strict=True)
        if net.version != 4 or not 16 <= net.prefixlen <= 20:
            raise ValueError(
                "vpc_cidr must be an IPv4 network between /16 and /20 (room for public and private subnets)"
            )
        return v

    @field_validator("public_endpoint_cidrs")
    @classmethod
    def _endpoint_cidrs(cls, v: list[str]) -> list[str]:
        for cidr in v:
            ipaddress.ip_network(cidr, strict=True)
        return v

    @field_validator("availability_zones")
    @classmethod
    def _azs(cls, v: list[str]) -> list[str]:
        for az in v:
            if not AZ_SUFFIX.match(az):
                raise ValueError(f"'{az}' is not an availability zone name like us-east-1a")
            if az[-1] > "f":
                # stacks/network.py places each AZ's subnets by its letter, so a reorder renumbers nothing.
                raise ValueError(f"'{az}': gpuloan's subnet layout has slots for AZs lettered a-f")
        if len(set(v)) != len(v):
            raise ValueError("availability zones must be distinct")
        return v


class ExistingCluster(Strict):
    mode: Literal["existing"] = Field(description="`existing`: use a cluster you already run; no network is created.")
    name: str = Field(pattern=r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$", description="Name of the existing EKS cluster.")
    kubernetes_version: str = Field(
        versions.DEFAULT_KUBERNETES_VERSION,
        pattern=r"^1\.(2[89]|3\d)$",
        description="The cluster's version (manifests are validated against it).",
    )
    availability_zones: list[str] = Field(
        default_factory=list, description="AZs whose cluster subnets GPU nodes may use; empty means all."
    )
    node_subnet_ids: list[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")]] = Field(
        default_factory=list,
        description="Private subnets (with a NAT or VPC endpoints) for the node groups and the "
        "policy function; empty means the cluster's subnets that assign no public IPs.",
    )


Cluster = Annotated[Union[NewCluster, ExistingCluster], Field(discriminator="mode")]


class UserRate(Strict):
    """Your own price of one floor node-hour: it always wins over the price book (docs/floor.md)."""

    usd_per_hour: float = Field(gt=0, le=1000, description="USD per instance-hour of one floor node, as you pay it.")
    source: str = Field(
        min_length=3,
        max_length=300,
        description="Where the rate comes from (your RI/Savings Plan "
        "invoice, a Capacity Block quote, a contract; with its date): printed beside the cost.",
    )


class Guaranteed(Strict):
    """The floor: nodes that are always there and never preempted."""

    instance_type: GpuInstanceType = Field(description="GPU instance type of the floor, e.g. p4d.24xlarge.")
    nodes: int = Field(ge=1, le=64, description="Nodes always up (min = desired = max of the node group).")
    reservation: Reservation = Field(
        Reservation.none,
        description="`none`; `odcr`: an on-demand capacity reservation (created, or yours with reservation_id); `capacity_block`: a Capacity Block you bought.",
    )
    reservation_id: str | None = Field(
        None, pattern=RESERVATION_ID, description="Id of an existing reservation (cr-...)."
    )
    availability_zone: str | None = Field(
        None, description="AZ of the reservation; the floor's nodes launch only there."
    )
    capacity_block_start: dt.datetime | None = Field(
        None,
        description="capacity_block only (required): the block's start time, UTC (ISO 8601, e.g. "
        "2027-01-08T11:30:00Z, as EC2 DescribeCapacityReservations' StartDate). The block is paid from it whether "
        "nodes run or not: the policy function raises the group to `nodes` at the first tick from this time "
        "(docs/floor.md).",
    )
    capacity_block_end: dt.datetime | None = Field(
        None,
        description="capacity_block only (required): the block's end time, UTC (ISO 8601, e.g. "
        "2027-01-15T11:30:00Z, as EC2 DescribeCapacityReservations' EndDate). From 40 minutes before it EKS scales "
        "the group to 0, and neither the policy function nor a later `pulumi up` raises it again.",
    )
    capacity_block_checkpoint_lead_minutes: int = Field(
        30,
        ge=0,
        le=1440,
        description="capacity_block only: how many minutes before EKS's scale-down (40 minutes "
        "before `capacity_block_end`) the policy function cordons the block's nodes, marks their GPU pods "
        "`gpuloan.io/checkpoint-by` and lets pending work go to the elastic groups. 30: time for a job to save a "
        "checkpoint and move before EKS evicts it; 0: no early drain (docs/floor.md).",
    )
    capacity_block_active: bool | None = Field(
        None,
        description="capacity_block only. Unset (default): the window decides (`capacity_block_start` to 40 "
        "minutes before `capacity_block_end`); the policy function brings the group up and down by itself. "
        "`false`: hold the group at 0 nodes inside the window too (EKS upgrades a Capacity Block group only at "
        "desired 0: set it for a roll, then remove it). `true`: the same as unset (the window decides), accepted "
        "so configs written before `capacity_block_start` still read the same.",
    )

    payment: FloorPayment | None = Field(
        None,
        description="DEPRECATED for reserved_1yr / reserved_3yr / savings_plan (kept for one release; "
        "validate and preview print a warning): list the commitment under the environment's `commitments` instead, "
        "which AWS applies to every matching usage of the organization, not to one pool. Read as a commitment of "
        "this pool alone that covers exactly its floor: `reserved_1yr` / `reserved_3yr` (Standard Reserved "
        "Instances, no upfront, count = nodes), `savings_plan` (EC2 Instance Savings Plan, 1 year, no upfront, "
        "hourly commitment = nodes x rate). `on_demand` (no commitment; an ODCR bills at on-demand) and "
        "`capacity_block` (paid up front) stay. Default: capacity_block for reservation: capacity_block, else "
        "on_demand (docs/floor.md).",
    )
    rate: UserRate | None = Field(
        None,
        description="Your own rate for this floor; without it the rate of `payment` "
        "comes from the price book, and validation asks for it where the book has none.",
    )

    @field_validator("instance_type")
    @classmethod
    def _type(cls, v: str, info: ValidationInfo) -> str:
        return _known_gpu_instance(v, _facts(info))

    def floor_up(self, now: dt.datetime | None = None) -> bool:
        """Whether the floor's node group should hold `nodes` now: always, except a Capacity Block outside its
        window (from `capacity_block_start` to EKS's scale-down 40 minutes before `capacity_block_end`) or held by
        `capacity_block_active: false` (docs/floor.md)."""
        if self.reservation != Reservation.capacity_block:
            return True
        if self.capacity_block_active is False:
            return False
        if self.capacity_block_end is None:
            return bool(self.capacity_block_active)  # refused by validation; kept total for configs built in code
        if self.capacity_block_end.tzinfo is None or (
            self.capacity_block_start is not None and self.capacity_block_start.tzinfo is None
        ):
            return False  # refused by validation (an ambiguous time); other rules may ask before it reports
        now = now or dt.datetime.now(dt.timezone.utc)
        if self.capacity_block_start is None:  # refused by validation; the pre-window meaning of the flag
            if not self.capacity_block_active:
                return False
        elif now < self.capacity_block_start:
            return False
        return now < self.capacity_block_end - CAPACITY_BLOCK_SCALEDOWN_BEFORE_END

    @property
    def price_model(self) -> str:
        """The payment in force (the default follows the reservation)."""
        if self.payment is not None:
            return str(self.payment)
        return "capacity_block" if self.reservation == Reservation.capacity_block else "on_demand"


class Elastic(Strict):
    """Borrowed GPUs: spot first, on-demand fallback, sized by the policy function between 0 and max_nodes."""

    instance_types: list[GpuInstanceType] = Field(
        min_length=1,
        max_length=20,
        description="Diversified types (more types, fewer spot shortages). Types of several sizes (GPUs per node, one GPU model: g6e.2xlarge / 12xlarge / 48xlarge) give the pool a spot and an on-demand node group per size, and the policy grows the size with the lowest price per GPU the pending pods use (docs/policy.md, \"Right-sized nodes\"); the plain size (plain_names_gpus) keeps a one-size pool's group names; the order of the list renames nothing. max_nodes and on_demand_max_nodes apply to each size's groups.",
    )
    plain_names_gpus: int | None = Field(
        None,
        ge=1,
        le=64,
        description="A pool of several node sizes: the GPUs per node of the size whose node groups keep a one-size pool's names (`<env>-<pool>-spot_`, `-on-demand_`); the others are named with their GPUs (`-spot-4gpu_`). Default: the largest size. Releases before issue 35 gave the plain names to the first listed type's size: where that was not the largest, set this to its GPUs, or the update replaces those groups with their nodes (docs/capacity.md, \"Node group names\").",
    )
    capacity: ElasticCapacity = Field(
        ElasticCapacity.spot_then_on_demand,
        description="`spot`, `on_demand`, or `spot_then_on_demand` (an on-demand fallback group used when spot stays short). A production pool not listed in scheduling.kueue.production_spot_pools keeps its work off spot: Kueue admits it to the on-demand group only, so it needs `on_demand` or `spot_then_on_demand`, and the preview prices its elastic nodes at on-demand (validate says so).",
    )
    max_nodes: int = Field(ge=1, le=500, description="Most elastic nodes (the spot group's max).")
    on_demand_max_nodes: int | None = Field(None, ge=1, le=500, description="Fallback group max; default max_nodes.")
    scale_up_utilization_pct: Percent = Field(
        80, description="Average GPU utilization over the window that adds a node (for services that do not queue)."
    )
    scale_up_window_minutes: int = Field(10, ge=1, le=120, description="Window for the scale-up average.")
    idle_utilization_pct: Percent = Field(
        5, description="A node whose max GPU utilization stays below this for idle_timeout_minutes is reclaimed."
    )
    idle_timeout_minutes: int = Field(
        10,
        ge=5,
        le=1440,
        description="How far back GPU utilization must stay below idle_utilization_pct (and the node be up) before it counts as idle: a measurement window, not a keep timer (how long an idle node is kept is the release-on-cost rule, docs/policy.md). Longer keeps every node that long after its last work.",
    )
    empty_timeout_minutes: int = Field(
        2,
        ge=2,
        le=1440,
        description="A node on which no pod has requested a GPU for this long (GPU reserved capacity 0) and whose GPUs stayed below idle_utilization_pct over the same minutes is reclaimed without waiting for idle_timeout_minutes: there is nothing on it to interrupt (the release-on-cost rule may still keep it for the next job). 2 minutes: the shortest window that holds a 1-minute datapoint; an empty node costs its price every minute it waits.",
    )
    workload: Workload = Field(
        Workload.batch,
        description="`batch`: jobs that queue; pending pods are the whole scale-up signal. `service`: traffic that does not queue; sustained utilization (scale_up_utilization_pct) adds a node too.",
    )
    cooldown_minutes: int = Field(
        5,
        ge=0,
        le=120,
        description="Quiet time after a group's change before a utilization-driven scale-up (service pools only); never delays a reclaim.",
    )
    max_step_nodes: int | None = Field(
        None,
        ge=1,
        le=500,
        description="Most nodes added or removed in one tick; unset = no step limit (max_nodes and the budget cap bound every tick).",
    )
    launch_minutes: int = Field(
        6,
        ge=1,
        le=60,
        description="Minutes from a scale-up to a node that takes pods: a relaunch costs this much paid boot plus as long a wait; the keep-or-release rule weighs it (docs/policy.md).",
    )
    fallback_after_minutes: int = Field(
        10,
        ge=1,
        le=240,
        description="How long spot may stay short of its desired size before on-demand takes the shortfall.",
    )
    gang_wait_minutes: int = Field(
        15,
        ge=2,
        le=1440,
        description='How long a gang (pods of one pod group that start only together: a multi-node job) may wait for the rest of its nodes. Past it, nodes spot has not delivered are asked of the on-demand fallback; if no group can add them all, the idle nodes held for the gang are released and it is retried whole once capacity is there (docs/policy.md, "Gangs"). Must exceed launch_minutes, the time its nodes take to come when capacity is there. 15: launch_minutes\' default (6) twice over plus 3, long enough that a launch in progress is never cut short, short of holding a partial set for an hour.',
    )
    warm_up: bool = Field(
        False,
        description='Keep or launch spare nodes ahead of the arrivals this pool saw at the same time of day over the last 7 days, while the release-on-cost rule says a spare node pays for itself (docs/policy.md, "Warm-up"). Off by default: it pays only where arrivals at some time of day come faster than one node\'s worth per 2 x launch_minutes; check with `gpuloan simulate --warm-up` on your own demand first.',
    )
    back_to_spot: bool = Field(
        True,
        description='With `spot_then_on_demand`: once spot is back after a fallback, the on-demand fallback nodes take no new pods (a NoSchedule taint `gpuloan.io/back-to-spot`) and go once idle, while spot grows for the pods that wait (docs/policy.md, "Back to spot"). Off: a fallback node keeps taking new pods until it happens to be idle.',
    )
    rebalance_checkpoint: bool = Field(
        False,
        description='Opt-in, pools with spot: on EC2\'s rebalance recommendation for a spot node (it can come before the 2-minute interruption notice, or with it), the policy function puts the NoSchedule taint `gpuloan.io/rebalance-recommended` on the node, so no new pod lands there and jobs that watch their node checkpoint early (docs/policy.md, "Early spot warnings"). Adds an EventBridge rule for "EC2 Instance Rebalance Recommendation".',
    )

    @property
    def on_demand_group_max_nodes(self) -> int:
        """The on-demand group's max: `on_demand_max_nodes`, else `max_nodes` (read here, not spelled out again)."""
        return self.on_demand_max_nodes or self.max_nodes

    @model_validator(mode="after")
    def _spot_features(self):
        if self.rebalance_checkpoint and self.capacity == ElasticCapacity.on_demand:
            raise ValueError(
                "rebalance_checkpoint: EC2 sends rebalance recommendations for spot instances only, and "
                "capacity `on_demand` has no spot group"
            )
        if "back_to_spot" in self.model_fields_set and self.capacity != ElasticCapacity.spot_then_on_demand:
            raise ValueError(
                f"back_to_spot applies to capacity `spot_then_on_demand` only (an on-demand fallback "
                f"to leave), not `{self.capacity}`: remove it"
            )
        return self

    @model_validator(mode="after")
    def _gang_wait_after_launch(self) -> "Elastic":
        if self.gang_wait_minutes <= self.launch_minutes:
            raise ValueError(
                f"gang_wait_minutes ({self.gang_wait_minutes}) must exceed launch_minutes "
                f"({self.launch_minutes}): a gang's nodes take that long to come, so a shorter wait "
                "would release every gang's nodes while the rest still boot"
            )
        return self

    @model_validator(mode="after")
    def _plain_names_size(self, info: ValidationInfo) -> "Elastic":
        if self.plain_names_gpus is not None:
            sizes = sorted({size.gpus_per_node for size in node_sizes(self.instance_types, facts=_facts(info))})
            if self.plain_names_gpus not in sizes:
                raise ValueError(
                    f"plain_names_gpus: {self.plain_names_gpus} GPUs per node is none of this pool's "
                    f"sizes ({', '.join(map(str, sizes))}): name the GPUs per node of the size whose "
                    "groups keep the plain names"
                )
        return self

    @field_validator("instance_types")
    @classmethod
    def _types(cls, v: list[str], info: ValidationInfo) -> list[str]:
        for name in v:
            _known_gpu_instance(name, _facts(info))
        dupes = [n for n, c in Counter(v).items() if c > 1]
        if dupes:
            raise ValueError(f"instance types listed twice: {', '.join(dupes)}")
        return v


class Budget(Strict):
    monthly_usd: float = Field(gt=0, le=10_000_000, description="Monthly budget in USD.")
    alert_emails: list[EmailStr] = Field(
        default_factory=list, max_length=MAX_BUDGET_EMAILS, description="Who gets budget alerts (AWS allows 10)."
    )
    actual_thresholds_pct: list[ThresholdPct] = Field(
        default_factory=lambda: [50.0, 80.0, 100.0], description="ACTUAL-spend notifications, percent of the budget."
    )
    forecasted_thresholds_pct: list[ThresholdPct] = Field(
        default_factory=lambda: [100.0], description="FORECASTED-spend notifications, percent of the budget."
    )
    enforcement: Enforcement = Field(
        Enforcement.cap_elastic,
        description="`cap_elastic`: the policy refuses scale-ups past the budget and drains elastic nodes at 100%; `alert_only`: emails only.",
    )

    @field_validator("actual_thresholds_pct", "forecasted_thresholds_pct")
    @classmethod
    def _distinct(cls, v: list[float]) -> list[float]:
        if len(set(v)) != len(v):
            raise ValueError("thresholds must be distinct")
        return sorted(v)


class EnvironmentBudget(Budget):
    activate_cost_allocation_tags: bool = Field(
        False,
        description="Activate the gpuloan:* cost-allocation tags from this stack. Off by default: AWS "
        "refuses activation of a key no billed resource carried yet, so turning it on in the first `pulumi up` "
        "would fail it; set it true the day after the first deploy (or run the `aws ce` command of "
        "docs/budgets.md once per account).",
    )


class ServiceTarget(Strict):
    """The service `gpuloan advise` must keep when it picks this pool's floor size (docs/floor.md)."""

    p95_wait_minutes: float = Field(
        30,
        ge=0,
        le=10080,
        description="Most p95 wait of a job before it starts "
        "(job traces; a minute,gpus_demanded series has no jobs and uses unmet_pct).",
    )
    unmet_pct: Percent = Field(1, description="Most share of the demanded GPU-hours left unserved by the horizon.")
    production_interruptions_per_month: float = Field(
        0,
        ge=0,
        le=100_000,
        description="Most interruptions of production work per month (a spot reclaim or a busy "
        "node reclaimed under a production job is a violation, not just lost minutes).",
    )
    production_share_pct: Percent | None = Field(
        None,
        description="Share of the pool's demand that is production work; default 100 for tier production, "
        "0 otherwise. Its interruptions count against production_interruptions_per_month.",
    )


class Pool(Strict):
    name: Slug = Field(description="Pool name: node label gpuloan.io/pool and cost tag gpuloan:pool.")
    team: Slug = Field(description="Owning team: a namespace with a GPU quota, cost tag gpuloan:team.")
    tier: Tier = Field(description="Priority of the pool's workloads: production > experiment > learning.")
    guaranteed: Guaranteed | None = Field(None, description="The floor; omit for elastic-only pools.")
    elastic: Elastic | None = Field(None, description="Borrowed capacity; omit for floor-only pools.")
    budget: Budget | None = Field(None, description="Optional per-pool budget (a cost filter on the pool tag).")
    service_target: ServiceTarget = Field(
        ServiceTarget(), description="What `gpuloan advise` keeps when it sizes the floor; changes nothing deployed."
    )


class PyTorch(Strict):
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$", description="PyTorch version, e.g. 2.5.1.")
    cuda_tag: str = Field(pattern=r"^cu\d{3}$", description="The wheel index tag, e.g. cu124.")


class Image(Strict):
    name: Slug = Field(description="Image (and ECR repository) name.")
    cuda_version: str = Field(pattern=r"^\d+\.\d+\.\d+$", description="nvidia/cuda base image version, e.g. 12.4.1")
    python_version: str = Field(pattern=r"^3\.\d+$", description="Python in the image, e.g. 3.11.")
    pytorch: PyTorch | None = Field(None, description="PyTorch pin; omit for a base-only image.")
    packages: list[str] = Field(default_factory=list, description="Extra pip packages, each pinned with ==.")

    @field_validator("packages")
    @classmethod
    def _pinned(cls, v: list[str]) -> list[str]:
        for spec in v:
            if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$", spec):
                raise ValueError(f"'{spec}' is not pinned: write name==version so images are reproducible")
        return v


class GpuOperator(Strict):
    enabled: bool = Field(True, description="Install the NVIDIA GPU Operator.")
    chart_version: str | None = Field(None, pattern=r"^v\d+\.\d+\.\d+$", description="Default: config/versions.py")
    mig_strategy: MigStrategy = Field(MigStrategy.none, description="MIG strategy of the device plugin.")
    time_slicing_replicas: int | None = Field(
        None, ge=2, le=48, description="Share each GPU between this many pods (time-slicing); omit to disable."
    )


class Shard(Strict):
    """Some of the environment's pools, decided by an invocation of their own (docs/policy.md, "Shards")."""

    name: Slug = Field(description="Shard name: its EventBridge rule's name and its lease item in the state table.")
    pools: list[Slug] = Field(
        min_length=1,
        max_length=200,
        description="The pools (by name) this shard decides; every pool in exactly one shard.",
    )


class Policy(Strict):
    enabled: bool = Field(True, description="Deploy the policy function.")
    schedule_minutes: int = Field(1, ge=1, le=60, description="How often the policy function runs.")
    dry_run: bool = Field(False, description="Decide and report, change nothing.")
    metric_namespace: str = Field("ContainerInsights", description="CloudWatch namespace of the per-node GPU metric.")
    utilization_metric: str = Field(
        "node_gpu_utilization",
        description="Per-node GPU utilization metric (dimensions ClusterName, InstanceId, NodeName).",
    )
    reserved_metric: str = Field(
        "node_gpu_reserved_capacity",
        description="Per-node % of GPUs requested by pods (same dimensions); 0 for empty_timeout_minutes makes a node empty.",
    )
    budget_refresh_minutes: int = Field(60, ge=60, le=1440, description="AWS Budgets lags hours; read at most hourly.")
    notify_min_interval_minutes: int = Field(
        30, ge=1, le=1440, description="Least time between two notifications of the same kind for a pool."
    )
    aws_calls_in_flight: int = Field(
        default=8,
        ge=1,
        le=32,
        description="AWS calls one tick makes side by side at most (policy/fanout.py). EKS and Auto Scaling publish no request rate (docs/aws-rules.md): lower it if the account's other tools share those limits and the tick sees throttling.",
    )
    reserve_concurrency: bool = Field(
        False,
        description="Reserve one concurrent execution for the function. Off by default: Lambda refuses it on accounts whose unreserved concurrency would drop below 100 (new accounts have a limit of 10); overlapping ticks are kept apart by a lease in the state table either way.",
    )
    log_retention_days: Literal[1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365] = 30
    shards: list[Shard] = Field(
        default_factory=list,
        max_length=20,
        description="Split the pools over several "
        "invocations, one schedule each, when one tick cannot decide them all within its "
        'deadline (docs/policy.md, "Shards"). Each shard has its own lease and deadline; '
        "the environment budget's cap holds across them. Empty: one invocation decides "
        "every pool.",
    )


class Alarms(Strict):
    idle_utilization_pct: Percent = Field(
        10, description="Idle-waste alarm: elastic nodes up while pool GPU utilization stays below this."
    )
    idle_hours: int = Field(3, ge=1, le=24, description="... for this many hours.")
    saturation_minutes: int = Field(
        60, ge=5, le=1440, description="Saturation alarm: the pool at its elastic max this long."
    )
    fallback_minutes: int = Field(
        120, ge=5, le=1440, description="Fallback alarm: on-demand fallback active this long."
    )


# Self-hosted runners named by CIDR: their subnets, never a /8 (docs/gitops.md, "CI and the cluster API").
RUNNER_PRIVATE_CIDR_MIN_PREFIX = 16


class CiClusterAccess(StrEnum):
    self_hosted = "self_hosted"
    runner_cidrs = "runner_cidrs"


class GitHub(Strict):
    repository: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$",
        description="owner/name of the repository whose workflows may assume the roles.",
    )
    create_oidc_provider: bool = Field(
        True,
        description="Create the account's GitHub OIDC provider (IAM allows one per URL per account). False in every other stack of the account: the roles then trust the existing provider.",
    )
    oidc_provider_arn: str | None = Field(
        None,
        pattern=r"^arn:aws(-[a-z]+)*:iam::\d{12}:oidc-provider/token\.actions\.githubusercontent\.com$",
        description="ARN of the account's existing GitHub OIDC provider (with create_oidc_provider: false). Default: "
        "arn:<partition>:iam::<this account>:oidc-provider/token.actions.githubusercontent.com.",
    )
    deploy_environment: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.-]{1,255}$",
        description="GitHub environment the deploy job of this stack runs in (required reviewers); the deploy role "
        "then trusts that environment instead of refs/heads/main. Restrict the environment to the main branch.",
    )
    cluster_access: CiClusterAccess | None = Field(
        None,
        description="How the CI jobs reach the cluster's Kubernetes API (required): `self_hosted` runs the "
        "pulumi jobs on self-hosted runners inside the cluster's VPC (runner_labels); `runner_cidrs` adds the "
        "runners' egress CIDRs to the public endpoint's allow-list (new clusters only).",
    )
    runner_labels: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,100}$")]] = Field(
        default_factory=list,
        max_length=10,
        description="`runs-on` labels of the runners the pulumi jobs use: the self-hosted runners in the cluster's "
        "VPC (self_hosted, required), or the larger runners whose static IPs are runner_cidrs (optional; default "
        "ubuntu-24.04).",
    )
    runner_cidrs: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="Public egress CIDRs of the CI runners, e.g. GitHub larger runners with static IP ranges "
        "(cluster_access: runner_cidrs); added to the cluster endpoint's public allow-list.",
    )

    runner_security_group_ids: list[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")]] = Field(
        default_factory=list,
        max_length=10,
        description="Security groups of the self-hosted runners (cluster_access: self_hosted): the cluster security "
        "group admits them on 443 (the private endpoint answers nothing else). Runners in the cluster's VPC or a "
        "peered VPC of the same region. A new cluster needs this or runner_private_cidrs.",
    )
    runner_private_cidrs: list[str] = Field(
        default_factory=list,
        max_length=10,
        description="Private CIDRs of the self-hosted runners where a security group cannot be referenced (a VPC "
        "reached through a Transit Gateway): each is admitted on 443 to the cluster security group. /16 or "
        "narrower, RFC 1918.",
    )

    state_bucket: str | None = Field(
        None,
        pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
        description="S3 bucket of a self-managed Pulumi backend (PULUMI_BACKEND_URL=s3://<bucket>) instead of Pulumi "
        "Cloud: the preview role may read this stack's state in it, the deploy role write it; no Pulumi token then.",
    )
    state_kms_key_arn: str | None = Field(
        None,
        pattern=r"^arn:aws(-[a-z]+)*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f-]{36}$",
        description="KMS key of an awskms:// secrets provider: both roles may decrypt with it (a preview decrypts the "
        "stack's secret config), the deploy role also encrypt. Only with state_bucket.",
    )

    @field_validator("runner_private_cidrs")
    @classmethod
    def _runner_private_cidrs(cls, v: list[str]) -> list[str]:
        for cidr in v:
            net = ipaddress.ip_network(cidr, strict=True)
            rfc1918 = isinstance(net, ipaddress.IPv4Network) and any(
                net.subnet_of(ipaddress.IPv4Network(n)) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
            )
            if net.version != 4 or net.prefixlen < RUNNER_PRIVATE_CIDR_MIN_PREFIX or not rfc1918:
                raise ValueError(
                    f"'{cidr}' must be a private (RFC 1918) IPv4 CIDR of /{RUNNER_PRIVATE_CIDR_MIN_PREFIX} "
                    "or narrower: the runners' own subnets, not a whole network"
                )
        return v

    @field_validator("runner_cidrs")
    @classmethod
    def _runner_cidrs(cls, v: list[str]) -> list[str]:
        for cidr in v:
            net = ipaddress.ip_network(cidr, strict=True)
            rfc1918 = isinstance(net, ipaddress.IPv4Network) and any(
                net.subnet_of(ipaddress.IPv4Network(n)) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
            )
            if net.version != 4 or net.prefixlen == 0 or rfc1918:
                raise ValueError(
                    f"'{cidr}' must be a public IPv4 CIDR narrower than /0 (the endpoint allow-list "
                    "is matched against the runners' public egress address)"
                )
        return v


class TeamSharing(Strict):
    """How much of a team's floor the cohort may borrow, and how much the team may borrow (docs/scheduling.md)."""

    lending_limit_pct: Percent = Field(
        100,
        description="Share of each of the team's floors that other teams' "
        "queues may borrow while it is idle (lent GPUs are reclaimed, by preemption, "
        "when the team's own work arrives). 0 keeps the floor to the team.",
    )
    borrowing_limit_gpus: int | None = Field(
        None,
        ge=0,
        le=100_000,
        description="Most GPUs each of the team's "
        "experiment/learning queues may borrow from any one other pool's idle "
        "floor; omit for no limit beyond what that floor lends.",
    )
    borrowing_limit_pct: float | None = Field(
        None,
        ge=0,
        le=500,
        description="The same limit in percent of the "
        "borrowing pool's own floor (its nominal quota), rounded down to whole "
        "GPUs: 50 lets a pool with a 16-GPU floor borrow 8 GPUs of each other "
        "floor. A pool without a floor borrows nothing under it. Set this or "
        "borrowing_limit_gpus, not both.",
    )
    # Kueue (v0.19.2 FairSharing.weight) accepts 0 and reads it as an infinite share: a queue of weight 0 is
    # admitted to borrowed quota after every other and preempted first. gpuloan refuses it: "borrows nothing"
    # is borrowing_limit_gpus: 0, which Kueue enforces as a limit instead of an order (docs/scheduling.md).
    fair_share_weight: float = Field(
        1,
        gt=0,
        le=1000,
        description="The team's weight in Kueue's fair sharing "
        "among borrowers: idle floors go first to the queue whose borrowed GPUs "
        "divided by its weight are lowest (2 = twice the share of a team of weight "
        "1). Must be above 0; to borrow nothing, set borrowing_limit_gpus: 0.",
    )

    @model_validator(mode="after")
    def _one_borrow_limit(self) -> "TeamSharing":
        if self.borrowing_limit_gpus is not None and self.borrowing_limit_pct is not None:
            raise ValueError(
                "set borrowing_limit_gpus or borrowing_limit_pct, not both (they are the same "
                "limit, in GPUs or in percent of the pool's own floor)"
            )
        return self


class Kueue(Strict):
    """Kueue queues generated from the pools: the scheduler-side form of the loan."""

    enabled: bool = Field(
        True,
        description="Install Kueue and generate its flavors, queues and cohort from the "
        "pools. On by default: quota follows the config, idle floors lend, and jobs over quota wait "
        "suspended instead of as pending pods (docs/scheduling.md). Off if the cluster runs another "
        "batch scheduler or its own Kueue.",
    )
    chart_version: str | None = Field(None, pattern=r"^\d+\.\d+\.\d+$", description="Default: config/versions.py")
    production_spot_pools: list[Slug] = Field(
        default_factory=list,
        description="Production pools whose work may "
        "run on their spot capacity. Other production pools use the floor, "
        "then on-demand: capacity on_demand, or spot_then_on_demand's "
        "on-demand group for a batch pool without warm_up (docs/scheduling.md).",
    )
    fair_sharing: bool = Field(
        True,
        description="Kueue's fair sharing among borrowers: idle floors go first to "
        "the queue whose borrowed GPUs per fair_share_weight are lowest, and a borrower may "
        "preempt another's borrowed work when its share stays lower (docs/scheduling.md, "
        '"Fair sharing among borrowers"). Off: Kueue\'s classical order, where flavor order '
        "and timing decide and borrowers never preempt each other.",
    )
    fair_sharing_preemption_strategies: list[FairSharingPreemption] = Field(
        default_factory=lambda: [FairSharingPreemption.less_than_or_equal_to_final_share],
        description="Kueue's fairSharing.preemptionStrategies when fair_sharing is on: "
        "[LessThanOrEqualToFinalShare] (default) lets a borrower evict another's borrowed work "
        "only while its own share with the new job stays at or below the victim queue's share "
        "without the victim, so two borrowers never evict each other back and forth; adding "
        "LessThanInitialShare also lets it evict a larger job when its share is only below the "
        "victim queue's. The owner's reclaim of its floor is the same under each "
        '(docs/scheduling.md, "Fair sharing among borrowers").',
    )
    lend_ahead: bool = Field(
        False,
        description="Lend less of each floor ahead of its owner's return: the policy "
        "function lowers the floor's lendingLimit by what the owner runs, has waiting and, by "
        "its daily rhythm, will bring within reclaim_lookahead_minutes, and raises it again "
        "after; the owner's guarantee (nominalQuota) is untouched (docs/scheduling.md, "
        '"Lending ahead of the owner"). Off by default: on the organization benchmark (seed 1), '
        "with fair sharing as shipped, it cut reclaims 25-58 % and their lost GPU-hours 21-53 % "
        "for -0.1 to +0.4 % cost, halving both on rotation 1 only (on rotations 2 and 3 about "
        "half of the reclaims are borrowers evicting borrowers).",
    )
    reclaim_lookahead_minutes: int = Field(
        60,
        ge=10,
        le=720,
        description="How far ahead lend_ahead reads the "
        "owner's daily rhythm (minutes, rounded up to 10-minute slots): about "
        "the run time of the borrowed jobs you want to spare a reclaim.",
    )
    teams: dict[str, TeamSharing] = Field(
        default_factory=dict,
        description="Lending and borrowing limits per team "
        "(key: team name); teams not listed lend their whole floor and borrow "
        "without limit.",
    )

    @field_validator("fair_sharing_preemption_strategies")
    @classmethod
    def _kueue_accepts_the_strategies(cls, value: list[FairSharingPreemption]) -> list[FairSharingPreemption]:
        if tuple(value) not in FAIR_SHARING_PREEMPTION_SETS:
            accepted = " or ".join(
                "[" + ", ".join(s.value for s in combo) + "]" for combo in FAIR_SHARING_PREEMPTION_SETS
            )
            raise ValueError(f"Kueue v0.19.2 accepts {accepted}, not [{', '.join(s.value for s in value)}]")
        return value

    def sharing(self, team: str) -> TeamSharing:
        """The team's limits: its entry in `teams`, or the defaults (lends its whole floor, borrows without limit)."""
        return self.teams.get(team) or TeamSharing()


class Scheduling(Strict):
    """Batch admission inside the cluster: which job may start, on which capacity (docs/scheduling.md)."""

    kueue: Kueue = Kueue()


class CostAssumptions(Strict):
    """Usage the platform cost estimate cannot read from the plan: assumptions, shown as such (docs/budgets.md)."""

    nat_data_gb_per_month: float = Field(
        100,
        ge=0,
        le=10_000_000,
        description="GB per month through the NAT gateways (image pulls, AWS APIs without a VPC endpoint); an assumption for the cost estimate.",
    )
    log_ingest_gb_per_month: float = Field(
        10,
        ge=0,
        le=10_000_000,
        description="GB per month ingested into CloudWatch Logs (control plane, Container Insights, the policy function); an assumption for the cost estimate.",
    )
    container_insights_metrics_per_node: int = Field(
        50,
        ge=0,
        le=100_000,
        description="CloudWatch metrics Container Insights publishes per node (billed as custom metrics); an assumption for the cost estimate.",
    )
    policy_duration_ms: int = Field(
        2000,
        ge=1,
        le=900_000,
        description="Average run time of one policy function tick; an assumption for the cost estimate.",
    )


class InstancePrice(Strict):
    """A price the user read somewhere, for an instance type the price source lacks (docs/prices.md)."""

    ondemand_usd_per_hour: float = Field(gt=0, le=10_000, description="On-demand USD per instance-hour.")
    spot_usd_per_hour: float | None = Field(
        None, gt=0, le=10_000, description="Spot USD per instance-hour; omit to price spot at on-demand."
    )
    source: str = Field(
        min_length=3, description="Where the price was read (AWS pricing page, a quote, a contract) and when."
    )


class CommitmentRate(Strict):
    """Your own rate of one instance-hour under a commitment: it wins over the price book (docs/floor.md)."""

    usd_per_hour: float = Field(
        gt=0,
        le=1000,
        description="USD per instance-hour under the commitment (for an "
        "upfront payment option, the effective rate: upfront amortized over the term plus "
        "the recurring rate).",
    )
    source: str = Field(
        min_length=3,
        max_length=300,
        description="Where the rate comes from (your RI or Savings "
        "Plan invoice, the Savings Plans purchase page, a Cost Explorer recommendation; with its "
        "date).",
    )


class Commitment(Strict):
    """A Savings Plan or Reserved Instances the organization holds or plans: a billing discount, not capacity.

    AWS applies it hour by hour to every matching instance-hour of the organization (floors in a capacity
    reservation and elastic on-demand nodes alike, never spot or Capacity Blocks), and bills its fee every hour of
    its term, used or not (pricing/cost_model/billing.py, docs/aws-rules.md). gpuloan never buys one: it prices the
    environment with it."""

    name: Slug = Field(description="A name for the commitment (shown in the preview and cost-diff).")
    kind: CommitmentKind = Field(
        description="`reserved_instances` (Standard RIs of one type in one region), "
        "`ec2_instance_savings_plan` (one instance family in one region) or "
        "`compute_savings_plan` (any family, any region)."
    )
    term_years: Literal[1, 3] = Field(description="Term: 1 or 3 years.")
    payment_option: PaymentOption = Field(
        PaymentOption.no_upfront,
        description="`no_upfront`, `partial_upfront` or "
        "`all_upfront`. The price book holds no-upfront RI rates only: another "
        "option needs your own `rates`.",
    )
    status: CommitmentStatus = Field(
        description="`held` (bought) or `planned` (priced as if bought, to see what "
        "buying it would do). Both are priced."
    )
    source: str = Field(
        min_length=3,
        max_length=300,
        description="Where it comes from, with its date: the purchase "
        "(RI reservation id, Savings Plan id), or the Cost Explorer recommendation it follows.",
    )
    hourly_commitment_usd: float | None = Field(
        None, gt=0, le=1_000_000, description="Savings Plans (required): the committed spend per hour, at plan rates."
    )
    instance_type: GpuInstanceType | None = Field(None, description="Reserved Instances (required): the instance type.")
    count: int | None = Field(None, ge=1, le=100_000, description="Reserved Instances (required): how many instances.")
    region: str | None = Field(
        None,
        pattern=AWS_REGION,
        description="Reserved Instances and EC2 Instance Savings "
        "Plans: the region they apply in; default the environment's region. A Compute Savings "
        "Plan applies in every region and takes none.",
    )
    instance_family: str | None = Field(
        None,
        pattern=r"^[a-z][a-z0-9-]*$",
        description="EC2 Instance Savings Plans (required): the instance family, e.g. p4d.",
    )
    rates: dict[str, CommitmentRate] = Field(
        default_factory=dict,
        description="Your own rate per instance type "
        "(key) under this commitment; wins over the price book. Needed for every "
        "floor type the commitment covers that the price book has no rate for "
        "(the shared data has no Savings Plans rates).",
    )

    @field_validator("instance_type")
    @classmethod
    def _type(cls, v: str | None, info: ValidationInfo) -> str | None:
        return None if v is None else _known_gpu_instance(v, _facts(info))

    @field_validator("rates")
    @classmethod
    def _rate_types(cls, v: dict[str, CommitmentRate], info: ValidationInfo) -> dict[str, CommitmentRate]:
        for t in v:
            _known_gpu_instance(t, _facts(info))
        return v


class GpuLoanConfig(Strict):
    environment: Slug = Field(
        description="Environment name (dev, prod, ...): cost tag gpuloan:environment and resource name prefix."
    )
    region: str = Field(pattern=AWS_REGION, description="AWS region; equal to aws:region when that is set.")
    default_tags: dict[str, str] = Field(default_factory=dict, description="Extra tags on every resource.")
    cluster: Cluster
    pools: list[Pool] = Field(min_length=1, max_length=200)
    budget: EnvironmentBudget
    images: list[Image] = Field(default_factory=list)
    gpu_operator: GpuOperator = GpuOperator()
    policy: Policy = Policy()
    alarms: Alarms = Alarms()
    github: GitHub | None = None
    scheduling: Scheduling = Scheduling()
    protect_critical: bool = Field(
        True,
        description="Protect the floors' reservations and node groups, the EKS cluster and the policy state "
        "table: Pulumi refuses to delete or replace them (the update fails instead). Set false for a change that "
        "is meant to replace one, then back to true.",
    )
    cost_assumptions: CostAssumptions = CostAssumptions()
    instance_prices: dict[str, InstancePrice] = Field(
        default_factory=dict,
        description="Prices for instance types the price source lacks, each with its source; the price source wins where it has the type.",
    )
    commitments: list[Commitment] = Field(
        default_factory=list,
        max_length=100,
        description="Savings Plans and "
        "Reserved Instances the organization holds or plans, applied to this "
        "environment's usage as AWS applies them (docs/floor.md, \"Capacity and "
        'commitment"); their fees are fixed spend of this environment, used or not.',
    )

    @field_validator("default_tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) + GPULOAN_TAGS_PER_RESOURCE > MAX_TAGS_PER_RESOURCE:
            raise ValueError(
                f"{len(v)} tags plus the {GPULOAN_TAGS_PER_RESOURCE} gpuloan adds to each resource is "
                f"{len(v) + GPULOAN_TAGS_PER_RESOURCE}; AWS allows {MAX_TAGS_PER_RESOURCE} per resource, "
                f"so list at most {MAX_TAGS_PER_RESOURCE - GPULOAN_TAGS_PER_RESOURCE}"
            )
        for key, value in v.items():
            if key.lower().startswith("aws:"):
                raise ValueError(f"tag key '{key}' uses the reserved aws: prefix")
            if key.lower().startswith("eks:"):
                raise ValueError(
                    f"tag key '{key}': eks:* tags are set by EKS itself (eks:cluster-name, eks:nodegroup-name)"
                )
            if key.startswith("gpuloan:"):
                raise ValueError(f"tag key '{key}': gpuloan:* tags are set by gpuloan itself")
            if not 1 <= len(key) <= 128 or len(value) > 256:
                raise ValueError(f"tag '{key}' is too long (keys <= 128, values <= 256 characters)")
            for part, text in (("key", key), ("value", value)):
                bad = next((c for c in text if not tag_character_allowed(c)), None)
                if bad is not None:
                    raise ValueError(
                        f"tag {part} {text!r} has the character {bad!r} (U+{ord(bad):04X}); AWS "
                        f"allows {TAG_CHARACTERS_ALLOWED}"
                    )
        return v

    # The instance facts read from EC2 this config was validated with (parse's `instance_facts`: a price book's,
    # for types newer than config/instance_types.py); not a field: it is no part of the stack's config.
    _instance_facts: dict[str, InstanceType] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _keep_instance_facts(self, info: ValidationInfo) -> "GpuLoanConfig":
        self._instance_facts = dict(_facts(info) or {})
        return self

    @property
    def instance_facts(self) -> InstanceFacts:
        return self._instance_facts

    def instance_type(self, name: str) -> InstanceType | None:
        """The facts of an instance type as this config was validated: the table's, else those read from EC2."""
        return instance_types.lookup(name, self._instance_facts)

    def gpu_type(self, name: str) -> InstanceType:
        """The facts of a GPU type this config names (validation refused every type without facts)."""
        itype = self.instance_type(name)
        if itype is None:
            raise KeyError(f"'{name}' is no GPU type this config was validated with")
        return itype

    # Convenience views used by components, the preview and the policy settings.
    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools if p.name == name)

    @property
    def teams(self) -> list[str]:
        return sorted({p.team for p in self.pools})


# AWS tag keys and values (the Tag pattern `^([\p{L}\p{Z}\p{N}_.:/=+\-@]*)$` of the tagging APIs; docs/aws-rules.md):
# Unicode letters, separators (spaces) and numbers, and these symbols. A NUL, a tab or a zero-width space (format
# character Cf) is refused by the tagging call only when the resource is created, mid-deployment.
TAG_SYMBOLS = "_.:/=+-@"
TAG_CHARACTERS_ALLOWED = f"letters, digits, spaces and {' '.join(TAG_SYMBOLS)}"


def tag_character_allowed(c: str) -> bool:
    return c in TAG_SYMBOLS or unicodedata.category(c)[0] in "LZN"


# --- errors ------------------------------------------------------------------------------------------------


def policy_keeps_block(cfg: "GpuLoanConfig", g: Guaranteed | None) -> bool:
    """Whether the policy function keeps this floor's Capacity Block window (its group's desired size and, with
    Kueue, its floor quota): a Capacity Block, with the policy on and acting (a dry run changes nothing, so the
    program keeps sizing the block at each `pulumi up`). docs/floor.md."""
    return (
        g is not None and g.reservation == Reservation.capacity_block and cfg.policy.enabled and not cfg.policy.dry_run
    )


class ConfigError(Exception):
    """One or more problems in a stack config; each is (path, message)."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "config"):
        self.problems = problems
        self.source = source
        lines = "\n".join(f" - {path}: {msg}" for path, msg in problems)
        super().__init__(f"{len(problems)} problem(s) in {source}:\n{lines}")


def format_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("new", "existing") and out == "cluster":
            continue  # the discriminator tag, not a key the user wrote
        else:
            out += ("." if out else "") + str(part)
    return out or "(root)"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The config model that holds the key at `loc` (the last element), or None when it cannot be told."""
    import typing

    model: Any = GpuLoanConfig
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if model is None:
            return None
        if part in ("new", "existing") and model is GpuLoanConfig.model_fields["cluster"].annotation:
            model = NewCluster if part == "new" else ExistingCluster
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        model = field.annotation
        # Unwrap Optional / list / Annotated until a model (or a discriminated union) is left.
        for _ in range(4):
            args = [a for a in typing.get_args(model) if a is not type(None)]
            if isinstance(model, type) and issubclass(model, BaseModel):
                break
            if part == "cluster":
                model = GpuLoanConfig.model_fields["cluster"].annotation
                break
            model = args[0] if args else None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def did_you_mean(word: str, choices) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _pydantic_problems(err: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            loc = tuple(e["loc"])
            model = _model_at(loc)
            hint = did_you_mean(str(loc[-1]), model.model_fields) if model is not None else ""
            msg = f"unknown key{hint or ' (check the spelling; see docs/config.md)'}"
        elif e["type"] == "union_tag_invalid":
            msg = "cluster.mode must be 'new' or 'existing'"
        problems.append((format_path(tuple(e["loc"])), msg))
    return problems


# --- cross-field rules -------------------------------------------------------------------------------------


# Payments of the deprecated per-pool shorthand (`guaranteed.payment`) that are commitments, and what each stands for.
SHORTHAND_COMMITMENTS = {
    FloorPayment.reserved_1yr: (CommitmentKind.reserved_instances, 1),
    FloorPayment.reserved_3yr: (CommitmentKind.reserved_instances, 3),
    FloorPayment.savings_plan: (CommitmentKind.ec2_instance_savings_plan, 1),
}


def deprecations(cfg: GpuLoanConfig) -> list[tuple[str, str]]:
    """(path, message) for each deprecated setting in use: printed as warnings by validate and preview."""
    out = []
    for i, pool in enumerate(cfg.pools):
        g = pool.guaranteed
        if g is not None and g.payment in SHORTHAND_COMMITMENTS:
            kind, years = SHORTHAND_COMMITMENTS[g.payment]
            out.append(
                (
                    f"pools[{i}].guaranteed.payment",
                    f"'{g.payment}' is deprecated and will be removed in the "
                    f"next release: a commitment is the organization's, not a pool's. List it under `commitments` "
                    f"(kind: {kind}, term_years: {years}, status, source, "
                    + (
                        "instance_type, count)"
                        if kind == CommitmentKind.reserved_instances
                        else "instance_family, hourly_commitment_usd)"
                    )
                    + ' and drop payment (docs/floor.md, "Capacity and commitment"; CHANGELOG.md)',
                )
            )
    return out


Problems = list[tuple[str, str]]
# A cross-field rule: the (path, message) problems of one concern of a validated config.
Rule = Callable[["GpuLoanConfig"], Problems]


def _az_problems(cfg: GpuLoanConfig) -> Problems:
    problems: Problems = []
    for i, az in enumerate(cfg.cluster.availability_zones):
        if not az.startswith(cfg.region):
            problems.append((f"cluster.availability_zones[{i}]", f"'{az}' is not in region {cfg.region}"))
    return problems


def _pool_name_problems(cfg: GpuLoanConfig) -> Problems:
    problems: Problems = []
    for name, count in Counter(p.name for p in cfg.pools).items():
        if count > 1:
            idx = [i for i, p in enumerate(cfg.pools) if p.name == name][1]
            problems.append((f"pools[{idx}].name", f"pool name '{name}' is used {count} times; names must be unique"))
    return problems


def _guaranteed_problems(cfg: GpuLoanConfig, g: Guaranteed, at: str, add) -> None:
    """A floor's reservation: its id and AZ (`at` is the pool's path)."""
    cluster_azs = list(cfg.cluster.availability_zones)
    if g.reservation in (Reservation.capacity_block,) and not g.reservation_id:
        add(
            f"{at}.guaranteed.reservation_id",
            "capacity_block needs the id of a Capacity Block you bought "
            "(gpuloan never buys one: they cannot be cancelled)",
        )
    if g.reservation == Reservation.none and g.reservation_id:
        add(f"{at}.guaranteed.reservation_id", "set reservation: odcr or capacity_block to use a reservation id")
    if g.reservation != Reservation.none and not g.availability_zone:
        add(f"{at}.guaranteed.availability_zone", "a reservation lives in one AZ; name it")
    if g.availability_zone:
        if not g.availability_zone.startswith(cfg.region):
            add(f"{at}.guaranteed.availability_zone", f"'{g.availability_zone}' is not in region {cfg.region}")
        elif cluster_azs and g.availability_zone not in cluster_azs:
            add(
                f"{at}.guaranteed.availability_zone",
                f"'{g.availability_zone}' is not one of the cluster AZs ({', '.join(cluster_azs)})",
            )
    _floor_payment_problems(g, f"{at}.guaranteed", add)


def _elastic_problems(cfg: GpuLoanConfig, pool: Pool, at: str, add) -> None:
    """An elastic pool's types agree with each other and with the floor (`at` is the pool's path)."""
    e, g = pool.elastic, pool.guaranteed
    assert e is not None
    facts = {t: cfg.gpu_type(t) for t in e.instance_types}
    gpus = {t: f.gpus for t, f in facts.items()}
    # Several sizes (GPUs per node) are several pairs of node groups (node_sizes, policy/sizes.py): one GPU
    # model, so a job fits whichever size the policy grows for it (a job built for one GPU must not land on
    # another). One size keeps today's rule (types of one size may differ, as A100 and H100 nodes of 8).
    models = {t: f.gpu_model for t, f in facts.items()}
    if len(set(gpus.values())) > 1 and len(set(models.values())) > 1:
        listing = ", ".join(f"{t}={gpus[t]}x{m}" for t, m in models.items())
        add(
            f"{at}.elastic.instance_types",
            f"several node sizes of several GPU models ({listing}); the "
            "sizes of a pool must share one GPU model: put another model in a pool of its own",
        )
    floor = cfg.gpu_type(g.instance_type) if g is not None else None
    if g is not None and floor is not None and floor.gpus not in set(gpus.values()):
        add(
            f"{at}.elastic.instance_types",
            f"the floor ({g.instance_type}) has "
            f"{floor.gpus} GPUs per node, the elastic types have "
            f"{sorted(set(gpus.values()))}; jobs sized for one would not fit the other",
        )
    archs = {f.cpu_architecture for f in facts.values()}
    if floor is not None:
        archs.add(floor.cpu_architecture)
    if len(archs) > 1:
        add(
            f"{at}.elastic.instance_types",
            "mixes x86_64 and arm64 (Graviton) types; a node group has one AMI, so keep one CPU architecture per pool",
        )
    if e.idle_utilization_pct >= e.scale_up_utilization_pct:
        add(
            f"{at}.elastic.idle_utilization_pct",
            f"must be below scale_up_utilization_pct "
            f"({e.scale_up_utilization_pct}), or the policy would scale up and reclaim the same nodes",
        )
    if e.on_demand_max_nodes is not None and e.capacity != ElasticCapacity.spot_then_on_demand:
        add(f"{at}.elastic.on_demand_max_nodes", "only applies to capacity: spot_then_on_demand")


def _shard_problems(cfg: GpuLoanConfig) -> Problems:
    """Every pool in exactly one shard, shards non-empty and named once (when policy.shards is set at all)."""
    shards = cfg.policy.shards
    if not shards:
        return []
    problems: Problems = []
    seen_names: set[str] = set()
    owner: dict[str, str] = {}  # pool -> the first shard that lists it
    pool_names = {p.name for p in cfg.pools}
    for i, shard in enumerate(shards):
        if shard.name in seen_names:
            problems.append(
                (
                    f"policy.shards[{i}].name",
                    f"shard name '{shard.name}' is used twice; names must be "
                    "unique (each names a schedule and a lease)",
                )
            )
        seen_names.add(shard.name)
        for j, pool in enumerate(shard.pools):
            at = f"policy.shards[{i}].pools[{j}]"
            if pool not in pool_names:
                problems.append((at, f"pool '{pool}' is not a pool of this environment"))
            elif pool in owner:
                problems.append(
                    (
                        at,
                        f"pool '{pool}' is in two shards, '{owner[pool]}' and '{shard.name}'; each "
                        "pool must be in exactly one (two ticks would decide it at once)",
                    )
                )
            else:
                owner[pool] = shard.name
    for i, configured in enumerate(cfg.pools):
        if configured.name not in owner:
            problems.append(
                (
                    f"pools[{i}].name",
                    f"pool '{configured.name}' is in no shard of policy.shards; list "
                    "it in exactly one, or no tick would ever decide it",
                )
            )
    return problems


def _pool_problems(cfg: GpuLoanConfig) -> Problems:
    """Each pool on its own: it has capacity, its floor's reservation, its elastic types."""
    problems: Problems = []
    add = lambda path, msg: problems.append((path, msg))  # noqa: E731
    for i, pool in enumerate(cfg.pools):
        at = f"pools[{i}]"
        if pool.guaranteed is None and pool.elastic is None:
            add(at, "a pool needs a guaranteed floor, elastic capacity, or both")
        if pool.guaranteed is not None:
            _guaranteed_problems(cfg, pool.guaranteed, at, add)
        if pool.elastic is not None:
            _elastic_problems(cfg, pool, at, add)
    return problems


def _budgets_problems(cfg: GpuLoanConfig) -> Problems:
    """The budgets' notifications, and the pool budgets within the environment's. What the floors cost against a
    budget is a money rule (pricing/checks.py): the config knows no prices."""
    problems: Problems = []
    add = lambda path, msg: problems.append((path, msg))  # noqa: E731
    for i, pool in enumerate(cfg.pools):
        if pool.budget is not None:
            _budget_problems(pool.budget, f"pools[{i}].budget", add)
    _budget_problems(cfg.budget, "budget", add)
    pool_budgets = sum(p.budget.monthly_usd for p in cfg.pools if p.budget)
    if pool_budgets > cfg.budget.monthly_usd:
        add("budget.monthly_usd", f"is below the sum of the pool budgets (${pool_budgets:,.0f})")
    return problems


def _image_name_problems(cfg: GpuLoanConfig) -> Problems:
    names = Counter(img.name for img in cfg.images)
    return [
        (f"images[{j}].name", f"image name '{img.name}' is used {names[img.name]} times")
        for j, img in enumerate(cfg.images)
        if names[img.name] > 1
    ]


def _endpoint_problems(cfg: GpuLoanConfig) -> Problems:
    problems: Problems = []
    if not (isinstance(cfg.cluster, NewCluster) and cfg.cluster.public_endpoint_cidrs):
        return problems
    cidrs = cfg.cluster.public_endpoint_cidrs
    for j, cidr in enumerate(cidrs):
        if ipaddress.ip_network(cidr).prefixlen == 0:
            problems.append(
                (
                    f"cluster.public_endpoint_cidrs[{j}]",
                    "0.0.0.0/0 opens the API endpoint to the "
                    "internet; list your office/VPN CIDRs or leave empty for a private endpoint",
                )
            )
    # Several CIDRs can open it just as wide (0.0.0.0/1 + 128.0.0.0/1).
    nets = [ipaddress.ip_network(c) for c in cidrs]
    for version in (4, 6):
        same: list[Any] = [n for n in nets if n.version == version]  # collapse_addresses takes one IP version
        union = list(ipaddress.collapse_addresses(same))
        if any(n.prefixlen == 0 for n in union) and not any(n.prefixlen == 0 for n in nets):
            problems.append(
                (
                    "cluster.public_endpoint_cidrs",
                    "together these CIDRs cover the whole internet "
                    f"({', '.join(str(n) for n in nets if n.version == version)}), which opens the API "
                    "endpoint to everyone; list your office/VPN CIDRs or leave empty for a private endpoint",
                )
            )
    return problems


def _team_name_problems(cfg: GpuLoanConfig) -> Problems:
    reserved = system_namespaces()
    return [
        (
            f"pools[{i}].team",
            f"team '{pool.team}' would be the Kubernetes namespace '{pool.team}', which the "
            "cluster or gpuloan's add-ons use (kube-*, default, "
            f"{', '.join(sorted(reserved - {'default'}))}); pick another team name",
        )
        for i, pool in enumerate(cfg.pools)
        if pool.team in reserved or pool.team.startswith("kube-")
    ]


def _commitments_rule(cfg: GpuLoanConfig) -> Problems:
    problems: Problems = []
    _commitment_problems(cfg, lambda path, msg: problems.append((path, msg)))
    return problems


def cross_field_problems(cfg: GpuLoanConfig, rules: Sequence[Rule] = ()) -> Problems:
    """Every rule of RULES (the config's own), then `rules` (what the caller adds: the money rules of
    pricing/checks.py, which need the price book), each problem once, in rule order."""
    problems: Problems = []
    for rule in (*RULES, *rules):
        problems.extend(rule(cfg))
    return problems


def system_namespaces() -> set[str]:
    """Namespaces a team may not take: Kubernetes' own and those of the add-ons gpuloan installs."""
    return {
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        GPU_OPERATOR_NAMESPACE,
        GPU_METRICS_AGENT_NAMESPACE,
        KUEUE_NAMESPACE,
    }


def _github_problems(cfg: GpuLoanConfig) -> list[tuple[str, str]]:
    gh = cfg.github
    if gh is None:
        return []
    out = []
    if gh.oidc_provider_arn and gh.create_oidc_provider:
        out.append(
            (
                "github.oidc_provider_arn",
                "set create_oidc_provider: false to use an existing provider (IAM "
                "allows one provider per URL per account, so creating a second one fails)",
            )
        )
    if gh.state_kms_key_arn and not gh.state_bucket:
        out.append(("github.state_kms_key_arn", "only with state_bucket (Pulumi Cloud encrypts secrets itself)"))
    if gh.cluster_access is None:
        out.append(
            (
                "github.cluster_access",
                "pick how CI reaches the cluster API: self_hosted (runner_labels: "
                "runners inside the VPC) or runner_cidrs (runner egress CIDRs added to the endpoint allow-list); "
                "GitHub-hosted runners cannot reach a private or CIDR-restricted endpoint",
            )
        )
    elif gh.cluster_access == CiClusterAccess.self_hosted:
        if not gh.runner_labels:
            out.append(("github.runner_labels", "name the labels of the self-hosted runners in the cluster's VPC"))
        if gh.runner_cidrs:
            out.append(("github.runner_cidrs", "only with cluster_access: runner_cidrs"))
        if isinstance(cfg.cluster, NewCluster) and not (gh.runner_security_group_ids or gh.runner_private_cidrs):
            # The endpoint's private access answers through the cluster security group, which admits only the
            # control plane and the nodes: without a rule every Kubernetes call of the pulumi jobs times out.
            out.append(
                (
                    "github.runner_security_group_ids",
                    "name the self-hosted runners' security group(s) (or "
                    "github.runner_private_cidrs): the cluster security group must admit them on 443, or every "
                    "preview and deploy times out on the private endpoint",
                )
            )
    else:
        if gh.runner_security_group_ids or gh.runner_private_cidrs:
            out.append(("github.runner_security_group_ids", "only with cluster_access: self_hosted"))
        if not gh.runner_cidrs:
            out.append(("github.runner_cidrs", "list the runners' public egress CIDRs"))
        if not isinstance(cfg.cluster, NewCluster):
            out.append(
                (
                    "github.cluster_access",
                    "runner_cidrs changes the endpoint allow-list, which only a cluster "
                    "this stack creates can have; add the CIDRs to the existing cluster yourself and use "
                    "self_hosted, or run CI inside its VPC",
                )
            )
        elif not cfg.cluster.public_endpoint_cidrs:
            out.append(
                (
                    "github.cluster_access",
                    "the cluster endpoint is private (cluster.public_endpoint_cidrs is "
                    "empty), so no runner CIDR can reach it; use self_hosted runners in the VPC",
                )
            )
    return out


def endpoint_public_cidrs(cfg: GpuLoanConfig) -> list[str]:
    """The new cluster's public endpoint allow-list: the configured CIDRs plus the CI runners' (runner_cidrs)."""
    cidrs = list(cfg.cluster.public_endpoint_cidrs) if isinstance(cfg.cluster, NewCluster) else []
    gh = cfg.github
    if cidrs and gh is not None and gh.cluster_access == CiClusterAccess.runner_cidrs:
        cidrs += [c for c in gh.runner_cidrs if c not in cidrs]
    return cidrs


def _floor_payment_problems(g: Guaranteed, at: str, add) -> None:
    """The payment fits the reservation. Whether the book has the rate of that payment is a money rule
    (pricing/checks.py)."""
    if g.payment == FloorPayment.capacity_block and g.reservation != Reservation.capacity_block:
        add(
            f"{at}.payment",
            "capacity_block payment needs reservation: capacity_block (the floor runs in the "
            "Capacity Block you bought)",
        )
    elif g.reservation == Reservation.capacity_block and g.payment not in (None, FloorPayment.capacity_block):
        add(
            f"{at}.payment",
            f"a Capacity Block is paid up front at its own price; {g.payment} does not apply to "
            "it (Reserved Instances and Savings Plans do not cover Capacity Block usage): use capacity_block",
        )


def _commitment_problems(cfg: GpuLoanConfig, add) -> None:
    """Each commitment has the fields its kind needs (and none it does not), and a rate for every floor type it
    may cover: the user's or the price book's. gpuloan never guesses a committed rate."""
    names = Counter(c.name for c in cfg.commitments)
    floor_types = {p.guaranteed.instance_type for p in cfg.pools if p.guaranteed is not None}
    for i, c in enumerate(cfg.commitments):
        at = f"commitments[{i}]"
        if names[c.name] > 1:
            add(f"{at}.name", f"commitment name '{c.name}' is used {names[c.name]} times; names must be unique")
        ri = c.kind == CommitmentKind.reserved_instances
        needs = {
            "instance_type": ri,
            "count": ri,
            "hourly_commitment_usd": not ri,
            "instance_family": c.kind == CommitmentKind.ec2_instance_savings_plan,
        }
        for field, needed in needs.items():
            given = getattr(c, field) is not None
            if needed and not given:
                add(f"{at}.{field}", f"required for kind {c.kind}")
            elif given and not needed:
                add(f"{at}.{field}", f"does not apply to kind {c.kind}")
        if c.kind == CommitmentKind.compute_savings_plan and c.region is not None:
            add(f"{at}.region", "a Compute Savings Plan applies in every region; it takes no region")
        if c.instance_family is not None and not any(
            f.family == c.instance_family for f in instance_types.known(cfg.instance_facts).values()
        ):
            add(f"{at}.instance_family", f"'{c.instance_family}' is not the family of any GPU type gpuloan knows")
        for t in c.rates:
            if ri and t != c.instance_type:
                add(f"{at}.rates.{t}", f"a Reserved Instance covers its own type ({c.instance_type}) only")
            elif (
                c.kind == CommitmentKind.ec2_instance_savings_plan
                and c.instance_family
                and t.split(".", 1)[0] != c.instance_family
            ):
                add(f"{at}.rates.{t}", f"an EC2 Instance Savings Plan for {c.instance_family} does not cover {t}")
        if ri and c.instance_type is not None and c.instance_type not in floor_types:
            pass  # valid: an RI no floor matches still bills its fee (shown as unused); elastic on-demand may use it
        # Whether the book has a committed rate for every floor type the commitment covers: a money rule
        # (pricing/checks.py).


def _budget_problems(b: Budget, at: str, add) -> None:
    n = len(b.actual_thresholds_pct) + len(b.forecasted_thresholds_pct)
    if n > MAX_BUDGET_NOTIFICATIONS:
        add(
            f"{at}.actual_thresholds_pct",
            f"{n} notifications; AWS Budgets allows {MAX_BUDGET_NOTIFICATIONS} per budget",
        )
    if not b.alert_emails and at == "budget":
        add(f"{at}.alert_emails", "name at least one address: budget alerts are the point of a budget")
    if b.enforcement == Enforcement.cap_elastic and 100.0 not in b.actual_thresholds_pct:
        add(
            f"{at}.actual_thresholds_pct",
            "cap_elastic drains elastic capacity at 100%; include 100 so people hear of it",
        )


# --- hardening rules (issue 24): inputs that passed silently ---------------------------------------------------

# YAML 1.1 reads these as booleans or null: a name spelled so turns into another value in some tools (the Pulumi
# CLI reads `environment: true` as a string, PyYAML and others as a bool), and reads as a flag to people.
YAML_AMBIGUOUS_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "y", "n", "null", "none"})
# Networks no public endpoint allow-list can usefully name: the endpoint sees the client's public address.
NON_PUBLIC_NETWORKS = tuple(
    ipaddress.IPv4Network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16")
)


@functools.cache
def known_regions() -> frozenset[str]:
    """Every region botocore's bundled endpoint data lists for EC2, in every partition."""
    import boto3

    session = boto3.session.Session()
    return frozenset(
        r
        for partition in session.get_available_partitions()
        for r in session.get_available_regions("ec2", partition_name=partition)
    )


@functools.cache
def known_instance_types() -> frozenset[str]:
    """The EC2 instance types of botocore's bundled EC2 model (the `InstanceType` enum)."""
    import boto3

    client = boto3.session.Session(region_name="us-east-1").client("ec2")
    return frozenset(client.meta.service_model.shape_for("InstanceType").enum)


def _hardening_problems(cfg: GpuLoanConfig) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    add = lambda path, msg: problems.append((path, msg))  # noqa: E731
    if cfg.region not in known_regions():
        add(
            "region",
            f"'{cfg.region}' is not an AWS region (botocore's endpoint data lists none by that name; if "
            "the region is new, update boto3)",
        )
    if cfg.environment.lower() in YAML_AMBIGUOUS_WORDS:
        add("environment", f"'{cfg.environment}' reads as a YAML boolean/null; name the environment (dev, prod, ...)")
    budgets = [("budget", cfg.budget)] + [(f"pools[{i}].budget", p.budget) for i, p in enumerate(cfg.pools) if p.budget]
    for at, b in budgets:
        seen: set[str] = set()
        for j, email in enumerate(b.alert_emails):
            if email.lower() in seen:
                add(f"{at}.alert_emails[{j}]", f"'{email}' is listed twice (AWS Budgets refuses duplicate subscribers)")
            seen.add(email.lower())
    if isinstance(cfg.cluster, NewCluster):
        for j, cidr in enumerate(cfg.cluster.public_endpoint_cidrs):
            net = ipaddress.ip_network(cidr, strict=True)
            if isinstance(net, ipaddress.IPv4Network) and any(net.subnet_of(n) for n in NON_PUBLIC_NETWORKS):
                add(
                    f"cluster.public_endpoint_cidrs[{j}]",
                    f"'{cidr}' is a private or reserved network: the public "
                    "endpoint sees clients' public addresses (reach from inside the VPC uses the private endpoint)",
                )
        system_type = cfg.cluster.system_nodes.instance_type
        if cfg.instance_type(system_type) is not None or re.match(r"^(p|g|gr)\d", system_type):
            add(
                "cluster.system_nodes.instance_type",
                f"'{system_type}' is a GPU type; system nodes are small "
                "non-GPU nodes (e.g. m7i.large): GPU pools are configured under pools",
            )
        elif system_type not in known_instance_types():
            add(
                "cluster.system_nodes.instance_type",
                f"'{system_type}' is not an EC2 instance type (not in botocore's EC2 model)",
            )
    if cfg.gpu_operator.enabled and cfg.gpu_operator.mig_strategy == MigStrategy.mixed and cfg.scheduling.kueue.enabled:
        add(
            "gpu_operator.mig_strategy",
            "mixed exposes MIG slices as nvidia.com/mig-* resources, which the Kueue "
            "ClusterQueues neither cover nor exclude, so such workloads are never admitted; use none or single, or "
            "turn scheduling.kueue off",
        )
    return problems


# --- entry points ------------------------------------------------------------------------------------------


# List sections whose broken items can be set aside so the cross-field rules still check the rest.
_ITEM_SECTIONS = ("pools", "images")


def parse(
    data: dict[str, Any],
    source: str = "config",
    *,
    instance_facts: InstanceFacts | None = None,
    rules: Sequence[Rule] = (),
) -> GpuLoanConfig:
    """Validate a `gpuloan:` namespace (keys without the prefix). Raises ConfigError with every problem: the
    config's own (RULES) and the caller's `rules` (pricing/checks.py's money rules, which need the price book).
    `instance_facts`: the facts read from EC2 for types newer than config/instance_types.py (a price book's).
    Writes nothing global: the config's own `instance_prices` reach the prices through pricing, which reads them
    from the returned config."""
    context = {INSTANCE_FACTS: dict(instance_facts or {})}
    try:
        cfg = GpuLoanConfig.model_validate(data, context=context)
    except ValidationError as err:
        problems = _pydantic_problems(err)
        raise ConfigError(problems + _cross_field_problems_of_the_rest(data, err, context, rules), source) from None
    problems = cross_field_problems(cfg, rules)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def _cross_field_problems_of_the_rest(
    data: dict[str, Any], err: ValidationError, context: dict[str, Any], rules: Sequence[Rule]
) -> Problems:
    """So that one run reports everything: set aside the pools/images that failed their shape checks (and unknown
    top-level keys), validate what is left, and run the cross-field rules on it, with paths mapped back to the
    original indices. A broken section that cannot be set aside (cluster, budget, ...) skips this: the rules
    would only guess. Rules over a subset of pools can miss problems but not invent them."""
    if not isinstance(data, dict):
        return []
    drop: dict[str, set[int]] = {name: set() for name in _ITEM_SECTIONS}
    extra_keys: set[str] = set()
    for e in err.errors():
        loc = tuple(e["loc"])
        if len(loc) >= 2 and loc[0] in _ITEM_SECTIONS and isinstance(loc[1], int):
            drop[loc[0]].add(loc[1])
        elif len(loc) == 1 and e["type"] == "extra_forbidden":
            extra_keys.add(str(loc[0]))
        else:
            return []
    rest = {k: v for k, v in data.items() if k not in extra_keys}
    kept: dict[str, list[int]] = {}
    for name in _ITEM_SECTIONS:
        items = rest.get(name)
        if isinstance(items, list):
            kept[name] = [i for i in range(len(items)) if i not in drop[name]]
            rest[name] = [items[i] for i in kept[name]]
    if not rest.get("pools"):
        return []
    try:
        partial = GpuLoanConfig.model_validate(rest, context=context)
    except ValidationError:
        return []

    def original(path: str) -> str:
        m = re.match(r"^(pools|images)\[(\d+)\]", path)
        if not m or m.group(1) not in kept:
            return path
        return f"{m.group(1)}[{kept[m.group(1)][int(m.group(2))]}]" + path[m.end() :]

    # Rules that look pools or teams up by name (scheduling.kueue) must not report the set-aside ones as missing.
    pools = data.get("pools")
    items = pools if isinstance(pools, list) else []
    aside = [items[i] for i in drop["pools"] if i < len(items) and isinstance(items[i], dict)]
    token = SET_ASIDE.set(frozenset(str(p.get(k)) for p in aside for k in ("name", "team") if p.get(k)))
    try:
        return [(original(path), msg) for path, msg in cross_field_problems(partial, rules)]
    finally:
        SET_ASIDE.reset(token)


NAMESPACE = "gpuloan"


def namespace_problems(keys) -> list[tuple[str, str]]:
    """Config keys whose namespace is not a string or looks like a misspelt `gpuloan` (`gpulaon:policy`): their
    settings would be ignored silently."""
    import difflib

    problems = []
    for key in keys:
        if not isinstance(key, str):
            problems.append((str(key), "config keys are strings of the form namespace:key"))
            continue
        namespace, sep, name = key.partition(":")
        if sep and namespace != NAMESPACE and difflib.get_close_matches(namespace, [NAMESPACE], n=1, cutoff=0.7):
            problems.append((key, f"unknown config namespace '{namespace}'; did you mean '{NAMESPACE}:{name}'?"))
    return problems


CONFIG_JSON_HINT = (
    "validate the decrypted values with `pulumi config --show-secrets --json -s STACK > cfg.json` "
    "and `gpuloan validate -s STACK --config-json cfg.json` (delete cfg.json afterwards)"
)


def secure_paths(value: Any, path: str = "") -> list[str]:
    """Paths of Pulumi secrets (`{secure: <ciphertext>}`) in a stack file's values: gpuloan cannot decrypt them."""
    from config import secret_values

    return secret_values.secure_paths(value, path)


def _problems_of(
    data: dict[str, Any], source: str, instance_facts: InstanceFacts | None, rules: Sequence[Rule]
) -> Problems:
    try:
        parse(data, source, instance_facts=instance_facts, rules=rules)
    except ConfigError as err:
        return err.problems
    return []


def with_secret_placeholders(
    config: dict[str, Any], source: str, *, instance_facts: InstanceFacts | None = None, rules: Sequence[Rule] = ()
) -> tuple[dict[str, Any], list[str]]:
    """A stack file's `config:` map with each `secure:` gpuloan value replaced by a placeholder its field accepts
    (config/secret_values.py), and the paths replaced: not checked offline. A secret no placeholder fits stays."""
    from config import secret_values

    data = {k.split(":", 1)[1]: v for k, v in config.items() if isinstance(k, str) and k.startswith("gpuloan:")}
    if not secret_values.secure_paths(data):
        return config, []
    data, replaced, _ = secret_values.substitute(data, lambda d: _problems_of(d, source, instance_facts, rules))
    return {**config, **{f"{NAMESPACE}:{k}": v for k, v in data.items()}}, replaced


def _esc_environments(doc: dict[str, Any]) -> list[str]:
    """The Pulumi ESC environments a stack file imports (`environment: [a, b]` or `environment: {imports: [...]}`)."""
    env = (doc or {}).get("environment")
    if isinstance(env, dict):
        env = env.get("imports")
    if isinstance(env, str):
        env = [env]
    return [str(e) for e in env or [] if isinstance(e, (str, int))]


def from_stack_yaml(
    doc: dict[str, Any], source: str, *, instance_facts: InstanceFacts | None = None, rules: Sequence[Rule] = ()
) -> GpuLoanConfig:
    """Pulumi.<env>.yaml's `config:` map → the `gpuloan:` namespace → GpuLoanConfig (parse's `instance_facts` and
    `rules`: pricing/checks.py from_stack_yaml passes a price book's).

    A value the file holds only encrypted (`secure:`), or a key an imported ESC environment may supply, gets a
    message saying so and how to validate the real values, instead of a type error or "Field required"."""
    config = (doc or {}).get("config") or {}
    if not isinstance(config, dict):
        raise ConfigError([("config", "must be a mapping of 'namespace:key' to values")], source)
    # A secret gets a placeholder its field accepts, so everything else is validated (the caller lists the
    # replaced paths as not checked: with_secret_placeholders); one no placeholder fits is reported below.
    config, _ = with_secret_placeholders(config, source, instance_facts=instance_facts, rules=rules)
    data = {k.split(":", 1)[1]: v for k, v in config.items() if isinstance(k, str) and k.startswith("gpuloan:")}
    problems = namespace_problems(config)
    aws_region = config.get("aws:region")
    secrets = secure_paths(data)
    try:
        cfg = parse(data, source, instance_facts=instance_facts, rules=rules)
    except ConfigError as err:
        problems += err.problems
        cfg = None
    problems += region_problems(aws_region, data.get("region"))
    if secrets:
        secret_set = set(secrets)
        problems = [
            (path, msg)
            for path, msg in problems
            if not any(path == s or path.startswith(s + ".") or path.startswith(s + "[") for s in secret_set)
        ]
        problems += [
            (
                path,
                "a Pulumi secret (`secure:`), encrypted in the stack file: gpuloan cannot read it "
                f"offline; {CONFIG_JSON_HINT}",
            )
            for path in secrets
        ]
    imported = _esc_environments(doc)
    if imported:
        problems = [
            (
                path,
                f"{msg}: not in {source}; the stack imports the ESC environment(s) "
                f"{', '.join(imported)}, which may supply it: {CONFIG_JSON_HINT}",
            )
            if msg == "Field required"
            else (path, msg)
            for path, msg in problems
        ]
    if problems or cfg is None:
        raise ConfigError(problems, source)
    return cfg


def region_problems(aws_region: Any, gpuloan_region: Any) -> list[tuple[str, str]]:
    if aws_region and gpuloan_region and aws_region != gpuloan_region:
        return [
            (
                "region",
                f"gpuloan:region is {gpuloan_region} but aws:region is {aws_region}; they must match "
                "(the stack's provider uses gpuloan:region, tools and other providers use aws:region)",
            )
        ]
    return []


def from_engine_config(
    raw_config: dict[str, Any], source: str, *, instance_facts: InstanceFacts | None = None, rules: Sequence[Rule] = ()
) -> GpuLoanConfig:
    """The string map the Pulumi engine hands a program (`namespace:key` -> the value, JSON text for anything but a
    string) → the `gpuloan:` namespace → GpuLoanConfig (parse's `instance_facts` and `rules`). The program reads the
    map from the engine (stacks/load.py from_pulumi_config); config/ never imports Pulumi."""
    import json

    data: dict[str, Any] = {}
    problems = namespace_problems(raw_config)
    for key, raw in raw_config.items():
        namespace, _, name = key.partition(":")
        if namespace != NAMESPACE:
            continue
        name = name.removeprefix("config:")  # legacy "project:config:key" form
        try:
            data[name] = json.loads(raw)
        except (json.JSONDecodeError, TypeError):
            data[name] = raw
        except RecursionError:
            problems.append((name, "nested too deeply"))
    # The CLI checks this too (from_stack_yaml); `pulumi up` must not depend on someone having run it.
    problems += region_problems(raw_config.get("aws:region"), data.get("region"))
    try:
        cfg = parse(data, source, instance_facts=instance_facts, rules=rules)
    except ConfigError as err:
        raise ConfigError(problems + err.problems, source) from None
    if problems:
        raise ConfigError(problems, source)
    return cfg


def json_schema() -> dict[str, Any]:
    schema = GpuLoanConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gpuloan stack config (the gpuloan: namespace of Pulumi.<env>.yaml)"
    return schema


# --- capacity rules (stacks/cluster.py, guaranteed.py, elastic.py) -------------------------------------------

# The longest node group kind gpuloan uses (see config/names.py: <env>-<pool>-<kind>_ + generated suffix).
_LONGEST_GROUP_SUFFIX = "guaranteed"


def _capacity_problems(cfg: GpuLoanConfig) -> list[tuple[str, str]]:
    from config import versions

    problems: list[tuple[str, str]] = []
    if (
        isinstance(cfg.cluster, NewCluster)
        and cfg.cluster.bin_packing
        and parse_version(cfg.cluster.kubernetes_version) < BIN_PACKING_MIN_VERSION
    ):
        problems.append(
            (
                "cluster.bin_packing",
                f"bin packing needs Kubernetes {fmt_version(BIN_PACKING_MIN_VERSION)} "
                f"or later (EKS advanced control plane configuration); cluster.kubernetes_version is "
                f"{cfg.cluster.kubernetes_version}",
            )
        )
    if isinstance(cfg.cluster, NewCluster) and cfg.cluster.kubernetes_version not in versions.EKS_ADDON_VERSIONS:
        problems.append(
            (
                "cluster.kubernetes_version",
                f"no pinned EKS add-on versions for "
                f"{cfg.cluster.kubernetes_version} (pinned: {', '.join(sorted(versions.EKS_ADDON_VERSIONS))}); "
                "add them to config/versions.py EKS_ADDON_VERSIONS",
            )
        )
    for i, pool in enumerate(cfg.pools):
        suffix = _LONGEST_GROUP_SUFFIX
        if pool.elastic is not None:  # another node size's groups are named longer: "on-demand-4gpu"
            suffix = max(
                [suffix] + [f"on-demand{size_suffix(z)}" for z in pool_sizes(pool.elastic, cfg.instance_facts)], key=len
            )
        longest = node_group_name_prefix(cfg.environment, pool.name, suffix)
        if len(longest) > NODE_GROUP_PREFIX_MAX:
            problems.append(
                (
                    f"pools[{i}].name",
                    f"node group name prefix '{longest}' would be {len(longest)} "
                    f"characters; with the {GENERATED_SUFFIX_LENGTH}-character suffix the provider adds, EKS's "
                    f"63-character limit leaves {NODE_GROUP_PREFIX_MAX}: shorten the pool or environment name",
                )
            )
        g = pool.guaranteed
        if g is not None and g.reservation != Reservation.capacity_block:
            for field in (
                "capacity_block_active",
                "capacity_block_start",
                "capacity_block_end",
                "capacity_block_checkpoint_lead_minutes",
            ):
                if field in g.model_fields_set and getattr(g, field) is not None:
                    problems.append((f"pools[{i}].guaranteed.{field}", "only applies to reservation: capacity_block"))
        if g is not None and g.reservation == Reservation.capacity_block:
            problems += _capacity_block_window_problems(f"pools[{i}].guaranteed", g)
        if g is not None and g.reservation == Reservation.capacity_block:
            if g.capacity_block_end is None:
                problems.append(
                    (
                        f"pools[{i}].guaranteed.capacity_block_end",
                        "give the block's end time (UTC, e.g. "
                        "2027-01-15T11:30:00Z; EC2 DescribeCapacityReservations EndDate): after it the floor "
                        "must stop asking for nodes the block no longer has",
                    )
                )
            elif g.capacity_block_end.tzinfo is None:
                problems.append(
                    (
                        f"pools[{i}].guaranteed.capacity_block_end",
                        "give the time zone (Z for UTC): a time without one is ambiguous",
                    )
                )
    # IAM refuses role names over 64 characters; the longest fixed name gpuloan gives a role is the policy
    # scheduler's (stacks/policy_function/function.py).
    longest_role = f"gpuloan-{cfg.environment}-policy-scheduler-{cfg.region}"
    if cfg.policy.enabled and len(longest_role) > IAM_ROLE_NAME_MAX:
        problems.append(
            (
                "environment",
                f"the IAM role '{longest_role}' would be {len(longest_role)} characters; IAM "
                f"allows {IAM_ROLE_NAME_MAX}: shorten the environment name",
            )
        )
    return problems


IAM_ROLE_NAME_MAX = 64
# The longest Capacity Block AWS sells is 182 days (1-day steps up to 14 days, 7-day steps up to 182); every block
# ends at 11:30 UTC, so a block's actual length is the bought one moved by less than a day (EC2 User Guide, "Find
# and purchase Capacity Blocks").
CAPACITY_BLOCK_MAX_DURATION = dt.timedelta(days=182 + 1)


def _capacity_block_window_problems(at: str, g: Guaranteed) -> list[tuple[str, str]]:
    """The window of a Capacity Block floor: its start is required (the policy function raises the group then),
    both times carry a zone, the start comes before the end, the length is one AWS sells, and the window leaves
    time up before the drain (lead + EKS's 40-minute scale-down)."""
    out: list[tuple[str, str]] = []
    start, end = g.capacity_block_start, g.capacity_block_end
    if start is None:
        out.append(
            (
                f"{at}.capacity_block_start",
                "give the block's start time (UTC, e.g. 2027-01-08T11:30:00Z; "
                "EC2 DescribeCapacityReservations StartDate): the policy function raises the floor then, and "
                "`capacity_block_active: true` alone no longer says when the block is up",
            )
        )
    elif start.tzinfo is None:
        out.append((f"{at}.capacity_block_start", "give the time zone (Z for UTC): a time without one is ambiguous"))
    if start is None or start.tzinfo is None or end is None or end.tzinfo is None:
        return out
    if start >= end:
        out.append(
            (
                f"{at}.capacity_block_end",
                f"the block must end after it starts ({end.isoformat()} is not after "
                f"capacity_block_start {start.isoformat()})",
            )
        )
        return out
    if end - start > CAPACITY_BLOCK_MAX_DURATION:
        out.append(
            (
                f"{at}.capacity_block_end",
                f"the block would last {(end - start).days} days; AWS sells Capacity "
                "Blocks of at most 182 days (check StartDate and EndDate in DescribeCapacityReservations)",
            )
        )
    lead = dt.timedelta(minutes=g.capacity_block_checkpoint_lead_minutes)
    if end - CAPACITY_BLOCK_SCALEDOWN_BEFORE_END - lead <= start:
        out.append(
            (
                f"{at}.capacity_block_checkpoint_lead_minutes",
                f"the drain would start before the block does: "
                f"{g.capacity_block_checkpoint_lead_minutes} min + EKS's 40-minute scale-down before the end "
                f"reach back past capacity_block_start; lower it",
            )
        )
    return out


# The config's cross-field rules, run in this order by cross_field_problems: one explicit tuple (no registry), so a
# reader sees every rule here. The last two are other modules' (CUDA images, then Kueue scheduling); they only read
# the config (its vocabulary from config/config_terms.py; this module's types for annotations only). The money rules
# that need prices are pricing/checks.py's, passed in by the caller that holds the price book.
RULES: tuple[Rule, ...] = (
    _az_problems,
    _pool_name_problems,
    _shard_problems,
    _pool_problems,
    _commitments_rule,
    _budgets_problems,
    _image_name_problems,
    _endpoint_problems,
    _team_name_problems,
    _github_problems,
    _hardening_problems,
    _capacity_problems,
    compat.images_rule,
    scheduling.scheduling_problems,
)
