"""The Pulumi program's config loader: the stack config the engine passed to the program, validated with the money
rules of the prices in force (the program's entry, __main__.py, reads them once and passes them here).

config/ parses the engine's string map (config.from_engine_config) without importing Pulumi; reading that map out of
the engine is Pulumi's side, so it lives here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from config.config import GpuLoanConfig
    from pricing.sources.catalog import Prices


def from_pulumi_config(*, prices: Prices) -> GpuLoanConfig:
    """Inside `pulumi up/preview`: every `gpuloan:` key the engine passed to the program, validated with the config's
    rules, the money rules of `prices` and the price book's instance facts."""
    import pulumi
    from pulumi.runtime.config import CONFIG, get_config_env

    from config import config
    from pricing import checks

    # The language host hands config over in-process (CONFIG); older hosts use the PULUMI_CONFIG variable.
    raw_config = {**get_config_env(), **CONFIG.get()}
    return config.from_engine_config(
        raw_config,
        f"the config of stack {pulumi.get_stack()}",
        instance_facts=prices.book.instance_facts,
        rules=checks.rules(prices),
    )
