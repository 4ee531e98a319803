"""Names and sizes of the deployed service, in one place.

Plain values only (no CDK objects), so tests and other modules can import them cheaply. Physical
names that depend on the stage, account or region are composed in ``infra/naming.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SERVICE_NAME = "remote-batch"
STACK_NAME_PREFIX = "RemoteBatch"
DEFAULT_STAGE = "dev"
REPO_ROOT = Path(__file__).resolve().parent.parent

# Context keys read by infra/config.py (cdk.json sets them; `cdk synth -c stage=prod` overrides).
CONTEXT_STAGE = "stage"
CONTEXT_STACK_NAME_PREFIX = "stackNamePrefix"
CONTEXT_HOME_REGION = "homeRegion"
CONTEXT_GEO_ZONE_REGIONS = "geoZoneRegions"
CONTEXT_AVAILABILITY_ZONES = "availabilityZones"
CONTEXT_WORKER_IMAGE_DIR = "workerImageDir"
DEFAULT_WORKER_IMAGE_DIR = "worker"
# The stage is part of S3 bucket, queue and log group names: lowercase, no hyphen (so one stage's
# queue-name prefix never matches another's), short enough for S3's 63-character bucket names.
STAGE_PATTERN = r"^[a-z][a-z0-9]{0,11}$"

# Retention: inputs/, outputs/ and job logs live 14 days (DESIGN.md "Retention").
DATA_RETENTION_DAYS = 14
DATA_PREFIXES = ("inputs/", "outputs/")
INPUTS_PREFIX = "inputs/"
OUTPUTS_PREFIX = "outputs/"
ABORT_INCOMPLETE_UPLOAD_DAYS = 1
ACCESS_LOG_RETENTION_DAYS = 90

# The tags the api sets on every Batch job it submits (functions/logic/submission.py): the only keys
# its role may tag with (aws:TagKeys); tests/infra/test_iam_flow.py submits with them under that role.
JOB_TAG_KEYS = ("remote-batch:jobId", "remote-batch:accountId")

# Lambdas.
LAMBDA_CODE_DIR = "functions"
POWERTOOLS_LAYER_ACCOUNT = "017000801446"
POWERTOOLS_LAYER_NAME = "AWSLambdaPowertoolsPythonV3-python312-arm64"
POWERTOOLS_LAYER_VERSION = 27
LAMBDA_MEMORY_MIB = {"api": 1024, "batch_events": 512, "meter": 1024}
LAMBDA_TIMEOUT_SECONDS = {"api": 29, "batch_events": 60, "meter": 55}
LAMBDA_HANDLERS = {
    "api": "functions.handlers.api.handler",
    "batch_events": "functions.handlers.batch_events.handler",
    "meter": "functions.handlers.meter.handler",
}

# API Gateway.
API_STAGE_NAME = "v1"
API_THROTTLE_RATE_PER_SECOND = 50
API_THROTTLE_BURST = 100
HEALTH_PATH = "health"

# EventBridge: Batch events are retried for up to 2 hours, then land in the DLQ; a meter tick
# older than a minute is superseded by the next one.
METER_RATE_MINUTES = 1
BATCH_EVENTS_RETRY_ATTEMPTS = 8
BATCH_EVENTS_MAX_EVENT_AGE_HOURS = 2
BATCH_EVENTS_HANDLER_RETRY_ATTEMPTS = 2  # Lambda's own retries when the handler raises
METER_RETRY_ATTEMPTS = 2
METER_MAX_EVENT_AGE_SECONDS = 60
DLQ_RETENTION_DAYS = 14

# Lambda's limit on the total size of a function's environment variables (keys and values).
LAMBDA_ENVIRONMENT_MAX_BYTES = 4096

# Monitoring: any message in a dead-letter queue, any function error, alarms within minutes.
ALARM_PERIOD_MINUTES = 5
DLQ_DEPTH_ALARM_THRESHOLD = 1
FUNCTION_ERRORS_ALARM_THRESHOLD = 1


# AWS Batch, per geo zone. Physical names are deterministic (infra/naming.py) so the control plane
# can address each zone's queues, definitions, bucket and log group without cross-region references.
@dataclass(frozen=True)
class ComputePool:
    """Instances some machine classes share: one Spot and one on-demand compute environment.

    ``instance_types`` are EC2 families (``m7i``: Batch picks the size) or sizes (``r8i.96xlarge``,
    where only the largest sizes fit); ``max_vcpus`` caps each of the two environments, and a full
    Spot environment is what spills a queue's jobs to on-demand.
    """

    name: str
    instance_types: tuple[str, ...]
    max_vcpus: int
    gpu: bool = False


# A job's MEMORY must be below what the ECS agent registers (the instance's memory minus a few
# hundred MiB), so each class needs a size strictly larger than its memory, e.g.:
#   Basic1x8 r7i.large (2/16 GiB), Memory16x128 r7i.8xlarge (32/256), Compute64x128 c7i.24xlarge
#   (96/192), Compute192x384 m7i.48xlarge (192/768), Memory192x1536 r8i.96xlarge (384/3072) or
#   x8i.48xlarge (192/3072), GPU1xL40S g6e.4xlarge (16/128, 1 L40S), GPU4xL4 g6.24xlarge (96/384, 4 L4).
COMPUTE_POOLS: dict[str, ComputePool] = {
    pool.name: pool
    for pool in (
        ComputePool("General", ("m7i", "c7i", "r7i"), max_vcpus=384),
        ComputePool("HighMemory", ("r8i.96xlarge", "x8i.48xlarge"), max_vcpus=384),
        ComputePool("GpuL40S", ("g6e",), max_vcpus=64, gpu=True),
        ComputePool("GpuL4", ("g6",), max_vcpus=192, gpu=True),
    )
}
MACHINE_CLASS_POOLS: dict[str, str] = {
    "Basic1x8": "General",
    "Basic2x8": "General",
    "Basic4x16": "General",
    "Memory8x64": "General",
    "Memory16x128": "General",
    "Memory192x1536": "HighMemory",
    "Compute64x128": "General",
    "Compute192x384": "General",
    "GPU1xL40S": "GpuL40S",
    "GPU4xL4": "GpuL4",
}
# Spot first (order 1), on-demand second (order 2).
SPOT_ORDER = 1
ON_DEMAND_ORDER = 2
JOB_QUEUE_PRIORITY = 1
# A job RUNNABLE behind a MISCONFIGURATION:* reason (no instance type can ever fit it, or the compute
# environments' max vCPUs are below its needs) is cancelled after 10 minutes; its statusReason
# reaches the user through the Batch event. CAPACITY:* waits on (Spot capacity comes back).
JOB_STATE_TIME_LIMIT_SECONDS = 600
VPC_NAT_GATEWAYS = 1
JOB_MAX_ATTEMPTS = 3
JOB_RETRY_STATUS_REASON = "Host EC2*"
JOB_LOG_STREAM_PREFIX = "job"
