"""The SDK's functions: ``rb.submit``, ``rb.map``, ``rb.job``, ``rb.jobs``, ``rb.account``,
``rb.usage``, ``rb.machine_classes``, ``rb.estimate``, ``rb.runtime``, ``rb.members``, ``rb.set_member``,
``rb.remove_member``, ``rb.roles``, ``rb.create_account``.

Each takes an optional ``client=``; without it they use the process's default client, made on first
use by the lookup order of ``remote_batch.config`` (or set by ``rb.connect``, ``remote_batch.connection``).
"""

from __future__ import annotations

import base64
import json
import sys
import sysconfig
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from types import EllipsisType, ModuleType
from typing import Any, TypedDict, Unpack

import cloudpickle

from remote_batch.client import Client, path_segment
from remote_batch.connection import resolve as _client
from remote_batch.environments import EnvironmentChoice, job_environment
from remote_batch.interpreter import python_version
from remote_batch.jobs import Job
from remote_batch.json_codec import decode, to_json_number
from remote_batch.usage import Usage

#: docs/http-api.md: an inline body is at most 5 MiB; payloads above this many bytes go through an upload.
INLINE_PAYLOAD_BYTES = 4 * 1024 * 1024
#: docs/http-api.md: ``arrayItems`` takes 1..10,000 values inline; more (up to 100,000) go as a JSON Lines
#: upload.
INLINE_ARRAY_ITEMS = 10_000
#: The content type of an ``arrayItemsKey`` upload (one JSON value a line).
JSON_LINES = "application/jsonl"
PICKLE_TYPE = "application/x-python-pickle"
CODE_TYPE = "text/x-python"


# -- payloads ----------------------------------------------------------------------------------------
def _installed_roots() -> list[Path]:
    paths = sysconfig.get_paths()
    return [
        Path(paths[key]).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths
    ]


def _by_value_modules(fn: Callable[..., Any]) -> list[ModuleType]:
    """The user's own modules ``fn`` comes from, which the job's container cannot import: a module
    with a file outside the standard library and site-packages (``__main__`` and notebooks are
    pickled by value by cloudpickle already)."""
    name = getattr(fn, "__module__", None)
    module = sys.modules.get(name) if isinstance(name, str) else None
    if module is None or module.__name__ == "__main__":
        return []
    file = getattr(module, "__file__", None)
    if not file:
        return []
    path = Path(file).resolve()
    if any(path.is_relative_to(root) for root in _installed_roots()):
        return []
    return [module]


@contextmanager
def _pickled_by_value(modules: Iterable[ModuleType]) -> Iterator[None]:
    """``cloudpickle.register_pickle_by_value`` for the duration of one ``dumps``."""
    registered = []
    for module in modules:
        if module.__name__ not in cloudpickle.list_registry_pickle_by_value():
            cloudpickle.register_pickle_by_value(module)
            registered.append(module)
    try:
        yield
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)


def dumps_call(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> bytes:
    """``cloudpickle.dumps((fn, args, kwargs))``, ``fn``'s own module pickled by value when the job's
    container could not import it."""
    # A wrapper (``with_parent_results``) ships the user's function: its module decides.
    with _pickled_by_value(_by_value_modules(getattr(fn, "__wrapped__", fn))):
        return bytes(cloudpickle.dumps((fn, tuple(args), dict(kwargs))))


def _upload(client: Client, data: bytes, content_type: str, geo_zone: str | None) -> str:
    """``POST /jobs/uploads`` then the presigned PUT; returns the ``inputKey``."""
    body: dict[str, Any] = {"size": len(data), "contentType": content_type}
    if geo_zone is not None:
        body["geoZone"] = geo_zone
    upload = client.post("/jobs/uploads", body)
    client.upload(str(upload["uploadUrl"]), data, upload.get("headers") or {"Content-Type": content_type})
    return str(upload["inputKey"])


def payload(
    client: Client,
    obj: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    geo_zone: str | None,
) -> dict[str, Any]:
    """The payload fields of ``POST /jobs`` for ``obj``: ``code`` for a string, ``command`` for a list of
    strings, ``pickle`` (plus the ``pythonVersion`` extension) for a callable; ``inputKey`` of an upload
    when the payload is over ``INLINE_PAYLOAD_BYTES``.

    Raises ``TypeError`` for anything else, or arguments given with code or a command.
    """
    if isinstance(obj, str) or (
        isinstance(obj, list | tuple) and obj and all(isinstance(a, str) for a in obj)
    ):
        if args or kwargs:
            raise TypeError("arguments are only taken with a function, not with code or a command")
        if not isinstance(obj, str):
            return {"command": list(obj)}
        source = obj.encode()
        if len(source) <= INLINE_PAYLOAD_BYTES:
            return {"code": obj}
        return {"inputKey": _upload(client, source, CODE_TYPE, geo_zone)}
    if callable(obj):
        data = dumps_call(obj, args, kwargs or {})
        fields: dict[str, Any] = {"pythonVersion": python_version()}
        if len(data) * 4 // 3 + 4 <= INLINE_PAYLOAD_BYTES:
            return {**fields, "pickle": base64.b64encode(data).decode()}
        return {**fields, "inputKey": _upload(client, data, PICKLE_TYPE, geo_zone)}
    raise TypeError(
        f"submit takes Python code (str), a command (list of str) or a callable, not {type(obj).__name__}"
    )


class JobOptions(TypedDict, total=False):
    """docs/http-api.md's submit options, as ``submit`` and ``map`` take them (keywords); an absent or None
    one
    leaves the service's default (``Basic1x8``, ``Automatic``, no constraint, ``Automatic``
    notifications). Credits are exact (pass a ``Decimal`` or a string); ``time_constraint`` is seconds."""

    machine_class: str | None
    geo_zone: str | None
    credit_constraint: Decimal | float | int | str | None
    time_constraint: float | None
    notifications: Any
    name: str | None
    # The job's Python (major.minor, one of GET /runtime's pythonVersions); a function's default is this
    # interpreter's (its pickle only loads there), code's and a command's the service's default.
    python_version: str | None
    # The jobs it waits for (``dependsOn``): a Job or job id, or a list of them; ``(job, condition)``
    # pairs name a condition (DEPENDENCY_CONDITIONS: Succeeded, Completed, Terminated; default Succeeded),
    # and ``(array, "Succeeded", "perItem")`` makes ``map``'s item i wait for that array's item i only.
    depends_on: Any
    # The parents whose outputs it starts with under ``inputs/<jobId>/`` (``inputsFrom``): a Job or id
    # (every output), or ``(job, [globs])`` pairs, or a list of them. Each must be in ``depends_on``
    # (a parent named only here is added to it).
    inputs_from: Any
    # The environment it runs in: a name, an rb.Environment (created first when this process has not
    # read it) or requirement lines (an inline spec on this interpreter's Python, or python_version's).
    environment: EnvironmentChoice | None


def _options(options: JobOptions) -> dict[str, Any]:
    """The body fields of ``options`` (None ones left out). Raises ``TypeError`` for a keyword that is
    not an option, as a misspelt keyword argument would."""
    unknown = sorted(set(options) - JobOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
    credit_constraint = options.get("credit_constraint")
    fields: dict[str, Any] = {
        "name": options.get("name"),
        "machineClass": options.get("machine_class"),
        "geoZone": options.get("geo_zone"),
        "creditConstraint": None if credit_constraint is None else Decimal(str(credit_constraint)),
        "timeConstraint": options.get("time_constraint"),
        "notifications": options.get("notifications"),
        "pythonVersion": options.get("python_version"),
    }
    inputs = [_input_entry(entry) for entry in _as_list(options.get("inputs_from"))]
    parents = [_dependency(entry) for entry in _as_list(options.get("depends_on"))]
    named = {p["jobId"] for p in parents}
    parents += [{"jobId": i["jobId"]} for i in inputs if i["jobId"] not in named]
    if parents:
        fields["dependsOn"] = parents
    if inputs:
        fields["inputsFrom"] = inputs
    return {key: value for key, value in fields.items() if value is not None}


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _job_id(value: Any) -> str:
    if isinstance(value, Job):
        return value.id
    if isinstance(value, str):
        return value
    raise TypeError(f"a parent is a Job or a job id, not {type(value).__name__}")


#: docs/http-api.md's ``dependsOn[i].condition``: the final status a parent must end in (``Completed``:
#: either).
DEPENDENCY_CONDITIONS = ("Succeeded", "Completed", "Terminated")


def check_condition(condition: str) -> str:
    """``condition`` if it is one of ``DEPENDENCY_CONDITIONS``; else ``ValueError`` naming it (before
    any request: the service would refuse it with a 400)."""
    if condition not in DEPENDENCY_CONDITIONS:
        raise ValueError(
            f"{condition!r} is not a dependency condition: give {', '.join(DEPENDENCY_CONDITIONS)}"
        )
    return condition


#: docs/http-api.md's ``dependsOn[i].mode``: ``whole`` (the default) or ``perItem`` (two arrays' items
#: paired, item i after item i).
DEPENDENCY_MODES = ("whole", "perItem")


def check_mode(mode: str) -> str:
    """``mode`` if it is one of ``DEPENDENCY_MODES``; else ``ValueError`` naming it (before any
    request: the service would refuse it with a 400)."""
    if mode not in DEPENDENCY_MODES:
        raise ValueError(f"{mode!r} is not a dependency mode: give {', '.join(DEPENDENCY_MODES)}")
    return mode


def _dependency(entry: Any) -> dict[str, str]:
    """``{"jobId", "condition"?, "mode"?}`` of a ``depends_on`` entry: a Job, an id, ``(job, condition)``
    or ``(job, condition, mode)``. Raises ``TypeError`` for another tuple, ``ValueError`` for a
    condition or a mode that is none (``check_condition``, ``check_mode``)."""
    if isinstance(entry, tuple):
        if len(entry) not in (2, 3):
            raise TypeError("a depends_on tuple is (job, condition) or (job, condition, mode)")
        fields = {"jobId": _job_id(entry[0]), "condition": check_condition(str(entry[1]))}
        if len(entry) == 3:
            fields["mode"] = check_mode(str(entry[2]))
        return fields
    return {"jobId": _job_id(entry)}


def _input_entry(entry: Any) -> dict[str, Any]:
    """``{"jobId", "files"}`` of an ``inputs_from`` entry: a Job, an id, or ``(job, globs)``."""
    if isinstance(entry, tuple):
        parent, files = entry
        return {"jobId": _job_id(parent), "files": [files] if isinstance(files, str) else list(files)}
    return {"jobId": _job_id(entry), "files": []}


#: What stands for a parent's result among a function's arguments until the job side loads it.
PARENT_RESULT_MARK = "remote-batch.parent-result/1"


def with_parent_results(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], list[str]]:
    """``fn`` and its arguments with each ``Job`` among them standing for its result: the job becomes a
    mark, and ``fn`` a function (pickled by value: the job's container has no ``remote_batch``) that
    loads ``inputs/<jobId>/result.pickle`` (``inputsFrom``) in the mark's place before calling ``fn``.
    Returns them with the parents' ids (empty, and ``fn`` as it is, without any ``Job``)."""
    parents: list[str] = []

    def mark(value: Any) -> Any:
        if isinstance(value, Job):
            if value.id not in parents:
                parents.append(value.id)
            return (PARENT_RESULT_MARK, value.id)
        return value

    marked_args = tuple(mark(a) for a in args)
    marked_kwargs = {k: mark(v) for k, v in kwargs.items()}
    if not parents:
        return fn, tuple(args), dict(kwargs), []
    target, sign = fn, PARENT_RESULT_MARK

    def call_with_parent_results(*call_args: Any, **call_kwargs: Any) -> Any:
        import pickle

        def load(value: Any) -> Any:
            if isinstance(value, tuple) and len(value) == 2 and value[0] == sign:
                with open(f"inputs/{value[1]}/result.pickle", "rb") as stream:
                    return pickle.load(stream)  # noqa: S301 - the parent's own result, in its job
            return value

        return target(*(load(a) for a in call_args), **{k: load(v) for k, v in call_kwargs.items()})

    call_with_parent_results.__wrapped__ = fn  # type: ignore[attr-defined]
    return call_with_parent_results, marked_args, marked_kwargs, parents


def _job_body(
    client: Client, obj: Any, args: Sequence[Any], kwargs: dict[str, Any] | None, options: JobOptions
) -> dict[str, Any]:
    """The ``POST /jobs`` body of ``obj`` (``payload``) with ``options`` (checked before any upload)."""
    fields = _options(options)
    choice = options.get("environment")
    if choice is not None:
        fields["environment"] = job_environment(choice, options.get("python_version"), client)
    return {**payload(client, obj, args, kwargs, options.get("geo_zone")), **fields}


def submit(
    obj: Any,
    *args: Any,
    kwargs: dict[str, Any] | None = None,
    client: Client | None = None,
    **options: Unpack[JobOptions],
) -> Job:
    """Submit a job (``POST /jobs``) and return it at once (``job.result()`` waits for it).

    Parameters
    ----------
    obj : str | list[str] | callable
        Python code (its last expression is the result), a command (argv; files written under
        ``$REMOTE_BATCH_OUTPUT_DIR`` become outputs), or a function called remotely as
        ``obj(*args, **kwargs)`` (cloudpickled; one defined in ``__main__``, a notebook or a module
        of yours is shipped by value).
    machine_class, geo_zone, credit_constraint, time_constraint, notifications, name
        docs/http-api.md's submit options (``machineClass`` ...), as keywords (``JobOptions``); None leaves
        the service's default (``Basic1x8``, ``Automatic``, no constraint, ``Automatic``
        notifications). Credits are exact (pass a ``Decimal`` or a string); ``time_constraint`` is
        seconds.
    depends_on, inputs_from
        The jobs it waits for and those whose outputs it starts with (``JobOptions``). A ``Job``
        passed among a function's arguments means its result: the job depends on it and the function
        receives the unpickled result in that position.
    environment : str | Environment | list[str] | None
        The environment it runs in (only its packages, on its Python): an environment's name, an
        ``rb.Environment`` (created first when this process has not read or created it), or
        requirement lines, sent as an inline spec on this interpreter's Python (``python_version``'s
        when given). None: the worker image's packages.

    Raises
    ------
    ValidationError
        A bad option (``field`` names it), or a Python version the service does not run jobs on
        (``field`` ``pythonVersion``: a function runs on this interpreter's, see ``runtime()``).
    InsufficientCredits
        The account's balance is not positive.
    TypeError
        ``obj`` is none of the three.

    The request carries an ``Idempotency-Key``: a retry after a lost answer returns the same job.
    """
    api = _client(client)
    if callable(obj) and not isinstance(obj, str):
        obj, args, kwargs, parents = with_parent_results(obj, args, kwargs or {})
        if parents:
            # Each parent's result (its result.pickle) and nothing of its files.
            given = _as_list(options.get("inputs_from"))
            options["inputs_from"] = given + [(p, ["result.pickle"]) for p in parents]
    return Job(api, api.post("/jobs", _job_body(api, obj, args, kwargs, options)))


def _json_lines(items: Sequence[Any]) -> bytes:
    return b"".join(json.dumps(item, default=to_json_number).encode() + b"\n" for item in items)


def map(
    fn_or_code: Callable[..., Any] | str,
    items: Iterable[Any],
    *,
    parallelism: int | None = None,
    client: Client | None = None,
    **options: Unpack[JobOptions],
) -> Job:
    """One array job with a child per item (docs/http-api.md ``arrayItems``); ``job.result()`` is the list of
    the children's results in ``items``' order.

    ``fn_or_code`` is a function (called as ``fn(item)``) or code (run with the name ``item`` bound).
    Items are JSON values. Up to 10,000 (and a body under 5 MiB) go inline; more go as a JSON Lines
    upload (``POST /jobs/uploads``, then ``arrayItemsKey``), up to 100,000. ``parallelism``
    (1..10,000) runs the items on that many containers that each take items until none is left
    (``parallelism`` in docs/http-api.md: charged per container); None, a container per item.
    Options and errors as ``submit``; ``ValueError`` for no items.
    """
    values = list(items)
    if not values:
        raise ValueError("map needs at least one item")
    api = _client(client)
    body = _job_body(api, fn_or_code, (), None, options)
    if parallelism is not None:
        body["parallelism"] = parallelism
    inline = json.dumps(values, default=to_json_number).encode()
    if (
        len(values) <= INLINE_ARRAY_ITEMS
        and len(inline) + len(json.dumps(body, default=to_json_number)) <= INLINE_PAYLOAD_BYTES
    ):
        body["arrayItems"] = values
    else:
        body["arrayItemsKey"] = _upload(api, _json_lines(values), JSON_LINES, options.get("geo_zone"))
    return Job(api, api.post("/jobs", body))


# -- reads -------------------------------------------------------------------------------------------
def job(job_id: str, *, client: Client | None = None) -> Job:
    """The job ``job_id`` of this account. Raises ``NotFound`` (also for another account's job)."""
    api = _client(client)
    return Job(api, api.get(f"/jobs/{path_segment(job_id, 'job id')}"))


def jobs(status: str | None = None, limit: int | None = 50, *, client: Client | None = None) -> list[Job]:
    """This account's top-level jobs, newest first: at most ``limit`` (None: all), only ``status`` ones
    when given."""
    api = _client(client)
    found: list[Job] = []
    page_size = 100 if limit is None else max(1, min(limit, 100))
    for data in api.pages("/jobs", "jobs", status=status, limit=page_size):
        found.append(Job(api, data))
        if limit is not None and len(found) >= limit:
            break
    return found


@dataclass(frozen=True)
class Account:
    """``GET /account``: id, exact credit balance, contacts, roles."""

    account_id: str
    credit_balance: Decimal
    email: str | None
    phone: str | None
    roles: list[str]
    data: dict[str, Any] = field(repr=False)


def _account(document: dict[str, Any]) -> Account:
    return Account(
        account_id=str(document["accountId"]),
        credit_balance=Decimal(str(document["creditBalance"])),
        email=document.get("email"),
        phone=document.get("phone"),
        roles=list(document.get("roles") or []),
        data=document,
    )


def account(*, client: Client | None = None) -> Account:
    """The caller's account and credit balance."""
    return _account(_client(client).get("/account"))


def set_contacts(
    email: str | EllipsisType | None = ...,
    phone: str | EllipsisType | None = ...,
    *,
    client: Client | None = None,
) -> Account:
    """``PUT /account/contacts``: set (a string), clear (None) or keep (left out) the email and phone.
    Raises ``ValidationError`` (``field`` ``phone`` when it is not E.164)."""
    body = {key: value for key, value in (("email", email), ("phone", phone)) if value is not ...}
    api = _client(client)
    return _account(_decode_put(api, "/account/contacts", body))


def _decode_put(api: Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = decode(api.request("PUT", path, body=body))
    return result


def grant_credits(
    account_id: str,
    credits: Decimal | int | str,
    reason: str,
    *,
    idempotency_key: str | None = None,
    client: Client | None = None,
) -> Account:
    """Admin: grant ``credits`` to ``account_id`` (a ``grant`` ledger entry); returns the account after.

    The request carries an ``Idempotency-Key`` (``idempotency_key``, else a fresh UUID), so the
    client's retries after a lost answer credit once; pass your own key to retry safely across calls
    (the same key with another body is ``Conflict``). Raises ``Forbidden`` without the admin role.
    """
    api = _client(client)
    body = {"credits": Decimal(str(credits)), "reason": reason}
    response = api.request(
        "POST",
        f"/admin/accounts/{path_segment(account_id, 'account id')}/credits",
        body=body,
        idempotency_key=idempotency_key,
    )
    return _account(decode(response))


@dataclass(frozen=True)
class Member:
    """A member of the account requests act in: the user, their role (``reader``, ``contributor``,
    ``owner``), who set it and when (None for the account's founder)."""

    user_id: str
    role: str
    updated_at: str | None
    updated_by: str | None
    data: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)


def _member(document: dict[str, Any]) -> Member:
    return Member(
        user_id=str(document["userId"]),
        role=str(document["role"]),
        updated_at=document.get("updatedAt"),
        updated_by=document.get("updatedBy"),
        data=document,
    )


def members(*, client: Client | None = None) -> list[Member]:
    """``GET /account/members``: the account's members, owners first. Raises ``Forbidden`` without
    ``members/read``, ``NotFound`` when the token's user is no member of the account."""
    return [_member(m) for m in _client(client).get("/account/members")["members"]]


def set_member(user_id: str, role: str, *, client: Client | None = None) -> Member:
    """``PUT /account/members/{userId}``: add ``user_id`` with ``role`` or change their role (owners).
    Raises ``Conflict`` when it would demote the last owner, ``ValidationError`` for an unknown role."""
    return _member(
        _decode_put(_client(client), f"/account/members/{path_segment(user_id, 'user id')}", {"role": role})
    )


def remove_member(user_id: str, *, client: Client | None = None) -> None:
    """``DELETE /account/members/{userId}`` (owners). Raises ``NotFound`` for a user who is no
    member, ``Conflict`` for the last owner."""
    _client(client).request("DELETE", f"/account/members/{path_segment(user_id, 'user id')}")


def roles(*, client: Client | None = None) -> dict[str, Any]:
    """``GET /roles``: the roles and the actions each holds (``{"roles": [...], "actions": [...]}``)."""
    table: dict[str, Any] = _client(client).get("/roles")
    return table


def create_account(
    account_id: str,
    credits: Decimal | int | str = 0,
    email: str | None = None,
    *,
    client: Client | None = None,
) -> str:
    """Local stack, admin: ``POST /admin/accounts``: a user ``account_id`` with their own account
    (``credits``, ``email``); returns the user's token (shown once). Raises ``Conflict`` when it exists.
    An owner then adds the user to a team's account with ``set_member``."""
    body = {"accountId": account_id, "email": email, "credits": Decimal(str(credits))}
    response = _client(client).request("POST", "/admin/accounts", body=body, repeatable=False)
    return str(decode(response)["token"])


def usage(
    start: datetime | str | None = None, end: datetime | str | None = None, *, client: Client | None = None
) -> Usage:
    """The ledger entries from ``start`` (inclusive) to ``end`` (exclusive), as ``Usage``: rows,
    ``dataframe()``, ``plot()``. Times are aware datetimes or ISO strings; None: no bound. Every page
    of ``GET /account/usage`` is read; the total charged is the exact sum of the pages' totals."""
    api = _client(client)

    def iso(value: datetime | str | None) -> str | None:
        if value is None or isinstance(value, str):
            return value
        return value.isoformat().replace("+00:00", "Z")

    window = {"from": iso(start), "to": iso(end)}
    entries: list[Any] = []
    total = Decimal(0)
    token: str | None = None
    while True:
        page = api.get("/account/usage", **window, nextToken=token)
        entries += page.get("entries") or []
        total += Decimal(str(page.get("totalCharged", 0)))
        token = page.get("nextToken")
        if not token:
            return Usage(api, {"entries": entries, "totalCharged": total})


@dataclass(frozen=True)
class Quota:
    """One line of ``GET /account/quotas``: a machine family in a geo zone, or the account's total
    (``family`` ``"total"``, ``geo_zone`` None, in vCPUs).

    ``in_use``: units the account's admitted jobs hold; ``queued``: units its held jobs wait for;
    ``reserved``: units its dedicated computes reserve (Stopped ones too; 0 from a server that does not
    report it). Jobs and computes share ``limit``: ``in_use + reserved`` never exceeds it. Units are
    vCPUs, GPUs for the GPU family (``unit``).
    """

    family: str
    geo_zone: str | None
    unit: str
    limit: int
    in_use: int
    queued: int
    reserved: int
    data: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def free(self) -> int:
        """Units a new job or compute may still take: ``limit - in_use - reserved`` (never below 0)."""
        return max(self.limit - self.in_use - self.reserved, 0)


def _quota(document: dict[str, Any], family: str | None = None) -> Quota:
    return Quota(
        family=family or str(document["family"]),
        geo_zone=document.get("geoZone"),
        unit=str(document["unit"]),
        limit=int(document["limit"]),
        in_use=int(document["inUse"]),
        queued=int(document["queued"]),
        reserved=int(document.get("reserved", 0)),
        data=document,
    )


def quotas(*, client: Client | None = None) -> list[Quota]:
    """``GET /account/quotas``: every machine family in every geo zone, then the account's total
    (``family`` ``"total"``). Raises ``Forbidden`` without ``quotas/read``."""
    document = _client(client).get("/account/quotas")
    return [*(_quota(q) for q in document["quotas"]), _quota(document["total"], "total")]


@dataclass(frozen=True)
class MachineClass:
    """A machine class and its price (credits per hour of Running time)."""

    name: str
    vcpus: int
    memory_gib: int
    gpus: int
    gpu_type: str | None
    credits_per_hour: Decimal
    data: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)


def machine_classes(*, client: Client | None = None) -> list[MachineClass]:
    """The machine classes with the prices the service charges."""
    document = _client(client).get("/machine-classes")
    return [
        MachineClass(
            name=str(m["name"]),
            vcpus=int(m["vcpus"]),
            memory_gib=int(m["memoryGiB"]),
            gpus=int(m["gpus"]),
            gpu_type=m.get("gpuType"),
            credits_per_hour=Decimal(str(m["creditsPerHour"])),
            data=m,
        )
        for m in document["machineClasses"]
    ]


@dataclass(frozen=True)
class Estimate:
    """``POST /estimate``: what a run would cost.

    Attributes
    ----------
    credits : Decimal
        Credits for the run (the 60-second minimum applied, capped by a credit constraint).
    credits_per_hour : Decimal
        The machine class's price.
    minimum_seconds : int
        The shortest run charged (60).
    data : dict
        The API's answer as sent (camelCase keys), for ``--json``.
    """

    credits: Decimal
    credits_per_hour: Decimal
    minimum_seconds: int
    data: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)


def estimate(
    machine_class: str = "Basic1x8",
    seconds: float = 60,
    *,
    credit_constraint: Decimal | float | int | str | None = None,
    client: Client | None = None,
) -> Estimate:
    """Credits a run of ``seconds`` of Running time on ``machine_class`` would cost, as the service
    computes it (its price table and its 60-second minimum). Raises ``ValidationError``."""
    body = {
        "seconds": seconds,
        **_options({"machine_class": machine_class, "credit_constraint": credit_constraint}),
    }
    document = _client(client).post("/estimate", body)
    return Estimate(
        credits=Decimal(str(document["credits"])),
        credits_per_hour=Decimal(str(document["creditsPerHour"])),
        minimum_seconds=int(document["minimumSeconds"]),
        data=document,
    )


def runtime(*, client: Client | None = None) -> dict[str, Any]:
    """``GET /runtime``: what jobs run with: ``{"pythonVersion": "3.12"`` (the default), ``"pythonVersions":
    ["3.11", "3.12", "3.13"], "interpreters": {...}}`` (the local stack's, by version)."""
    result: dict[str, Any] = _client(client).get("/runtime")
    return result
