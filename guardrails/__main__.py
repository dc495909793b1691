"""Entry point of the policy pack: the Pulumi CLI runs this file from guardrails/ with the pack's virtualenv."""

import sys
from pathlib import Path

# The rules read the project's tag keys, price data and month (config/tags.py, pricing/sources/catalog.py, pricing/checks.py,
# pricing/cost_model/billing.py: stdlib only), so the pack and the program can never disagree on a tag name or a price.
HERE = Path(__file__).resolve().parent
for path in (str(HERE), str(HERE.parent)):
    if path not in sys.path:
        sys.path.insert(0, path)

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policies import policies  # noqa: E402

from pricing.sources import catalog  # noqa: E402

# The prices in force ($GPULOAN_PRICE_FILE, the project's file, the cache, the snapshot), read once for the pack.
PolicyPack(
    name="gpuloan-guardrails", enforcement_level=EnforcementLevel.MANDATORY, policies=policies(catalog.Prices.resolve())
)
