"""The gpuloan Pulumi program: validate the typed config, then declare the environment.

Config problems stop the program before any resource is registered (stacks/config.py lists them all).
"""

import pulumi

from stacks import config, platform

try:
    cfg = config.from_pulumi_config()
except config.ConfigError as err:
    # A clean, complete list of problems instead of a traceback; nothing has been registered yet.
    raise pulumi.RunError(str(err)) from None

for name, value in platform.build(cfg).items():
    pulumi.export(name, value)
