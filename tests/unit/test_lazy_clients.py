"""The composition root makes each AWS client on its first use, once (functions/bootstrap.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from functions.bootstrap import LazyClient, build_services
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
from functions.settings import RouteSettings, Settings, ZoneSettings


@dataclass
class Client:
    service: str
    region: str

    def ping(self) -> str:
        return f"{self.service}@{self.region}"


@dataclass
class RecordingSession:
    """A boto3 Session stand-in: records the clients it is asked to make."""

    made: list[tuple[str, str]] = field(default_factory=list)

    def client(self, service: str, region_name: str, config: Any = None) -> Client:
        self.made.append((service, region_name))
        return Client(service, region_name)


def _settings() -> Settings:
    routes = {name: RouteSettings(job_queue="q", job_definition="d") for name in MACHINE_CLASSES}
    return Settings(
        jobs_table="jobs",
        accounts_table="accounts",
        ledger_table="ledger",
        idempotency_table="idempotency",
        operations_table="operations",
        computes_table="computes-table",
        compute_prefix="remote-batch-test",
        quotas_table="quotas",
        email_topic_arn_prefix="arn:aws:sns:us-east-1:123456789012:rb-email-",
        home_region="us-east-1",
        zones={
            GeoZone.UNITED_STATES: ZoneSettings(
                region="us-east-1", bucket="b-us", log_group="/g", routes=routes
            ),
            GeoZone.EUROPEAN_UNION: ZoneSettings(
                region="eu-central-1", bucket="b-eu", log_group="/g", routes=routes
            ),
        },
    )


def test_building_the_services_makes_no_client() -> None:
    session = RecordingSession()
    services = build_services(_settings(), session=session)  # type: ignore[arg-type]
    assert session.made == []
    assert services.zones[GeoZone.EUROPEAN_UNION].bucket == "b-eu"


def test_a_client_is_made_on_first_use_and_only_once() -> None:
    made: list[int] = []

    def make() -> Client:
        made.append(1)
        return Client("s3", "eu-central-1")

    client: Any = LazyClient(make, threading.Lock())
    assert not client.made
    assert client.ping() == "s3@eu-central-1"
    assert client.region == "eu-central-1"
    assert client.made
    assert made == [1]


def test_threads_racing_to_the_first_use_make_one_client() -> None:
    made: list[int] = []
    gate = threading.Barrier(8)

    def make() -> Client:
        made.append(1)
        return Client("dynamodb", "us-east-1")

    client: Any = LazyClient(make, threading.Lock())

    def use() -> None:
        gate.wait()
        assert client.ping() == "dynamodb@us-east-1"

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert made == [1]
