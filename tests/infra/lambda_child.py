"""Runs in the fresh interpreter of the deployed-bundle test, as Lambda would run a handler.

Started as ``python -I -S -B lambda_child.py SPEC.json`` (isolated: no PYTHONPATH, no user or
system site-packages, so sys.path is the standard library only). It puts the Lambda's own search
path in front, in Lambda's order (the code asset as /var/task, the layer as /opt/python, the
runtime's SDK as /var/runtime), checks that nothing from the dev, local or worker extras can be
imported, imports the handler, runs the given events through it and writes a JSON report:
responses, where each imported third-party module came from, the versions importlib.metadata
sees, and every module compiled from its source instead of loaded from its ``.pyc`` (the code asset
and the layer ship theirs: none of theirs may be compiled). Only the standard library is imported
before the handler.

SPEC.json: ``{"paths": {"asset": str, "layer": str, "runtime": str}, "handler": "pkg.mod.func",
"events": [...], "forbidden": [module names], "distributions": [names], "report": path}``.
"""

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import platform
import sys
import types
import uuid
from pathlib import Path


class LambdaContext:
    """The context object Lambda passes (the attributes Powertools reads)."""

    def __init__(self, function_name: str) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.memory_limit_in_mb = 512
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "bundle-test"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def _origin(module: object, roots: dict[str, str]) -> str | None:
    """Which of the Lambda's roots a module was loaded from (None: the standard library)."""
    location = getattr(module, "__file__", None)
    if not location:
        return None
    resolved = str(Path(location).resolve())
    for label, root in roots.items():
        if resolved.startswith(root + "/"):
            return label
    return None


_compiled_from_source: list[str] = []


def _record_compilations() -> None:
    """Note each module the import system compiles from its source: ``SourceLoader.get_code`` calls
    ``source_to_code`` only when no ``.pyc`` could be used (missing, another Python's magic number,
    stale)."""
    loader = importlib.machinery.SourceFileLoader
    original = loader.source_to_code

    def source_to_code(
        self: importlib.machinery.SourceFileLoader, data: bytes, path: str, *, _optimize: int = -1
    ) -> types.CodeType:
        _compiled_from_source.append(str(path))
        return original(self, data, path, _optimize=_optimize)

    setattr(loader, "source_to_code", source_to_code)


def _origin_of_path(path: str, roots: dict[str, str]) -> str | None:
    """``<root label>:<path>`` of a file under one of the Lambda's roots (None: elsewhere)."""
    resolved = str(Path(path).resolve())
    for label, root in roots.items():
        if resolved.startswith(root + "/"):
            return f"{label}:{resolved[len(root) + 1 :]}"
    return None


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    _record_compilations()
    stdlib = list(sys.path)
    paths = spec["paths"]
    sys.path[:] = [paths["asset"], paths["layer"], paths["runtime"], *stdlib]

    importable = {name: importlib.util.find_spec(name) is not None for name in spec["forbidden"]}
    module_name, function_name = spec["handler"].rsplit(".", 1)
    handler = getattr(importlib.import_module(module_name), function_name)
    context = LambdaContext(spec["function_name"])
    responses = [handler(event, context) for event in spec["events"]]

    roots = {label: str(Path(path).resolve()) for label, path in paths.items()}
    origins: dict[str, str] = {}
    for name, module in sorted(sys.modules.items()):
        top = name.partition(".")[0]
        label = _origin(module, roots)
        if label is not None and top not in origins:
            origins[top] = label
    versions: dict[str, str | None] = {}
    for name in spec["distributions"]:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    report = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "stdlib": stdlib,
        "sys_path": sys.path[:3],
        "importable": importable,
        "responses": responses,
        "origins": origins,
        "versions": versions,
        "compiled_from_source": [
            label for label in (_origin_of_path(path, roots) for path in _compiled_from_source) if label
        ],
    }
    Path(spec["report"]).write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
