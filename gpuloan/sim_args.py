"""The simulation options `gpuloan simulate` and `gpuloan advise` share: one spelling, one default, one help text
each (both run the same simulator, so `--seed 1` means the same run in either)."""

from __future__ import annotations

from dataclasses import replace

# Option -> SimSettings field, for the numeric settings a user may override.
_NUMERIC = (
    ("provisioning_delay", "provisioning_delay_minutes"),
    ("checkpoint_interval", "checkpoint_interval_minutes"),
    ("metric_delay", "metric_delay_minutes"),
    ("spot_episodes_per_week", "spot_unavailable_episodes_per_week"),
)


def add(parser) -> None:
    from sim.engine import SimSettings

    d = SimSettings()
    parser.add_argument(
        "--seed",
        type=int,
        default=d.seed,
        help=f"seed of spot interruptions and shortages (default {d.seed}, as in docs/benchmarks.md)",
    )
    parser.add_argument(
        "--provisioning-delay",
        type=int,
        default=None,
        metavar="MINUTES",
        help=f"minutes from a node request to a schedulable GPU node (default "
        f"{d.provisioning_delay_minutes}, docs/simulator.md)",
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=int,
        default=None,
        metavar="MINUTES",
        help=f"minutes between a job's checkpoints: the work an interrupted job loses (default "
        f"{d.checkpoint_interval_minutes})",
    )
    parser.add_argument(
        "--metric-delay",
        type=int,
        default=None,
        metavar="MINUTES",
        help=f"minutes before a CloudWatch datapoint can be read (default {d.metric_delay_minutes}, "
        "docs/simulator.md); 0 reads this very minute",
    )
    parser.add_argument(
        "--spot-episodes-per-week",
        type=float,
        default=None,
        metavar="N",
        help=f"spot shortages per week, each about {d.spot_unavailable_mean_hours:g} h with no spot "
        f"capacity (default {d.spot_unavailable_episodes_per_week:g})",
    )
    parser.add_argument(
        "--placement",
        choices=("least_allocated", "most_allocated"),
        default=None,
        help="which node a pod goes to among those that fit (default: what the stack's cluster "
        "runs: most_allocated with cluster.bin_packing, else least_allocated, kube-scheduler's "
        "default scoring on EKS)",
    )


def settings(args):
    """SimSettings from the options; raises ValueError naming the option for a negative value (and a checkpoint
    interval of 0)."""
    from sim.engine import SimSettings

    s = SimSettings(seed=args.seed)
    for opt, field in _NUMERIC:
        value = getattr(args, opt)
        if value is not None:
            if opt == "checkpoint_interval" and value < 1:
                # the engine reads 0 as "never" where a job stops and as "always" where a node is evicted
                raise ValueError(f"--checkpoint-interval must be at least 1 minute, got {value}")
            if value < 0:
                raise ValueError(f"--{opt.replace('_', '-')} must be >= 0")
            s = replace(s, **{field: value})
    if args.placement:
        s = replace(s, placement=args.placement)
    return s
