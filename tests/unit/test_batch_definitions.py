"""Image environments' job definitions (``functions.adapters.batch_definitions``): the multi-container
definition made from the class's own, the cache keyed by digest and class, and two dispatchers racing
on a first use (both register; the conditional put keeps the first, the loser uses it)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from functions.adapters.batch import submit_job_request
from functions.adapters.batch_definitions import (
    SUPERVISOR_MEMORY_MIB,
    CachedJobDefinitions,
    definition_name,
    image_job_definition_request,
    template_hash,
)
from functions.domain.images import CONTAINER_LAUNCHER
from functions.ports import BatchSubmission, ImageJob

PINNED = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/remote-batch-dev-images/ml@sha256:" + "a" * 64
SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:remote-batch/dev/registry/acme-AbCdEf"
BASE: dict[str, Any] = {
    "jobDefinitionName": "remote-batch-dev-GPU1xL40S-py312",
    "jobDefinitionArn": (
        "arn:aws:batch:us-east-1:123456789012:job-definition/remote-batch-dev-GPU1xL40S-py312:7"
    ),
    "revision": 7,
    "retryStrategy": {"attempts": 3},
    "containerProperties": {
        "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/cdk-assets:worker-gpu-py312",
        "command": ["/opt/remote-batch/venv/bin/python", "-m", "worker"],
        "jobRoleArn": "arn:aws:iam::123456789012:role/remote-batch-dev-us-east-1-job",
        "executionRoleArn": "arn:aws:iam::123456789012:role/remote-batch-dev-us-east-1-job-execution",
        "resourceRequirements": [
            {"type": "VCPU", "value": "8"},
            {"type": "MEMORY", "value": "61440"},
            {"type": "GPU", "value": "1"},
        ],
        "environment": [{"name": "AWS_REGION", "value": "us-east-1"}],
        "linuxParameters": {"sharedMemorySize": 15360},
        "logConfiguration": {"logDriver": "awslogs", "options": {"awslogs-group": "/remote-batch/dev/jobs"}},
    },
}


def test_the_definition_runs_the_supervisor_from_the_service_image_and_the_job_in_the_users() -> None:
    job = ImageJob(PINNED, "remote-batch-dev-GPU1xL40S-py312", SECRET)

    request = image_job_definition_request(BASE, job, "remote-batch-dev-GPU1xL40S-py312-img-0123")

    assert request["platformCapabilities"] == ["EC2"] and request["retryStrategy"] == {"attempts": 3}
    (task,) = request["ecsProperties"]["taskProperties"]
    assert task["taskRoleArn"].endswith(":role/remote-batch-dev-us-east-1-job")
    assert task["executionRoleArn"].endswith(":role/remote-batch-dev-us-east-1-job-execution")
    supervisor, container = task["containers"]
    assert supervisor["image"] == BASE["containerProperties"]["image"]
    assert supervisor["command"] == ["/opt/remote-batch/venv/bin/python", "-m", "worker"]
    assert supervisor["resourceRequirements"] == [{"type": "MEMORY", "value": str(SUPERVISOR_MEMORY_MIB)}]
    assert supervisor["logConfiguration"] == container["logConfiguration"]
    assert container["image"] == PINNED
    assert container["command"] == ["python3", "-I", "-c", CONTAINER_LAUNCHER, "/remote-batch/exchange"]
    assert container["resourceRequirements"] == [
        {"type": "VCPU", "value": "8"},
        {"type": "MEMORY", "value": str(61440 - SUPERVISOR_MEMORY_MIB)},
        {"type": "GPU", "value": "1"},
    ]
    assert container["linuxParameters"] == {"sharedMemorySize": 15360}
    assert container["repositoryCredentials"] == {"credentialsParameter": SECRET}
    assert "repositoryCredentials" not in supervisor


def test_a_base_without_container_properties_is_refused() -> None:
    with pytest.raises(ValueError, match="no containerProperties"):
        image_job_definition_request({"jobDefinitionArn": "x"}, ImageJob(PINNED, "x"), "x-img-1")


def test_an_image_job_is_submitted_with_its_definition_and_the_supervisors_overrides() -> None:
    submission = BatchSubmission("job-1", "queue", "base-py312", 8, 61440, 1, {"B": "2", "A": "1"})

    request = submit_job_request(submission, "arn:aws:batch:us-east-1:1:job-definition/base-py312-img-ab:1")

    assert request["jobDefinition"].endswith("base-py312-img-ab:1")
    assert "containerOverrides" not in request
    assert request["ecsPropertiesOverride"] == {
        "taskProperties": [
            {
                "containers": [
                    {
                        "name": "supervisor",
                        "environment": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    }
                ]
            }
        ]
    }


class FakeBatch:
    def __init__(self) -> None:
        self.registered: list[dict[str, Any]] = []
        self.described: list[dict[str, Any]] = []

    def describe_job_definitions(self, **kwargs: Any) -> dict[str, Any]:
        self.described.append(kwargs)
        return {"jobDefinitions": [{**BASE, "revision": 6}, BASE]}

    def register_job_definition(self, **kwargs: Any) -> dict[str, Any]:
        self.registered.append(kwargs)
        name, revision = kwargs["jobDefinitionName"], len(self.registered)
        return {"jobDefinitionArn": f"arn:aws:batch:::job-definition/{name}:{revision}"}


class FakeTable:
    """GetItem/PutItem with ``attribute_not_exists``; ``first`` is what a racing dispatcher put first."""

    def __init__(self, first: str | None = None) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.first = first

    def _key(self, key: dict[str, Any]) -> str:
        return f"{key['accountId']['S']}|{key['entry']['S']}"

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        item = self.items.get(self._key(kwargs["Key"]))
        return {"Item": item} if item else {}

    def put_item(self, **kwargs: Any) -> dict[str, Any]:
        key = self._key(kwargs["Item"])
        if self.first is not None:  # the other dispatcher's put landed in between
            self.items[key] = {**kwargs["Item"], "jobDefinitionArn": {"S": self.first}}
        if key in self.items:
            error = {"Error": {"Code": "ConditionalCheckFailedException", "Message": "exists"}}
            raise ClientError(error, "PutItem")  # type: ignore[arg-type]
        self.items[key] = kwargs["Item"]
        return {}


def test_the_first_use_registers_and_caches_and_the_second_finds_it() -> None:
    batch, table = FakeBatch(), FakeTable()
    definitions = CachedJobDefinitions(batch, table, "computes", "us-east-1")  # type: ignore[arg-type]
    job = ImageJob(PINNED, "remote-batch-dev-GPU1xL40S-py312")

    first = definitions.definition_for(job)
    second = definitions.definition_for(job)

    template = template_hash(BASE["jobDefinitionArn"], job)  # the latest revision: 7
    assert (
        first
        == second
        == f"arn:aws:batch:::job-definition/{definition_name(BASE['jobDefinitionName'], template)}:1"
    )
    assert len(batch.registered) == 1
    (key,) = table.items
    assert key == f"jobdefinitions#us-east-1|sha256:{'a' * 64}#remote-batch-dev-GPU1xL40S-py312#{template}"
    assert batch.described[0] == {"jobDefinitionName": "remote-batch-dev-GPU1xL40S-py312", "status": "ACTIVE"}
    # Another image (or pull secret) of the same class is another definition.
    definitions.definition_for(ImageJob(PINNED, "remote-batch-dev-GPU1xL40S-py312", SECRET))
    assert len(batch.registered) == 2 and len(table.items) == 2


def test_a_dispatcher_that_loses_the_race_uses_the_definition_cached_first() -> None:
    batch, table = FakeBatch(), FakeTable(first="arn:aws:batch:::job-definition/theirs:1")
    definitions = CachedJobDefinitions(batch, table, "computes", "us-east-1")  # type: ignore[arg-type]

    arn = definitions.definition_for(ImageJob(PINNED, "remote-batch-dev-GPU1xL40S-py312:7"))

    assert arn == "arn:aws:batch:::job-definition/theirs:1"
    assert len(batch.registered) == 1  # its own registration stays unused: an identical revision
    assert batch.described[0] == {"jobDefinitions": ["remote-batch-dev-GPU1xL40S-py312:7"]}
