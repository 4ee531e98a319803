"""``rb.quotas()`` and ``remote-batch quotas`` against a fake server: limits, jobs' use, dedicated
computes' reservations, held jobs' queue and what is free, per family and zone and in total."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from typer.testing import CliRunner

import remote_batch as rb
from remote_batch.cli import app
from tests.sdk.conftest import TOKEN, ok


def line(family: str, zone: str, **numbers: int) -> dict[str, Any]:
    unit = "GPU" if family == "GPU" else "vCPU"
    return {"family": family, "geoZone": zone, "unit": unit, "limit": 64, "inUse": 0, "queued": 0, **numbers}


QUOTAS = {
    "quotas": [
        line("Basic", "UnitedStates", inUse=48, queued=3, reserved=16),
        line("GPU", "EuropeanUnion", limit=8, reserved=0),
        line("Memory", "EuropeanUnion", limit=384, reserved=0),
    ],
    "total": {"unit": "vCPU", "limit": 768, "inUse": 48, "queued": 3, "reserved": 16},
}


def test_quotas_read_each_line_and_the_total(httpserver: HTTPServer, api: rb.Client) -> None:
    httpserver.expect_request("/account/quotas").respond_with_response(ok(QUOTAS))
    basic, gpu, _, total = rb.quotas()
    assert (basic.family, basic.geo_zone, basic.unit) == ("Basic", "UnitedStates", "vCPU")
    assert (basic.limit, basic.in_use, basic.reserved, basic.queued, basic.free) == (64, 48, 16, 3, 0)
    assert (gpu.unit, gpu.limit, gpu.free) == ("GPU", 8, 8)
    assert (total.family, total.geo_zone, total.limit, total.reserved, total.free) == (
        "total",
        None,
        768,
        16,
        704,
    )


def test_a_server_without_reservations_reads_as_none_reserved(httpserver: HTTPServer, api: rb.Client) -> None:
    older = {
        "quotas": [{k: v for k, v in line("Basic", "UnitedStates", inUse=2).items() if k != "reserved"}],
        "total": {"unit": "vCPU", "limit": 768, "inUse": 2, "queued": 0},
    }
    httpserver.expect_request("/account/quotas").respond_with_response(ok(older))
    basic, total = rb.quotas()
    assert (basic.reserved, basic.free, total.reserved, total.free) == (0, 62, 0, 766)


@pytest.fixture
def cli_env(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMOTE_BATCH_ENDPOINT", httpserver.url_for("").rstrip("/"))
    monkeypatch.setenv("REMOTE_BATCH_TOKEN", TOKEN)
    httpserver.expect_request("/account/quotas").respond_with_response(ok(QUOTAS))


def test_the_cli_table_has_a_reserved_column_and_hides_idle_lines(cli_env: None) -> None:
    result = CliRunner().invoke(app, ["quotas"], terminal_width=200)
    assert result.exit_code == 0, result.output
    header = next(row for row in result.output.splitlines() if "family" in row)
    assert header.split() == ["family", "zone", "unit", "limit", "in", "use", "reserved", "queued", "free"]
    rows = {row.split()[0]: row.split() for row in result.output.splitlines() if row.split()}
    assert rows["Basic"] == ["Basic", "UnitedStates", "vCPU", "64", "48", "16", "3", "0"]
    assert rows["total"] == ["total", "all", "vCPU", "768", "48", "16", "3", "704"]
    assert "GPU" not in rows and "Memory" not in rows
    shown = CliRunner().invoke(app, ["quotas", "--all"], terminal_width=200)
    assert {"GPU", "Memory"} <= {row.split()[0] for row in shown.output.splitlines() if row.split()}


def test_the_cli_json_is_the_apis_document(cli_env: None) -> None:
    result = CliRunner().invoke(app, ["quotas", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == QUOTAS
