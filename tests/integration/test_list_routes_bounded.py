"""No list in an answer can outgrow the 5 MiB of a response (issue 22, item 4).

Every GET route whose JSON answer holds a list either pages it (takes ``nextToken`` and a bounded
``limit``, and keeps each page under its byte budget, as the routes' own tests show) or names here
what bounds the list. A new list route fails this test until it does one or the other.
"""

from __future__ import annotations

import json
from typing import Any

from functions.domain.dependencies import MAX_DEPENDENTS, MAX_PARENTS, MAX_PATTERNS
from functions.domain.environments import MAX_EXTRA_INDEXES, MAX_PACKAGES, MAX_REQUIREMENTS
from functions.domain.notifications import MAX_RULES
from functions.domain.roles import MAX_MEMBERS
from functions.domain.runtime import PYTHON_VERSIONS
from functions.handlers import api

#: Lists that are not paged, and what keeps each small.
BOUNDED = {
    ("/account", "roles"): "the account's roles: at most the few roles the service defines",
    ("/account/access", "actions"): "the caller's actions: the service's fixed action table",
    ("/account/computes", "computes"): "each compute reserves its vCPUs of the account's quota",
    ("/account/members", "members"): f"at most MAX_MEMBERS ({MAX_MEMBERS}) members an account",
    ("/account/quotas", "quotas"): "one line per machine family and geo zone",
    ("/admin/machine-classes", "machineClasses"): "the service's machine classes per geo zone",
    ("/machine-classes", "machineClasses"): "the service's machine classes",
    ("/roles", "actions"): "the service's fixed action table",
    ("/roles", "roles"): "the roles the service defines",
    ("/runtime", "pythonVersions"): f"the Python versions jobs may run on: at most {len(PYTHON_VERSIONS)}",
    ("/environments/{name}", "requirements"): f"at most MAX_REQUIREMENTS ({MAX_REQUIREMENTS}) lines",
    ("/environments/{name}", "extraIndexUrls"): f"at most MAX_EXTRA_INDEXES ({MAX_EXTRA_INDEXES}) URLs",
    (
        "/environments/{name}",
        "packages",
    ): f"a lock of more than MAX_PACKAGES ({MAX_PACKAGES}) fails the build",
    ("/jobs/{jobId}", "dependsOn"): f"at most MAX_PARENTS ({MAX_PARENTS}) parents",
    (
        "/jobs/{jobId}",
        "inputsFrom",
    ): f"parents of dependsOn (at most {MAX_PARENTS}), {MAX_PATTERNS} patterns each",
    (
        "/jobs/{jobId}",
        "waitingFor",
    ): f"the job's prerequisites: its environment and at most {MAX_PARENTS} parents",
    (
        "/jobs/{jobId}",
        "childrenWaiting",
    ): f"at most MAX_DEPENDENTS ({MAX_DEPENDENTS}) jobs wait for one job, and as many arrays per item",
    ("/jobs/{jobId}", "notifications"): f"at most MAX_RULES ({MAX_RULES}) rules",
    ("/jobs/{jobId}", "notificationLog"): "the store keeps the last NOTIFICATION_LOG_LIMIT records",
    ("/jobs/{jobId}", "warnings"): "the service's own warnings about the submit",
    ("/jobs/{jobId}/result", "messages"): "over MESSAGES_BUDGET_BYTES they are a messagesUrl instead",
    ("/jobs/{jobId}/result", "errors"): "over MESSAGES_BUDGET_BYTES the document is a resultUrl",
}


def _resolve(schema: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = schemas[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _is_list(schema: dict[str, Any], schemas: dict[str, Any]) -> bool:
    options = [schema, *schema.get("anyOf", [])]
    return any(_resolve(option, schemas).get("type") == "array" for option in options)


def test_every_list_in_an_answer_is_paged_or_bounded():
    document = json.loads(api.openapi_json())
    schemas = document["components"]["schemas"]
    unpaged, paged = set(), set()
    for path, operations in document["paths"].items():
        operation = operations.get("get")
        content = (operation or {}).get("responses", {}).get("200", {}).get("content", {})
        if "application/json" not in content:
            continue
        body = _resolve(content["application/json"]["schema"], schemas)
        parameters = {p["name"]: p for p in operation.get("parameters", [])}
        for name, field in body.get("properties", {}).items():
            if not _is_list(field, schemas):
                continue
            if "nextToken" in parameters:
                paged.add(path)
            else:
                unpaged.add((path, name))

    assert unpaged == set(BOUNDED)
    assert {"/jobs", "/jobs/{jobId}/children", "/jobs/{jobId}/log", "/jobs/{jobId}/outputs", "/account/usage",
            "/admin/audit", "/environments", "/environments/{name}/log"} == paged  # fmt: skip
