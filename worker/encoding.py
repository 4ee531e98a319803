"""Turn an ``Outcome`` into the bytes of the job's output objects.

``result.json`` = ``{"result": <JSON value or null>, "resultRepr": "<repr, at most 10000 chars>"}``;
``result.pickle`` = ``cloudpickle.dumps(result)``; ``messages.json`` = ``{"messages": [...],
"error": null | {"type", "message", "traceback"}}``; ``preview.png`` for a matplotlib Figure result.
Converting, repr-ing and pickling a result runs the user's methods, so every step here is guarded:
a result that cannot be encoded degrades (null, a placeholder repr, a message), never aborts the upload.
"""

from __future__ import annotations

import io
import json
import math
import sys
from dataclasses import asdict, dataclass
from typing import Any

import cloudpickle

from worker.runner import Outcome

#: Longest ``resultRepr``, in characters.
REPR_LIMIT = 10_000
#: Resolution of ``preview.png``, in dots per inch.
PREVIEW_DPI = 100


class NotJSONError(ValueError):
    """The value has no faithful JSON form."""


@dataclass(frozen=True)
class EncodedOutputs:
    """The bodies of the output objects.

    Attributes
    ----------
    result_json : bytes
        ``result.json``, UTF-8.
    result_pickle : bytes or None
        ``result.pickle``; None when the result could not be pickled (a message says so).
    messages_json : bytes
        ``messages.json``, UTF-8.
    preview_png : bytes or None
        ``preview.png``: the Figure as drawn, or the result's repr as text; None for a None result.
    """

    result_json: bytes
    result_pickle: bytes | None
    messages_json: bytes
    preview_png: bytes | None


def encode_outcome(outcome: Outcome) -> EncodedOutputs:
    """Encode every output object of a finished job.

    Parameters
    ----------
    outcome : Outcome
        What the runner returned.

    Returns
    -------
    EncodedOutputs
        Problems met while encoding (unpicklable result, figure that fails to draw) are appended to
        the messages, after the runner's own.
    """
    messages = list(outcome.messages)
    try:
        result_pickle: bytes | None = cloudpickle.dumps(outcome.result)
    except Exception as exc:  # user __reduce__ methods may raise anything
        result_pickle = None
        messages.append(f"result.pickle not written: the result cannot be pickled ({_describe(exc)})")
    try:
        preview_png = render_preview(outcome.result)
    except Exception as exc:
        preview_png = None
        messages.append(f"preview.png not written: the result cannot be drawn ({_describe(exc)})")
    document = {"messages": messages, "error": None if outcome.error is None else asdict(outcome.error)}
    return EncodedOutputs(
        result_json=_dumps(result_document(outcome.result)),
        result_pickle=result_pickle,
        messages_json=_dumps(document),
        preview_png=preview_png,
    )


def result_document(value: Any) -> dict[str, Any]:
    """Return the ``result.json`` document of a result.

    Parameters
    ----------
    value : Any
        The job's result.

    Returns
    -------
    dict
        ``{"result": to_json(value) or None when it has no JSON form, "resultRepr": safe_repr(value)}``.
    """
    try:
        json_value = to_json(value)
    except NotJSONError:
        json_value = None
    return {"result": json_value, "resultRepr": safe_repr(value)}


def to_json(value: Any) -> Any:
    """Convert a result to the JSON value it stands for, exactly or not at all.

    ``None``, bools, ints, finite floats, strings, lists, tuples (as lists) and dicts with string keys
    convert, recursively; so do numpy scalars (``.item()``) and arrays (``.tolist()``). Anything else
    (sets, NaN and infinities, non-string dict keys, cycles, other objects) has no faithful JSON form.

    Parameters
    ----------
    value : Any
        The result.

    Returns
    -------
    Any
        A value made only of JSON types, which ``json.dumps(..., allow_nan=False)`` accepts.

    Raises
    ------
    NotJSONError
        The value, or something inside it, has no faithful JSON form.
    """
    try:
        return _to_json(value, set())
    except RecursionError as exc:
        raise NotJSONError("nested too deeply") from exc


def _to_json(value: Any, open_containers: set[int]) -> Any:
    if value is None or type(value) is bool:
        return value
    if isinstance(value, str | int | float):
        return _number_or_string(value)
    if isinstance(value, list | tuple | dict):
        if id(value) in open_containers:
            raise NotJSONError("a container that contains itself is not JSON")
        open_containers.add(id(value))
        try:
            if isinstance(value, dict):
                if not all(isinstance(key, str) for key in value):
                    raise NotJSONError("dict keys must be strings")
                return {str.__str__(key): _to_json(item, open_containers) for key, item in value.items()}
            return [_to_json(item, open_containers) for item in value]
        finally:
            open_containers.discard(id(value))
    numpy = sys.modules.get("numpy")  # only a result made with numpy can hold numpy values
    if numpy is not None and isinstance(value, numpy.ndarray):
        return _to_json(value.tolist(), open_containers)
    if numpy is not None and isinstance(value, numpy.generic):
        return _to_json(value.item(), open_containers)
    raise NotJSONError(f"{type(value).__name__} is not JSON")


def _number_or_string(value: str | int | float) -> str | int | float:
    # Unbound base-class methods: a subclass's __str__/__int__/__float__ overrides are not called.
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # bool was handled by the caller: only int and its subclasses here
        return int.__int__(value)
    number = float.__float__(value)
    if not math.isfinite(number):
        raise NotJSONError("NaN and infinities are not JSON")
    return number


def safe_repr(value: Any) -> str:
    """Return ``repr(value)``, at most ``REPR_LIMIT`` characters, even when ``__repr__`` raises.

    Parameters
    ----------
    value : Any
        The result.

    Returns
    -------
    str
        The repr, cut to 9999 characters plus ``…`` when longer than 10000 characters.
    """
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<{type(value).__name__} object; repr() failed: {_describe(exc)}>"
    if len(text) > REPR_LIMIT:
        text = text[: REPR_LIMIT - 1] + "…"
    return text


def render_preview(value: Any) -> bytes | None:
    """Draw the result as PNG (API.md ``OutputPreviewImage``): a matplotlib Figure as drawn, anything
    else but None as its repr, rendered as text.

    Parameters
    ----------
    value : Any
        The result.

    Returns
    -------
    bytes or None
        The PNG (a Figure at ``PREVIEW_DPI`` dots per inch), or None for a None result.
    """
    if value is None:
        return None
    figure_module = sys.modules.get("matplotlib.figure")  # a Figure result means matplotlib is loaded
    if figure_module is not None and isinstance(value, figure_module.Figure):
        buffer = io.BytesIO()
        value.savefig(buffer, format="png", dpi=PREVIEW_DPI)
        return buffer.getvalue()
    return render_text_preview(safe_repr(value))


#: A text preview shows at most this many lines of this many characters.
PREVIEW_LINES = 40
PREVIEW_COLUMNS = 100


def render_text_preview(text: str) -> bytes:
    """``text`` (a repr) drawn in Pillow's built-in font, black on white, wrapped and cut to
    ``PREVIEW_LINES`` × ``PREVIEW_COLUMNS`` characters."""
    from PIL import Image, ImageDraw, ImageFont

    lines: list[str] = []
    for raw in text.splitlines() or [""]:
        lines += [raw[i : i + PREVIEW_COLUMNS] for i in range(0, max(len(raw), 1), PREVIEW_COLUMNS)]
    if len(lines) > PREVIEW_LINES:
        lines = [*lines[: PREVIEW_LINES - 1], "…"]
    font = ImageFont.load_default()
    left, top, right, bottom = font.getbbox("M")
    char_w, line_h = int(max(right - left, 6)), int(max(bottom - top, 11)) + 4
    width = 16 + char_w * max(len(line) for line in lines)
    height = 16 + line_h * len(lines)
    image = Image.new("RGB", (max(width, 64), max(height, 32)), "white")
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(lines):
        draw.text((8, 8 + row * line_h), line.encode("ascii", "replace").decode(), fill="black", font=font)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _dumps(document: dict[str, Any]) -> bytes:
    # A lone surrogate (only possible inside a string) becomes the JSON escape \udXXX: valid UTF-8 always.
    return json.dumps(document, ensure_ascii=False, allow_nan=False).encode("utf-8", "backslashreplace")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
