"""DynamoDB: the quota counters, held jobs and the dispatch claims (``functions.domain.quotas``).

One item per account and entry in the quotas table (``functions.adapters.tables.QUOTAS``):

- ``limits``: the account's overrides (``overrides``: a map ``Basic#UnitedStates`` → units; ``total``;
  ``version``, written with the operator's audit entry by ``limits_put``);
- ``usage#<Family>#<Zone>``: ``inUse``, ``queued`` and ``reserved`` units; ``usage#total``: the same in
  vCPUs;
- ``waiting#<jobId>``, in the account's held partition: a job waiting for prerequisites
  (``functions.adapters.dynamodb.waits``), deleted by whichever of its release and its ending
  comes first (each conditional on it), as a ``held#`` item is by its admission or its ending;
- ``held#<Family>#<Zone>#<jobId>``, in the account's held partition ``<accountId>#held``
  (``held_partition``): a job waiting for quota (``key``, ``units``, ``vcpus``, and ``reason``: the
  ``statusReason`` it was last given). Each family and zone is a range of its own,
  oldest first (``job-<ULID>`` ids sort by submission time), so an admission reads
  ``begins_with(entry, "held#Basic#UnitedStates#")`` a page at a time and never wades through another
  family's queue: 10,000 held Basic jobs cost a Memory job nothing.

``inUse`` counts every unit taken: admitted jobs' units *and* dedicated computes' reservations;
``reserved`` says how many of them are computes' (so jobs hold ``inUse - reserved``, which is what
``get_quota_usage`` reports as in use). The rule is ``jobs + reserved + units <= limit``, but a DynamoDB
condition expression has no arithmetic (its grammar is ``operand comparator operand``, an operand being
an attribute path or a value: DynamoDB Developer Guide, "Condition and filter expressions, operators,
and functions"), so it cannot test ``inUse + reserved``. Keeping the sum in one attribute makes every
admission and every compute creation one condition on that attribute, ``inUse <= limit - units``, and
both kinds of writer serialize on the same item: no interleaving of job admissions and compute
creations ever takes more than a limit.

Usage only moves inside a ``TransactWriteItems`` that also moves the job or the compute: holding a job
writes it with its ``held#`` item and the queued counters; admitting it flips its ``dispatchState`` from
``Held``, deletes the ``held#`` item and adds its units to ``inUse`` under the condition; ending it
releases its units in the very transaction that settles it (``release_items``, added by
``AccountsAndLedger.settle``). Creating a compute adds its units to ``inUse`` and ``reserved`` under the
same condition (``reserve_items``, added by ``DynamoComputeStore.create_compute``); deleting it (or its
failing) subtracts them from both (``unreserve_items``). Jobs on a dedicated compute never move a
counter: they run on its reservation.

Held items of the earlier layouts (``held#<jobId>``, or any held item in the account's own partition)
are not read here: the quotas were never released with those layouts, so only a local stack's home kept
from before can hold them, and the local stack moves them to this layout when it starts, before anything
settles or admits (``rekey_legacy_held_items``). Reading every layout on every admission would cost
Queries per admission for good, to serve a home that is rewritten once.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from functions.adapters.dynamodb.base import LIVE_JOB, QUEUED_NONE, StoreBase, cancelled_by, store_errors
from functions.adapters.dynamodb.items import (
    account_from_item,
    deserialize_item,
    job_from_item,
    job_to_item,
    serialize_item,
    serialize_value,
)
from functions.domain.errors import ConditionFailed
from functions.domain.jobs import Account, DispatchState, Job, JobType
from functions.domain.machine_classes import machine_class
from functions.domain.quotas import Demand, HeldJob, QuotaKey, QuotaLimits, Usage, demand_of
from functions.domain.status import JobStatus
from functions.domain.timefmt import to_sortable

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

LIMITS_ENTRY = "limits"
TOTAL_ENTRY = "usage#total"
USAGE_PREFIX = "usage#"
HELD_PREFIX = "held#"
WAITING_PREFIX = "waiting#"
# Held items live in a partition of their own per account (``held_partition``): the counters' Query
# (``get_quota_usage``, on every submit and ending) then never reads past them. DynamoDB would read
# only the ``usage#`` range anyway, but moto walks a partition's every item per Query: with 2,000 held
# jobs in the account's partition, each counter read took the DynamoDB lock for tens of milliseconds.
HELD_PARTITION_SUFFIX = "#held"
# Held jobs of one ``list_held_jobs`` call unless the caller asks for fewer (one Query page).
HELD_PAGE = 200


def usage_entry(key: QuotaKey) -> str:
    """``usage#Basic#UnitedStates``."""
    return USAGE_PREFIX + key.name


def held_prefix(key: QuotaKey) -> str:
    """``held#Basic#UnitedStates#``: the start of every held entry of ``key``."""
    return f"{HELD_PREFIX}{key.name}#"


def held_entry(key: QuotaKey, job_id: str) -> str:
    """``held#Basic#UnitedStates#<jobId>``."""
    return held_prefix(key) + job_id


def waiting_entry(job_id: str) -> str:
    """``waiting#<jobId>``: the guard of a job waiting for prerequisites (``waits.WaitRecords``)."""
    return f"{WAITING_PREFIX}{job_id}"


def held_partition(account_id: str) -> str:
    """``<accountId>#held``: the partition of an account's held items, apart from its limits and
    counters (no account id holds a ``#``: ``functions.domain.text.ACCOUNT_ID_PATTERN``)."""
    return account_id + HELD_PARTITION_SUFFIX


def _limits_from_item(item: dict[str, Any]) -> QuotaLimits:
    """The limits of a plain ``limits`` item ({} when none is stored: the defaults, version 0)."""
    overrides = {QuotaKey.parse(k): int(v) for k, v in (item.get("overrides") or {}).items()}
    total = item.get("total")
    return QuotaLimits(
        overrides, int(total) if total is not None else None, version=int(item.get("version", 0))
    )


def _unless_queued(item: TransactWriteItemTypeDef) -> None:
    """Add to a usage counter's update (in place) the condition that nothing of it is queued."""
    update: dict[str, Any] = item["Update"]  # type: ignore[assignment]
    existing = update.get("ConditionExpression")
    update["ConditionExpression"] = f"({existing}) AND ({QUEUED_NONE})" if existing else QUEUED_NONE
    update["ExpressionAttributeValues"][":queuedNone"] = serialize_value(0)


def limits_put(table: str, account_id: str, limits: QuotaLimits) -> TransactWriteItemTypeDef:
    """The conditional Put of an account's ``limits`` item at ``limits.version``: only over the version
    before it (version 1: only where none is stored), so of two changes made from one read, one wins."""
    values = {
        "accountId": account_id,
        "entry": LIMITS_ENTRY,
        "overrides": {k.name: v for k, v in limits.overrides.items()} or None,
        "total": limits.total,
        "version": limits.version,
    }
    put: dict[str, Any] = {"TableName": table, "Item": serialize_item(values)}
    if limits.version == 1:
        put["ConditionExpression"] = "attribute_not_exists(version)"
    else:
        put["ConditionExpression"] = "version = :read"
        put["ExpressionAttributeValues"] = {":read": serialize_value(limits.version - 1)}
    return {"Put": put}  # type: ignore[typeddict-item]


def job_demand(job: Job) -> Demand:
    """What ``job`` holds while admitted (``quotas.demand_of`` of its class, zone and array size)."""
    return demand_of(machine_class(job.machine_class), job.geo_zone, job.array_children or None)


def usage_counter_update(
    table: str,
    account_id: str,
    entry: str,
    *,
    in_use: int,
    queued: int = 0,
    reserved: int = 0,
    at_most: int | None = None,
) -> TransactWriteItemTypeDef:
    """The transaction item that ADDs ``in_use``, ``queued`` and ``reserved`` to the usage counter
    ``entry`` (created at 0 when absent); with ``at_most``, only while ``inUse`` (jobs and reservations:
    see the module's docstring) is at most that before the change."""
    adds = {"inUse": in_use, "queued": queued, "reserved": reserved}
    # An ADD of 0 is left out (a job's counters never get a ``reserved`` attribute); ``inUse`` always
    # stays, so the expression is never empty.
    moved = {name: value for name, value in adds.items() if value or name == "inUse"}
    values: dict[str, Any] = {f":{name}": serialize_value(value) for name, value in moved.items()}
    update: dict[str, Any] = {
        "TableName": table,
        "Key": serialize_item({"accountId": account_id, "entry": entry}),
        "UpdateExpression": "ADD " + ", ".join(f"{name} :{name}" for name in moved),
        "ExpressionAttributeValues": values,
    }
    if at_most is not None:
        update["ConditionExpression"] = "attribute_not_exists(inUse) OR inUse <= :max"
        values[":max"] = serialize_value(at_most)
    return {"Update": update}  # type: ignore[typeddict-item]


def reserve_items(
    table: str, account_id: str, demand: Demand, limits: QuotaLimits
) -> list[TransactWriteItemTypeDef]:
    """The transaction items that reserve ``demand`` for a dedicated compute: ``inUse`` and ``reserved``
    of its family and zone and of the total grow by its units (vCPUs), only while ``inUse`` stays within
    ``limits`` (jobs + reserved + units <= limit). The caller checks first that ``demand`` alone fits
    (``quotas.check_reservation``): a negative room would make the condition fail forever."""
    return [
        usage_counter_update(
            table,
            account_id,
            usage_entry(demand.key),
            in_use=demand.units,
            reserved=demand.units,
            at_most=limits.limit(demand.key) - demand.units,
        ),
        usage_counter_update(
            table,
            account_id,
            TOTAL_ENTRY,
            in_use=demand.vcpus,
            reserved=demand.vcpus,
            at_most=limits.total_limit - demand.vcpus,
        ),
    ]


def unreserve_items(table: str, account_id: str, demand: Demand) -> list[TransactWriteItemTypeDef]:
    """The transaction items that give a compute's reservation ``demand`` back (unconditionally: the
    compute's own write in the same transaction is what guards against releasing twice)."""
    return [
        usage_counter_update(
            table, account_id, usage_entry(demand.key), in_use=-demand.units, reserved=-demand.units
        ),
        usage_counter_update(table, account_id, TOTAL_ENTRY, in_use=-demand.vcpus, reserved=-demand.vcpus),
    ]


class QuotaRecords(StoreBase):
    """The quota part of ``DynamoJobStore`` (its ``quotas_table``)."""

    @property
    def _quota_table(self) -> str:
        if not self._quotas:
            raise ValueError("this store was built without a quotas table")
        return self._quotas

    def _key(self, account_id: str, entry: str) -> dict[str, Any]:
        return serialize_item({"accountId": account_id, "entry": entry})

    def _held_key(self, account_id: str, key: QuotaKey, job_id: str) -> dict[str, Any]:
        return serialize_item({"accountId": held_partition(account_id), "entry": held_entry(key, job_id)})

    # -- limits and usage --------------------------------------------------------------------------
    def get_quota_limits(self, account_id: str) -> QuotaLimits:
        """The account's limits (its overrides over the defaults), read strongly consistent."""
        with store_errors("GetItem"):
            response = self._db.get_item(
                TableName=self._quota_table, Key=self._key(account_id, LIMITS_ENTRY), ConsistentRead=True
            )
        return _limits_from_item(deserialize_item(response["Item"]) if "Item" in response else {})

    def get_account_and_quota_limits(self, account_id: str) -> tuple[Account | None, QuotaLimits | None]:
        """The account (None when absent) and its quota limits (None for a store without quotas), read
        strongly consistent in one BatchGetItem (what a submit checks first)."""
        request: dict[str, Any] = {
            self._accounts: {"Keys": [serialize_item({"accountId": account_id})], "ConsistentRead": True}
        }
        if self._quotas:
            request[self._quotas] = {"Keys": [self._key(account_id, LIMITS_ENTRY)], "ConsistentRead": True}
        found = self._batch_get(request)
        accounts = found[self._accounts]
        account = account_from_item(accounts[0]) if accounts else None
        if not self._quotas:
            return account, None
        limits = found[self._quotas]
        return account, _limits_from_item(limits[0] if limits else {})

    def put_quota_limits(self, account_id: str, limits: QuotaLimits) -> None:
        """Store the account's overrides (replacing what was stored, unconditionally and without an
        audit entry: an operator's change goes through ``OperationsStore.save_quota_limits``)."""
        values = {
            "accountId": account_id,
            "entry": LIMITS_ENTRY,
            "overrides": {k.name: v for k, v in limits.overrides.items()} or None,
            "total": limits.total,
        }
        with store_errors("PutItem"):
            self._db.put_item(TableName=self._quota_table, Item=serialize_item(values))

    def get_quota_usage(self, account_id: str) -> Usage:
        """The account's counters (units in use by jobs, queued and reserved by computes per key; vCPUs
        in all), strongly consistent."""
        items = self._query(
            TableName=self._quota_table,
            KeyConditionExpression="accountId = :a AND begins_with(#entry, :p)",
            ExpressionAttributeNames={"#entry": "entry"},
            ExpressionAttributeValues={
                ":a": serialize_value(account_id),
                ":p": serialize_value(USAGE_PREFIX),
            },
            ConsistentRead=True,
        )
        in_use: dict[QuotaKey, int] = {}
        queued: dict[QuotaKey, int] = {}
        reserved: dict[QuotaKey, int] = {}
        total_in_use = total_queued = total_reserved = 0
        for item in items:
            entry = str(item["entry"])
            held_back = int(item.get("reserved", 0))
            # ``inUse`` counts the reservation too (see the module's docstring): jobs hold the rest.
            used, waiting = int(item.get("inUse", 0)) - held_back, int(item.get("queued", 0))
            if entry == TOTAL_ENTRY:
                total_in_use, total_queued, total_reserved = used, waiting, held_back
            else:
                key = QuotaKey.parse(entry.removeprefix(USAGE_PREFIX))
                in_use[key], queued[key], reserved[key] = used, waiting, held_back
        return Usage(in_use, queued, total_in_use, total_queued, reserved, total_reserved)

    def list_held_jobs(
        self,
        account_id: str,
        key: QuotaKey | None = None,
        *,
        limit: int = HELD_PAGE,
        after: str | None = None,
    ) -> list[HeldJob]:
        """Held jobs of the account, strongly consistent, one Query of at most ``limit`` (1..1000) items.

        With ``key``: that family and zone's held jobs oldest first, after the job ``after`` (a job id of
        that key, the last of the previous page) when given; fewer than ``limit`` means none is left.
        Without ``key``: the first held jobs of every key, by family and zone, each key's oldest first
        (an inventory, not an admission order).
        """
        if not 1 <= limit <= 1000:
            raise ValueError("limit must be 1..1000")
        prefix = held_prefix(key) if key is not None else HELD_PREFIX
        query: dict[str, Any] = {
            "TableName": self._quota_table,
            "KeyConditionExpression": "accountId = :a AND begins_with(#entry, :p)",
            "ExpressionAttributeNames": {"#entry": "entry"},
            "ExpressionAttributeValues": {
                ":a": serialize_value(held_partition(account_id)),
                ":p": serialize_value(prefix),
            },
            "ConsistentRead": True,
            "Limit": limit,
        }
        if after is not None:
            if key is None:
                raise ValueError("after needs the key it belongs to")
            query["ExclusiveStartKey"] = self._held_key(account_id, key, after)
        with store_errors("Query"):
            page = self._db.query(**query)
        held = []
        for raw in page.get("Items", []):
            item = deserialize_item(raw)
            demand = Demand(QuotaKey.parse(str(item["key"])), int(item["units"]), int(item["vcpus"]))
            job_id = str(item["entry"]).removeprefix(held_prefix(demand.key))
            reason = item.get("reason")
            child = (
                Demand(demand.key, int(item["childUnits"]), int(item["childVcpus"]))
                if "childUnits" in item
                else None
            )
            held.append(HeldJob(job_id, demand, str(reason) if reason is not None else None, child))
        return held

    def _counter_update(
        self, account_id: str, entry: str, in_use: int, queued: int, *, at_most: int | None = None
    ) -> TransactWriteItemTypeDef:
        """ADD ``in_use`` and ``queued`` to a usage counter; with ``at_most``, only while ``inUse`` is at
        most that before the change."""
        return usage_counter_update(
            self._quota_table, account_id, entry, in_use=in_use, queued=queued, at_most=at_most
        )

    # -- the job's way through the quota -------------------------------------------------------------
    def hold_job(self, job: Job) -> None:
        """Create ``job`` (``dispatchState`` ``Held``) with its ``held#`` item and its units counted as
        queued, in one transaction. ``ConditionFailed`` when the job id exists."""
        items: list[TransactWriteItemTypeDef] = [
            {
                "Put": {
                    "TableName": self._jobs,
                    "Item": serialize_item(job_to_item(job)),
                    "ConditionExpression": "attribute_not_exists(jobId)",
                }
            },
            *self.hold_items(job),
        ]
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(TransactItems=items)

    def hold_items(self, job: Job) -> list[TransactWriteItemTypeDef]:
        """The transaction items that hold ``job`` for quota beside its own write: its ``held#`` item
        and its units counted as queued."""
        demand = job_demand(job)
        held = {
            "accountId": held_partition(job.account_id),
            "entry": held_entry(demand.key, job.job_id),
            "key": demand.key.name,
            "units": demand.units,
            "vcpus": demand.vcpus,
            "reason": job.status_reason,
        }
        if job.type == JobType.ARRAY:
            # Admitted a span at a time (``array_spans.ArraySpanRecords.admit_span``): one child's units.
            child = demand_of(machine_class(job.machine_class), job.geo_zone)
            held.update(childUnits=child.units, childVcpus=child.vcpus)
        return [
            {"Put": {"TableName": self._quota_table, "Item": serialize_item(held)}},
            self._counter_update(job.account_id, usage_entry(demand.key), 0, demand.units),
            self._counter_update(job.account_id, TOTAL_ENTRY, 0, demand.vcpus),
        ]

    def create_admitted_job(self, job: Job, limits: QuotaLimits) -> bool:
        """Create ``job`` admitted at once (``dispatchState`` ``Admitted``) with its units added to in
        use, in one transaction, only while nothing of its family and zone is queued (no overtaking a
        held job) and its family's ``inUse`` and the total's stay within ``limits``: what ``hold_job``
        then ``admit_job`` would do, without the held item or a read of the counters first.

        Returns False, writing nothing, when a limit would be exceeded or a job of its family and zone
        waits (the caller then holds it). ``ConditionFailed`` when the job id exists.
        """
        demand = job_demand(job)
        family_room = limits.limit(demand.key) - demand.units
        total_room = limits.total_limit - demand.vcpus
        if family_room < 0 or total_room < 0:
            return False
        family = self._counter_update(
            job.account_id, usage_entry(demand.key), demand.units, 0, at_most=family_room
        )
        _unless_queued(family)
        admitted = replace(job, dispatch_state=DispatchState.ADMITTED, status_reason=None)
        items: list[TransactWriteItemTypeDef] = [
            {
                "Put": {
                    "TableName": self._jobs,
                    "Item": serialize_item(job_to_item(admitted)),
                    "ConditionExpression": "attribute_not_exists(jobId)",
                }
            },
            family,
            self._counter_update(job.account_id, TOTAL_ENTRY, demand.vcpus, 0, at_most=total_room),
        ]
        try:
            with store_errors("TransactWriteItems"):
                self._db.transact_write_items(TransactItems=items)
        except ConditionFailed as exc:
            if cancelled_by(exc) == {0}:
                raise  # the id exists
            return False
        return True

    def admit_job(self, account_id: str, held: HeldJob, limits: QuotaLimits) -> bool:
        """Admit a held job: its ``dispatchState`` becomes ``Admitted`` (its waiting reason removed), its
        ``held#`` item goes, and its units move from queued to in use, only while that keeps its
        family's ``inUse`` and the total's within ``limits``: one transaction.

        Returns False, changing nothing, when a limit would be exceeded or the job is no longer held
        (admitted by another writer, aborted, gone).
        """
        demand = held.demand
        family_room = limits.limit(demand.key) - demand.units
        total_room = limits.total_limit - demand.vcpus
        if family_room < 0 or total_room < 0:
            return False
        job_update: dict[str, Any] = {
            "TableName": self._jobs,
            "Key": serialize_item({"jobId": held.job_id}),
            "UpdateExpression": "SET dispatchState = :admitted REMOVE statusReason",
            "ConditionExpression": f"{LIVE_JOB} AND dispatchState = :held",
            "ExpressionAttributeNames": {"#ttl": "ttl"},
            "ExpressionAttributeValues": {
                ":admitted": serialize_value(DispatchState.ADMITTED.value),
                ":held": serialize_value(DispatchState.HELD.value),
                ":liveNow": serialize_value(self._now_epoch()),
            },
        }
        items: list[TransactWriteItemTypeDef] = [
            {"Update": job_update},  # type: ignore[typeddict-item]
            {
                "Delete": {
                    "TableName": self._quota_table,
                    "Key": self._held_key(account_id, demand.key, held.job_id),
                    "ConditionExpression": "attribute_exists(accountId)",
                }
            },
            self._counter_update(
                account_id, usage_entry(demand.key), demand.units, -demand.units, at_most=family_room
            ),
            self._counter_update(account_id, TOTAL_ENTRY, demand.vcpus, -demand.vcpus, at_most=total_room),
        ]
        return self._transact_if(items)

    def release_items(self, job: Job, *, unless_queued: bool = False) -> list[TransactWriteItemTypeDef]:
        """The transaction items that give back what ``job`` (as read) holds when it ends: an admitted
        job's units in use, a held job's queued units and its ``held#`` item (only while it exists, so a
        job admitted since it was read cancels the settlement: the caller re-reads). Nothing for a job
        outside this release (an array or its child: ``array_spans`` releases theirs; one on a dedicated
        compute, one submitted before quotas) or a store without them.

        A job still ``Waiting`` holds no units: its release is the delete of its ``waiting#`` guard
        (``waits.WaitRecords``), only while it exists, so a job released since it was read cancels the
        settlement likewise.

        With ``unless_queued``, an admitted job's release of the account's total holds only while the
        total has no units queued (``QUEUED_NONE``): its success proves no held job waits for them."""
        if self._quotas and job.dispatch_state == DispatchState.WAITING:
            return [self.waiting_guard_delete(job)]
        if (
            not self._quotas
            or job.dispatch_state is None
            or job.type != JobType.SINGLE
            or job.compute is not None
        ):
            return []
        demand = job_demand(job)
        account = job.account_id
        if job.dispatch_state == DispatchState.HELD:
            return [
                {
                    "Delete": {
                        "TableName": self._quota_table,
                        "Key": self._held_key(account, demand.key, job.job_id),
                        "ConditionExpression": "attribute_exists(accountId)",
                    }
                },
                self._counter_update(account, usage_entry(demand.key), 0, -demand.units),
                self._counter_update(account, TOTAL_ENTRY, 0, -demand.vcpus),
            ]
        total = self._counter_update(account, TOTAL_ENTRY, -demand.vcpus, 0)
        if unless_queued:
            _unless_queued(total)
        return [self._counter_update(account, usage_entry(demand.key), -demand.units, 0), total]

    def waiting_guard_delete(self, job: Job) -> TransactWriteItemTypeDef:
        """The Delete of a ``Waiting`` job's ``waiting#<jobId>`` guard (in its account's held partition),
        only while it exists: whichever of the job's release and its ending comes second is cancelled."""
        return {
            "Delete": {
                "TableName": self._quota_table,
                "Key": serialize_item(
                    {"accountId": held_partition(job.account_id), "entry": waiting_entry(job.job_id)}
                ),
                "ConditionExpression": "attribute_exists(accountId)",
            }
        }

    def set_waiting_reason(self, job_id: str, reason: str) -> None:
        """Set a held job's ``statusReason`` (no-op once it is no longer held), and record it on its
        ``held#`` item (so a later admission reads it with the job and writes only a changed reason).
        ``RecordMissing`` when the job is gone."""
        response = self._update_job(
            job_id,
            "SET statusReason = :r",
            condition="dispatchState = :held",
            values={":r": reason, ":held": DispatchState.HELD.value},
            return_new=True,
        )
        if response is None or not self._quotas:
            return
        job = job_from_item(deserialize_item(dict(response["Attributes"])))
        try:
            with store_errors("UpdateItem"):
                self._db.update_item(
                    TableName=self._quota_table,
                    Key=self._held_key(job.account_id, job_demand(job).key, job_id),
                    UpdateExpression="SET reason = :r",
                    ConditionExpression="attribute_exists(accountId)",  # admitted or ended meanwhile
                    ExpressionAttributeValues={":r": serialize_value(reason)},
                )
        except ConditionFailed:
            return

    # -- the dispatcher's claim ------------------------------------------------------------------------
    def claim_dispatch(self, job_id: str, now: datetime) -> Job | None:
        """Claim an admitted job for SubmitJob (``dispatchState`` ``Admitted`` → ``Dispatching``, claimed
        at ``now``) while it is not final; returns the job after the claim, or None when another
        dispatcher has it, it was sent already, it is not admitted or it ended (aborted).
        ``RecordMissing`` when it is gone."""
        response = self._update_job(
            job_id,
            "SET dispatchState = :after, dispatchClaimedAt = :now",
            condition="dispatchState = :before AND NOT #status IN (:succeeded, :terminated)",
            names={"#status": "status"},
            values={
                ":before": DispatchState.ADMITTED.value,
                ":after": DispatchState.DISPATCHING.value,
                ":now": to_sortable(now),
                ":succeeded": JobStatus.SUCCEEDED.value,
                ":terminated": JobStatus.TERMINATED.value,
            },
            return_new=True,
        )
        return (
            self._live_job(deserialize_item(dict(response["Attributes"])), "dispatch") if response else None
        )

    def release_dispatch(self, job_id: str, reason: str | None = None) -> bool:
        """Give a claim back (``Dispatching`` → ``Admitted``): after SubmitJob failed for a while, when
        the meter finds a dead dispatcher's claim whose job AWS Batch does not have, or when its class
        is out of service (``reason`` becomes its ``statusReason``). False (nothing written) when the
        job is no longer ``Dispatching``; ``RecordMissing`` when it is gone."""
        values = {":before": DispatchState.DISPATCHING.value, ":after": DispatchState.ADMITTED.value}
        update = "SET dispatchState = :after REMOVE dispatchClaimedAt"
        if reason is not None:
            update = "SET dispatchState = :after, statusReason = :reason REMOVE dispatchClaimedAt"
            values[":reason"] = reason
        response = self._update_job(job_id, update, condition="dispatchState = :before", values=values)
        return response is not None

    def record_dispatch(self, job_id: str, batch_job_id: str, *, clear_reason: bool = False) -> Job | None:
        """Record the Batch job id SubmitJob returned (unless an event recorded it first) and
        ``dispatchState`` ``Dispatched`` (``clear_reason``: and remove the ``statusReason`` a parked job
        waited with); returns the job after the write (it may have ended meanwhile: the caller then
        terminates the Batch job). ``RecordMissing`` when it is gone."""
        response = self._update_job(
            job_id,
            "SET batchJobId = if_not_exists(batchJobId, :b), dispatchState = :dispatched"
            + (" REMOVE statusReason" if clear_reason else ""),
            condition="dispatchState = :dispatching",
            values={
                ":b": batch_job_id,
                ":dispatched": DispatchState.DISPATCHED.value,
                ":dispatching": DispatchState.DISPATCHING.value,
            },
            return_new=True,
        )
        return (
            self._live_job(deserialize_item(dict(response["Attributes"])), "dispatch") if response else None
        )


def rekey_legacy_held_items(db: DynamoDBClient, table: str) -> int:
    """Move held items of the earlier layouts (``held#<jobId>``, or ``held#<Family>#<Zone>#<jobId>`` in
    the account's own partition) to ``held#<Family>#<Zone>#<jobId>`` in the account's held partition
    (``held_partition``; their ``key`` attribute names the family and zone): one transaction per item
    that puts the new item and deletes the old. Run by the local stack as it starts, before anything
    admits or settles (an item's counters are unchanged: it is the same held job). Returns how many
    were moved.

    One Scan of the table (filtered on the prefix): a local home's table is small, and a deployed table
    never had the old layouts (see the module's docstring).
    """
    scan: dict[str, Any] = {
        "TableName": table,
        "FilterExpression": "begins_with(#entry, :p)",
        "ExpressionAttributeNames": {"#entry": "entry"},
        "ExpressionAttributeValues": {":p": serialize_value(HELD_PREFIX)},
        "ConsistentRead": True,
    }
    rewritten = 0
    while True:
        with store_errors("Scan"):
            page = db.scan(**scan)
        for raw in page.get("Items", []):
            item = deserialize_item(raw)
            account = str(item["accountId"])
            if account.endswith(HELD_PARTITION_SUFFIX):
                continue  # in place
            job_id = str(item["entry"]).rsplit("#", 1)[-1]
            moved = {
                **item,
                "accountId": held_partition(account),
                "entry": held_entry(QuotaKey.parse(str(item["key"])), job_id),
            }
            old_key = serialize_item({"accountId": account, "entry": item["entry"]})
            try:
                with store_errors("TransactWriteItems"):
                    db.transact_write_items(
                        TransactItems=[
                            {"Put": {"TableName": table, "Item": serialize_item(moved)}},
                            {
                                "Delete": {
                                    "TableName": table,
                                    "Key": old_key,
                                    "ConditionExpression": "attribute_exists(accountId)",
                                }
                            },
                        ]
                    )
            except ConditionFailed:
                continue  # gone since the scan read it
            rewritten += 1
        if "LastEvaluatedKey" not in page:
            return rewritten
        scan["ExclusiveStartKey"] = page["LastEvaluatedKey"]
