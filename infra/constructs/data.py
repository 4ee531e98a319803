"""DynamoDB tables (from ``functions/adapters/tables.py``, home region) and a zone's S3 data bucket."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from functions.adapters.tables import ALL_TABLES, Index, TableSpec
from functions.domain.environment_builds import BUILD_REQUESTS_PREFIX
from infra import constants

_PROJECTIONS = {
    "ALL": dynamodb.ProjectionType.ALL,
    "KEYS_ONLY": dynamodb.ProjectionType.KEYS_ONLY,
    "INCLUDE": dynamodb.ProjectionType.INCLUDE,
}


class Data(Construct):
    """The service's state in the home region: one table per ``TableSpec``.

    Attributes
    ----------
    tables : dict[str, dynamodb.Table]
        By the spec's ``logical_name`` (``Jobs``, ``Accounts``, ``Ledger``, ``Idempotency``, ``Quotas``).
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.tables = {spec.logical_name: self._build_table(spec) for spec in ALL_TABLES}

    @property
    def jobs_table(self) -> dynamodb.Table:
        return self.tables["Jobs"]

    @property
    def accounts_table(self) -> dynamodb.Table:
        return self.tables["Accounts"]

    @property
    def ledger_table(self) -> dynamodb.Table:
        return self.tables["Ledger"]

    @property
    def computes_table(self) -> dynamodb.Table:
        return self.tables["Computes"]

    @property
    def quotas_table(self) -> dynamodb.Table:
        return self.tables["Quotas"]

    @property
    def idempotency_table(self) -> dynamodb.Table:
        return self.tables["Idempotency"]

    @property
    def operations_table(self) -> dynamodb.Table:
        return self.tables["Operations"]

    def _build_table(self, spec: TableSpec) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            f"{spec.logical_name}Table",
            partition_key=_string_key(spec.partition_key),
            sort_key=_string_key(spec.sort_key) if spec.sort_key else None,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=spec.ttl_attribute,
            # Generated names, so a failed first deploy that leaves a table behind never blocks the
            # retry; deletion protection keeps the service's state from a stray DeleteTable (docs/deploy.md,
            # "Destroy", says how to turn it off first).
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        for index in spec.indexes:
            self._add_index(table, index)
        return table

    @staticmethod
    def _add_index(table: dynamodb.Table, index: Index) -> None:
        projection = _PROJECTIONS[index.projection]
        sort_key = _string_key(index.sort_key) if index.sort_key else None
        if index.local:
            if sort_key is None:
                raise ValueError(f"local index {index.name} needs a sort key")
            table.add_local_secondary_index(
                index_name=index.name,
                sort_key=sort_key,
                projection_type=projection,
                non_key_attributes=list(index.included) or None,
            )
        else:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=_string_key(index.partition_key),
                sort_key=sort_key,
                projection_type=projection,
                non_key_attributes=list(index.included) or None,
            )


class DataBucket(Construct):
    """A geo zone's bucket of job inputs and outputs, so a job's data stays in its zone's region.

    Parameters
    ----------
    bucket_name : str
        Deterministic (``infra/naming.py``): the control plane addresses the bucket by it. Both
        buckets are ``RetainExceptOnCreate``: kept when the stack is deleted, deleted when their
        own creation rolls back, so a failed first deploy can simply be retried.

    Attributes
    ----------
    bucket : s3.Bucket
        Job inputs under ``inputs/``, outputs under ``outputs/``; both expire after 14 days.
    access_log_bucket : s3.Bucket
        The data bucket's server access logs.
    """

    def __init__(self, scope: Construct, construct_id: str, *, bucket_name: str) -> None:
        super().__init__(scope, construct_id)
        self.access_log_bucket = self._build_access_log_bucket()
        self.bucket = self._build_data_bucket(bucket_name, self.access_log_bucket)

    def _build_access_log_bucket(self) -> s3.Bucket:
        return s3.Bucket(
            self,
            "AccessLogBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            versioned=False,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireAccessLogs", expiration=Duration.days(constants.ACCESS_LOG_RETENTION_DAYS)
                )
            ],
            # Kept when the stack is deleted or replaces it; deleted when its own creation rolls back.
            removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )

    def _build_data_bucket(self, bucket_name: str, access_log_bucket: s3.Bucket) -> s3.Bucket:
        expire_prefixes = [
            s3.LifecycleRule(
                id=f"Expire{prefix.strip('/').capitalize()}",
                prefix=prefix,
                expiration=Duration.days(constants.DATA_RETENTION_DAYS),
            )
            for prefix in constants.DATA_PREFIXES
        ]
        # An environment build's request and outcome matter until its report; its build (environments/)
        # is shared by every environment whose lock it is, and stays.
        expire_prefixes.append(
            s3.LifecycleRule(
                id="ExpireEnvironmentBuildRecords",
                prefix=BUILD_REQUESTS_PREFIX,
                expiration=Duration.days(constants.DATA_RETENTION_DAYS),
            )
        )
        abort_uploads = s3.LifecycleRule(
            id="AbortIncompleteMultipartUploads",
            abort_incomplete_multipart_upload_after=Duration.days(constants.ABORT_INCOMPLETE_UPLOAD_DAYS),
        )
        return s3.Bucket(
            self,
            "DataBucket",
            bucket_name=bucket_name,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            versioned=False,
            lifecycle_rules=[*expire_prefixes, abort_uploads],
            server_access_logs_bucket=access_log_bucket,
            server_access_logs_prefix="data-bucket/",
            # The name is fixed (the control plane addresses it across regions), so a rollback of the
            # first deploy must not keep it: CloudFormation's RetainExceptOnCreate deletes a bucket
            # whose creation rolls back (empty then) and keeps it on stack deletion or replacement.
            removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )


def _string_key(name: str) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=name, type=dynamodb.AttributeType.STRING)
