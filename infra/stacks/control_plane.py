"""The home region's stack: data, notifications, auth, the home zone's Batch compute, functions,
events and the API, each a construct."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from infra import constants, nag_suppressions
from infra.constructs.api import Api
from infra.constructs.auth import Auth
from infra.constructs.batch_compute import BatchCompute
from infra.constructs.data import Data
from infra.constructs.events import Events
from infra.constructs.functions import Functions
from infra.constructs.notifications import Notifications


class ControlPlaneStack(Stack):
    """remote-batch in one region.

    Parameters
    ----------
    worker_image_dir : Path
        The job container's Docker build context (built at deploy time only).
    **kwargs
        Passed to ``Stack`` (description, env, …).
    """

    def __init__(self, scope: Construct, construct_id: str, *, worker_image_dir: Path, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.data = Data(self, "Data")
        self.notifications = Notifications(self, "Notifications")
        self.auth = Auth(self, "Auth")
        self.compute = BatchCompute(
            self,
            f"Compute{constants.HOME_ZONE}",
            zone=constants.HOME_ZONE,
            bucket=self.data.bucket,
            worker_image_dir=worker_image_dir,
        )
        self.functions = Functions(
            self, "Functions", data=self.data, notifications=self.notifications, zones=[self.compute]
        )
        self.events = Events(
            self,
            "Events",
            batch_events=self.functions.batch_events,
            meter=self.functions.meter,
            job_queues=self.compute.job_queues,
        )
        self.api = Api(self, "Api", handler=self.functions.api, user_pool=self.auth.user_pool)
        self._build_outputs()
        nag_suppressions.acknowledge_control_plane(self)

    def _build_outputs(self) -> None:
        CfnOutput(self, "ApiUrl", value=self.api.url, description="The API's base URL")
        CfnOutput(self, "UserPoolId", value=self.auth.user_pool.user_pool_id)
        CfnOutput(self, "UserPoolClientId", value=self.auth.client.user_pool_client_id)
        CfnOutput(self, "DataBucketName", value=self.data.bucket.bucket_name)
        CfnOutput(self, "DeadLetterQueueUrl", value=self.events.dead_letter_queue.queue_url)
