"""``Job``: one remote job, with Wolfram Compute Services' job properties under Python names.

| WCS property              | here                        |
|---------------------------|-----------------------------|
| ``JobStatus``             | ``job.status``              |
| ``JobStatusReason``       | ``job.status_reason``       |
| ``CreditsSpent``          | ``job.credits_spent``       |
| ``JobExitCode``           | ``job.exit_code``           |
| ``EvaluationResult``      | ``job.result(timeout)``     |
| ``EvaluationMessagesText``| ``job.messages``            |
| ``JobLogString``          | ``job.log``                 |
| ``JobLogData``            | ``job.log_data``            |
| ``JobLogTabular``         | ``job.log_table``           |
| ``OutputPreviewImage``    | ``job.preview_image``       |
"""

from __future__ import annotations

import base64
import html
import io
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol

import cloudpickle

from remote_batch.client import path_segment
from remote_batch.errors import JobNotFinished, NoOutput, NotFound, RemoteBatchError, RemoteJobError
from remote_batch.json_codec import decode_bytes

if TYPE_CHECKING:
    import pandas
    from PIL.Image import Image

    from remote_batch.client import Client

FINAL_STATUSES = ("Succeeded", "Terminated")
STATUS_COLOURS = {
    "Queued": "#6c757d",
    "Starting": "#0d6efd",
    "Running": "#0d6efd",
    "Succeeded": "#198754",
    "Terminated": "#dc3545",
}
#: Seconds between status polls while waiting: from the first to the last, growing by half each time.
POLL_FIRST_SECONDS = 0.25
POLL_MAX_SECONDS = 3.0


def parse_time(text: str | None) -> datetime | None:
    """An API time (``2026-11-29T17:20:00Z``, with or without milliseconds) as an aware datetime."""
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


def api_time(moment: datetime) -> str:
    """An aware datetime as the API's query parameters take it (ISO 8601, ``Z`` for UTC)."""
    return moment.isoformat().replace("+00:00", "Z")


def optional_import(module: str, purpose: str) -> Any:
    """Import an optional package (pandas, PIL, matplotlib) when a feature needs it.

    Raises ``ImportError`` naming the package and the pip command when it is not installed.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = {"PIL": "pillow"}.get(module.split(".", maxsplit=1)[0], module.split(".", maxsplit=1)[0])
        raise ImportError(f"{purpose} needs {package}: pip install {package}") from exc


@dataclass(frozen=True)
class JobEnvironment:
    """The environment a job runs in, as it was at submit (docs/http-api.md ``Job.environment``).

    Attributes
    ----------
    name : str | None
        The environment's name; None for an inline spec (an unnamed environment, known by its hash).
    hash : str | None
        Its build's identity (64 hex): what the job runs with, even if the environment is deleted
        later; None while the environment it waits for is still resolving.
    python : str
        Its Python, ``major.minor``.
    """

    name: str | None
    hash: str | None
    python: str


@dataclass(frozen=True)
class OutputFile:
    """One file the job wrote under ``$REMOTE_BATCH_OUTPUT_DIR``.

    Attributes
    ----------
    name : str
        Its path under the output directory (``out/a.csv``).
    size : int
        Bytes.
    url : str
        A presigned GET, valid 15 minutes from the listing.
    """

    name: str
    size: int
    url: str


class Outputs(Sequence[OutputFile]):
    """A job's output files (a sequence of ``OutputFile``) and ``download(dir)``."""

    def __init__(self, client: Client, files: list[OutputFile]) -> None:
        self._client = client
        self._files = files

    def __getitem__(self, index: Any) -> Any:
        return self._files[index]

    def __len__(self) -> int:
        return len(self._files)

    def __repr__(self) -> str:
        return f"Outputs({[(f.name, f.size) for f in self._files]!r})"

    @property
    def names(self) -> list[str]:
        """The files' names, in the listing's order."""
        return [f.name for f in self._files]

    def download(self, directory: str | Path = ".") -> list[Path]:
        """Write every file under ``directory`` (made if missing), keeping its relative path.

        Returns the written paths. Raises ``ValueError`` for a name that would leave ``directory``
        (an absolute path or ``..``), ``Expired`` when the links expired (list the outputs again).
        """
        root = Path(directory)
        written = []
        for output in self._files:
            relative = PurePosixPath(output.name)
            if relative.is_absolute() or ".." in relative.parts:
                raise ValueError(f"output name {output.name!r} would leave {root}")
            target = root.joinpath(*relative.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            response = self._client.download(output.url)
            with target.open("wb") as out:
                for chunk in response.iter_content(chunk_size=1 << 20):
                    out.write(chunk)
            written.append(target)
        return written


class LogSource(Protocol):
    """What has a log paged as a job's (``GET .../log?since=&nextToken=``): a job, an environment."""

    def log_events(self, since: datetime | None = None) -> Iterator[tuple[datetime, str]]:
        """Its lines from ``since`` (inclusive) on, as ``(time, text)``, oldest first."""
        ...


class LogTail:
    """The lines of a log not returned yet, call after call (``remote-batch logs -f``, ``submit
    --follow``, an environment's build), as ``aws logs tail --follow`` does: each call asks for the
    lines since the last one's time and drops those of that millisecond already returned."""

    def __init__(self, source: LogSource) -> None:
        self._source = source
        self._last: datetime | None = None
        self._seen_at_last = 0

    def new_lines(self) -> list[tuple[datetime, str]]:
        """The lines written since the previous call (all of them the first time), oldest first."""
        lines = list(self._source.log_events(since=self._last))
        skip = self._seen_at_last
        fresh = []
        for stamp, message in lines:
            if self._last is not None and stamp <= self._last and skip > 0:
                skip -= 1
                continue
            fresh.append((stamp, message))
        if lines:
            newest = lines[-1][0]
            self._seen_at_last = sum(1 for stamp, _ in lines if stamp == newest)
            self._last = newest
        return fresh


class Job:
    """A remote job; its fields come from the last ``GET /jobs/{jobId}`` (``refresh()``).

    ``status``, ``status_reason``, ``credits_spent`` and ``exit_code`` refresh the job when it is not
    final yet, so reading them shows the live state (as WCS's ``job["JobStatus"]`` does); a final
    job never changes, so it is not fetched again.
    """

    def __init__(self, client: Client, data: dict[str, Any]) -> None:
        self._client = client
        self.data = data

    # -- identity and state --------------------------------------------------------------------
    @property
    def id(self) -> str:
        """The job id (``job-01JD...``)."""
        return str(self.data["jobId"])

    @property
    def name(self) -> str | None:
        """The job's label, if it was given one."""
        return self.data.get("name")

    @property
    def submitted_by(self) -> str | None:
        """The user who submitted the job (None for jobs from before users were recorded)."""
        return self.data.get("submittedBy")

    @property
    def parents(self) -> list[Job]:
        """The jobs this one depends on (``dependsOn``), each fetched when its fields are read."""
        return [Job(self._client, {"jobId": d["jobId"]}) for d in self.data.get("dependsOn") or []]

    @property
    def children_waiting(self) -> list[Job]:
        """The jobs waiting for this one (``childrenWaiting``: those submitted depending on it while it
        runs, unless aborted or ended by another parent since), read again while it is not final;
        empty once it is. Each is fetched when its fields are read."""
        return [Job(self._client, {"jobId": str(i)}) for i in self._live().get("childrenWaiting") or []]

    @property
    def waiting_for(self) -> list[str]:
        """What a job waiting ``Queued`` waits for (``job|job-...``, ``environment|...``); empty once
        released."""
        return [str(w) for w in self.data.get("waitingFor") or []]

    @property
    def type(self) -> str:
        """``Single``, ``Array`` or ``ArrayChild``."""
        return str(self.data.get("type", "Single"))

    @property
    def done(self) -> bool:
        """Whether the job was final (Succeeded or Terminated) at the last refresh."""
        return self.data.get("status") in FINAL_STATUSES

    def _live(self) -> dict[str, Any]:
        if not self.done:
            self.refresh()
        return self.data

    @property
    def status(self) -> str:
        """``Queued``, ``Starting``, ``Running``, ``Succeeded`` or ``Terminated`` (refreshed if not final)."""
        return str(self._live()["status"])

    @property
    def status_reason(self) -> str | None:
        """Why it waits or why it ended (``TimeConstraint of 600 s reached``), or None."""
        return self._live().get("statusReason")

    @property
    def credits_spent(self) -> Decimal:
        """Credits charged so far (exact)."""
        return Decimal(str(self._live().get("creditsSpent", 0)))

    @property
    def exit_code(self) -> int | None:
        """The job container's exit code once it ended, else None."""
        return self._live().get("exitCode")

    @property
    def machine_class(self) -> str:
        """The machine class it runs on (``Basic1x8``)."""
        return str(self.data.get("machineClass"))

    @property
    def submitted_at(self) -> datetime | None:
        """When it was submitted (UTC)."""
        return parse_time(self.data.get("submittedAt"))

    @property
    def started_at(self) -> datetime | None:
        """When it started Running (UTC), or None."""
        return parse_time(self.data.get("startedAt"))

    @property
    def completed_at(self) -> datetime | None:
        """When it became final (UTC), or None."""
        return parse_time(self.data.get("completedAt"))

    @property
    def expires_at(self) -> datetime | None:
        """When its inputs, outputs and log are deleted (submission + 14 days)."""
        return parse_time(self.data.get("expiresAt"))

    @property
    def environment(self) -> JobEnvironment | None:
        """The environment it runs in (name, build hash, Python), or None for a job in the worker
        image's own packages."""
        found = self.data.get("environment")
        if not found:
            return None
        return JobEnvironment(found.get("name"), found.get("hash"), str(found.get("python")))

    @property
    def child_status_counts(self) -> dict[str, int] | None:
        """For an Array job: children per status (``{"Succeeded": 7, "Running": 3}``)."""
        return self._live().get("childStatusCounts")

    def refresh(self) -> Job:
        """Fetch the job again (``GET /jobs/{jobId}``); returns itself."""
        self.data = self._client.get(f"/jobs/{path_segment(self.id, 'job id')}")
        return self

    # -- waiting and the result ------------------------------------------------------------------
    def wait(self, timeout: float | None = None, progress: bool = True) -> Job:
        """Block until the job is final; returns itself.

        Parameters
        ----------
        timeout : float | None
            Seconds to wait at most (None: as long as it takes).
        progress : bool
            Show its status, elapsed time and credits (children done of total for an array) on
            stderr: a live line on a terminal or in Jupyter (rich), a plain line per change otherwise;
            False: wait silently.

        Raises
        ------
        TimeoutError
            The job is not final after ``timeout`` seconds (it keeps running; wait again or abort it).
        """
        from remote_batch.progress import watch

        with watch(self, enabled=progress) as display:
            deadline = None if timeout is None else time.monotonic() + timeout
            pause = POLL_FIRST_SECONDS
            while True:
                self.refresh()
                display.show(self)
                if self.done:
                    return self
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"Job {self.id} is still {self.data['status']} after {timeout} s.")
                time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
                pause = min(pause * 1.5, POLL_MAX_SECONDS)

    def result(self, timeout: float | None = None) -> Any:
        """The job's result (``EvaluationResult``), waiting for it to be final first.

        A single job's result comes back as the Python object it was (the worker's pickle of it, made
        by this account's own job, is unpickled here); if
        that pickle cannot be loaded here (a module this Python lacks), its JSON form is returned with
        a warning. An array job's result is the list of its children's results, in index order.

        Raises
        ------
        RemoteJobError
            The job ended Terminated: the remote exception's type, message and traceback, or the
            job's ``statusReason`` (a constraint reached, aborted, a command's exit code).
        TimeoutError
            Not final after ``timeout`` seconds.
        Expired
            Past its 14-day retention.
        """
        self.wait(timeout, progress=False)
        if self.data["status"] == "Terminated":
            raise self._failure()
        if self.type != "Array":
            value, loaded = self._pickled_result()
            if loaded:
                return value
        return self._json_result()["result"]

    def _result_document(self, fmt: str) -> dict[str, Any]:
        document: dict[str, Any] = self._client.get(
            f"/jobs/{path_segment(self.id, 'job id')}/result", format=fmt
        )
        url = document.get("resultUrl")
        if url:
            # Over 5 MiB: the body links result.json (or result.pickle) instead of inlining it.
            raw = self._client.download(str(url)).content
            if fmt == "pickle":
                return {**document, "pickle": base64.b64encode(raw).decode()}
            stored = decode_bytes(raw)
            return {**document, **(stored if isinstance(stored, dict) else {"result": stored})}
        return document

    def _json_result(self) -> dict[str, Any]:
        return self._result_document("json")

    def _pickled_result(self) -> tuple[Any, bool]:
        try:
            document = self._result_document("pickle")
        except NoOutput:
            return None, False
        try:
            return cloudpickle.loads(base64.b64decode(document["pickle"])), True
        except Exception as exc:  # a module missing here, another Python: its JSON form is what is left
            warnings.warn(
                f"The result of job {self.id} cannot be unpickled here ({type(exc).__name__}: {exc}); "
                "returning its JSON form.",
                stacklevel=3,
            )
            return None, False

    def _failure(self) -> RemoteJobError:
        reason = str(self.data.get("statusReason") or "Terminated")
        try:
            messages = list(self._json_result().get("messages") or [])
        except (NoOutput, NotFound, JobNotFinished):
            messages = []
        traceback = next((m for m in messages if m.startswith("Traceback")), "")
        head, _, text = reason.partition(": ")
        if traceback and head.isidentifier():
            return RemoteJobError(self, head, text, traceback)
        return RemoteJobError(self, None, reason, traceback)

    @property
    def messages(self) -> list[str]:
        """The warnings and error text the job's code produced (``EvaluationMessagesText``).

        Raises ``JobNotFinished`` before the job is final."""
        try:
            document = self._json_result()
        except NoOutput:
            return []
        url = document.get("messagesUrl")
        if url:
            stored = decode_bytes(self._client.download(str(url)).content)
            return [str(m) for m in (stored.get("messages", []) if isinstance(stored, dict) else [])]
        return [str(m) for m in document.get("messages") or []]

    # -- logs ------------------------------------------------------------------------------------
    def log_events(self, since: datetime | None = None) -> Iterator[tuple[datetime, str]]:
        """The job's console lines as ``(time, text)``, oldest first, page after page."""
        params: dict[str, Any] = {"format": "json"}
        if since is not None:
            params["since"] = api_time(since)
        for event in self._client.pages(f"/jobs/{path_segment(self.id, 'job id')}/log", "events", **params):
            stamp = parse_time(str(event["timestamp"]))
            assert stamp is not None
            yield stamp, str(event["message"])

    @property
    def log(self) -> str:
        """The job's console output as text, lines joined by newlines (``JobLogString``)."""
        return "".join(f"{message}\n" for _, message in self.log_events())

    @property
    def log_data(self) -> list[tuple[datetime, str]]:
        """The console lines as ``(UTC datetime, text)`` (``JobLogData``)."""
        return list(self.log_events())

    @property
    def log_table(self) -> pandas.DataFrame:
        """The console lines as a pandas DataFrame with columns ``timestamp`` and ``message``
        (``JobLogTabular``). Raises ``ImportError`` when pandas is not installed."""
        pd = optional_import("pandas", "Job.log_table")
        rows = self.log_data
        table: pandas.DataFrame = pd.DataFrame(
            {"timestamp": pd.to_datetime([t for t, _ in rows], utc=True), "message": [m for _, m in rows]}
        )
        return table

    # -- outputs and preview ------------------------------------------------------------------------
    @property
    def outputs(self) -> Outputs:
        """The files the job wrote under ``$REMOTE_BATCH_OUTPUT_DIR`` (names, sizes, ``download(dir)``),
        every page of ``GET /jobs/{jobId}/outputs`` followed."""
        files = [
            OutputFile(str(f["name"]), int(f["size"]), str(f["url"]))
            for f in self._client.pages(f"/jobs/{path_segment(self.id, 'job id')}/outputs", "files")
        ]
        return Outputs(self._client, files)

    def download(self, directory: str | Path = ".") -> list[Path]:
        """Write the job's output files under ``directory``; returns their paths (``Outputs.download``)."""
        return self.outputs.download(directory)

    @property
    def preview_png(self) -> bytes:
        """The result's picture as PNG bytes (``OutputPreviewImage``). Raises ``NotFound`` when the
        job has none, ``JobNotFinished`` before it is final."""
        response = self._client.request(
            "GET", f"/jobs/{path_segment(self.id, 'job id')}/preview.png", ok=(200, 303)
        )
        if response.status_code == 303:
            location = response.headers.get("Location")
            if not location:
                raise RemoteBatchError(f"The preview of job {self.id} answered 303 without a Location.")
            return self._client.download(location).content
        return response.content

    @property
    def preview_image(self) -> Image:
        """The result's picture as a PIL image (``OutputPreviewImage``). Raises ``ImportError``
        without pillow, ``NotFound`` when the job has no preview."""
        pil = optional_import("PIL.Image", "Job.preview_image")
        image: Image = pil.open(io.BytesIO(self.preview_png))
        image.load()
        return image

    # -- actions -------------------------------------------------------------------------------
    def abort(self) -> Job:
        """End the job if it is not final (an array job: all its children); returns itself, refreshed."""
        self.data = self._client.post(f"/jobs/{path_segment(self.id, 'job id')}/abort")
        return self

    def delete(self) -> None:
        """Delete a final job's inputs, outputs and log now. Raises ``Conflict`` when it is not final."""
        self._client.request("DELETE", f"/jobs/{path_segment(self.id, 'job id')}")

    def children(self, status: str | None = None) -> list[Job]:
        """An array job's children in ``arrayIndex`` order (those of ``status`` only, when given)."""
        return [
            Job(self._client, data)
            for data in self._client.pages(
                f"/jobs/{path_segment(self.id, 'job id')}/children", "jobs", status=status, limit=100
            )
        ]

    # -- display -----------------------------------------------------------------------------------
    def __repr__(self) -> str:
        data = self.data
        label = f" {data['name']!r}" if data.get("name") else ""
        counts = data.get("childStatusCounts")
        children = f" children={counts}" if counts else ""
        return (
            f"<Job {self.id}{label} {data.get('status')} {data.get('machineClass')} "
            f"credits={data.get('creditsSpent')}{children}>"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def _repr_html_(self) -> str:
        """Jupyter's rendering: a status badge, credits, times, the preview as a thumbnail."""
        data = self.data
        status = str(data.get("status"))
        colour = STATUS_COLOURS.get(status, "#6c757d")
        rows = [
            ("Job", self.id),
            ("Name", data.get("name") or ""),
            ("Machine class", data.get("machineClass")),
            ("Credits spent", data.get("creditsSpent")),
            ("Submitted", data.get("submittedAt")),
            ("Started", data.get("startedAt") or ""),
            ("Completed", data.get("completedAt") or ""),
        ]
        if data.get("statusReason"):
            rows.append(("Reason", data["statusReason"]))
        if data.get("childStatusCounts"):
            rows.append(("Children", ", ".join(f"{k}: {v}" for k, v in data["childStatusCounts"].items())))
        cells = "".join(
            f"<tr><th style='text-align:left'>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
            for k, v in rows
        )
        badge = (
            f"<span class='rb-status' style='background:{colour};color:white;padding:2px 8px;"
            f"border-radius:8px'>{html.escape(status)}</span>"
        )
        thumbnail = ""
        if status == "Succeeded" and self.type != "Array":
            try:
                png = self.preview_png
            except RemoteBatchError:
                png = b""
            if png:
                encoded = base64.b64encode(png).decode()
                thumbnail = (
                    f"<img class='rb-preview' src='data:image/png;base64,{encoded}' "
                    "style='max-width:240px;max-height:180px;margin-left:12px' alt='preview'>"
                )
        return (
            f"<div class='rb-job' style='display:flex;align-items:flex-start'><div>{badge}"
            f"<table>{cells}</table></div>{thumbnail}</div>"
        )
