"""Map botocore errors onto the policy's exception hierarchy (policy/errors.py), in one place."""

from __future__ import annotations

from policy.errors import CapacityShortage, ConflictingUpdate, DataUnavailable, PolicyError, Throttled

_THROTTLING = {
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "RequestThrottled",
    "RequestThrottledException",
    "ProvisionedThroughputExceededException",
    "SlowDown",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "InternalFailure",
    "InternalError",
    "InternalServerError",
    "ServerException",
}
_CONFLICT = {
    "ResourceInUseException",
    "ScalingActivityInProgress",
    "ResourceContention",
    "ConditionalCheckFailedException",
}
_CAPACITY = {"InsufficientInstanceCapacity", "InsufficientCapacity"}
# Refusals that asking again a minute later will not change (a missing permission, a budget that does not exist):
# a read refused so is backed off (policy/spend.py), where a throttled or unreachable one is retried next tick.
_REFUSED = {
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "UnauthorizedException",
    "NotFoundException",
    "UnrecognizedClientException",
}


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


def refused(err: BaseException) -> bool:
    """Whether `err` (or the botocore error it was raised from, as `classify`'s callers do) is a refusal that
    holds until someone changes a permission or a resource."""
    for e in (err, err.__cause__):
        response = getattr(e, "response", None) or {}
        if (response.get("Error") or {}).get("Code", "") in _REFUSED:
            return True
    return False
