"""``remote-batch env``: the account's environments (``create``, ``list``, ``show``, ``log``, ``delete``).

``env create NAME -r requirements.txt`` reads the file as pip does (``remote_batch.requirements_file``);
a line that cannot be sent is refused in one line naming its file and line (exit 2, as every usage
error), and a requirement the service refuses is reported with the file and line it came from. A name
that is no environment name, a ``--python`` that is no ``3.N`` and an empty index URL are usage errors
naming the option and the value, before any request. ``--wait`` follows the build log and exits 2 when
the build ends Failed. Every text the service returns (names, reasons, the build log on a terminal)
goes through ``remote_batch.terminal``. ``submit --with/-r`` builds its inline environment here too
(``inline_requirements``).
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

import remote_batch as rb
from remote_batch.cli_output import (
    EXIT_TERMINATED,
    Group,
    JsonOption,
    err,
    out,
    print_json,
    stdout_is_terminal,
    usage_error,
)
from remote_batch.environments import check_name, check_python
from remote_batch.jobs import LogTail
from remote_batch.requirements_file import Requirements, RequirementsFileError, read_requirements
from remote_batch.terminal import cell, visible

#: Seconds between reads of the build log while ``env log --follow`` follows it.
FOLLOW_SECONDS = 1.0
_REQUIREMENT_FIELD = re.compile(r"^requirements\[(\d+)\]$")

env_app = typer.Typer(
    cls=Group,
    help="Environments: named sets of Python packages jobs run with (submit --env NAME).",
    no_args_is_help=True,
)


def checked_name(name: str | None) -> str | None:
    """An environment's name as the command line gives it (``NAME``, ``--env``), if it is one
    (``environments.check_name``); else ``typer.BadParameter`` naming it, before any request."""
    if name is None:
        return None
    try:
        return check_name(name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def checked_python(version: str | None) -> str | None:
    """``--python``'s value if it is a Python version (``3.N``); else ``typer.BadParameter`` naming it
    (an empty one too: leaving the option out is what means this interpreter's)."""
    if version is None:
        return None
    try:
        return check_python(version)
    except ValueError:
        raise typer.BadParameter(
            f"{version[:80]!r} is not a Python version jobs can run on: give major.minor, 3.N, such as 3.12 "
            "(leave --python out for this interpreter's)"
        ) from None


def checked_index_url(url: str | None) -> str | None:
    """``--index-url``'s value unless it is empty (``typer.BadParameter``: an empty one is no index;
    leaving the option out means PyPI, or the requirements file's)."""
    if url is not None and not url.strip():
        raise typer.BadParameter(f"{url!r} is empty: give the https URL of a package index, or leave it out")
    return url


def checked_index_urls(urls: list[str] | None) -> list[str] | None:
    """``--extra-index-url``'s values unless one is empty (``typer.BadParameter`` naming it)."""
    for url in urls or []:
        if not url.strip():
            raise typer.BadParameter(f"{url!r} is empty: give the https URL of a package index")
    return urls


EnvName = Annotated[
    str,
    typer.Argument(
        help="The environment's name (a letter, then letters, digits, . _ -).", callback=checked_name
    ),
]


def _read_files(files: list[Path]) -> Requirements:
    """The requirements files' requirements (in order) and index URLs; a file that cannot be sent is a
    usage error, printed as one line naming its file and line."""
    gathered = Requirements()
    for path in files:
        try:
            found = read_requirements(path)
        except RequirementsFileError as exc:
            raise usage_error(f"-r {path}: {exc}" if exc.path != path else str(exc)) from None
        gathered.requirements += found.requirements
        gathered.origins += found.origins
        gathered.index_url = found.index_url or gathered.index_url
        gathered.extra_index_urls += found.extra_index_urls
    return gathered


def inline_requirements(lines: list[str], files: list[Path]) -> list[str]:
    """``submit``'s inline environment: the requirements files' lines (in order), then the ``--with``
    ones. Usage errors (exit 2): an empty ``--with``, a bad file (its file and line), and a file's index
    URL lines (an inline spec from here takes none: ``env create NAME -r FILE`` takes them, then
    ``submit --env NAME``)."""
    for line in lines:
        if not line.strip():
            raise typer.BadParameter(
                f"{line!r} is empty: give a requirement (PEP 508)", param_hint="'--with'"
            )
    gathered = _read_files(files)
    if gathered.index_url is not None or gathered.extra_index_urls:
        raise usage_error(
            "submit's inline requirements take no index URLs (the files name "
            f"{', '.join(filter(None, [gathered.index_url, *gathered.extra_index_urls]))}): create a named "
            "environment with them (remote-batch env create NAME -r FILE) and submit --env NAME"
        )
    return gathered.requirements + lines


def _gathered(
    lines: list[str], files: list[Path], index_url: str | None, extra_index_urls: list[str]
) -> Requirements:
    """The requirements of the command line: the files' (in order), then the REQUIREMENT arguments; the
    files' index URLs, overridden by ``--index-url``, and every extra index once."""
    gathered = _read_files(files)
    for position, line in enumerate(lines, start=1):
        gathered.requirements.append(line)
        gathered.origins.append(f"argument {position} ({line!r})")
    gathered.index_url = index_url or gathered.index_url
    gathered.extra_index_urls = list(dict.fromkeys([*gathered.extra_index_urls, *extra_index_urls]))
    return gathered


def _located(exc: rb.ValidationError, origins: list[str]) -> rb.ValidationError:
    """``exc`` with the file and line of the requirement its field names (``requirements[3]``)."""
    match = _REQUIREMENT_FIELD.match(exc.field or "")
    if match is None or int(match.group(1)) >= len(origins):
        return exc
    origin = origins[int(match.group(1))]
    return rb.ValidationError(exc.status, exc.code, f"{origin}: {exc.message}", exc.field)


def _summary(environment: rb.Environment) -> str:
    data = environment.data or {}
    count = len(environment.requirements)
    text = (
        f"environment {environment.name} {data.get('status')}: Python {environment.python}, "
        f"{count} requirement{'' if count == 1 else 's'}"
    )
    if data.get("status") == "Ready":
        count = len(data.get("packages") or [])
        text += f", {count} package{'' if count == 1 else 's'}, {_size(data.get('sizeBytes'))}"
    if data.get("statusReason"):
        text += f" ({data['statusReason']})"
    return text


def _size(size: Any) -> str:
    return f"{(size or 0) / 2**20:.1f} MiB"


@env_app.command("create")
def create(  # noqa: PLR0917 (typer maps each parameter to an option)
    name: EnvName,
    requirement_lines: Annotated[
        list[str] | None,
        typer.Argument(metavar="REQUIREMENT", help="Requirement lines (PEP 508), as pip install takes."),
    ] = None,
    requirement_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--requirement",
            "-r",
            metavar="FILE",
            help="A pip requirements file (comments, -r includes, --index-url lines); repeatable.",
        ),
    ] = None,
    python: Annotated[
        str | None,
        typer.Option(
            help="The Python (major.minor, one the service runs); default: this interpreter's.",
            callback=checked_python,
        ),
    ] = None,
    index_url: Annotated[
        str | None,
        typer.Option(
            "--index-url",
            "-i",
            help="An https package index instead of PyPI (wins over a file's).",
            callback=checked_index_url,
        ),
    ] = None,
    extra_index_urls: Annotated[
        list[str] | None,
        typer.Option(
            "--extra-index-url", help="Another https index; repeatable.", callback=checked_index_urls
        ),
    ] = None,
    image: Annotated[
        str | None, typer.Option(help="A container image to run in instead of the worker image.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="Follow the build log until it is over; exit 2 if it failed.")
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Create an environment (or find it, with this spec) and start its build."""
    gathered = _gathered(
        list(requirement_lines or []), list(requirement_files or []), index_url, list(extra_index_urls or [])
    )
    environment = rb.Environment(
        name,
        python,
        gathered.requirements,
        index_url=gathered.index_url,
        extra_index_urls=gathered.extra_index_urls,
        image=image,
    )
    try:
        environment.create()
    except rb.ValidationError as exc:
        raise _located(exc, gathered.origins) from None
    if not json_output:
        verb = "created" if environment.created else "found (same spec)"
        err.print(cell(f"{verb} {_summary(environment)}"), soft_wrap=True)
    if wait and (environment.data or {}).get("status") == "Building":
        with contextlib.suppress(rb.EnvironmentFailed):  # its reason is in the summary printed next
            environment.wait(progress=not json_output)
    if json_output:
        print_json(environment.data)
    else:
        out.print(cell(_summary(environment)), soft_wrap=True)
    if wait and (environment.data or {}).get("status") == "Failed":
        raise typer.Exit(EXIT_TERMINATED)


@env_app.command("list")
def list_command(json_output: JsonOption = False) -> None:
    """The account's environments, by name."""
    found = rb.environments()
    if json_output:
        print_json([e.data for e in found])
        return
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("name", "python", "status", "build", "size", "created", "reason"):
        table.add_column(column, justify="right" if column == "size" else "left", no_wrap=column != "reason")
    for environment in found:
        data = environment.data or {}
        table.add_row(
            cell(environment.name),
            cell(environment.python),
            cell(data.get("status")),
            cell(str(data.get("hash") or "-")[:12]),
            cell(_size(data.get("sizeBytes"))),
            cell(str(data.get("createdAt") or "")[:19].replace("T", " ")),
            cell(data.get("statusReason") or ""),
        )
    out.print(table)


@env_app.command("show")
def show(name: EnvName, json_output: JsonOption = False) -> None:
    """An environment: its spec, build status, hash and resolved packages."""
    environment = rb.environment(name)
    data = environment.data or {}
    if json_output:
        print_json(data)
        return
    table = Table(show_header=False, box=None)
    for key in ("name", "python", "status", "statusReason", "hash", "indexUrl", "extraIndexUrls", "image",
                "sizeBytes", "createdAt", "readyAt", "failedAt"):  # fmt: skip
        value = data.get(key)
        if value not in (None, []):
            shown = ", ".join(map(str, value)) if isinstance(value, list) else value
            table.add_row(key, cell(shown))
    table.add_row("requirements", cell("\n".join(environment.requirements) or "(none)", multiline=True))
    packages = [f"{p['name']}=={p['version']}" for p in data.get("packages") or []]
    if packages:
        table.add_row("packages", cell("\n".join(packages), multiline=True))
    out.print(table)


@env_app.command("log")
def log(
    name: EnvName,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until the build is over.")
    ] = False,
    raw: Annotated[
        bool, typer.Option("--raw", help="On a terminal too, print the lines as the build wrote them.")
    ] = False,
) -> None:
    """An environment's build log: the resolver's and installer's output.

    To a pipe or a file the lines are as the build wrote them; on a terminal their control characters
    are shown escaped unless --raw.
    """
    as_written = raw or not stdout_is_terminal()
    environment = rb.environment(name)
    tail = LogTail(environment)
    while True:
        building = (environment.data or {}).get("status") == "Building"
        for _, message in tail.new_lines():
            sys.stdout.write((message if as_written else visible(message)) + "\n")
        sys.stdout.flush()
        if not (follow and building):
            return
        time.sleep(FOLLOW_SECONDS)
        environment.refresh()


@env_app.command("delete")
def delete(name: EnvName, json_output: JsonOption = False) -> None:
    """Delete an environment: its name is free again; jobs already submitted in it keep its build."""
    environment = rb.Environment(name).delete()
    if json_output:
        print_json(environment.data)
    else:
        out.print(cell(f"deleted environment {name}"))
