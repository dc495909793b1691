"""Whether the Pulumi program runs as the offline preview (offline/runner.py), where nothing is deployed and the
Lambda settings may carry unknown (null) prices. Module state of the program run, so it lives here beside the
Pulumi code, not in pricing/ (pricing/policy_settings.py takes `allow_unknown_prices` as an argument).
"""

from __future__ import annotations

import contextlib

_offline_preview = False


@contextlib.contextmanager
def offline_preview():
    """While the offline preview (offline/runner.py) runs the program: nothing is deployed, so the Lambda
    settings may carry unknown (null) prices. The offline engine runs as an update (outputs must resolve), so
    pulumi.runtime.is_dry_run() cannot tell it apart from a real deployment."""
    global _offline_preview
    before, _offline_preview = _offline_preview, True
    try:
        yield
    finally:
        _offline_preview = before


def unknown_prices_allowed() -> bool:
    return _offline_preview
