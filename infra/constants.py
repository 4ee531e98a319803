"""Names and sizes of the deployed service, in one place.

Plain values only (no CDK objects), so tests and other modules can import them cheaply.
"""

from __future__ import annotations

from pathlib import Path

SERVICE_NAME = "remote-batch"
STACK_NAME_PREFIX = "RemoteBatch"
DEFAULT_STAGE = "dev"
REPO_ROOT = Path(__file__).resolve().parent.parent

# Context keys read by infra/app.py (cdk.json sets them; `cdk synth -c stage=prod` overrides).
CONTEXT_STAGE = "stage"
CONTEXT_WORKER_IMAGE_DIR = "workerImageDir"
DEFAULT_WORKER_IMAGE_DIR = "worker"

# Retention: inputs/, outputs/ and job logs live 14 days (DESIGN.md "Retention").
DATA_RETENTION_DAYS = 14
DATA_PREFIXES = ("inputs/", "outputs/")
INPUTS_PREFIX = "inputs/"
OUTPUTS_PREFIX = "outputs/"
ABORT_INCOMPLETE_UPLOAD_DAYS = 1
ACCESS_LOG_RETENTION_DAYS = 90

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

# AWS Batch (issue 2: one compute environment, queue and job definition per zone).
HOME_ZONE = "UnitedStates"
VPC_MAX_AZS = 2
VPC_NAT_GATEWAYS = 1
COMPUTE_MAX_VCPUS = 256
COMPUTE_INSTANCE_FAMILIES = ("m7i", "r7i")
JOB_DEFAULT_VCPUS = 1
JOB_DEFAULT_MEMORY_GIB = 8
JOB_MAX_ATTEMPTS = 3
JOB_RETRY_STATUS_REASON = "Host EC2*"
JOB_LOG_STREAM_PREFIX = "job"
