"""AWS Batch job definitions of image environments (``JobDefinitions``): one per (image digest, machine
class), registered on first use and cached in DynamoDB.

A job in an image environment runs as a **multi-container** job (``ecsProperties``, AWS Batch user
guide "Create job definitions using EcsProperties"), made from the class's own definition (the
service's worker image, roles, log configuration and retry strategy; DescribeJobDefinitions of its
latest ACTIVE revision):

- ``supervisor``: the service's worker image and command (``python -m worker``, boto3), essential (the
  job ends when it exits, with its exit code), run as root so it can prepare the shared volume for a
  job container of any user; it fetches the input, hands the job to the job container through the
  volume, relays the job's console to its own log stream (the job's one log), stores the outputs;
- ``job``: the user's image pinned by digest, started once the supervisor has (``dependsOn`` START),
  not essential, running ``python3 -I -c LAUNCHER`` (``functions.domain.images.CONTAINER_LAUNCHER``: the
  job side from the volume, on the image's Python, standard library only) with the class's vCPUs, GPUs and
  memory less the supervisor's share (``SUPERVISOR_MEMORY_MIB``), pulled with ``repositoryCredentials``
  when the environment names a secret;
- the volume ``remote-batch-exchange`` (no host path: a task-scoped Docker volume, gone with the job),
  mounted read-write in both at ``EXCHANGE_PATH``.

Cache: an item of the ``Computes`` table under partition ``jobdefinitions#<region>``, entry
``<digest>#<machine class definition>#<template hash>``; the template hash covers everything else the
definition is made of (the pinned image, the pull secret, the base definition's ARN with its revision),
so a redeployed worker image registers anew. Two dispatchers racing on a first use may both register
(AWS Batch then holds two identical revisions); the cache's conditional put (``attribute_not_exists``)
keeps the first, and the other uses it: duplicates are harmless and accepted, never two entries.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from functions.adapters.batch import translated_errors
from functions.adapters.dynamodb.base import store_errors
from functions.adapters.dynamodb.items import serialize_item
from functions.domain.errors import BatchRefused, ConditionFailed
from functions.domain.images import (
    CONTAINER_LAUNCHER,
    EXCHANGE_PATH,
    EXCHANGE_VARIABLE,
    JOB_CONTAINER,
    SUPERVISOR_CONTAINER,
)
from functions.ports import ImageJob

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_batch import BatchClient
    from mypy_boto3_dynamodb import DynamoDBClient

#: The task-scoped volume both containers share.
EXCHANGE_VOLUME = "remote-batch-exchange"
#: The supervisor's memory (MiB), taken from the class's: it fetches, relays and uploads, nothing more.
SUPERVISOR_MEMORY_MIB = 256
#: The command the job container runs: the image's ``python3`` (>= 3.9) on the launcher.
JOB_COMMAND = ("python3", "-I", "-c", CONTAINER_LAUNCHER, EXCHANGE_PATH)


def _resources(container: dict[str, Any]) -> dict[str, str]:
    """``{"VCPU": "2", "MEMORY": "8192", "GPU": "1"}`` of a ``containerProperties``."""
    found = {r["type"]: str(r["value"]) for r in container.get("resourceRequirements", [])}
    if "VCPU" not in found and container.get("vcpus"):
        found["VCPU"] = str(container["vcpus"])
    if "MEMORY" not in found and container.get("memory"):
        found["MEMORY"] = str(container["memory"])
    return found


def definition_name(base_name: str, template: str) -> str:
    """``<base>-img-<first 16 hex of the template hash>`` (AWS Batch allows 128 characters)."""
    return f"{base_name[:100]}-img-{template[:16]}"


def template_hash(base_arn: str, job: ImageJob) -> str:
    """The hex SHA-256 of what a definition is made of besides the class: the base definition's ARN
    (with its revision), the pinned image, the pull secret."""
    value = {"base": base_arn, "image": job.image, "credentials": job.repository_credentials}
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def image_job_definition_request(base: dict[str, Any], job: ImageJob, name: str) -> dict[str, Any]:
    """The RegisterJobDefinition parameters of ``job`` on the class of ``base`` (a DescribeJobDefinitions
    ``jobDefinition`` with ``containerProperties``): see the module docstring.

    Raises ``ValueError`` for a base without ``containerProperties`` or without memory.
    """
    container: dict[str, Any] | None = base.get("containerProperties")
    if not container:
        raise ValueError(f"job definition {base.get('jobDefinitionArn')} has no containerProperties")
    resources = _resources(container)
    if "MEMORY" not in resources:
        raise ValueError(f"job definition {base.get('jobDefinitionArn')} has no memory")
    mount = {"sourceVolume": EXCHANGE_VOLUME, "containerPath": EXCHANGE_PATH, "readOnly": False}
    common: dict[str, Any] = {}
    if container.get("logConfiguration"):
        common["logConfiguration"] = container["logConfiguration"]
    supervisor: dict[str, Any] = {
        "name": SUPERVISOR_CONTAINER,
        "image": container["image"],
        "essential": True,
        # Root in the service's own image only: it makes the shared volume usable by the job
        # container's user, whichever the image runs as.
        "user": "0",
        "environment": [
            *container.get("environment", []),
            {"name": EXCHANGE_VARIABLE, "value": EXCHANGE_PATH},
        ],
        "mountPoints": [mount],
        "resourceRequirements": [{"type": "MEMORY", "value": str(SUPERVISOR_MEMORY_MIB)}],
        **common,
    }
    if container.get("command"):
        supervisor["command"] = container["command"]
    job_memory = int(resources["MEMORY"]) - SUPERVISOR_MEMORY_MIB
    job_resources = [
        {"type": "VCPU", "value": resources.get("VCPU", "1")},
        {"type": "MEMORY", "value": str(job_memory)},
    ]
    if "GPU" in resources:
        job_resources.append({"type": "GPU", "value": resources["GPU"]})
    job_container: dict[str, Any] = {
        "name": JOB_CONTAINER,
        "image": job.image,
        "essential": False,
        "command": list(JOB_COMMAND),
        "dependsOn": [{"containerName": SUPERVISOR_CONTAINER, "condition": "START"}],
        "mountPoints": [mount],
        "resourceRequirements": job_resources,
        "environment": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        **common,
    }
    if container.get("linuxParameters"):
        job_container["linuxParameters"] = container["linuxParameters"]
    if job.repository_credentials is not None:
        job_container["repositoryCredentials"] = {"credentialsParameter": job.repository_credentials}
    task: dict[str, Any] = {
        "containers": [supervisor, job_container],
        "volumes": [{"name": EXCHANGE_VOLUME}],
    }
    if container.get("executionRoleArn"):
        task["executionRoleArn"] = container["executionRoleArn"]
    if container.get("jobRoleArn"):
        task["taskRoleArn"] = container["jobRoleArn"]
    request: dict[str, Any] = {
        "jobDefinitionName": name,
        "type": "container",
        "platformCapabilities": ["EC2"],
        "ecsProperties": {"taskProperties": [task]},
    }
    for key in ("retryStrategy", "timeout", "propagateTags"):
        if key in base:
            request[key] = base[key]
    return request


class CachedJobDefinitions:
    """``JobDefinitions`` on AWS Batch (one region) with a DynamoDB cache (the ``Computes`` table).

    Parameters
    ----------
    batch : BatchClient
        The zone's AWS Batch client.
    dynamodb : DynamoDBClient
        The home region's client.
    table : str
        The ``Computes`` table's name.
    region : str
        The zone's region (the cache's partition: definitions are regional).
    """

    def __init__(self, batch: BatchClient, dynamodb: DynamoDBClient, table: str, region: str) -> None:
        self._batch = batch
        self._db = dynamodb
        self._table = table
        self._partition = f"jobdefinitions#{region}"

    def definition_for(self, job: ImageJob) -> str:
        """The cached definition's ARN, or a new one registered and cached (see the module docstring).

        Raises ``DependencyFailed`` (``BatchRefused`` for a base definition AWS Batch does not have, or a
        definition it refuses).
        """
        base = self._base(job.base_definition)
        template = template_hash(base["jobDefinitionArn"], job)
        digest = job.image.rpartition("@")[2]
        key = {"accountId": self._partition, "entry": f"{digest}#{job.base_definition}#{template}"}
        cached = self._cached(key)
        if cached is not None:
            return cached
        request = image_job_definition_request(
            base, job, definition_name(base["jobDefinitionName"], template)
        )
        with translated_errors("register the image's job definition", "the dispatcher retries."):
            arn = self._batch.register_job_definition(**request)["jobDefinitionArn"]
        item = {
            **key,
            "jobDefinitionArn": arn,
            "image": job.image,
            "baseDefinition": base["jobDefinitionArn"],
        }
        try:
            with store_errors("PutItem"):
                self._db.put_item(
                    TableName=self._table,
                    Item=serialize_item(item),
                    ConditionExpression="attribute_not_exists(accountId)",
                )
        except ConditionFailed:
            # Another dispatcher registered and cached it first: its revision is the one used.
            return self._cached(key) or arn
        return arn

    def _base(self, name: str) -> dict[str, Any]:
        """The class's own definition: the latest ACTIVE revision of a name, or exactly the revision a
        ``name:revision`` or an ARN names (as SubmitJob would run it)."""
        with translated_errors("describe the job definition", "the dispatcher retries."):
            if ":" in name:
                response = self._batch.describe_job_definitions(jobDefinitions=[name])
            else:
                response = self._batch.describe_job_definitions(jobDefinitionName=name, status="ACTIVE")
        definitions: list[dict[str, Any]] = [dict(d) for d in response.get("jobDefinitions", [])]
        if not definitions:
            raise BatchRefused(f"AWS Batch has no job definition {name}; the dispatcher retries.")
        return max(definitions, key=lambda d: int(d.get("revision", 0)))

    def _cached(self, key: dict[str, str]) -> str | None:
        with store_errors("GetItem"):
            response = self._db.get_item(TableName=self._table, Key=serialize_item(key), ConsistentRead=True)
        item = response.get("Item")
        return item["jobDefinitionArn"]["S"] if item else None
