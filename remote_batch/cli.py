"""``remote-batch``: the command line of the SDK (typer + rich).

Every read command takes ``--json`` (the API's JSON, for scripts). Errors print the API's message
and field (``Error: ValidationError: ... (field: machineClass)``) and exit 1, never a traceback;
``submit --wait`` and ``wait`` exit 2 when the job ends Terminated, ``env create --wait`` when the build
fails; a bad option value (a requirements file's bad line) is a usage error, exit 2 too (typer's code),
before any request. Text a job or
another user controls is printed through ``remote_batch.terminal`` (control characters escaped),
except the log ``logs`` prints to a pipe or with ``--raw``. Piped into a reader that stops early
(``| head``), a command ends quietly with status 141, as coreutils' do when SIGPIPE ends them.
"""

from __future__ import annotations

import getpass
import importlib.util
import json
import re
import sys
import time
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

import remote_batch as rb
from remote_batch import auth, config
from remote_batch.cli_environments import (
    checked_name,
    checked_python,
    env_app,
    inline_requirements,
)
from remote_batch.cli_output import (
    EXIT_TERMINATED,
    Group,
    JsonOption,
    err,
    out,
    print_json,
    stdout_is_terminal,
)
from remote_batch.client import Client
from remote_batch.jobs import POLL_MAX_SECONDS, Job, LogTail
from remote_batch.json_codec import to_json_number
from remote_batch.progress import watch
from remote_batch.terminal import cell, end_on_broken_pipe, int_digits_shown, json_text, result_repr, visible

FOLLOW_SECONDS = 1.0


app = typer.Typer(
    cls=Group,
    help="remote-batch: submit Python code, functions and commands to the batch service; watch them; "
    "get their results.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
contacts_app = typer.Typer(cls=Group, help="The account's notification contacts.", no_args_is_help=True)
admin_app = typer.Typer(cls=Group, help="Administration (admin role).", no_args_is_help=True)
members_app = typer.Typer(
    cls=Group,
    help="The account's members and their roles (reader, contributor, owner).",
    no_args_is_help=True,
)
app.add_typer(contacts_app, name="contacts")
app.add_typer(admin_app, name="admin")
app.add_typer(members_app, name="members")
app.add_typer(env_app, name="env")

JobId = Annotated[str, typer.Argument(help="The job id (job-...).")]


@app.callback()
def _connection(
    profile: Annotated[
        str | None, typer.Option("--profile", "-p", help="A stored profile (from `login`) to use.")
    ] = None,
    account: Annotated[
        str | None,
        typer.Option(
            "--account",
            "-a",
            envvar="REMOTE_BATCH_ACCOUNT",
            help="The account to act in (X-Account-Id); default: your own. You must be its member.",
        ),
    ] = None,
) -> None:
    if profile is not None or account is not None:
        rb.connect(profile=profile, account=account)


#: Widths of the jobs table's columns but the reason, which takes what the terminal has left.
_JOB_COLUMNS = {"job": 30, "name": 12, "status": 10, "class": 14, "credits": 8, "submitted": 14}


def _job_table(jobs: list[Job], title: str | None = None, *, indexed: bool = False) -> Table:
    """Jobs as a table that fits the terminal: id, status, class, credits, time whole; name and reason
    cut with an ellipsis. ``indexed`` (an array's children) leads with the ``arrayIndex`` and widens
    the id column to the children's ``<parent>:<index>`` ids."""
    table = Table(title=title, box=box.SIMPLE_HEAD)
    columns = dict(_JOB_COLUMNS)
    if indexed:
        table.add_column("index", no_wrap=True, justify="right")
        longest = max((len(job.id) for job in jobs), default=0)
        columns["job"] = max(columns["job"], longest)
    for column, width in columns.items():
        table.add_column(
            column,
            no_wrap=True,
            overflow="ellipsis",
            max_width=width,
            min_width=width if column in ("job", "status", "credits", "submitted") else 4,
            justify="right" if column == "credits" else "left",
        )
    used = sum(columns.values()) + 2 * (len(columns) + 1) + 1
    if indexed:
        used += 2 + max((len(str(job.data.get("arrayIndex", ""))) for job in jobs), default=0)
    table.add_column("reason", no_wrap=True, overflow="ellipsis", max_width=max(8, out.width - used))
    for job in jobs:
        data = job.data
        counts = data.get("childStatusCounts") or {}
        detail = ", ".join(f"{k} {v}" for k, v in counts.items())
        submitted = str(data.get("submittedAt") or "")
        lead = [cell(data.get("arrayIndex", ""))] if indexed else []
        table.add_row(
            *lead,
            cell(job.id),
            cell(data.get("name") or ""),
            cell(data.get("status")),
            cell(data.get("machineClass")),
            cell(data.get("creditsSpent")),
            cell(submitted[5:19].replace("T", " ")),  # MM-DD HH:MM:SS (UTC)
            cell(data.get("statusReason") or detail),
        )
    return table


def _show_job(job: Job) -> None:
    table = Table(show_header=False, box=None)
    data = job.data
    for key in ("jobId", "name", "type", "status", "statusReason", "machineClass", "geoZone", "creditsSpent",
                "creditConstraint", "timeConstraint", "exitCode", "submittedAt", "startedAt", "completedAt",
                "expiresAt", "arraySize", "childStatusCounts"):  # fmt: skip
        if data.get(key) is not None:
            table.add_row(key, cell(data[key]))
    for parent in data.get("dependsOn") or []:
        table.add_row("dependsOn", cell(f"{parent.get('jobId')} ({parent.get('condition')})"))
    for waited in data.get("waitingFor") or []:
        table.add_row("waitingFor", cell(waited))
    for child in data.get("childrenWaiting") or []:
        table.add_row("childrenWaiting", cell(child))
    if data.get("pythonVersion") is not None:
        table.add_row("pythonVersion", cell(data["pythonVersion"]))
    environment = job.environment
    if environment is not None:
        build = f", build {environment.hash}" if environment.hash else ""
        table.add_row(
            "environment", cell(f"{environment.name or '(inline)'} (Python {environment.python}{build})")
        )
    out.print(table)


def _final_line(job: Job) -> str:
    data = job.data
    reason = f" ({data['statusReason']})" if data.get("statusReason") else ""
    return f"{job.id} {data['status']}{reason}, {data.get('creditsSpent')} credits"


def _wait(job: Job, follow: bool, timeout: float | None) -> int:
    """Wait for ``job`` with a live status (streaming its log when ``follow``); the exit code."""
    deadline = None if timeout is None else time.monotonic() + timeout
    tail = LogTail(job)
    with watch(job, enabled=True) as display:
        while True:
            job.refresh()
            if follow:
                for _, message in tail.new_lines():
                    display.echo(message)
            display.show(job)
            if job.done:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"Job {job.id} is still {job.data['status']} after {timeout} s.")
            time.sleep(FOLLOW_SECONDS if follow else min(POLL_MAX_SECONDS, FOLLOW_SECONDS))
        if follow:  # the lines shipped after the final status
            for _, message in tail.new_lines():
                display.echo(message)
    return EXIT_TERMINATED if job.data["status"] == "Terminated" else 0


# -- jobs ------------------------------------------------------------------------------------------
@app.command(context_settings={"allow_interspersed_args": False})
def submit(  # noqa: PLR0917 (typer maps each parameter to an option)
    # Text, not a Path: typer would read an empty argument as "." (this folder).
    file: Annotated[
        str | None, typer.Argument(help="A .py file to run as code; `-- CMD ARGS...` runs a command.")
    ] = None,
    command: Annotated[list[str] | None, typer.Argument(hidden=True)] = None,
    code: Annotated[str | None, typer.Option("--code", "-c", help="Python code to run.")] = None,
    machine_class: Annotated[str | None, typer.Option("--machine-class", "-m")] = None,
    geo_zone: Annotated[
        str | None, typer.Option("--geo-zone", help="Automatic, UnitedStates, EuropeanUnion")
    ] = None,
    credit_constraint: Annotated[
        str | None, typer.Option("--credit-constraint", help="Most credits the job may spend.")
    ] = None,
    time_constraint: Annotated[
        float | None, typer.Option("--time-constraint", help="Longest running time, seconds.")
    ] = None,
    notifications: Annotated[
        str | None,
        typer.Option(help="Automatic, None, an event name (JobCompleted), or a JSON list of rules."),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-n")] = None,
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            help="Run in this environment (`env list`): its packages, its Python.",
            callback=checked_name,
        ),
    ] = None,
    with_requirements: Annotated[
        list[str] | None,
        typer.Option(
            "--with",
            "-R",
            metavar="REQUIREMENT",
            help="Run in an unnamed environment with this requirement (PEP 508); repeatable.",
        ),
    ] = None,
    requirement_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--requirement",
            "-r",
            metavar="FILE",
            help="Run in an unnamed environment with a pip requirements file's requirements (no index "
            "URLs: those take `env create`); repeatable.",
        ),
    ] = None,
    python: Annotated[
        str | None,
        typer.Option(
            "--python",
            help="The job's Python (major.minor); with --with/-r the environment's too (default: this "
            "interpreter's there, the service's for code and commands).",
            callback=checked_python,
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="Wait until it is final; exit 2 if Terminated.")
    ] = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="With --wait: stream its log.")] = False,
    after: Annotated[
        list[str] | None,
        typer.Option("--after", help="JOB[:Succeeded|Completed|Terminated]: wait for that job (repeatable)."),
    ] = None,
    inputs_from: Annotated[
        list[str] | None,
        typer.Option(
            "--inputs-from",
            help="JOB[:GLOB]: start with that parent's outputs under inputs/JOB/ (repeatable).",
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Submit a job: --code CODE, a FILE.py (its code), or -- CMD ARGS... (a command).

    It runs with the worker image's packages, an environment's (--env), or inline ones (--with, -r).
    """
    payload = _payload(file, command, code)
    rules: Any = notifications
    if notifications is not None and notifications.lstrip().startswith("["):
        try:
            rules = json.loads(notifications)
        except ValueError as exc:
            raise typer.BadParameter(f"--notifications is not valid JSON: {exc}") from None
    environment = _environment(env, list(with_requirements or []), list(requirement_files or []))
    job = rb.submit(
        payload,
        machine_class=machine_class,
        geo_zone=geo_zone,
        credit_constraint=_credits(credit_constraint, "--credit-constraint")
        if credit_constraint is not None
        else None,
        time_constraint=time_constraint,
        notifications=rules,
        name=name,
        depends_on=[_parent_and(value) for value in after or []] or None,
        inputs_from=_inputs_from(inputs_from or []) or None,
        python_version=python,
        environment=environment,
    )
    if json_output and not wait:
        print_json(job.data)
        return
    err.print(cell(f"submitted {job.id}"))
    if not wait:
        out.print(cell(job.id))
        return
    code_ = _wait(job, follow, None)
    if json_output:
        print_json(job.data)
    raise typer.Exit(code_)


def _payload(file: str | None, command: list[str] | None, code: str | None) -> Any:
    """What ``submit`` runs: the ``--code``, a ``FILE.py``'s source, or the command's words;
    ``typer.BadParameter`` for none or several of them, an empty one, or a directory."""
    words = ([file] if file is not None else []) + list(command or [])
    is_code_file = len(words) == 1 and words[0].endswith(".py")
    if (code is not None) == bool(words):
        raise typer.BadParameter("give exactly one of --code CODE, FILE.py, or -- CMD ARGS...")
    if code is not None and not code.strip():
        raise typer.BadParameter(f"--code {code!r} is empty: give the Python code to run")
    if words and not words[0]:
        # The service refuses it too (400 on command[0]); refused here before anything is sent.
        raise typer.BadParameter("the command's program is empty (''): give -- CMD ARGS... or a FILE.py")
    if words and Path(words[0]).is_dir():
        raise typer.BadParameter(
            f"{words[0]!r} is a directory, not a FILE.py or a program: give --code CODE, FILE.py, "
            "or -- CMD ARGS..."
        )
    if code is not None:
        return code
    if is_code_file:
        return _read_source(Path(words[0]))
    return words


def _environment(env: str | None, lines: list[str], files: list[Path]) -> str | list[str] | None:
    """``submit``'s environment: the ``--env`` name, the inline requirements of ``--with`` and ``-r``
    (``inline_requirements``), or None; ``typer.BadParameter`` for a name and requirements both."""
    if not (lines or files):
        return env
    if env is not None:
        raise typer.BadParameter(
            f"{env!r} names an environment: give --env NAME or inline requirements (--with, -r), not both",
            param_hint="'--env'",
        )
    return inline_requirements(lines, files)


def _parent_and(value: str) -> tuple[str, str]:
    """``JOB`` or ``JOB:REST`` (a condition or a glob) split at its first colon; the rest defaults
    to ``Succeeded`` for ``--after``."""
    parent, _, rest = value.partition(":")
    if not parent:
        raise typer.BadParameter(f"{value!r}: give a job id first (JOB[:...])")
    return parent, rest or "Succeeded"


def _inputs_from(values: list[str]) -> list[tuple[str, list[str]]]:
    """``--inputs-from`` values as ``(parent, globs)``, a parent's globs gathered in order."""
    globs: dict[str, list[str]] = {}
    for value in values:
        parent, _, pattern = value.partition(":")
        if not parent:
            raise typer.BadParameter(f"{value!r}: give a job id first (JOB[:GLOB])")
        globs.setdefault(parent, [])
        if pattern:
            globs[parent].append(pattern)
    return list(globs.items())


def _read_source(path: Path) -> str:
    """A ``.py`` file's text as ``python FILE`` reads it (a UTF-8 byte-order mark or a PEP 263 coding
    declaration, any line endings); ``typer.BadParameter`` for a file CPython would refuse to read
    (UTF-16, as Windows PowerShell 5's ``>`` writes, or bytes not in the declared encoding)."""
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise typer.BadParameter(f"{str(path)!r} cannot be read: {exc.strerror}") from None
    try:
        return importlib.util.decode_source(source)
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(
            f"{path} is not Python source as python reads it ({exc}); save it as UTF-8"
        ) from None


@app.command()
def status(job_id: JobId, json_output: JsonOption = False) -> None:
    """A job's status, credits and times."""
    job = rb.job(job_id)
    if json_output:
        print_json(job.data)
    else:
        _show_job(job)


@app.command("wait")
def wait_command(
    job_id: JobId,
    timeout: Annotated[float | None, typer.Option(help="Seconds to wait at most (exit 1 after).")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream its log.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Wait until a job is final (live status); exit 2 if it ended Terminated."""
    job = rb.job(job_id)
    code = _wait(job, follow, timeout)
    if json_output:
        print_json(job.data)
    raise typer.Exit(code)


@app.command()
def logs(
    job_id: JobId,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until it is final.")
    ] = False,
    fmt: Annotated[str, typer.Option("--format", help="text, json or csv")] = "text",
    json_output: Annotated[
        bool, typer.Option("--json", help="One JSON object per line (the same as --format json).")
    ] = False,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="On a terminal too, print the lines as the job wrote them (escape sequences and all).",
        ),
    ] = False,
) -> None:
    """A job's console log (-f follows it while it runs, like `aws logs tail --follow`).

    To a pipe or a file the lines are the job's own bytes; on a terminal their control characters are
    shown escaped (\\x1b...) unless --raw.
    """
    if fmt not in ("text", "json", "csv"):
        raise typer.BadParameter(f"--format is text, json or csv, not {fmt!r}")
    if json_output:
        if fmt not in ("text", "json"):
            raise typer.BadParameter(f"--json prints JSON lines; it cannot be combined with --format {fmt}")
        fmt = "json"
    as_written = raw or not stdout_is_terminal()
    job = rb.job(job_id)
    tail = LogTail(job)
    if fmt == "csv":
        sys.stdout.write("timestamp,message\n")
    while True:
        final = job.done
        for stamp, message in tail.new_lines():
            _print_line(stamp, message if as_written else visible(message), fmt, as_written)
        if final or not follow:
            return
        time.sleep(FOLLOW_SECONDS)
        job.refresh()


def _print_line(stamp: datetime, message: str, fmt: str, as_written: bool) -> None:
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"
    if fmt == "json":
        line = {"timestamp": text, "message": message}
        sys.stdout.write((json.dumps(line, ensure_ascii=False) if as_written else json_text(line)) + "\n")
    elif fmt == "csv":
        import csv

        csv.writer(sys.stdout, lineterminator="\n").writerow([text, message])
    else:
        sys.stdout.write(message + "\n")
    sys.stdout.flush()


@app.command()
def result(
    job_id: JobId,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the result's JSON here.")
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds to wait for it at most.")] = None,
    json_output: JsonOption = False,
) -> None:
    """A job's result (waits for it); exit 2 with the remote error when it ended Terminated (an array
    job's children that succeeded are still printed: null for the others, their reasons in errors)."""
    with int_digits_shown():  # a result may hold integers past Python's 4,300-digit default
        _show_result(job_id, output, timeout, json_output)


def _show_result(job_id: str, output: Path | None, timeout: float | None, json_output: bool) -> None:
    job = rb.job(job_id)
    try:
        job.wait(timeout, progress=False)
        if job.data["status"] == "Terminated":
            job.result()
    except rb.RemoteJobError as exc:
        err.print(cell(exc, multiline=True))
        if job.type == "Array":
            _print_partial_array_result(job, output)
        raise typer.Exit(EXIT_TERMINATED) from None
    document = job._json_result() if job.type == "Array" or json_output or output else None
    if output is not None:
        assert document is not None
        output.write_text(json.dumps(document.get("result"), default=to_json_number, indent=2) + "\n")
        err.print(cell(f"wrote {output}"))
        return
    if json_output:
        print_json(document)
        return
    out.print(cell(result_repr(job.result()), multiline=True))


def _print_partial_array_result(job: Job, output: Path | None) -> None:
    """What a Terminated array's children produced: the result document's list (null where a child
    failed or never ran) and its errors, to ``output`` or stdout. Nothing when none was assembled."""
    try:
        document = job._json_result()
    except (rb.NoOutput, rb.NotFound, rb.JobNotFinished):
        return
    partial = {"result": document.get("result"), "errors": document.get("errors") or []}
    if document.get("resultUrl"):
        partial["resultUrl"] = document["resultUrl"]
    if output is not None:
        output.write_text(json.dumps(partial, default=to_json_number, indent=2) + "\n")
        err.print(cell(f"wrote the children's partial results to {output}"))
    else:
        print_json(partial)


@app.command()
def abort(job_id: JobId, json_output: JsonOption = False) -> None:
    """Abort a job that is not final (an array job: all its children)."""
    job = rb.job(job_id).abort()
    if json_output:
        print_json(job.data)
    else:
        out.print(cell(_final_line(job)))


@app.command()
def delete(job_id: JobId) -> None:
    """Delete a final job's inputs, outputs and log now."""
    rb.job(job_id).delete()
    out.print(cell(f"deleted the data of {job_id}"))


@app.command("jobs")
def jobs_command(
    status_: Annotated[str | None, typer.Option("--status", help="Only jobs of this status.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many (newest first).")] = 20,
    json_output: JsonOption = False,
) -> None:
    """This account's jobs, newest first, as a table."""
    found = rb.jobs(status=status_, limit=limit)
    if json_output:
        print_json([j.data for j in found])
    else:
        out.print(_job_table(found))


@app.command()
def children(
    job_id: JobId,
    status_: Annotated[str | None, typer.Option("--status", help="Only children of this status.")] = None,
    json_output: JsonOption = False,
) -> None:
    """An array job's children in index order."""
    found = rb.job(job_id).children(status=status_)
    if json_output:
        print_json([j.data for j in found])
    else:
        out.print(_job_table(found, indexed=True))


@app.command()
def outputs(
    job_id: JobId,
    download: Annotated[Path | None, typer.Option(help="Download every file into this folder.")] = None,
    json_output: JsonOption = False,
) -> None:
    """A job's output files (and --download DIR)."""
    files = rb.job(job_id).outputs
    if download is not None:
        for path in files.download(download):
            err.print(cell(f"wrote {path}"))
    if json_output:
        print_json([{"name": f.name, "size": f.size, "url": f.url} for f in files])
    elif download is None:
        table = Table()
        table.add_column("name")
        table.add_column("bytes", justify="right")
        for f in files:
            table.add_row(cell(f.name), cell(f.size))
        out.print(table)


@app.command()
def preview(
    job_id: JobId,
    output: Annotated[Path, typer.Option("--output", "-o", help="The PNG file to write.")],
) -> None:
    """Write a job's result picture (OutputPreviewImage) as PNG."""
    output.write_bytes(rb.job(job_id).preview_png)
    err.print(cell(f"wrote {output}"))


# -- account ---------------------------------------------------------------------------------------
@app.command("account")
def account_command(json_output: JsonOption = False) -> None:
    """The account: id, credit balance, contacts, roles."""
    found = rb.account()
    if json_output:
        print_json(found.data)
        return
    table = Table(show_header=False, box=None)
    for key, value in found.data.items():
        table.add_row(cell(key), cell(_account_value(value)))
    out.print(table)


def _account_value(value: Any) -> str:
    """One account field as a person reads it: a list comma-separated, an unset contact as such."""
    if value is None:
        return "(not set)"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "(none)"
    return str(value)


@members_app.command("list")
def members_list(json_output: JsonOption = False) -> None:
    """The account's members and their roles, owners first."""
    found = rb.members()
    if json_output:
        print_json([m.data for m in found])
        return
    table = Table(box=box.SIMPLE)
    for column in ("user", "role", "set by", "set at"):
        table.add_column(column)
    for member in found:
        table.add_row(
            cell(member.user_id),
            cell(member.role),
            cell(member.updated_by or "-"),
            cell(member.updated_at or "-"),
        )
    out.print(table)


@members_app.command("set")
def members_set(
    user_id: Annotated[
        str, typer.Argument(help="The user's id (their Cognito sub; locally, their account id).")
    ],
    role: Annotated[str, typer.Argument(help="reader, contributor or owner.")],
    json_output: JsonOption = False,
) -> None:
    """Add a user to the account with a role, or change their role (owners)."""
    member = rb.set_member(user_id, role)
    if json_output:
        print_json(member.data)
    else:
        out.print(cell(f"{member.user_id}: {member.role}"))


@members_app.command("remove")
def members_remove(user_id: Annotated[str, typer.Argument(help="The member's user id.")]) -> None:
    """Remove a member from the account (owners; never its last owner)."""
    rb.remove_member(user_id)
    out.print(cell(f"{user_id} removed"))


@app.command("roles")
def roles_command(json_output: JsonOption = False) -> None:
    """The roles and the action each route checks (GET /roles)."""
    table_json = rb.roles()
    if json_output:
        print_json(table_json)
        return
    table = Table(box=box.SIMPLE)
    for column in ("action", "scope", "roles"):
        table.add_column(column)
    for action in table_json["actions"]:
        table.add_row(cell(action["name"]), cell(action["scope"]), cell(", ".join(action["roles"])))
    out.print(table)


@app.command("usage")
def usage_command(
    start: Annotated[str | None, typer.Option("--from", help="ISO time, inclusive.")] = None,
    end: Annotated[str | None, typer.Option("--to", help="ISO time, exclusive.")] = None,
    chart: Annotated[
        Path | None, typer.Option(help="Write a PNG of credits over time per machine class.")
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Ledger entries (charges, grants, refunds) and the total charged."""
    found = rb.usage(start, end)
    if chart is not None:
        found.plot().savefig(chart, dpi=100)
        err.print(cell(f"wrote {chart}"))
    if json_output:
        print_json(
            {
                "entries": [
                    {
                        "at": r.at.isoformat().replace("+00:00", "Z"),
                        "kind": r.kind,
                        "credits": r.credits,
                        "jobId": r.job_id,
                        "balanceAfter": r.balance_after,
                    }
                    for r in found
                ],
                "totalCharged": found.total_charged,
            }
        )
        return
    table = Table(title=f"{len(found)} entries, {found.total_charged} credits charged")
    for column in ("at", "kind", "credits", "job", "class", "balance after"):
        table.add_column(column, justify="right" if column in ("credits", "balance after") else "left")
    for row in found:
        table.add_row(
            row.at.isoformat().replace("+00:00", "Z"),
            cell(row.kind),
            cell(row.credits),
            cell(row.job_id or ""),
            cell(found.machine_class(row.job_id)),
            cell(row.balance_after),
        )
    out.print(table)


@app.command("quotas")
def quotas_command(
    show_all: Annotated[
        bool, typer.Option("--all", help="Every family and zone, also those with nothing in use.")
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """The account's quotas: per machine family and geo zone, the limit, what jobs hold, what dedicated
    computes reserve, what held jobs wait for and what is free; then the total (vCPUs)."""
    found = rb.quotas()
    if json_output:
        # docs/http-api.md's document of GET /account/quotas: the lines, then the total apart.
        print_json(
            {
                "quotas": [q.data for q in found if q.family != "total"],
                "total": next((q.data for q in found if q.family == "total"), None),
            }
        )
        return
    table = Table(box=box.SIMPLE)
    for column in ("family", "zone", "unit", "limit", "in use", "reserved", "queued", "free"):
        table.add_column(column, justify="left" if column in ("family", "zone", "unit") else "right")
    for quota in found:
        idle = not (quota.in_use or quota.reserved or quota.queued)
        if idle and not show_all and quota.family != "total":
            continue
        table.add_row(
            *(
                cell(value)
                for value in (
                    quota.family,
                    quota.geo_zone or "all",
                    quota.unit,
                    quota.limit,
                    quota.in_use,
                    quota.reserved,
                    quota.queued,
                    quota.free,
                )
            )
        )
    out.print(table)


@app.command("machine-classes")
def machine_classes_command(json_output: JsonOption = False) -> None:
    """The machine classes and their prices."""
    classes = rb.machine_classes()
    if json_output:
        print_json([m.data for m in classes])
        return
    table = Table()
    for column in ("name", "vCPUs", "memory GiB", "GPUs", "credits/hour"):
        table.add_column(column, justify="left" if column == "name" else "right")
    for m in classes:
        gpus = f"{m.gpus} {m.gpu_type}" if m.gpus else "0"
        table.add_row(cell(m.name), cell(m.vcpus), cell(m.memory_gib), cell(gpus), cell(m.credits_per_hour))
    out.print(table)


@app.command("estimate")
def estimate_command(
    machine_class: Annotated[str, typer.Option("--machine-class", "-m")] = "Basic1x8",
    seconds: Annotated[float, typer.Option(help="Running time, seconds.")] = 60,
    json_output: JsonOption = False,
) -> None:
    """Credits a run would cost (the service's prices and 60-second minimum)."""
    found = rb.estimate(machine_class, seconds)
    if json_output:
        print_json(found.data)
    else:
        out.print(
            cell(
                f"{found.credits} credits ({machine_class}, {seconds:g} s at "
                f"{found.credits_per_hour} credits/hour, at least {found.minimum_seconds} s charged)"
            )
        )


@contacts_app.command("set")
def contacts_set(
    email: Annotated[str | None, typer.Option(help="Email address; '' clears it.")] = None,
    phone: Annotated[str | None, typer.Option(help="E.164 phone (+15555550100); '' clears it.")] = None,
    json_output: JsonOption = False,
) -> None:
    """Set (or clear with '') the account's email and phone for notifications."""
    if email is None and phone is None:
        raise typer.BadParameter("give --email and/or --phone")
    found = rb.set_contacts(
        email=... if email is None else (email or None), phone=... if phone is None else (phone or None)
    )
    if json_output:
        print_json(found.data)
    else:
        out.print(cell(f"email: {found.email}  phone: {found.phone}"))


def _credits(value: str, name: str) -> Decimal:
    """``value`` as an exact amount of credits; ``typer.BadParameter`` naming ``name`` and the value
    when it is no finite number (the service checks the rest: positive, at most 4 decimals)."""
    try:
        amount = Decimal(value)
    except InvalidOperation:
        raise typer.BadParameter(f"{name} must be a number of credits like 12.5, not {value!r}") from None
    if not amount.is_finite():
        raise typer.BadParameter(f"{name} must be a finite number of credits, not {value!r}")
    return amount


@admin_app.command("grant")
def admin_grant(
    account_id: Annotated[str, typer.Argument(help="The account to credit.")],
    credits: Annotated[str, typer.Argument(help="Credits to add (> 0, at most 4 decimals).")],
    reason: Annotated[str, typer.Option(help="Why, for the ledger.")],
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            help="Send the grant under this key: running the command again with it credits once.",
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Grant credits to an account (admin role); retried requests credit once."""
    found = rb.grant_credits(
        account_id, _credits(credits, "CREDITS"), reason, idempotency_key=idempotency_key
    )
    if json_output:
        print_json(found.data)
    else:
        out.print(cell(f"{found.account_id}: balance {found.credit_balance}"))


@admin_app.command("create-account")
def admin_create_account(
    account_id: Annotated[str, typer.Argument(help="The new user's id (also their own account's).")],
    credits: Annotated[str, typer.Option(help="Starting credits of their own account.")] = "0",
    email: Annotated[str | None, typer.Option(help="Their email, for notifications.")] = None,
) -> None:
    """Local stack: make a user (and their own account) and print their token, shown once."""
    token = rb.create_account(account_id, _credits(credits, "--credits"), email)
    out.print(cell(token), soft_wrap=True)


# -- login -----------------------------------------------------------------------------------------
_API_HOST = re.compile(r"^https://[^/]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com")


@app.command()
def login(  # noqa: PLR0917 (typer maps each parameter to an option)
    endpoint: Annotated[str, typer.Option(help="The API's URL (the stack's ApiUrl output).")],
    client_id: Annotated[str, typer.Option(help="The user pool app client id (UserPoolClientId output).")],
    username: Annotated[str, typer.Option(help="Your user name (email).", prompt=True)],
    region: Annotated[
        str | None, typer.Option(help="The user pool's region (default: the endpoint's).")
    ] = None,
    profile: Annotated[str, typer.Option("--profile", help="The profile to write.")] = config.DEFAULT_PROFILE,
    cognito_endpoint: Annotated[str | None, typer.Option(hidden=True)] = None,
) -> None:
    """Sign in with Cognito (password; MFA code or new password when asked) and store a profile."""
    match = _API_HOST.match(endpoint)
    pool_region = region or (match.group(1) if match else None)
    if pool_region is None:
        raise typer.BadParameter("give --region (the endpoint does not name one)")
    password = getpass.getpass("Password: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")

    def answer(challenge: str, _parameters: dict[str, Any]) -> dict[str, str]:
        if challenge == "SOFTWARE_TOKEN_MFA":
            return {"SOFTWARE_TOKEN_MFA_CODE": typer.prompt("MFA code")}
        if challenge == "NEW_PASSWORD_REQUIRED":
            return {"NEW_PASSWORD": getpass.getpass("New password: ")}
        raise rb.LoginFailed(f"Cognito asks for {challenge}, which this login cannot answer.")

    tokens = auth.password_login(
        pool_region, client_id, username, password, answer=answer, endpoint=cognito_endpoint
    )
    saved = rb.Profile(
        endpoint=endpoint,
        token=tokens.id_token,
        refresh_token=tokens.refresh_token,
        client_id=client_id,
        region=pool_region,
        expires_at=tokens.expires_at,
        username=username,
        cognito_endpoint=cognito_endpoint,
    )
    path = config.save_profile(profile, saved)
    account = rb.account(client=Client(saved, profile))
    out.print(cell(f"signed in as {account.account_id} ({username}); profile {profile!r} written to {path}"))


def main() -> None:
    """The ``remote-batch`` console script."""
    try:
        app()
        sys.stdout.flush()  # what is still buffered goes now, while a closed pipe can be handled
    except BrokenPipeError:
        end_on_broken_pipe()
