"""`gpuloan prices refresh -s STACK`: read the stack's GPU prices from AWS into the project's price file
(gpuloan-prices.json beside Pulumi.yaml, committed like a lockfile; `--output PATH` elsewhere, `--cache` the
per-user cache instead);
`gpuloan prices show -s STACK`: the prices in force for the stack and where they come from, and for each pool with
spot the per-GPU figures EC2's price-capacity-optimized strategy spreads its launches by (pricing/cost_model/spot_spread.py).

Exit codes: 0 done, 1 some prices could not be read (the others are cached), 2 bad input (stack, price file).
"""

from __future__ import annotations

import sys
import textwrap
from typing import Any

from gpuloan import exit_codes, price_args, stack_arg, stackfile
from pricing.sources import catalog, pricebook
from pricing.cost_model import spot_spread

EXIT_PARTIAL = 1
EXIT_BAD_INPUT = 2


def register(sub) -> None:
    p = sub.add_parser(
        "prices", help="read GPU prices from AWS into the project's price file, or show the prices in force"
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    r = verbs.add_parser(
        "refresh",
        help=f"read the stack's prices from AWS (your credentials) into "
        f"{pricebook.PROJECT_PRICE_FILE} beside Pulumi.yaml (commit it)",
    )
    stack_arg.add(r)
    r.add_argument(
        "--instance-type",
        action="append",
        default=[],
        metavar="TYPE",
        help="also read this type (repeatable), e.g. one the config does not use yet",
    )
    r.add_argument("--profile", help="AWS profile (default: the usual AWS credential chain)")
    where = r.add_mutually_exclusive_group()
    where.add_argument(
        "--output",
        metavar="PATH",
        default=None,
        help=f"write this price file (default: {pricebook.PROJECT_PRICE_FILE} beside the project's "
        "Pulumi.yaml; other regions already in it are kept)",
    )
    where.add_argument(
        "--cache", action="store_true", help="write the per-user cache (~/.cache/gpuloan) instead of a project file"
    )
    r.set_defaults(func=run_refresh)
    refresh_codes = {
        0: "every price was read and written",
        1: "some prices could not be read (throttled, missing, not offered); the others were written",
        2: "bad input (the stack, --output), or no AWS credentials",
    }
    exit_codes.document(r, refresh_codes, ".venv/bin/gpuloan prices refresh -s prod")
    s = verbs.add_parser("show", help="the prices in force for the stack's instance types, with source and date")
    stack_arg.add(s)
    price_args.add(s)
    exit_codes.document(
        s, {0: "shown", 2: "bad input: the stack or the price file"}, ".venv/bin/gpuloan prices show -s prod"
    )
    s.set_defaults(func=run_show)
    exit_codes.document(p, {**refresh_codes, 0: "done"}, ".venv/bin/gpuloan prices show -s dev")


def stack_targets(doc: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """(region, instance types, cluster AZs) read straight from the stack file, before validation: a refresh must
    work for a config whose types have no price yet (validation would stop on exactly that)."""
    cfg = doc.get("config") or {}
    region = str(cfg.get("gpuloan:region") or cfg.get("aws:region") or "")
    types: list[str] = []
    for pool in cfg.get("gpuloan:pools") or []:
        if not isinstance(pool, dict):
            continue
        g, e = pool.get("guaranteed") or {}, pool.get("elastic") or {}
        if isinstance(g, dict) and g.get("instance_type"):
            types.append(str(g["instance_type"]))
        if isinstance(e, dict):
            types += [str(t) for t in e.get("instance_types") or []]
    cluster = cfg.get("gpuloan:cluster") or {}
    zones = [str(z) for z in (cluster.get("availability_zones") or [])] if isinstance(cluster, dict) else []
    return region, list(dict.fromkeys(types)), zones


def spot_pools(doc: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(pool name, elastic instance types in config order) of each pool with a spot group, read straight from the
    stack file like stack_targets (a type without a price must still be shown, as unknown)."""
    from config.config import Elastic

    default = str(Elastic.model_fields["capacity"].default)
    out = []
    for i, pool in enumerate((doc.get("config") or {}).get("gpuloan:pools") or []):
        e = pool.get("elastic") if isinstance(pool, dict) else None
        if isinstance(e, dict) and str(e.get("capacity") or default) in spot_spread.SPOT_CAPACITIES:
            out.append((str(pool.get("name") or f"pools[{i}]"), [str(t) for t in e.get("instance_types") or []]))
    return out


def _say(text: str, indent: int = 4) -> None:
    """One record of `prices show`, folded to the terminal (rich's width: the terminal, else $COLUMNS, else 80) at
    spaces, continuation lines indented; only a word longer than a line (a source path) is cut, never a figure."""
    from gpuloan.render import tables

    width = max(40, tables.console().width)
    print(textwrap.fill(text, width=width, subsequent_indent=" " * indent, break_on_hyphens=False))


def print_spot_spread(prices: catalog.Prices, doc: dict[str, Any], region: str, zones: list[str]) -> None:
    """Per pool with spot: type, GPUs, spot and on-demand $/GPU-h, Spot Advisor bucket, how the spot price was
    obtained; then the types another listed type beats on both price and interruptions (docs/capacity.md)."""
    money = lambda v: "unknown" if v is None else f"${v:,.4f}"  # noqa: E731
    where = f"{len(zones)} AZ(s)" if zones else "the cluster's AZs"
    for pool, types in spot_pools(doc):
        rows = spot_spread.figures(prices, types, region)
        groups = spot_spread.by_size(rows)
        advised = {d.index: d for d in spot_spread.dominated(rows)}
        for gpus, group in groups:
            # a multi-size pool has one spot group per size (config/node_sizes.py), each spread on its own
            name = (
                f"spot spread of pool {pool}"
                if len(groups) == 1
                else f"spot spread of pool {pool}, {spot_spread.size_words(gpus)} group"
            )
            _say(f"{name} (price-capacity-optimized over {len(group)} type(s) x {where}):")
            # 76 columns: the row fits 80; the spot price's basis, a sentence, goes on its own folded line below it
            print(f"  {'type':<20} {'GPUs':>4} {'spot $/GPU-h':>13} {'on-demand $/GPU-h':>18} {'interruptions':>13}")
            for _, r in group:
                print(
                    f"  {r.instance_type:<20} {r.gpus if r.gpus is not None else '?':>4} "
                    f"{money(r.spot_usd_per_gpu_hour):>13} {money(r.ondemand_usd_per_gpu_hour):>18} "
                    f"{r.interruption_bucket or 'unknown':>13}"
                )
                _say(f"    spot price basis: {r.spot_basis}", indent=6)
            for i, _ in group:
                if i in advised:
                    _say(f"  advisory: {advised[i].reason()}", indent=4)
        if len(groups) > 1:
            _say(f"  across sizes: {spot_spread.SIZE_CHOICE}", indent=4)


def system_instance_types(doc: dict[str, Any]) -> list[str]:
    """The system node type of a stack that creates its cluster (priced as a platform rate, `ec2:<type>`)."""
    from config.config import SystemNodes

    cluster = (doc.get("config") or {}).get("gpuloan:cluster") or {}
    if not isinstance(cluster, dict) or cluster.get("mode", "new") != "new":
        return []
    nodes = cluster.get("system_nodes") or {}
    default = SystemNodes.model_fields["instance_type"].default
    return [str(nodes.get("instance_type") or default) if isinstance(nodes, dict) else default]


def _clients(region: str, profile: str | None):
    import boto3

    session = boto3.Session(profile_name=profile) if profile else boto3.Session()
    # The Price List and Savings Plans APIs answer from us-east-1 for every region priced.
    return (
        session.client("pricing", region_name="us-east-1"),
        session.client("ec2", region_name=region),
        session.client("savingsplans", region_name="us-east-1"),
        session.client("eks", region_name=region),
    )


def cluster_version_of(doc: dict[str, Any]) -> str:
    """The stack's Kubernetes version, read straight from the stack file (the config's default when unset)."""
    from config import versions

    cluster = (doc.get("config") or {}).get("gpuloan:cluster") or {}
    return (
        str(cluster.get("kubernetes_version") or versions.DEFAULT_KUBERNETES_VERSION)
        if isinstance(cluster, dict)
        else versions.DEFAULT_KUBERNETES_VERSION
    )


def version_support_lines(eks_client, version: str) -> list[str]:
    """The live EKS support status of the stack's version (DescribeClusterVersions) and, where the offline calendar
    in config/versions.py says otherwise, a note to update it (the preview prices the control plane from it)."""
    from pricing.cost_model import platform_costs

    live = platform_costs.read_version_support(eks_client, version)
    offline = platform_costs.version_support(version)
    lines = [
        f"Kubernetes {version}: {live.status} (end of standard support {live.end_of_standard_support or '?'}; "
        f"{live.source})"
    ]
    if (live.status, live.end_of_standard_support) != (offline.status, offline.end_of_standard_support):
        lines.append(
            f"note: the offline calendar ({offline.source}) says {offline.status} until "
            f"{offline.end_of_standard_support or '?'}: update config/versions.py:EKS_VERSION_CALENDAR"
        )
    return lines


def run_refresh(args, clients=None) -> int:
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from pricing.sources import aws_prices

    try:
        _, path = stackfile.resolve(stack_arg.resolve(args))
        doc = stackfile.load(path)
        region, types, zones = stack_targets(doc)
    except (stackfile.StackFileError, stack_arg.NoStackError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    types = list(dict.fromkeys(types + list(args.instance_type)))
    if not region or not types:
        print(f"error: {path.name} names no region or no GPU instance types to price", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        pricing, ec2, plans, *rest = clients or _clients(region, args.profile)
        eks = rest[0] if rest else None
        print(f"reading {len(types)} instance type(s) in {region} from AWS ...", file=sys.stderr)
        result = aws_prices.refresh(
            region,
            types,
            pricing_client=pricing,
            ec2_client=ec2,
            savingsplans_client=plans,
            zones=zones,
            known_facts=catalog.KNOWN,
        )
        print(f"reading platform rates (EKS, NAT, EBS, KMS, CloudWatch, Lambda) in {region} ...", file=sys.stderr)
        platform, platform_gaps = aws_prices.refresh_platform(
            region, system_instance_types(doc), pricing_client=pricing
        )
    except NoCredentialsError:
        print(
            "error: no AWS credentials; configure them (aws configure / AWS_PROFILE), or use an offline price "
            f"file instead ({pricebook.ENV_PRICE_FILE}, see docs/prices.md)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except (aws_prices.PriceFetchError, BotoCoreError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_PARTIAL
    if eks is not None:
        try:
            for line in version_support_lines(eks, cluster_version_of(doc)):
                print(line, file=sys.stderr)
        except (BotoCoreError, ClientError) as err:
            print(f"note: EKS support status not read ({err})", file=sys.stderr)
    body = result.book.regions[region]
    body.platform.update(platform)
    # A platform gap leaves that preview row unknown; the GPU prices are still worth caching.
    result.notes += platform_gaps
    if getattr(args, "cache", False):
        written = pricebook.write_cache(result.book)
    else:
        written = [pricebook.write_project_file(result.book, output_path(args, path))]
    for t, p in sorted(body.prices.items()):
        spot = f"${p.spot_usd_per_hour:,.4f}/h spot" if p.spot_usd_per_hour is not None else "no spot price"
        commits = len(body.commitments.get(t, []))
        print(f"{t:<22} ${p.ondemand_usd_per_hour:,.4f}/h on demand, {spot}, {commits} commitment rate(s)")
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    for problem in result.problems:
        print(f"error: {problem}", file=sys.stderr)
    for key, rate in sorted(body.platform.items()):
        print(f"{key:<22} ${rate.usd_per_unit:g}/{rate.unit} ({rate.source}, {rate.as_of})")
    print(
        f"wrote {len(body.prices)} price(s) and {len(body.platform)} platform rate(s) for {region}, read "
        f"{body.read_at}, in {', '.join(map(str, written))}"
    )
    if not getattr(args, "cache", False):
        print(f"commit it (git add {written[0].name}): previews, cost diffs and CI read it from there", file=sys.stderr)
    return EXIT_PARTIAL if result.problems else 0


def output_path(args, stack_file) -> "Path":
    """--output, else the project's price file beside Pulumi.yaml (the stack file's folder outside a project)."""
    from pathlib import Path

    if getattr(args, "output", None):
        return Path(args.output)
    root = pricebook.project_root(stack_file.parent) or stack_file.parent
    return root / pricebook.PROJECT_PRICE_FILE


def run_show(args) -> int:
    try:
        prices = price_args.apply(args)
        _, path = stackfile.resolve(stack_arg.resolve(args))
        doc = stackfile.load(path)
        region, types, zones = stack_targets(doc)
    except (stackfile.StackFileError, catalog.PriceSourceError, stack_arg.NoStackError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for t in types:
        p = prices.price(t, region)
        if p is None:
            _say(f"{t:<22} unknown: {prices.missing_price_reason(t, region)}")
            continue
        spot = (
            f"${p.spot_usd_per_hour:,.4f}/h spot ({p.spot_basis})"
            if p.spot_usd_per_hour is not None
            else "no spot price"
        )
        _say(f"{t:<22} ${p.ondemand_usd_per_hour:,.4f}/h on demand (as of {p.as_of}), {spot}")
        for c in prices.commitments(t, region):
            _say(f"{'':<4}{c.offer}: ${c.usd_per_hour:,.4f}/h ({c.source}, {c.as_of})", indent=6)
    for key, rate in sorted(prices.book.regions.get(region, pricebook.RegionPrices(region, "", "")).platform.items()):
        _say(f"{key:<22} ${rate.usd_per_unit:g}/{rate.unit} ({rate.source}, {rate.as_of})")
    if not prices.book.regions.get(region) or not prices.book.regions[region].platform:
        _say(
            f"{'platform':<22} no platform rates (EKS, NAT, EBS ...): those preview rows are unknown "
            '(docs/prices.md, "Platform rates")'
        )
    print_spot_spread(prices, doc, region, zones)
    print(prices.price_source(region))
    return 0
