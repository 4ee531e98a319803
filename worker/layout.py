"""Which objects hold a finished job's outcome: one outcome document, and an object of its own only for
a part too big to inline or for a picture of the result.

Layout ``remote-batch.outcome/1``, under the job's output prefix (``outputs/<jobId>/``; an array
child's is ``outputs/<arrayId>/<index>/``):

- ``files/<path>``: each file the job left in ``$REMOTE_BATCH_OUTPUT_DIR``.
- ``outcome.json``, always, written LAST (its presence means every object it names is complete): a
  UTF-8 JSON object with these fields.

  ``format``
      ``"remote-batch.outcome/1"``; a reader refuses any other value.
  ``messages``
      ``[str, ...]``: the warnings, notes and error text (``EvaluationMessagesText``).
  ``error``
      ``null`` or ``{"type", "message", "traceback"[, "reason"][, "signal"]}``: why the code failed;
      ``signal`` (an int) when the job's process was killed by a signal, whose ``statusReason`` the
      service words.
  ``resultRepr``
      ``str``, the result's repr. Present exactly when the job's code ran; absent when the input was
      refused or the worker itself failed (the document then only says why).
  ``result``
      The result's JSON form (``null`` when it has none), when the result's document
      ``{"result", "resultRepr"}`` is at most ``INLINE_RESULT_MAX_BYTES``.
  ``resultObject``
      Instead of ``result``: ``"result.json"``, the object holding that document.
  ``pickle``
      The result's cloudpickle, base64 (RFC 4648, padded), when at most ``INLINE_PICKLE_MAX_BYTES``.
  ``pickleObject``
      Instead of ``pickle``: ``"result.pickle"``, the object holding the raw pickle. Neither field:
      the result could not be pickled (a message says why).
  ``preview``
      A text preview's PNG (the repr rendered as text), base64, when at most
      ``INLINE_PREVIEW_MAX_BYTES``.
  ``previewObject``
      Instead of ``preview``: ``"preview.png"``. An image preview (a plot, an image result) always
      has its object; neither field: no preview (a None result).

- ``result.json``, ``result.pickle``, ``preview.png``: only when ``outcome.json`` names them.

So a job whose result is ``4`` leaves one object: ``outcome.json``. The Lambdas read ``outcome.json``
whole (a few MiB at most: each inline part is bounded here, the messages by ``worker.encoding``) and
the objects it names; JSON only: they copy the base64 pickle out as text and never unpickle it. An
inline text preview is written to ``preview.png`` by the api the first time ``GET
/jobs/{jobId}/preview.png`` asks for it (a presigned URL needs an object).

The layout before it (no ``outcome.json``; jobs within their 14 days may still have it, and the
service reads both): ``result.json``, ``result.pickle``, ``preview.png`` (every result but None),
then ``messages.json`` last.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from worker.encoding import EncodedOutputs, dumps_document, messages_document
from worker.runner import JobError

#: The ``format`` of the outcome document this module writes.
OUTCOME_FORMAT = "remote-batch.outcome/1"
#: The outcome document's name under the job's output prefix.
OUTCOME_OBJECT = "outcome.json"
#: Where a part too big to inline goes.
RESULT_OBJECT = "result.json"
PICKLE_OBJECT = "result.pickle"
PREVIEW_OBJECT = "preview.png"
#: Largest result document (``{"result", "resultRepr"}``, UTF-8 bytes) inlined in ``outcome.json``.
#: The service inlines an array child's result in its array's result up to the same size.
INLINE_RESULT_MAX_BYTES = 1024 * 1024
#: Largest pickle inlined (raw bytes; base64 takes 4/3 of it).
INLINE_PICKLE_MAX_BYTES = 1024 * 1024
#: Largest text preview PNG inlined (raw bytes). A 40 × 100 character picture is about 10 KB.
INLINE_PREVIEW_MAX_BYTES = 256 * 1024


@dataclass(frozen=True)
class OutputObject:
    """One object to write under the job's output prefix: its name there, body and Content-Type."""

    name: str
    body: bytes
    content_type: str


def outcome_objects(encoded: EncodedOutputs) -> list[OutputObject]:
    """The objects holding a finished job's outcome, in the order to write them (``outcome.json``
    last).

    Parameters
    ----------
    encoded : EncodedOutputs
        ``worker.encoding.encode_outcome``'s parts of a job whose code ran.

    Returns
    -------
    list of OutputObject
        ``result.json``, ``result.pickle`` and ``preview.png`` each only when the module's rules
        put that part in an object of its own, then ``outcome.json``.
    """
    objects: list[OutputObject] = []
    document: dict[str, Any] = {"format": OUTCOME_FORMAT, **json.loads(encoded.messages_json)}
    if len(encoded.result_json) <= INLINE_RESULT_MAX_BYTES:
        document.update(json.loads(encoded.result_json))
    else:
        document.update(resultRepr=encoded.result_repr, resultObject=RESULT_OBJECT)
        objects.append(OutputObject(RESULT_OBJECT, encoded.result_json, "application/json"))
    pickled = encoded.result_pickle
    if pickled is not None and len(pickled) <= INLINE_PICKLE_MAX_BYTES:
        document["pickle"] = base64.b64encode(pickled).decode("ascii")
    elif pickled is not None:
        document["pickleObject"] = PICKLE_OBJECT
        objects.append(OutputObject(PICKLE_OBJECT, pickled, "application/octet-stream"))
    png = encoded.preview_png
    if png is not None and encoded.preview_kind == "text" and len(png) <= INLINE_PREVIEW_MAX_BYTES:
        document["preview"] = base64.b64encode(png).decode("ascii")
    elif png is not None:
        document["previewObject"] = PREVIEW_OBJECT
        objects.append(OutputObject(PREVIEW_OBJECT, png, "image/png"))
    objects.append(OutputObject(OUTCOME_OBJECT, dumps_document(document), "application/json"))
    return objects


def failure_outcome(messages: list[str], error: JobError) -> OutputObject:
    """``outcome.json`` of a job whose code never ran (its input refused, the worker's own failure):
    the messages and error only, no ``resultRepr``.

    Parameters
    ----------
    messages : list of str
        E.g. ``["InvalidJobInput: The job's input was rejected: ..."]``.
    error : JobError
        Its ``reason`` becomes the job's ``statusReason``.
    """
    document = {"format": OUTCOME_FORMAT, **json.loads(messages_document(messages, error))}
    return OutputObject(OUTCOME_OBJECT, dumps_document(document), "application/json")
