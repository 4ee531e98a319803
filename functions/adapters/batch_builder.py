"""The cloud's environment builder (``functions.ports.EnvironmentBuilder``): each build is an AWS Batch
job on the build zone's build queue (``functions.domain.environment_builds``).

``start_build`` writes the build's request to the zone's bucket, then submits the build job on the
definition of the environment's Python (``<build definition>-py3XY``: the worker image of that
Python, whose ``python -m worker build`` is the build program), tagged so its state-change event
reaches ``record_build`` (``functions.logic.environment_builds``) and not the jobs' logic.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence

from functions.domain.environment_builds import (
    BUCKET_VARIABLE,
    BUILD_MEMORY_MIB,
    BUILD_TIMEOUT_SECONDS,
    BUILD_VCPUS,
    LOG_GROUP_VARIABLE,
    LOG_STREAM_VARIABLE,
    OUTCOME_KEY_VARIABLE,
    REPLICAS_VARIABLE,
    REQUEST_KEY_VARIABLE,
    build_job_name,
    build_tag_values,
    outcome_key,
    request_document,
    request_key,
)
from functions.domain.machine_classes import GeoZone
from functions.domain.runtime import job_definition_name
from functions.ports import BatchRoute, BatchSubmission, BuildRequest, ZoneServices


def new_build_id() -> str:
    """A build's id: 32 random hex digits."""
    return uuid.uuid4().hex


class BatchEnvironmentBuilder:
    """Builds environments as AWS Batch jobs in ``zone``.

    Parameters
    ----------
    zone : GeoZone
        The build zone: its bucket holds the requests, outcomes and builds, its job log group the
        build logs (``GET /environments/{name}/log`` reads them there).
    services : ZoneServices
        That zone's bucket and AWS Batch.
    route : BatchRoute
        The zone's build queue and the base name of its build job definitions.
    log_group : str
        The zone's job log group.
    replicas : Sequence[tuple[str, str]]
        The other zones' ``(bucket, region)``: each gets a copy of every build, so a job reads its
        environment from its own zone's bucket.
    new_id : Callable[[], str]
        Makes build ids (tests pass a fixed one).
    """

    runs_images = False

    def __init__(
        self,
        zone: GeoZone,
        services: ZoneServices,
        route: BatchRoute,
        *,
        log_group: str,
        replicas: Sequence[tuple[str, str]] = (),
        new_id: Callable[[], str] = new_build_id,
    ) -> None:
        self.zone = zone
        self._services = services
        self._route = route
        self._log_group = log_group
        self._replicas = [{"bucket": bucket, "region": region} for bucket, region in replicas]
        self._new_id = new_id

    def start_build(self, request: BuildRequest) -> None:
        """Write the request (``environment-builds/<buildId>/request.json``) and SubmitJob the build.

        Raises
        ------
        DependencyFailed
            S3 or AWS Batch refused or could not be reached (``BatchRefused`` for a queue or
            definition Batch does not know); the build job may not exist.
        """
        build_id = self._new_id()
        body = json.dumps(request_document(request.spec), separators=(",", ":")).encode()
        self._services.blobs.put(request_key(build_id), body, "application/json")
        self._services.batch.submit_job(
            BatchSubmission(
                job_name=build_job_name(request.spec_hash),
                job_queue=self._route.job_queue,
                job_definition=job_definition_name(self._route.job_definition, request.spec.python),
                vcpus=BUILD_VCPUS,
                memory_mib=BUILD_MEMORY_MIB,
                gpus=0,
                environment={
                    BUCKET_VARIABLE: self._services.bucket,
                    REQUEST_KEY_VARIABLE: request_key(build_id),
                    OUTCOME_KEY_VARIABLE: outcome_key(build_id),
                    LOG_GROUP_VARIABLE: self._log_group,
                    LOG_STREAM_VARIABLE: request.log_stream_name,
                    REPLICAS_VARIABLE: json.dumps(self._replicas, separators=(",", ":")),
                },
                timeout_seconds=BUILD_TIMEOUT_SECONDS,
                tags=build_tag_values(
                    request.account_id, request.name, request.spec_hash, build_id, request.log_stream_name
                ),
            )
        )

    def site_packages(self, build_hash: str) -> str | None:
        """None: in the cloud the job's worker fetches the build itself (``worker/environment_cache.py``)."""
        return None
