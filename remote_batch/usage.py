"""``rb.usage(start, end)``: the account's ledger entries as rows, a pandas DataFrame, and a chart."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from remote_batch.client import path_segment
from remote_batch.errors import Expired, NotFound
from remote_batch.jobs import optional_import, parse_time

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure

    from remote_batch.client import Client


@dataclass(frozen=True)
class UsageEntry:
    """One ledger entry (docs/http-api.md, ``GET /account/usage``).

    Attributes
    ----------
    at : datetime
        When it was booked (UTC).
    kind : str
        ``charge``, ``grant`` or ``refund``.
    credits : Decimal
        The amount (exact).
    job_id : str | None
        The job charged or refunded; None for a grant.
    balance_after : Decimal
        The account's balance after it.
    """

    at: datetime
    kind: str
    credits: Decimal
    job_id: str | None
    balance_after: Decimal


class Usage(Sequence[UsageEntry]):
    """The ledger entries of a period (newest first, as the API lists them) and their total charge."""

    def __init__(self, client: Client, document: dict[str, Any]) -> None:
        self._client = client
        self.rows: list[UsageEntry] = []
        for entry in document.get("entries", []):
            at = parse_time(str(entry["at"]))
            assert at is not None
            self.rows.append(
                UsageEntry(
                    at=at,
                    kind=str(entry["kind"]),
                    credits=Decimal(str(entry["credits"])),
                    job_id=entry.get("jobId"),
                    balance_after=Decimal(str(entry["balanceAfter"])),
                )
            )
        self.total_charged = Decimal(str(document.get("totalCharged", 0)))
        self._classes: dict[str, str] = {}

    def __getitem__(self, index: Any) -> Any:
        return self.rows[index]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[UsageEntry]:
        return iter(self.rows)

    def __repr__(self) -> str:
        return f"<Usage {len(self.rows)} entries, {self.total_charged} credits charged>"

    def machine_class(self, job_id: str | None) -> str:
        """The machine class of an entry's job (fetched once per job); ``-`` without a job,
        ``unknown`` for a job the API no longer shows."""
        if job_id is None:
            return "-"
        if job_id not in self._classes:
            try:
                self._classes[job_id] = str(
                    self._client.get(f"/jobs/{path_segment(job_id, 'job id')}")["machineClass"]
                )
            except (NotFound, Expired):
                self._classes[job_id] = "unknown"
        return self._classes[job_id]

    def dataframe(self) -> pandas.DataFrame:
        """The entries as a DataFrame: ``at`` (UTC), ``kind``, ``credits`` and ``balanceAfter`` (Decimal
        objects, exact), ``jobId``, ``machineClass``. Raises ``ImportError`` without pandas."""
        pd = optional_import("pandas", "Usage.dataframe()")
        table: pandas.DataFrame = pd.DataFrame(
            {
                "at": pd.to_datetime([r.at for r in self.rows], utc=True),
                "kind": [r.kind for r in self.rows],
                "credits": [r.credits for r in self.rows],
                "jobId": [r.job_id for r in self.rows],
                "machineClass": [self.machine_class(r.job_id) for r in self.rows],
                "balanceAfter": [r.balance_after for r in self.rows],
            }
        )
        return table

    def plot(self) -> Figure:
        """Credits charged over time per machine class (cumulative, one step line per class), as a
        matplotlib ``Figure`` (made without pyplot: no display needed; ``fig.savefig("usage.png")``).
        Refunds count negative. Raises ``ImportError`` without matplotlib."""
        figure_module = optional_import("matplotlib.figure", "Usage.plot()")
        dates = optional_import("matplotlib.dates", "Usage.plot()")
        figure: Figure = figure_module.Figure(figsize=(8, 4.5), layout="constrained")
        axes = figure.add_subplot()
        series: dict[str, tuple[list[datetime], list[float]]] = {}
        for row in sorted(self.rows, key=lambda r: r.at):
            if row.kind not in ("charge", "refund"):
                continue
            times, totals = series.setdefault(self.machine_class(row.job_id), ([], []))
            signed = row.credits if row.kind == "charge" else -row.credits
            times.append(row.at)
            totals.append(float((Decimal(str(totals[-1])) if totals else Decimal(0)) + signed))
        for name, (times, totals) in sorted(series.items()):
            axes.step(
                dates.date2num(times),
                totals,
                where="post",
                label=name,
                marker="o",
                markersize=3,
            )
        axes.set_title(f"Credits charged: {self.total_charged}")
        axes.set_xlabel("time (UTC)")
        axes.set_ylabel("credits (cumulative)")
        if series:
            axes.legend(title="machine class")
        else:
            axes.text(
                0.5, 0.5, "no charges in this period", ha="center", va="center", transform=axes.transAxes
            )
        axes.xaxis_date(tz="UTC")
        figure.autofmt_xdate()
        return figure
