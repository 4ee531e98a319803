"""The outcome document a job's worker leaves, as the Lambdas read it: JSON only, never unpickled.

The worker (``worker.layout``, which documents the layout field by field) writes, under the job's
output prefix, ``outcome.json``: ``{"format": "remote-batch.outcome/1", "messages", "error",
["resultRepr", "result" | "resultObject": "result.json", "pickle" | "pickleObject": "result.pickle",
"preview" | "previewObject": "preview.png"]}``, last; a part too big to inline, or a picture of the
result, is an object of its own that the document names. Jobs written before this layout have no
``outcome.json`` but ``result.json``, ``result.pickle``, ``preview.png`` and ``messages.json``
(``LEGACY_*``); they stay readable for their 14 days.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from functions.domain.batch_reasons import signal_sentence

#: The outcome document's name, and the only ``format`` read.
OUTCOME_OBJECT = "outcome.json"
OUTCOME_FORMAT = "remote-batch.outcome/1"
#: The objects a part of the outcome may have of its own (and the previous layout's objects).
RESULT_OBJECT = "result.json"
PICKLE_OBJECT = "result.pickle"
PREVIEW_OBJECT = "preview.png"
#: The previous layout's messages document ``{"messages", "error"}``.
LEGACY_MESSAGES_OBJECT = "messages.json"
#: The most of ``outcome.json`` a Lambda reads, in bytes. The worker keeps it far below: at most
#: 1 MiB of result, 4/3 MiB of base64 pickle, 1/3 MiB of base64 preview, and the bounded messages.
OUTCOME_MAX_BYTES = 8 * 1024 * 1024
_OBJECT_FIELDS = {
    "resultObject": RESULT_OBJECT,
    "pickleObject": PICKLE_OBJECT,
    "previewObject": PREVIEW_OBJECT,
}


class OutcomeUnreadable(ValueError):
    """``outcome.json`` is not a document of ``OUTCOME_FORMAT`` (damaged, or from a newer worker)."""


@dataclass(frozen=True, slots=True)
class StoredOutcome:
    """A parsed ``outcome.json``.

    Attributes
    ----------
    messages : tuple of str
        The job's messages (``EvaluationMessagesText``).
    error : dict or None
        ``{"type", "message", "traceback"[, "reason"][, "signal"]}`` when the code failed, else None.
    ran : bool
        The job's code ran, so it has a result (None included); False when the worker refused the
        input or failed itself.
    result : Any
        The result's JSON form when inline (``result_object`` is None), else None.
    result_repr : str or None
        Its repr (``ran`` only).
    result_object : str or None
        ``"result.json"`` when the result's document ``{"result", "resultRepr"}`` is an object of
        its own.
    pickle_base64 : str or None
        The result's cloudpickle, base64, when inline (never decoded here, never unpickled).
    pickle_object : str or None
        ``"result.pickle"`` when the pickle is an object of its own.
    preview_png : bytes or None
        An inline text preview's PNG.
    preview_object : str or None
        ``"preview.png"`` when the preview is an object of its own.
    """

    messages: tuple[str, ...] = ()
    error: dict[str, Any] | None = None
    ran: bool = False
    result: Any = None
    result_repr: str | None = None
    result_object: str | None = None
    pickle_base64: str | None = None
    pickle_object: str | None = None
    preview_png: bytes | None = None
    preview_object: str | None = None

    @property
    def has_pickle(self) -> bool:
        """Whether the result has a pickle (inline or in its object)."""
        return self.pickle_base64 is not None or self.pickle_object is not None


def parse_outcome(raw: bytes) -> StoredOutcome:
    """Parse ``outcome.json``'s bytes.

    Raises
    ------
    OutcomeUnreadable
        Not a UTF-8 JSON object of ``OUTCOME_FORMAT``, a field of the wrong type, an object field
        naming anything but its one allowed object, or base64 that does not decode.
    """
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise OutcomeUnreadable(f"{OUTCOME_OBJECT} is not JSON ({exc})") from exc
    if not isinstance(document, dict) or document.get("format") != OUTCOME_FORMAT:
        found = document.get("format") if isinstance(document, dict) else None
        raise OutcomeUnreadable(f"{OUTCOME_OBJECT} is not of format {OUTCOME_FORMAT} ({found!r})")
    messages = document.get("messages", [])
    error = document.get("error")
    if not isinstance(messages, list) or not (error is None or isinstance(error, dict)):
        raise OutcomeUnreadable(f"{OUTCOME_OBJECT} has malformed messages or error")
    for name, allowed in _OBJECT_FIELDS.items():
        if document.get(name, allowed) != allowed:
            raise OutcomeUnreadable(f"{OUTCOME_OBJECT}'s {name} names {document[name]!r}")
    repr_text = document.get("resultRepr")
    pickle_text = document.get("pickle")
    preview_text = document.get("preview")
    if not all(v is None or isinstance(v, str) for v in (repr_text, pickle_text, preview_text)):
        raise OutcomeUnreadable(f"{OUTCOME_OBJECT} has a non-string resultRepr, pickle or preview")
    try:
        preview = None if preview_text is None else base64.b64decode(preview_text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise OutcomeUnreadable(f"{OUTCOME_OBJECT}'s preview is not base64 ({exc})") from exc
    return StoredOutcome(
        messages=tuple(str(m) for m in messages),
        error=error,
        ran=repr_text is not None,
        result=document.get("result"),
        result_repr=repr_text,
        result_object=document.get("resultObject"),
        pickle_base64=pickle_text,
        pickle_object=document.get("pickleObject"),
        preview_png=preview,
        preview_object=document.get("previewObject"),
    )


def error_summary(error: Any) -> str | None:
    """The error line of a worker's ``error`` document (either layout): a death by signal's sentence
    (``signal``: ``batch_reasons.signal_sentence``), else its ``reason`` when the worker gave one
    (``Memory limit of 8 GiB exceeded``, ``The job's input was rejected: ...``), else
    ``"Type: message"`` (``"Type"`` alone without a message); None without an error."""
    if not isinstance(error, dict) or not error.get("type"):
        return None
    number = error.get("signal")
    if type(number) is int and (sentence := signal_sentence(number)) is not None:
        return sentence
    reason = error.get("reason")
    if isinstance(reason, str) and reason.strip():
        return " ".join(reason.split())
    message = str(error.get("message") or "").strip()
    return f"{error['type']}: {message}" if message else str(error["type"])
