"""The gpuloan Pulumi program: validate the typed config, then declare the environment.

Config problems stop the program before any resource is registered (config/config.py lists them all).
"""

import pulumi

from stacks import platform
from config import config
from pricing import checks
from stacks.policy_function import settings as policy_settings
from pricing.sources import catalog

try:
    cfg = checks.from_pulumi_config(prices=catalog.current())
except (config.ConfigError, catalog.PriceSourceError) as err:
    # A clean, complete list of problems instead of a traceback; nothing has been registered yet.
    raise pulumi.RunError(str(err)) from None

# A deployment spends by these prices (the policy's budget cap), so it needs all of them before anything is
# registered; a preview shows unknown ones as unknown (docs/prices.md).
if not (pulumi.runtime.is_dry_run() or policy_settings.unknown_prices_allowed()):
    missing = policy_settings.missing_prices(cfg)
    if missing:
        raise pulumi.RunError("prices needed to deploy are missing:\n - " + "\n - ".join(missing))

for name, value in platform.build(cfg).items():
    pulumi.export(name, value)
