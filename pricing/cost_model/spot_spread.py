"""What EC2 weighs when it spreads a pool's spot launches, and which listed spot types work against it.

A pool's spot capacity is one EKS managed node group per node size (GPUs per node, config/node_sizes.py): a
one-size pool has one spot group over all of `elastic.instance_types`, a pool that lists types of several sizes
(g6e.2xlarge, g6e.12xlarge: 1 and 4 L40S) one spot group per size, each over that size's types. Every group has a
private subnet in every cluster AZ. EKS runs it as an Auto Scaling group with the price-capacity-optimized
allocation strategy: for each launch EC2 takes the spot pools (type x AZ) of THAT group with the most spare
capacity, the least likely to be interrupted, and launches from the cheapest of those; the group keeps its
instances balanced over the AZs of its subnets (docs/aws-rules.md). With equal GPUs per node inside a group, price
per instance ranks like price per GPU, so EC2 already spreads by price per GPU and interruption risk; gpuloan does
not second-guess it with per-type groups (docs/capacity.md, "How spot launches are spread"). Which SIZE grows is
not EC2's choice but the policy's: each new node is of the size with the lowest price per GPU the pending pods
use (docs/policy.md, "Right-sized nodes"), so types are compared only with the types of their own size.

This module shows the figures that decision rests on, per type: spot and on-demand price per GPU-hour, the Spot
Instance Advisor's interruption bucket, and where each figure comes from. And it names the types a list would be
better without: a type that is *dominated*, dearer per GPU than another listed type of its size AND in a worse
(higher) interruption bucket. Price-capacity-optimized may still launch it when its spot pool is deeper, so it can
only raise both the bill and the interruptions. That is an advisory, never a validation error: a deeper pool is a
real reason to keep a type. A type with no spot price or no bucket is never judged (no guess stands in for a
figure).

Pure and stdlib only (guardrails/ imports pricing.sources.catalog too): figures in, figures and advisories out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from pricing.sources.catalog import Prices

if TYPE_CHECKING:  # the config model needs pydantic; the figures and the rule do not
    from config.config import GpuLoanConfig, Pool

# The Spot Instance Advisor's interruption-frequency buckets (share of a type's spot instances interrupted in a
# month), best first; sim/pool.py turns the same buckets into rates.
ADVISOR_BUCKETS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
SPOT_CAPACITIES = ("spot", "spot_then_on_demand")


@dataclass(frozen=True)
class SpotFigures:
    """One listed spot type as price-capacity-optimized sees it (per GPU, since a pool's types have equal GPUs)."""

    instance_type: str
    gpus: int | None  # None: the type is unknown to the catalog
    gpu_model: str
    spot_usd_per_gpu_hour: float | None  # None: no spot price in the price source
    ondemand_usd_per_gpu_hour: float | None  # None: no price at all
    spot_basis: (
        str  # how the spot price was obtained (pricing/sources/pricebook.py Price.spot_basis), "none" without one
    )
    interruption_bucket: str | None  # a Spot Advisor bucket, None when the source has none (or an unknown label)
    source: str  # where the prices were read ("" without a price)
    as_of: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Dominated:
    """A listed spot type that is dearer per GPU and interrupted more often than another type of the same list."""

    index: int  # its position in the list the figures were made from (the config's order)
    figures: SpotFigures
    better: SpotFigures  # the cheaper, less interrupted type, of the same size (the same spot group)
    multi_size: bool = False  # the list has several sizes: the reason names the size's own group

    def reason(self) -> str:
        a, b = self.figures, self.better
        models = (
            f" ({a.gpu_model} vs {b.gpu_model}: weigh the work per GPU too)"
            if a.gpu_model and b.gpu_model and a.gpu_model != b.gpu_model
            else ""
        )
        group = f"the pool's {size_words(a.gpus)} spot group" if self.multi_size else "its spot group"
        return (
            f"{a.instance_type} spot costs ${a.spot_usd_per_gpu_hour:,.4f}/GPU-h at interruption "
            f"frequency {a.interruption_bucket} (Spot Instance Advisor), {b.instance_type} "
            f"${b.spot_usd_per_gpu_hour:,.4f}/GPU-h at {b.interruption_bucket}; in {group}, "
            f"price-capacity-optimized still launches {a.instance_type} when its spot pool is the deeper one, "
            f"so keep it only if that extra capacity is worth both{models}"
        )


@dataclass(frozen=True)
class Advisory:
    """A warning about a config field that does not fail validation."""

    path: str  # e.g. pools[0].elastic.instance_types[1]
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def bucket_rank(bucket: str | None) -> int | None:
    """0 for the least interrupted bucket, up to 4; None for no bucket or a label gpuloan does not know."""
    return ADVISOR_BUCKETS.index(bucket) if bucket in ADVISOR_BUCKETS else None


def figures(prices: Prices, instance_types: list[str], region: str) -> list[SpotFigures]:
    """The figures of each type, in the order given, from the price source in force (pricing/sources/catalog.py)."""
    rows = []
    for t in instance_types:
        facts, price = prices.lookup(t), prices.price(t, region)
        gpus = facts.gpus if facts is not None and facts.gpus > 0 else None
        per_gpu = lambda usd: None if usd is None or gpus is None else usd / gpus  # noqa: E731
        rows.append(
            SpotFigures(
                instance_type=t,
                gpus=gpus,
                gpu_model=facts.gpu_model if facts is not None else "",
                spot_usd_per_gpu_hour=per_gpu(price.spot_usd_per_hour if price else None),
                ondemand_usd_per_gpu_hour=per_gpu(price.ondemand_usd_per_hour if price else None),
                spot_basis=(price.spot_basis if price and price.spot_usd_per_hour is not None else "none"),
                interruption_bucket=(
                    price.interruption_bucket if price and bucket_rank(price.interruption_bucket) is not None else None
                ),
                source=price.source if price else "",
                as_of=price.as_of if price else "",
            )
        )
    return rows


def size_words(gpus: int | None) -> str:
    """'1-GPU', '8-GPU', or 'unknown-size' for a type the catalog does not know."""
    return "unknown-size" if gpus is None else f"{gpus}-GPU"


def by_size(rows: list[SpotFigures]) -> list[tuple[int | None, list[tuple[int, SpotFigures]]]]:
    """The rows as the spot groups hold them: one group per GPUs per node (config/node_sizes.py), smallest first
    (a type of unknown size last), each with (index in `rows`, row) in the given order."""
    groups: dict[int | None, list[tuple[int, SpotFigures]]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(r.gpus, []).append((i, r))
    return sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))


def is_multi_size(rows: list[SpotFigures]) -> bool:
    return len(by_size(rows)) > 1


# What decides between sizes, said wherever a multi-size pool's spread is shown (docs/policy.md, docs/capacity.md).
SIZE_CHOICE = (
    "one spot group per node size, EC2 spreads each group's launches over that group's types only; "
    "the policy picks the size: each new node is of the size with the lowest price per GPU that the "
    'pending pods use (docs/policy.md, "Right-sized nodes"), so a type is compared only with types of '
    "its own size"
)


def dominated(rows: list[SpotFigures]) -> list[Dominated]:
    """Each row that another row of its size (its spot group) beats on both counts: strictly cheaper per GPU on
    spot AND in a strictly better Advisor bucket. Rows without a spot price or a bucket are never judged, nor used
    to judge; a row of another size is never used to judge either (EC2 never chooses between the two: the policy
    does, by price per GPU used). Against several better rows, the cheapest one (then the least interrupted) is
    named."""
    multi = is_multi_size(rows)
    out = []
    for _, group in by_size(rows):
        # (index, row, spot per GPU-hour, bucket rank) of the rows with both figures
        known: list[tuple[int, SpotFigures, float, int]] = []
        for i, r in group:
            rank = bucket_rank(r.interruption_bucket)
            if r.spot_usd_per_gpu_hour is not None and rank is not None:
                known.append((i, r, r.spot_usd_per_gpu_hour, rank))
        for i, r, usd, rank in known:
            better = [(b_usd, b_rank, b) for _, b, b_usd, b_rank in known if b_usd < usd and b_rank < rank]
            if better:
                best = min(better, key=lambda found: (found[0], found[1]))[2]
                out.append(Dominated(i, r, best, multi))
    return sorted(out, key=lambda d: d.index)


def launches_spot(pool: "Pool") -> bool:
    return pool.elastic is not None and str(pool.elastic.capacity) in SPOT_CAPACITIES


def pool_figures(prices: Prices, cfg: "GpuLoanConfig", pool: "Pool") -> list[SpotFigures]:
    """The spot figures of one pool, in its config order (the node group's own list is sorted: order-free)."""
    if pool.elastic is None or not launches_spot(pool):
        return []
    return figures(prices, list(pool.elastic.instance_types), cfg.region)


def advisories(prices: Prices, cfg: "GpuLoanConfig") -> list[Advisory]:
    """Every dominated spot type of the stack, named by its config path."""
    out = []
    for i, pool in enumerate(cfg.pools):
        for d in dominated(pool_figures(prices, cfg, pool)):
            out.append(Advisory(f"pools[{i}].elastic.instance_types[{d.index}]", d.reason()))
    return out


def summary(rows: list[SpotFigures]) -> str:
    """One line: each type's spot $/GPU-h and bucket, cheapest first (what price-capacity-optimized weighs); for
    several sizes, per spot group ("1-GPU group: ... | 4-GPU group: ...")."""

    def key(r: SpotFigures):
        return (r.spot_usd_per_gpu_hour is None, r.spot_usd_per_gpu_hour or 0.0, r.instance_type)

    def line(group: list[SpotFigures]) -> str:
        parts = []
        for r in sorted(group, key=key):
            price = (
                "spot price unknown" if r.spot_usd_per_gpu_hour is None else f"${r.spot_usd_per_gpu_hour:,.2f}/GPU-h"
            )
            parts.append(f"{r.instance_type} {price}, interruptions {r.interruption_bucket or 'unknown'}")
        return "; ".join(parts)

    groups = by_size(rows)
    if len(groups) <= 1:
        return line(rows)
    return " | ".join(f"{size_words(gpus)} group: {line([r for _, r in group])}" for gpus, group in groups)
