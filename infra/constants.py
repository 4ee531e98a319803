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
CONTEXT_INSTANCE_POOLS = "instancePools"
CONTEXT_CONSOLE_DOMAIN_PREFIX = "consoleDomainPrefix"
DEFAULT_WORKER_IMAGE_DIR = "worker"
# The built web console (`make console`), uploaded to the console bucket by `make deploy-console`.
DEFAULT_CONSOLE_ASSETS_DIR = "build/console"
# The stage is part of S3 bucket, queue and log group names: lowercase, no hyphen (so one stage's
# queue-name prefix never matches another's), short enough for S3's 63-character bucket names.
STAGE_PATTERN = r"^[a-z][a-z0-9]{0,11}$"

# Retention: inputs/, outputs/ and job logs live 14 days (docs/architecture.md "Retention").
DATA_RETENTION_DAYS = 14
DATA_PREFIXES = ("inputs/", "outputs/")
INPUTS_PREFIX = "inputs/"
OUTPUTS_PREFIX = "outputs/"
ABORT_INCOMPLETE_UPLOAD_DAYS = 1
ACCESS_LOG_RETENTION_DAYS = 90

# The tags the api sets on every Batch job it submits (functions/logic/batch_submission.py): the only keys
# its role may tag with (aws:TagKeys); tests/infra/test_iam_flow.py submits with them under that role.
JOB_TAG_KEYS = ("remote-batch:jobId", "remote-batch:accountId")

# Lambdas.
LAMBDA_CODE_DIR = "functions"
# The code asset: functions/ with its .pyc, built at synth (infra/lambda_bundle.py build_code_asset).
LAMBDA_CODE_ASSET_DIR = "build/lambda/code"
# The interpreter and machine the functions run on, and the wheels their layer is built for.
# CPython 3.13 on x86_64: python3.13 runs on Amazon Linux 2023 and is supported to 2029-06-30
# (python3.11, on Amazon Linux 2, is deprecated on 2027-06-30: the Lambda runtimes table). The
# deployed-bundle test imports the very layer that is deployed in a CPython 3.13 of this machine
# (pydantic-core is a compiled wheel: a cp311 or arm64 build could not be imported there, so it would
# ship untested). manylinux2014 wheels need glibc >= 2.17; Amazon Linux 2023 has 2.34. Moving to
# another version or to arm64 is a change of these three values once the test machines have that
# interpreter (infra/lambda_bundle.py finds it by running it).
LAMBDA_PYTHON_VERSION = "3.13"
LAMBDA_ARCHITECTURE = "x86_64"
LAMBDA_PLATFORM = "manylinux2014_x86_64"
# One lock file holds every third-party pin of the functions (boto3 included); `make lock` writes it,
# `make lambda-bundle` installs it into the layer folder, the venv installs it as constraints.
LAMBDA_LOCK_FILE = "functions/requirements.lock"
LAMBDA_RUNTIME_LOCK_FILE = "functions/runtime.lock"
LAMBDA_LAYER_DIR = "build/lambda/layer"
LAMBDA_LAYER_ZIP = "build/lambda/layer.zip"  # what CDK uploads: LAMBDA_LAYER_DIR, zipped reproducibly
LAMBDA_RUNTIME_SDK_DIR = "build/lambda-runtime"
LAMBDA_MEMORY_MIB = {"api": 1024, "batch_events": 512, "meter": 1024, "dispatcher": 512}
LAMBDA_TIMEOUT_SECONDS = {"api": 29, "batch_events": 60, "meter": 55, "dispatcher": 60}
LAMBDA_HANDLERS = {
    "api": "functions.handlers.api.handler",
    "batch_events": "functions.handlers.batch_events.handler",
    "meter": "functions.handlers.meter.handler",
    "dispatcher": "functions.handlers.dispatcher.handler",
}

# The dispatch queue (functions/logic/dispatch_rules.py). SubmitJob calls per second in all, below AWS Batch's
# ~50 per account and region; the event source mapping's maximum concurrency (SQS's minimum is 2), each
# instance pacing itself at the rate divided by it; up to 10 messages per invocation (one instance paces
# 10 SubmitJob calls at 10/s: 1 s of a 60 s timeout; a throttled call backs off up to ~3.5 s per job).
DISPATCH_TPS = 40
DISPATCH_MAX_CONCURRENCY = 4
DISPATCH_BATCH_SIZE = 10
# Six times the function's timeout (the AWS Lambda developer guide's advice for SQS event sources).
DISPATCH_VISIBILITY_TIMEOUT_SECONDS = 360
# The DLQ takes a message only after the dispatcher's own give-up
# (functions.logic.dispatch_rules.MAX_RECEIVES, which ends the job Terminated) failed too.
DISPATCH_MAX_RECEIVE_COUNT = 12
DISPATCH_DLQ_RETENTION_DAYS = 14
# Alarm when the oldest message waits this long (a stalled dispatcher or AWS Batch refusing for long).
DISPATCH_BACKLOG_ALARM_SECONDS = 900

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
# What callers see: the share of API requests answered 5xx (API Gateway's 5XXError averages 0/1 per
# request), the API's p90 latency (ms; API Gateway ends a request at 29 s), each function's p90
# duration (ms; half its timeout); the meter not invoked for 3 one-minute periods (it runs every
# minute), and any job still Starting/Running past its Batch timeout plus the meter's margin.
API_5XX_RATE_ALARM_THRESHOLD = 0.05
API_LATENCY_P90_ALARM_MS = 5000
FUNCTION_DURATION_P90_ALARM_MS = {"api": 5000, "batch_events": 30_000, "meter": 27_500, "dispatcher": 30_000}
LATENCY_ALARM_EVALUATION_PERIODS = 2
METER_SILENCE_MINUTES = 3
STUCK_JOBS_ALARM_THRESHOLD = 0
# The service's own CloudWatch metrics (functions/observability.py: powertools EMF, dimension ``service``).
METRICS_NAMESPACE = "RemoteBatch"


# AWS Batch, per geo zone. Physical names are deterministic (infra/naming.py) so the control plane
# can address each zone's queues, definitions, bucket and log group without cross-region references.
@dataclass(frozen=True)
class ComputePool:
    """Instances some machine classes share: one Spot and one on-demand compute environment.

    ``instance_types`` are EC2 families (``m7i``: Batch picks the size) or sizes (``r8i.96xlarge``,
    where only the largest sizes fit); ``max_vcpus`` caps each of the two environments.
    ``on_demand_first`` puts the on-demand environment first in the pool's queues: where Spot is
    scarce (the largest memory sizes, GPUs) a Spot-first queue would wait on Spot capacity until
    the job-state time limit cancels the job, while on-demand, priced the same in credits, would
    have run it; elsewhere Spot comes first and a full Spot environment spills to on-demand.
    ``root_volume_gib`` sizes each instance's encrypted gp3 root volume, which every container on
    the instance shares (images, the jobs' working directories).
    """

    name: str
    instance_types: tuple[str, ...]
    max_vcpus: int
    root_volume_gib: int
    gpu: bool = False
    on_demand_first: bool = False


# A job's MEMORY must be below what the ECS agent registers (the instance's memory minus a few
# hundred MiB), so each class needs a size strictly larger than its memory, e.g.:
#   Basic1x8 r7i.large (2/16 GiB), Memory16x128 r7i.8xlarge (32/256), Compute64x128 c7i.24xlarge
#   (96/192), Compute192x384 m7i.48xlarge (192/768), Memory192x1536 r8i.96xlarge (384/3072) or
#   x8i.48xlarge (192/3072), GPU1xL40S g6e.4xlarge (16/128, 1 L40S), GPU4xL4 g6.24xlarge (96/384, 4 L4).
# Each configured region must offer every type (checked at synth against infra/instance_offerings.json;
# the instancePools context gives a pool other types in one region).
COMPUTE_POOLS: dict[str, ComputePool] = {
    pool.name: pool
    for pool in (
        ComputePool("General", ("m7i", "c7i", "r7i"), max_vcpus=384, root_volume_gib=100),
        ComputePool(
            "HighMemory",
            ("r8i.96xlarge", "x8i.48xlarge"),
            max_vcpus=384,
            root_volume_gib=500,
            on_demand_first=True,
        ),
        ComputePool("GpuL40S", ("g6e",), max_vcpus=64, root_volume_gib=200, gpu=True, on_demand_first=True),
        ComputePool("GpuL4", ("g6",), max_vcpus=192, root_volume_gib=200, gpu=True, on_demand_first=True),
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
# A queue's first and second compute environment (Spot first unless the pool is on_demand_first).
FIRST_ORDER = 1
SECOND_ORDER = 2
JOB_QUEUE_PRIORITY = 1
# /dev/shm of a job container, as a share of its class's memory (Docker's default is 64 MiB, too
# small for PyTorch data loaders or multiprocessing queues); tmpfs pages count against the job's memory.
SHARED_MEMORY_FRACTION = 4  # memory / 4
# The root device of the ECS-optimized Amazon Linux 2023 AMIs (standard and NVIDIA).
ROOT_DEVICE_NAME = "/dev/xvda"
# Job-state time limits (cancel a job RUNNABLE behind a capacity or misconfiguration reason) live in
# functions/domain/queue_limits.py: the batch_events Lambda words the cancel's statusReason from them.
VPC_NAT_GATEWAYS = 1
# The job definitions' retry rule (attempts, the retried statusReason) is functions/domain/batch_retries.py.
JOB_LOG_STREAM_PREFIX = "job"
# Environments' builds (functions/domain/environment_builds.py): each zone's build queue takes the
# builds on its General pool's on-demand compute environment, ahead of the class queues sharing it (a
# job waiting on a build waits for it), and on-demand so a 30-minute build is not reclaimed.
BUILD_POOL = "General"
BUILD_QUEUE_PRIORITY = 10
BUILD_QUEUE_SUFFIX = "build"
# The host folder each instance unpacks environments into (keyed by build hash), mounted into every
# job container at the same path; made at instance boot, root's (0755): the job's supervisor runs as
# root and unpacks there, the user's code runs as the worker image's user and only reads it.
ENVIRONMENT_CACHE_PATH = "/var/cache/remote-batch/environments"
# The worker image's unprivileged user (worker/Dockerfile), which environment builds run as.
WORKER_UID = 10001
