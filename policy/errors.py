"""The policy function's exception hierarchy: callers react differently to each kind.

- CapacityShortage: AWS had no capacity (spot or on-demand); the engine falls back, nothing is retried now.
- Throttled: an AWS or Kubernetes API asked us to slow down (or failed with a 5xx); the tick holds and the
  next tick retries. Never a reason to shrink capacity.
- BadSettings: the settings JSON does not match this code; the function cannot decide anything safely.
- DataUnavailable: a read failed (Kubernetes down, metrics missing); the engine treats the data as missing.
- MalformedState: the stored tick state does not parse; its bookkeeping is dropped for the tick and rewritten.
"""


class PolicyError(Exception):
    """Base class of every error the policy function raises on purpose."""


class BadSettings(PolicyError):
    """The settings (policy/settings.json in the package, or GPULOAN_SETTINGS) are missing, malformed or of another
    version."""


class CapacityShortage(PolicyError):
    """AWS reported insufficient capacity for a node group."""


class Throttled(PolicyError):
    """Rate limited or a transient server error: retry on the next tick, change nothing now."""


class DataUnavailable(PolicyError):
    """A read failed or returned nothing usable; the engine holds instead of acting on a guess."""


class ConflictingUpdate(PolicyError):
    """The node group is already being updated (EKS ResourceInUseException); leave it for the next tick."""


class DeadlineExceeded(PolicyError):
    """The tick's deadline (the Lambda's remaining time minus a margin) passed: what was not read yet is missing
    data, and nothing more is changed this tick."""


class MalformedState(DataUnavailable):
    """The tick state item exists but does not parse (not JSON, not an object, no numeric version). `version` is
    the stored version when it could be read, else None: the tick starts its bookkeeping afresh and overwrites
    the item (conditionally, so a concurrent writer still wins)."""

    def __init__(self, message: str, version: int | None):
        super().__init__(message)
        self.version = version
