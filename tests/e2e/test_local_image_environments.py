"""Issue 24 item 3 on the local stack: it has no container runtime, so an environment naming its own
image is a 400 on ``image`` that says so, and nothing is created."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Client

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "spec",
    [
        {"python": "3.12", "image": "python:3.12-slim"},
        {
            "python": "3.12",
            "image": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/remote-batch-dev-images/ml:v1",
        },
    ],
)
def test_an_image_environment_is_a_400_on_image_saying_there_is_no_container_runtime(
    dev: Client, spec: dict[str, str]
) -> None:
    refused = dev.request("PUT", "/environments/imaged", json=spec)

    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["field"] == "image" and error["code"] == "ValidationError"
    assert "no container runtime" in error["message"]
    assert dev.get("/environments/imaged").status_code == 404
