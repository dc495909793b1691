"""Names of the CloudWatch metrics the policy function publishes (as Embedded Metric Format log lines).

Shared by the Lambda (which publishes them), the alarms and the dashboard (which read them), so a rename
cannot leave an alarm watching a metric nobody publishes.
"""

NAMESPACE = "gpuloan"

# Dimensions
DIM_ENVIRONMENT = "Environment"
DIM_POOL = "Pool"
DIM_CAPACITY = "Capacity"  # spot | on_demand
DIM_REASON = "Reason"
DIM_TIER = "Tier"  # guaranteed | elastic (PoolGpuUtilization)
DIM_USE = "Use"  # own_floor | lent | borrowed | elastic_spot | elastic_on_demand (LoanGpus, policy/loan_usage.py)
DIM_FLAVOR = "Flavor"  # the Kueue ResourceFlavor (LoanGpus)

# Metrics (dimension sets in comments)
ELASTIC_NODES = "ElasticNodes"  # Environment, Pool, Capacity: desired size after the tick
ELASTIC_MAX_NODES = "ElasticMaxNodes"  # Environment, Pool: the pool's elastic max (spot + on-demand)
PENDING_GPUS = "PendingGpus"  # Environment, Pool: GPUs requested by pending pods
DECISIONS = "Decisions"  # Environment, Pool, Reason: count of decisions by reason code
ESTIMATED_ELASTIC_SPEND_USD = "EstimatedElasticSpendUsd"  # Environment, Pool: month-to-date estimate
MONTH_TO_DATE_SPEND_USD = "MonthToDateSpendUsd"  # Environment, Pool: last actual + estimate since
FALLBACK_ACTIVE = "FallbackActive"  # Environment, Pool: 1 while on-demand fallback is in use
POLICY_ERRORS = "PolicyErrors"  # Environment: failed reads/writes in a tick (the tick itself may succeed)
POOL_GPU_UTILIZATION = "PoolGpuUtilization"  # Environment, Pool, Tier (guaranteed|elastic): mean GPU utilization %
LOAN_GPUS = "LoanGpus"  # Environment, Pool, Use, Flavor: GPUs in use per Kueue status (policy/loan_usage.py)
