"""Upload the built web console to the deployed console bucket: ``make deploy-console``, after the deploy.

Reads the control plane stack's outputs (``ConsoleBucketName``, ``ConsoleDistributionId``,
``ConsoleClientId``, ``ConsoleSignInUrl``, ``ConsoleUrl``), puts every file of the build under
``console/`` with its content type, writes ``console/config.json`` (where the console signs in:
``infra/constructs/console.py``), deletes what the previous upload left under ``console/`` that this
build no longer has, and invalidates ``/console/*`` on the distribution. It runs with the operator's
own credentials, so the stack needs no deploy-time function. ``index.html`` and ``config.json`` are
uploaded last and never cached long, so a browser never gets a page whose files are not there yet.

``python -m infra.console_upload [--stack NAME] [--region REGION] [--build DIR]``; exit 2 on a missing
build or output, naming it.
"""

from __future__ import annotations

import argparse
import json
import mimetypes
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from infra import constants
from infra.constructs.console import CONSOLE_PATH, CONSOLE_SCOPE_NAMES

PREFIX = CONSOLE_PATH.strip("/") + "/"
#: The outputs the upload reads (infra/stacks/control_plane.py).
OUTPUTS = ("ConsoleBucketName", "ConsoleDistributionId", "ConsoleClientId", "ConsoleSignInUrl", "ConsoleUrl")
#: Files a new deploy must replace at once; every other file's name carries its content hash (the bundler's).
ENTRY_FILES = ("index.html", "config.json")
_LONG_CACHE = "public, max-age=31536000, immutable"
_NO_CACHE = "no-cache"


class UploadError(RuntimeError):
    """A missing build or stack output; the message names it."""


def sign_in_config(outputs: Mapping[str, str]) -> dict[str, Any]:
    """``console/config.json``: Cognito's managed login for the console's app client (PKCE in the browser)."""
    return {
        "signIn": "cognito",
        "authority": outputs["ConsoleSignInUrl"],
        "clientId": outputs["ConsoleClientId"],
        "redirectUri": outputs["ConsoleUrl"],
        "scopes": list(CONSOLE_SCOPE_NAMES),
    }


def stack_outputs(cloudformation: Any, stack_name: str) -> dict[str, str]:
    """The outputs of ``stack_name`` that the upload needs.

    Raises
    ------
    UploadError
        The stack cannot be read, or an output is missing (it predates the console, or is another stack).
    """
    try:
        (stack,) = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except (ClientError, BotoCoreError) as exc:
        raise UploadError(f"cannot read stack {stack_name}: {exc}") from exc
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    missing = [key for key in OUTPUTS if key not in outputs]
    if missing:
        raise UploadError(
            f"stack {stack_name} has no output {', '.join(missing)}: deploy it first (cdk deploy)"
        )
    return outputs


def upload(s3: Any, cloudfront: Any, build: Path, outputs: Mapping[str, str]) -> list[str]:
    """Upload ``build`` (see the module docstring); returns the keys written, in order.

    Raises
    ------
    UploadError
        ``build`` has no ``index.html``.
    """
    if not (build / "index.html").is_file():
        raise UploadError(f"{build}/index.html is missing: build the console first (make console)")
    bucket = outputs["ConsoleBucketName"]
    files = sorted(path for path in build.rglob("*") if path.is_file() and path.name != "config.json")
    order = sorted(files, key=lambda path: path.relative_to(build).as_posix() in ENTRY_FILES)
    written: list[str] = []
    for path in order:
        key = PREFIX + path.relative_to(build).as_posix()
        s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=path.read_bytes(),
            ContentType=mimetypes.guess_type(path.name)[0] or "application/octet-stream",
            CacheControl=_NO_CACHE if path.name in ENTRY_FILES else _LONG_CACHE,
        )
        written.append(key)
    config_key = PREFIX + "config.json"
    s3.put_object(
        Bucket=bucket,
        Key=config_key,
        Body=json.dumps(sign_in_config(outputs), indent=2).encode(),
        ContentType="application/json",
        CacheControl=_NO_CACHE,
    )
    written.append(config_key)
    _delete_stale(s3, bucket, set(written))
    cloudfront.create_invalidation(
        DistributionId=outputs["ConsoleDistributionId"],
        InvalidationBatch={
            "Paths": {"Quantity": 1, "Items": [f"{CONSOLE_PATH}*"]},
            "CallerReference": f"remote-batch-console-{time.time_ns()}",
        },
    )
    return written


def _delete_stale(s3: Any, bucket: str, keep: set[str]) -> None:
    """Delete the keys under ``console/`` not in ``keep`` (DeleteObjects takes at most 1,000 a request)."""
    stale: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=PREFIX):
        stale.extend(item["Key"] for item in page.get("Contents", []) if item["Key"] not in keep)
    for start in range(0, len(stale), 1000):
        batch = [{"Key": key} for key in stale[start : start + 1000]]
        s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, upload; 0 when done, 2 on an ``UploadError`` (printed)."""
    parser = argparse.ArgumentParser(
        prog="python -m infra.console_upload", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--stack", default=f"{constants.STACK_NAME_PREFIX}-{constants.DEFAULT_STAGE}")
    parser.add_argument(
        "--region", default=None, help="the control plane's region (default: the AWS profile's)"
    )
    parser.add_argument(
        "--build", type=Path, default=constants.REPO_ROOT / constants.DEFAULT_CONSOLE_ASSETS_DIR
    )
    arguments = parser.parse_args(argv)
    session = boto3.Session(region_name=arguments.region)
    try:
        outputs = stack_outputs(session.client("cloudformation"), arguments.stack)
        written = upload(session.client("s3"), session.client("cloudfront"), arguments.build, outputs)
    except UploadError as exc:
        print(f"console upload: {exc}", file=sys.stderr)
        return 2
    print(
        f"console upload: {len(written)} files to s3://{outputs['ConsoleBucketName']}/{PREFIX};",
        outputs["ConsoleUrl"],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
