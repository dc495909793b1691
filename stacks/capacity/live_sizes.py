"""The live desired size of the elastic node groups, read before the program declares them.

Why: the policy function owns the elastic groups' desired size (`ignore_changes`), so an update of their scaling
config sends the live desired size. EKS refuses a desired size above the max (InvalidParameterException), so
lowering `elastic.max_nodes` below the live size would fail the `pulumi up`. With the live size known,
stacks/capacity/elastic.py sends the new max as the desired size in that one update (elastic.scaling).

The read is an explicit, separate step (platform.build calls it once, with this stack's provider) rather than an
invoke hidden in a component (STYLE.md 6). It is best-effort by design: on a first deploy the cluster does not
exist yet, and any read failure means "unknown", which keeps today's behaviour (the policy keeps the size);
an unknown size never shrinks anything.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from config.names import GROUP_ON_DEMAND, GROUP_SPOT, node_group_name_prefix
from config.config import GpuLoanConfig
from config.node_sizes import pool_sizes, size_suffix

# Group kind as ElasticCapacity.group_names keys it -> the kind in the node group name.
KINDS = {"spot": GROUP_SPOT, "on_demand": GROUP_ON_DEMAND}


def sizes_by_prefix(names_and_sizes: dict[str, int], prefixes: dict[str, str]) -> dict[str, int]:
    """{key: largest desired size among the groups whose name starts with prefixes[key]} (pure).

    Several groups can share a prefix for the length of a create-before-delete replacement; the largest size is
    the one that could exceed a new max."""
    out: dict[str, int] = {}
    for key, prefix in prefixes.items():
        sizes = [size for name, size in names_and_sizes.items() if name.startswith(prefix)]
        if sizes:
            out[key] = max(sizes)
    return out


def read_live_desired(
    cfg: GpuLoanConfig, cluster_name: str, provider: pulumi.ProviderResource
) -> dict[str, dict[str, int]]:
    """{pool: {"spot" | "on_demand": live desired size}} for the elastic groups that exist now."""
    # every size's groups (config/node_sizes.py): "spot", "on_demand" for the plain size, "spot-4gpu" ... others
    prefixes = {
        (pool.name, key + size_suffix(size)): node_group_name_prefix(
            cfg.environment, pool.name, kind + size_suffix(size)
        )
        for pool in cfg.pools
        if pool.elastic is not None
        for size in pool_sizes(pool.elastic, cfg.instance_facts)
        for key, kind in KINDS.items()
    }
    if not prefixes:
        return {}
    opts = pulumi.InvokeOptions(provider=provider)
    try:
        listed = aws.eks.get_node_groups(cluster_name=cluster_name, opts=opts).names or []
        ours = [n for n in listed if any(n.startswith(p) for p in prefixes.values())]
        sizes = {}
        for name in ours:
            group = aws.eks.get_node_group(cluster_name=cluster_name, node_group_name=name, opts=opts)
            if group.scaling_configs:
                sizes[name] = int(group.scaling_configs[0].desired_size)
    except Exception as err:  # noqa: BLE001 - any failure means "unknown", which changes nothing (module doc)
        pulumi.log.info(
            f"live elastic sizes of cluster {cluster_name} not read ({type(err).__name__}); the "
            "policy function keeps owning the desired size"
        )
        return {}
    out: dict[str, dict[str, int]] = {}
    for key, size in sizes_by_prefix(sizes, {f"{p}/{k}": v for (p, k), v in prefixes.items()}).items():
        pool_name, kind = key.split("/")  # pool names are slugs: no "/"
        out.setdefault(pool_name, {})[kind] = size
    return out
