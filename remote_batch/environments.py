"""``Environment``: a named set of Python packages of the account that jobs run with (docs/http-api.md,
"Environments"), and what ``submit(..., environment=)`` sends for one.

    env = rb.Environment("ml", python="3.12", requirements=["scikit-learn==1.9.1"]).create()
    env.wait()                                  # the build log as it comes, then Ready (or EnvironmentFailed)
    rb.submit(train, environment=env).result()  # runs with exactly those packages, on Python 3.12

The service resolves the requirements to a lock and installs it once per build ``hash`` (of Python,
lock and platform): two names or two accounts asking the same share one build. ``create`` is
idempotent (the same spec again answers the existing environment); another spec under the name is
``Conflict``, which names what differs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_batch.client import path_segment
from remote_batch.connection import resolve
from remote_batch.errors import Conflict, EnvironmentFailed, NotFound
from remote_batch.interpreter import python_version
from remote_batch.jobs import POLL_FIRST_SECONDS, POLL_MAX_SECONDS, LogTail, api_time, parse_time
from remote_batch.json_codec import decode
from remote_batch.requirements_file import read_requirements

if TYPE_CHECKING:
    from remote_batch.client import Client

BUILDING = "Building"
#: Seconds between polls while ``wait(progress=True)`` follows the build log, at most.
FOLLOW_SECONDS = 1.0
#: What ``GET /environments`` leaves out of each environment (``GET /environments/{name}`` has them).
SUMMARY_OMITS = ("requirements", "indexUrl", "extraIndexUrls", "packages")
#: An environment's name as the contract states it (docs/http-api.md, ``PUT /environments/{name}``, and
#: docs/openapi.json's ``name`` parameter): a letter, then letters, digits, ``.``, ``_`` or ``-``; 2 to 64
#: characters. The service checks the same pattern; the SDK checks it first, so that a name that is no
#: name reaches no route (``a/b``) and no request is sent for it.
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9._-]{1,63}$"
#: A Python version as the contract states it (docs/openapi.json's ``pythonVersion``): ``3.N``. Which
#: of them the service runs is its answer (``rb.runtime()["pythonVersions"]``, a 400 naming them).
PYTHON_PATTERN = r"^3\.[0-9]{1,2}$"


def check_name(name: str) -> str:
    """``name`` if it is an environment name (:data:`NAME_PATTERN`, matched whole).

    Raises ``ValueError`` naming it otherwise (``TypeError`` for what is not a string)."""
    if not isinstance(name, str):
        raise TypeError(f"an environment name is a string, not {type(name).__name__}")
    if re.fullmatch(NAME_PATTERN, name) is None:
        raise ValueError(
            f"environment name {name[:80]!r} is not a name: 2 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter"
        )
    return name


def check_python(version: str) -> str:
    """``version`` if it is a Python version, ``3.N`` (:data:`PYTHON_PATTERN`, matched whole).

    Raises ``ValueError`` naming it otherwise (``TypeError`` for what is not a string)."""
    if not isinstance(version, str):
        raise TypeError(f"python is a string such as '3.12', not {type(version).__name__}")
    if re.fullmatch(PYTHON_PATTERN, version) is None:
        raise ValueError(
            f"python {version[:80]!r} is not a Python version jobs can run on: give major.minor, 3.N, such "
            "as '3.12' (rb.runtime()['pythonVersions'] lists those the service runs), or None for this "
            "interpreter's"
        )
    return version


@dataclass(frozen=True)
class Package:
    """One package of an environment's resolved lock."""

    name: str
    version: str


class Environment:
    """An environment of the account: its spec, and its build's state from the last answer.

    Parameters
    ----------
    name : str
        2 to 64 letters, digits, ``.``, ``_`` or ``-``, starting with a letter (:data:`NAME_PATTERN`).
    python : str | None
        ``major.minor``, one of ``rb.runtime()["pythonVersions"]``; None: this interpreter's, so that a
        function pickled here loads in it.
    requirements : iterable of str
        PEP 508 lines (``"scikit-learn==1.9.1"``, ``"numpy>=2"``), at most 500.
        ``Environment.from_requirements_file`` reads them from a pip requirements file.
    index_url : str | None
        An https package index instead of PyPI (the local stack takes http too).
    extra_index_urls : iterable of str
        More https indexes, at most 10.
    image : str | None
        A container image to run in instead of the service's worker image.
    client : Client | None
        The connection; None: the process's default (``rb.connect``).

    Nothing is sent until ``create()`` (or ``refresh()``, which reads the stored one). ``status``,
    ``status_reason``, ``hash``, ``packages``, ``size_bytes``, ``ready_at`` and ``failed_at`` read the
    environment again while it is ``Building``, as a job's ``status`` does while it is not final (and
    not after ``delete()``).

    Raises ``ValueError`` naming ``name`` or ``python`` when it is no name (``a/b``, ``..``) or no
    Python version (``""``, ``3``), before anything is sent.
    """

    def __init__(
        self,
        name: str,
        python: str | None = None,
        requirements: Iterable[str] = (),
        *,
        index_url: str | None = None,
        extra_index_urls: Iterable[str] = (),
        image: str | None = None,
        client: Client | None = None,
    ) -> None:
        if isinstance(requirements, str) or isinstance(extra_index_urls, str):
            which = "requirements" if isinstance(requirements, str) else "extra_index_urls"
            raise TypeError(f"{which} is a list of strings, not one string")
        self._hold(check_name(name), python_version() if python is None else check_python(python), client)
        self.image = image
        self._requirements = tuple(requirements)
        self._index_url = index_url
        self._extra_index_urls = tuple(extra_index_urls)

    def _hold(self, name: str, python: str, client: Client | None) -> None:
        """Its name and Python, and nothing else known yet (``__init__`` checks them first; an API
        answer's are the service's own)."""
        self.name = name
        self.python = python
        self.image = None
        self._requirements = ()
        self._index_url = None
        self._extra_index_urls = ()
        #: The API's last answer about it (``GET``/``PUT /environments/{name}``); None before any.
        self.data: dict[str, Any] | None = None
        # Made from a summary of ``GET /environments``: the fields it leaves out are read on first use.
        self._summary = False
        #: Whether ``create()`` made it (201) rather than finding it with this spec (200).
        self.created = False
        #: Whether ``delete()`` deleted it: ``data`` is then its last view, and is not read again.
        self.deleted = False
        self._client = client

    @classmethod
    def from_requirements_file(
        cls,
        name: str,
        path: str | Path,
        python: str | None = None,
        *,
        image: str | None = None,
        client: Client | None = None,
    ) -> Environment:
        """The environment of a pip requirements file: its requirement lines, with its ``-r`` includes,
        and its ``--index-url``/``--extra-index-url`` lines (``remote_batch.requirements_file``).

        Raises ``RequirementsFileError`` naming the file and line of what cannot be sent."""
        found = read_requirements(Path(path))
        return cls(
            name,
            python,
            found.requirements,
            index_url=found.index_url,
            extra_index_urls=found.extra_index_urls,
            image=image,
            client=client,
        )

    @classmethod
    def from_data(cls, client: Client, data: dict[str, Any]) -> Environment:
        """The environment an API answer describes (its name and Python taken as the service gives
        them, unchecked)."""
        environment = cls.__new__(cls)
        environment._hold(str(data["name"]), str(data["python"]), client)
        environment._load(data)
        return environment

    # -- requests ----------------------------------------------------------------------------------
    def _api(self) -> Client:
        if self._client is None:
            self._client = resolve(None)
        return self._client

    def _path(self, suffix: str = "") -> str:
        return f"/environments/{path_segment(self.name, 'environment name')}{suffix}"

    def _load(self, data: dict[str, Any]) -> None:
        """Take the service's answer: its state, and its spec as the service holds it (a summary's
        fields only, the others read when first asked for)."""
        self.data = data
        self.python = str(data.get("python") or self.python)
        self.image = data.get("image", self.image)
        if "requirements" in data:
            self._requirements = tuple(data["requirements"] or ())
        if "indexUrl" in data:
            self._index_url = data["indexUrl"]
        if "extraIndexUrls" in data:
            self._extra_index_urls = tuple(data["extraIndexUrls"] or ())
        self._summary = any(key not in data for key in SUMMARY_OMITS)

    def _whole(self) -> None:
        if self._summary and not self.deleted:
            self.refresh()

    @property
    def requirements(self) -> tuple[str, ...]:
        """Its PEP 508 requirement lines, as the spec gives them."""
        self._whole()
        return self._requirements

    @property
    def index_url(self) -> str | None:
        """The package index it resolves from instead of PyPI, or None."""
        self._whole()
        return self._index_url

    @property
    def extra_index_urls(self) -> tuple[str, ...]:
        """More package indexes it resolves from."""
        self._whole()
        return self._extra_index_urls

    def spec(self) -> dict[str, Any]:
        """The ``PUT /environments/{name}`` body of this environment."""
        return {
            "python": self.python,
            "requirements": list(self.requirements),
            "indexUrl": self.index_url,
            "extraIndexUrls": list(self.extra_index_urls),
            "image": self.image,
        }

    def create(self) -> Environment:
        """``PUT /environments/{name}``: create it (its build starts) or find it with this spec; returns
        itself (``created`` says which). Idempotent: run it again, it answers the same environment.

        Raises
        ------
        Conflict
            The name holds an environment with another spec; the message names what differs (delete
            it first, or pick another name).
        ValidationError
            A bad field, named by ``field`` (``python``, ``requirements[3]``, ``indexUrl``, ``image``,
            ``name``).
        QuotaExceeded
            The account builds 3 environments already.
        NotSupported
            This deployment builds no environments.
        """
        api = self._api()
        spec = self.spec()
        try:
            response = api.request("PUT", self._path(), body=spec)
        except Conflict as exc:
            raise Conflict(exc.status, exc.code, self._conflict_message(spec), "name") from exc
        self._load(decode(response))
        self.created = response.status_code == 201
        self.deleted = False
        return self

    def _conflict_message(self, asked: dict[str, Any]) -> str:
        """What differs between ``asked`` and the environment stored under the name."""
        advice = "delete it first (`remote-batch env delete NAME`) or pick another name"
        try:
            stored = self._api().get(self._path())
        except NotFound:  # deleted meanwhile: nothing to compare
            return f"Environment {self.name} exists with another spec; {advice}."
        differences = [
            f"{key} {stored.get(key)!r} there, {value!r} here"
            for key, value in asked.items()
            if (stored.get(key) or None) != (value or None)
        ]
        what = "; ".join(differences) or "the requirements differ once normalized"
        return f"Environment {self.name} exists with another spec ({what}); {advice}."

    def refresh(self) -> Environment:
        """Read it again (``GET /environments/{name}``); returns itself. Raises ``NotFound``."""
        self._load(self._api().get(self._path()))
        return self

    def delete(self) -> Environment:
        """``DELETE /environments/{name}``: the name is free again; jobs already submitted in it keep
        its build (jobs still waiting for a build end Terminated).

        Returns itself as the service held it when deleted (``data``, ``status`` ``Building`` too),
        with ``deleted`` True: its attributes are that last view and nothing is read again
        (``refresh()`` would raise ``NotFound``). Raises ``NotFound`` when there is no such environment.
        """
        self._load(decode(self._api().request("DELETE", self._path())))
        self.deleted = True
        return self

    # -- state ---------------------------------------------------------------------------------------
    def _live(self) -> dict[str, Any]:
        if self.data is None or (self.data.get("status") == BUILDING and not self.deleted):
            self.refresh()
        assert self.data is not None
        return self.data

    @property
    def status(self) -> str:
        """``Building``, ``Ready`` or ``Failed`` (read again while Building)."""
        return str(self._live()["status"])

    @property
    def status_reason(self) -> str | None:
        """Why it failed (``Environment ml failed: <the first error line>``, or the limit reached)."""
        return self._live().get("statusReason")

    @property
    def hash(self) -> str | None:
        """Its build's identity (64 hex): SHA-256 of (Python, lock, platform); None until resolved."""
        return self._live().get("hash")

    @property
    def packages(self) -> list[Package]:
        """The resolved lock (empty until Ready)."""
        self._whole()
        return [Package(str(p["name"]), str(p["version"])) for p in self._live().get("packages") or []]

    @property
    def size_bytes(self) -> int:
        """What its installed files take, unpacked (bytes; 0 until Ready)."""
        return int(self._live().get("sizeBytes") or 0)

    @property
    def created_at(self) -> datetime | None:
        """When it was created (UTC)."""
        return parse_time(self._live().get("createdAt"))

    @property
    def ready_at(self) -> datetime | None:
        """When its build was Ready (UTC), or None."""
        return parse_time(self._live().get("readyAt"))

    @property
    def failed_at(self) -> datetime | None:
        """When its build Failed (UTC), or None."""
        return parse_time(self._live().get("failedAt"))

    # -- the build log and waiting ----------------------------------------------------------------
    def log_events(self, since: datetime | None = None) -> Iterator[tuple[datetime, str]]:
        """The build's lines (the resolver's and installer's output) as ``(time, text)``, oldest first,
        from ``since`` (inclusive) on, page after page."""
        params = {} if since is None else {"since": api_time(since)}
        for event in self._api().pages(self._path("/log"), "events", **params):
            stamp = parse_time(str(event["timestamp"]))
            assert stamp is not None
            yield stamp, str(event["message"])

    def log(self) -> str:
        """The build log as text, lines joined by newlines."""
        return "".join(f"{message}\n" for _, message in self.log_events())

    def wait(self, timeout: float | None = None, progress: bool = True) -> Environment:
        """Block until the build is over; returns itself once ``Ready``.

        Parameters
        ----------
        timeout : float | None
            Seconds to wait at most (None: as long as it takes; a build has 30 minutes).
        progress : bool
            Print the build log as it comes and a status line on stderr (a live line on a terminal,
            where the log's control characters are shown escaped); False: wait silently.

        Raises
        ------
        EnvironmentFailed
            The build ended ``Failed``: ``reason`` is its first error line (or the limit it reached),
            ``log()`` the whole output.
        TimeoutError
            Still Building after ``timeout`` seconds (the build goes on; wait again).
        NotFound
            There is no such environment (``create()`` it first).
        """
        from remote_batch.progress import watch_build

        deadline = None if timeout is None else time.monotonic() + timeout
        tail = LogTail(self)
        longest = FOLLOW_SECONDS if progress else POLL_MAX_SECONDS
        pause = POLL_FIRST_SECONDS
        with watch_build(self, enabled=progress) as display:
            while True:
                self.refresh()
                if progress:  # read after the status: a final status's log is whole
                    for _, message in tail.new_lines():
                        display.echo(message)
                display.show(self)
                assert self.data is not None
                if self.data.get("status") != BUILDING:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"Environment {self.name} is still Building after {timeout} s.")
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                time.sleep(pause if remaining is None else min(pause, remaining))
                pause = min(pause * 1.5, longest)
        if self.data.get("status") != "Ready":
            raise EnvironmentFailed(
                self, str(self.data.get("statusReason") or f"Environment {self.name} failed")
            )
        return self

    # -- display ---------------------------------------------------------------------------------
    def __repr__(self) -> str:
        status = self.data.get("status") if self.data else "not created"
        if self.deleted:
            status = f"deleted ({status})"
        count = len(self._requirements)
        listed = "" if self._summary else f", {count} requirement{'' if count == 1 else 's'}"
        return f"<Environment {self.name!r} Python {self.python}{listed}, {status}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Environment) and (other.name, other.spec()) == (self.name, self.spec())

    def __hash__(self) -> int:
        return hash(self.name)


#: What ``submit``/``map`` take as ``environment``: a name, an ``Environment``, or requirement lines.
EnvironmentChoice = str | Environment | Sequence[str]


def job_environment(choice: EnvironmentChoice, python: str | None, client: Client) -> str | dict[str, Any]:
    """``POST /jobs``' ``environment`` for ``choice``.

    A name goes as it is; an ``Environment`` by its name, created first (``create()``, idempotent)
    when this process has not read or created it yet; a list of requirement lines as an inline spec
    ``{"python": python or this interpreter's, "requirements": [...]}`` (an unnamed environment, known by
    its hash). Raises ``ValueError`` for a name that is no name or a ``python`` that is no version
    (``check_name``, ``check_python``), ``TypeError`` for anything else.
    """
    if isinstance(choice, str):
        return check_name(choice)
    if isinstance(choice, Environment):
        if choice.data is None:
            if choice._client is None:
                choice._client = client
            choice.create()
        return choice.name
    if isinstance(choice, list | tuple) and all(isinstance(line, str) for line in choice):
        spec_python = python_version() if python is None else check_python(python)
        return {"python": spec_python, "requirements": list(choice)}
    raise TypeError(
        "environment is a name, an rb.Environment or a list of requirement lines, "
        f"not {type(choice).__name__}"
    )


def environments(*, client: Client | None = None) -> list[Environment]:
    """The account's environments, by name (every page of ``GET /environments``). Each comes from the
    list's summary (name, python, image, status, reason, hash, size, times): its requirements, indexes
    and packages are read (``GET /environments/{name}``) when first asked for."""
    api = resolve(client)
    pages = api.pages("/environments", "environments", limit=100)
    return [Environment.from_data(api, data) for data in pages]


def environment(name: str, *, client: Client | None = None) -> Environment:
    """The account's environment ``name``. Raises ``NotFound`` (also for another account's), and
    ``ValueError`` naming a name that is no name (``check_name``) before any request."""
    api = resolve(client)
    segment = path_segment(check_name(name), "environment name")
    return Environment.from_data(api, api.get(f"/environments/{segment}"))
