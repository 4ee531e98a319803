"""Deterministic physical names of each geo zone's resources.

The control plane (home region) addresses every zone's queues, job definitions, bucket and job log
group by name: CloudFormation cannot reference resources across regions, and names keep the Lambdas'
``REMOTE_BATCH_ZONES`` variable short. Both stacks compose the names here from the stage, the zone's
region and the account, so they always agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.domain.runtime import job_definition_name
from infra import constants


@dataclass(frozen=True)
class ZoneNames:
    """The names of one geo zone's resources.

    Parameters
    ----------
    zone : str
        The geo zone as the API spells it (``UnitedStates``).
    region : str
        The zone's AWS region.
    stage : str
        The deployment stage (``dev``); part of every name, so stages can share an account.
    account : str
        The AWS account id, usually a token (``Aws.ACCOUNT_ID``); cdk-nag spells it
        ``<AWS::AccountId>``.
    """

    zone: str
    region: str
    stage: str
    account: str

    @property
    def prefix(self) -> str:
        """Every job queue and job definition name starts with it (``remote-batch-dev-``).

        The stage has no hyphen, so one stage's prefix never matches another stage's names.
        """
        return f"{constants.SERVICE_NAME}-{self.stage}-"

    @property
    def compute_prefix(self) -> str:
        """Dedicated computes' compute environments and job queues are named ``<this>-cmp-...``
        (``functions.domain.computes.resource_name``): ``remote-batch-dev``."""
        return f"{constants.SERVICE_NAME}-{self.stage}"

    @property
    def dedicated_instance_role_name(self) -> str:
        """The container instances' role (and instance profile) of the zone's dedicated computes; a
        fixed name, so the control plane may pass exactly it (IAM is global: the region is in it)."""
        return f"{constants.SERVICE_NAME}-{self.stage}-{self.region}-dedicated-instance"

    @property
    def job_role_name(self) -> str:
        """The role every job of the zone runs with (a fixed name: the dispatcher passes exactly it
        when it registers an image environment's job definition)."""
        return f"{constants.SERVICE_NAME}-{self.stage}-{self.region}-job"

    @property
    def execution_role_name(self) -> str:
        """The role ECS starts the zone's jobs with (pulls, the job log, a registry's secret)."""
        return f"{constants.SERVICE_NAME}-{self.stage}-{self.region}-job-execution"

    @property
    def image_repository_prefix(self) -> str:
        """The ECR repositories (of the deployment's account) environments' images may come from:
        the execution roles may pull exactly these (``functions.domain.images``)."""
        return f"{self.prefix}images/"

    @property
    def registry_secret_prefix(self) -> str:
        """The Secrets Manager secret names a private registry's credentials may be under: the
        execution roles may read exactly these."""
        return f"{constants.SERVICE_NAME}/{self.stage}/registry/"

    def image_job_definition_pattern(self, machine_class: str) -> str:
        """The image environments' definitions of a class (``<class definition>-py3XY-img-<hash>``,
        ``functions.adapters.batch_definitions.definition_name``)."""
        return f"{self.job_definition_base(machine_class)}-py3*-img-*"

    @property
    def batch_service_role_name(self) -> str:
        """The Batch service role the zone's dedicated compute environments are created with."""
        return f"{constants.SERVICE_NAME}-{self.stage}-{self.region}-batch-service"

    @property
    def compute_template_parameter_name(self) -> str:
        """The SSM parameter (in the zone's region) holding what its dedicated computes are built from."""
        return f"/{constants.SERVICE_NAME}/{self.stage}/{self.zone}/compute-template"

    def job_queue_name(self, machine_class: str) -> str:
        """The machine class's job queue (``remote-batch-dev-Basic1x8``)."""
        return f"{self.prefix}{machine_class}"

    def compute_environment_name(self, pool: str, *, spot: bool) -> str:
        """A compute pool's Spot or on-demand environment (``remote-batch-dev-General-Spot``): named,
        so the api's role may update exactly these (``batch:UpdateComputeEnvironment``)."""
        return f"{self.prefix}{pool}-{'Spot' if spot else 'OnDemand'}"

    def job_definition_base(self, machine_class: str) -> str:
        """What the machine class's job definitions are named after (same as its queue: Batch keeps
        them apart); the api adds the job's Python (``functions.domain.runtime.job_definition_name``)."""
        return f"{self.prefix}{machine_class}"

    def job_definition_pattern(self, machine_class: str) -> str:
        """The machine class's definitions of every Python version (``remote-batch-dev-Basic1x8-py3*``):
        what IAM policies name (one pattern, not one ARN per version: the dispatcher's policy stays
        under IAM's 10,240-character limit for a role's inline policies)."""
        return f"{self.job_definition_base(machine_class)}-py3*"

    def job_definition_name(self, machine_class: str, python_version: str) -> str:
        """The machine class's job definition on Python ``python_version``
        (``remote-batch-dev-Basic1x8-py312``)."""
        return job_definition_name(self.job_definition_base(machine_class), python_version)

    @property
    def bucket_name(self) -> str:
        """The zone's data bucket; S3 names are global, so it carries the account and region."""
        return f"{constants.SERVICE_NAME}-{self.stage}-data-{self.account}-{self.region}"

    @property
    def job_log_group_name(self) -> str:
        """Where the awslogs driver writes every job's console output (one per region)."""
        return f"/{constants.SERVICE_NAME}/{self.stage}/jobs"
