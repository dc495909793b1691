"""Terms the policy and the typed config share, one definition each (issue 34): the config validates a pool's
`workload` and `budget.enforcement` against these, and the Lambda receives them in its settings as plain strings
(a StrEnum member equals its string). Standard library only, like all of policy/.
"""

from __future__ import annotations

from enum import StrEnum


# What the pool runs: jobs that queue (pending pods are the whole scale-up signal) or traffic that does not queue
# (sustained utilization adds a node too).
class Workload(StrEnum):
    batch = "batch"
    service = "service"


# What the budget does when spend reaches it: only alert, or cap the elastic capacity too.
class Enforcement(StrEnum):
    alert_only = "alert_only"
    cap_elastic = "cap_elastic"
