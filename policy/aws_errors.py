"""Map botocore errors onto the policy's exception hierarchy (policy/errors.py), in one place."""

from __future__ import annotations

from policy.errors import CapacityShortage, ConflictingUpdate, DataUnavailable, PolicyError, Throttled

_THROTTLING = {
    "Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded", "TooManyRequestsException",
    "RequestThrottled", "RequestThrottledException", "ProvisionedThroughputExceededException", "SlowDown",
    "ServiceUnavailable", "ServiceUnavailableException", "InternalFailure", "InternalError", "InternalServerError",
    "ServerException",
}
_CONFLICT = {"ResourceInUseException", "ScalingActivityInProgress", "ResourceContention",
             "ConditionalCheckFailedException"}
_CAPACITY = {"InsufficientInstanceCapacity", "InsufficientCapacity"}


def classify(err: Exception, what: str) -> PolicyError:
    """A PolicyError for `err` (a botocore ClientError, connection error, or anything else), naming `what`."""
    response = getattr(err, "response", None) or {}
    code = (response.get("Error") or {}).get("Code", "")
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode", 0) or 0
    message = f"{what}: {code or type(err).__name__}: {err}"
    if code in _THROTTLING or status == 429 or status >= 500:
        return Throttled(message)
    if code in _CONFLICT:
        return ConflictingUpdate(message)
    if code in _CAPACITY:
        return CapacityShortage(message)
    if isinstance(err, PolicyError):
        return err
    return DataUnavailable(message)
