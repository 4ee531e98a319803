"""The HTTP contract in the repository: ``docs/openapi.json`` is what ``GET /openapi.json`` serves.

A change to a route, a model or a response shows in review as a diff of that file: ``make openapi``
writes it, and this test fails until it is committed with the change (and CHANGELOG.md says why).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def _differences(committed: dict[str, Any], served: dict[str, Any]) -> list[str]:
    """The paths and schemas whose entries differ, for a failure message a reviewer can act on."""
    found = []
    for section, key in (("paths", None), ("components", "schemas")):
        old = committed.get(section, {})
        new = served.get(section, {})
        if key is not None:
            old, new = old.get(key, {}), new.get(key, {})
        found += [
            f"{section} {name}" for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)
        ]
    return found


def test_the_served_document_is_the_committed_one(stack):
    status, served = stack.api("GET", "/openapi.json")
    assert status == 200
    # The test client reads JSON numbers with a fraction as Decimal: read the file the same way.
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"), parse_float=Decimal)
    assert served == committed, (
        "GET /openapi.json differs from docs/openapi.json in "
        f"{_differences(committed, served) or ['the document header']}: run `make openapi`, commit the "
        "file and note the contract change in CHANGELOG.md"
    )
