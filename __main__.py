"""The gpuloan Pulumi program: validate the typed config, then declare the environment.

Config problems stop the program before any resource is registered (config/config.py lists them all).
"""

import pulumi

from stacks import platform
from stacks.load import from_pulumi_config
from config import config
from pricing import policy_settings
from pricing.sources import catalog
from stacks.policy_function import preview_mode

try:
    # The price book in force, read once here and passed down (docs/architecture.md, "The price book's path"): under
    # `pulumi up` resolved here; the offline runner (offline/runner.py) hands in the prices of its command.
    prices = globals().get("GPULOAN_PROGRAM_PRICES") or catalog.Prices.resolve()
    cfg = from_pulumi_config(prices=prices)
    prices = prices.with_config(cfg)
except (config.ConfigError, catalog.PriceSourceError) as err:
    # A clean, complete list of problems instead of a traceback; nothing has been registered yet.
    raise pulumi.RunError(str(err)) from None

# A deployment spends by these prices (the policy's budget cap), so it needs all of them before anything is
# registered; a preview shows unknown ones as unknown (docs/prices.md).
if not (pulumi.runtime.is_dry_run() or preview_mode.unknown_prices_allowed()):
    missing = policy_settings.missing_prices(prices, cfg)
    if missing:
        raise pulumi.RunError("prices needed to deploy are missing:\n - " + "\n - ".join(missing))

for name, value in platform.build(cfg, prices).items():
    pulumi.export(name, value)
