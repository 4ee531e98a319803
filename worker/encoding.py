"""Turn an ``Outcome`` into the bytes of the job's output objects.

The parts: the result's JSON document ``{"result": <JSON value or null>, "resultRepr": "<repr, at
most 10000 chars>"}``; its pickle ``cloudpickle.dumps(result)``; the messages document ``{"messages":
[...], "error": null | {"type", "message", "traceback"[, "reason"]}}``; a PNG preview: a matplotlib
Figure or a PIL image as drawn (an *image* preview), the repr drawn as text for anything else (a *text*
preview). ``worker.layout`` packs these parts into the job's output objects.

Converting, repr-ing and pickling a result runs the user's methods (``__repr__``, ``__reduce__``,
``__iter__``, ``__len__``, ``__eq__``, a ``__class__`` property...), which may raise anything, loop
through a cycle, nest deeper than the C stack allows, or need more memory than is left. So every step
is guarded against any ``BaseException`` and runs under the interpreter's default limits (the user's
code may have changed them): a result that cannot be encoded degrades to ``null``, a bounded
placeholder repr and a line in ``messages``; it never fails a job whose code succeeded.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import cloudpickle

from worker.runner import JobError, Outcome, describe_exception, job_side_pickler

#: Longest ``resultRepr``, in characters.
REPR_LIMIT = 10_000
#: Resolution of ``preview.png``, in dots per inch.
PREVIEW_DPI = 100
#: Largest ``result.json`` with a JSON value, in bytes (UTF-8). A result whose JSON form is bigger is
#: stored as ``null`` with its repr and a message; ``result.pickle`` still holds it.
RESULT_JSON_MAX_BYTES = 64 * 1024 * 1024
#: Longest single message and ``error.message`` kept in ``messages.json``, in characters; the
#: traceback keeps at most ``TRACEBACK_LIMIT`` characters (its first and last lines). The whole
#: ``messages.json`` stays well under the 1 MiB the service reads the error from.
MESSAGE_LIMIT = 8_000
TRACEBACK_LIMIT = 64_000
#: The interpreter limits the encoding runs under: CPython 3.11's defaults. A result encoded under
#: a raised limit could take minutes to format (int → str is quadratic) or overflow the C stack.
INT_MAX_STR_DIGITS = 4300
RECURSION_LIMIT = 1000
#: Above this many bits, an int's digit count is computed exactly only when it is not next to a
#: power of ten (the exact test would compute a number as large as the result itself).
EXACT_DIGITS_MAX_BITS = 1 << 20


class NotJSONError(ValueError):
    """The value has no faithful JSON form."""


#: What a preview shows: the result drawn (a plot, an image) or its repr rendered as text.
PreviewKind = Literal["image", "text"]


@dataclass(frozen=True)
class EncodedOutputs:
    """The encoded parts of a finished job's outcome (``worker.layout`` packs them into objects).

    Attributes
    ----------
    result_json : bytes
        The result's document ``{"result", "resultRepr"}``, UTF-8, always valid JSON (no NaN or
        Infinity).
    result_pickle : bytes or None
        The result's cloudpickle; None when the result could not be pickled (a message says so).
    messages_json : bytes
        The messages document ``{"messages", "error"}``, UTF-8, always valid JSON.
    preview_png : bytes or None
        The PNG preview: the Figure or image as drawn, or the result's repr as text; None for a None
        result.
    preview_kind : {"image", "text"} or None
        ``"image"`` when the preview is the result itself drawn (a Figure, a PIL image), ``"text"``
        when it is the repr rendered as text; None with no preview.
    result_repr : str
        The ``resultRepr`` inside ``result_json`` (at most ``REPR_LIMIT`` characters).
    """

    result_json: bytes
    result_pickle: bytes | None
    messages_json: bytes
    preview_png: bytes | None
    preview_kind: PreviewKind | None = None
    result_repr: str = "None"


@dataclass(frozen=True)
class EncodedResult:
    """The encoded parts of a job's result (its outcome's messages and error aside).

    Attributes
    ----------
    result_json, result_pickle, preview_png, preview_kind, result_repr
        As in ``EncodedOutputs``.
    messages : list of str
        The problems met while encoding (no pickle, no JSON form, no preview), one sentence each.
    """

    result_json: bytes
    result_pickle: bytes | None
    preview_png: bytes | None
    preview_kind: PreviewKind | None
    result_repr: str
    messages: list[str]

    def with_messages(self, messages: list[str], error: JobError | None) -> EncodedOutputs:
        """The job's outputs: ``messages`` (the runner's, then any notes), this encoding's own
        problems after them, and ``error``, as the bounded messages document."""
        return EncodedOutputs(
            result_json=self.result_json,
            result_pickle=self.result_pickle,
            messages_json=messages_document([*messages, *self.messages], error),
            preview_png=self.preview_png,
            preview_kind=self.preview_kind,
            result_repr=self.result_repr,
        )


def encode_result(value: Any) -> EncodedResult:
    """Encode a result (its pickle, preview, repr and JSON document). Never raises for anything the
    value does; what could not be encoded is said in ``messages``."""
    messages: list[str] = []
    with default_interpreter_limits():
        result_pickle = _pickle_result(value, messages)
        preview = _preview(value, messages)
        result_repr = safe_repr(value)
        result_json = _result_json(value, result_repr, messages)
    return EncodedResult(
        result_json=result_json,
        result_pickle=result_pickle,
        preview_png=None if preview is None else preview[0],
        preview_kind=None if preview is None else preview[1],
        result_repr=result_repr,
        messages=messages,
    )


def encode_outcome(outcome: Outcome, notes: list[str] | None = None) -> EncodedOutputs:
    """Encode every output object of a finished job. Never raises for anything the result does.

    Parameters
    ----------
    outcome : Outcome
        What the runner returned.
    notes : list of str or None
        More messages to record after the runner's (e.g. output files that were not uploaded).

    Returns
    -------
    EncodedOutputs
        Problems met while encoding (a result with no pickle, no JSON form or no preview) are
        appended to the messages, after the runner's own and ``notes``.
    """
    encoded = encode_result(outcome.result)
    with default_interpreter_limits():
        return encoded.with_messages([*outcome.messages, *(notes or [])], outcome.error)


def messages_document(messages: list[str], error: JobError | None) -> bytes:
    """Return the body of ``messages.json``: each message and the error's text bounded.

    Parameters
    ----------
    messages : list of str
        The messages, in order; each longer than ``MESSAGE_LIMIT`` characters is cut in its middle.
    error : JobError or None
        The failure; its ``message`` is cut to ``MESSAGE_LIMIT``, its ``traceback`` to
        ``TRACEBACK_LIMIT`` characters, its ``reason`` (when set) to one line.

    Returns
    -------
    bytes
        ``{"messages": [...], "error": null | {"type", "message", "traceback"[, "reason"][, "signal"]}}`` as
        UTF-8.
    """
    document: dict[str, Any] = {"messages": [_cut(str(m), MESSAGE_LIMIT) for m in messages], "error": None}
    if error is not None:
        document["error"] = {
            "type": _cut(error.type, 200),
            "message": _cut(error.message, MESSAGE_LIMIT),
            "traceback": _cut(error.traceback, TRACEBACK_LIMIT),
        }
        if error.reason:
            document["error"]["reason"] = _cut(" ".join(error.reason.split()), 1000)
        if error.signal is not None:
            document["error"]["signal"] = error.signal
    return dumps_document(document)


def _pickle_result(value: Any, messages: list[str]) -> bytes | None:
    try:
        with job_side_pickler():
            pickled: bytes = cloudpickle.dumps(value)  # cloudpickle ships no type information
        return pickled
    except BaseException as exc:  # user __reduce__/__getstate__ may raise anything, even SystemExit
        messages.append(
            f"result.pickle not written: the result cannot be pickled ({describe_exception(exc)})"
        )
        return None


def _preview(value: Any, messages: list[str]) -> tuple[bytes, PreviewKind] | None:
    try:
        return draw_preview(value)
    except BaseException as exc:
        messages.append(f"preview.png not written: the result cannot be drawn ({describe_exception(exc)})")
        return None


def _result_json(value: Any, result_repr: str, messages: list[str]) -> bytes:
    try:
        body = dumps_document({"result": to_json(value), "resultRepr": result_repr})
    except NotJSONError as exc:
        if exc.args and exc.args[0] == _TOO_BIG:
            messages.append(f"result.json holds no JSON value: {_TOO_BIG} (result.pickle has the result)")
        return dumps_document({"result": None, "resultRepr": result_repr})
    except BaseException as exc:  # the result's own methods raised while it was converted
        messages.append(
            f"result.json holds no JSON value: converting the result failed ({describe_exception(exc)})"
        )
        return dumps_document({"result": None, "resultRepr": result_repr})
    if len(body) > RESULT_JSON_MAX_BYTES:
        messages.append(f"result.json holds no JSON value: {_TOO_BIG} (result.pickle has the result)")
        return dumps_document({"result": None, "resultRepr": result_repr})
    return body


_TOO_BIG = f"its JSON form is over {RESULT_JSON_MAX_BYTES // (1024 * 1024)} MiB"


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
    with default_interpreter_limits():
        try:
            json_value = to_json(value)
        except BaseException:
            json_value = None
        return {"result": json_value, "resultRepr": safe_repr(value)}


def to_json(value: Any) -> Any:
    """Convert a result to the JSON value it stands for, exactly or not at all.

    ``None``, bools, ints of at most ``INT_MAX_STR_DIGITS`` digits, finite floats, strings, lists,
    tuples (as lists) and dicts with string keys convert, recursively; so do numpy scalars
    (``.item()``) and arrays (``.tolist()``). Anything else (sets, NaN and infinities, longer ints,
    non-string dict keys, cycles, other objects) has no faithful JSON form.

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
        The value, or something inside it, has no faithful JSON form, or its JSON form would be
        over ``RESULT_JSON_MAX_BYTES``.
    Exception
        Whatever the value's own methods raise while it is walked (``__iter__``, ``__class__``...).
    """
    budget = [RESULT_JSON_MAX_BYTES]
    try:
        return _to_json(value, set(), budget)
    except RecursionError as exc:
        raise NotJSONError("nested too deeply") from exc


def _spend(budget: list[int], size: int) -> None:
    budget[0] -= size
    if budget[0] < 0:
        raise NotJSONError(_TOO_BIG)


def _to_json(value: Any, open_containers: set[int], budget: list[int]) -> Any:
    # The budget counts a lower bound of each value's JSON size (the real size is checked at the end):
    # it stops the walk of a result far too big, never one that fits.
    if value is None or type(value) is bool:
        _spend(budget, 4)
        return value
    if isinstance(value, (str, int, float)):
        number = _number_or_string(value)
        if isinstance(number, str):
            _spend(budget, len(number) + 2)
        elif isinstance(number, int):
            _spend(budget, int(number.bit_length() * 0.30103) + 1)
        else:
            _spend(budget, 3)
        return number
    if isinstance(value, (list, tuple, dict)):
        if id(value) in open_containers:
            raise NotJSONError("a container that contains itself is not JSON")
        open_containers.add(id(value))
        _spend(budget, 2)
        try:
            return _container_to_json(value, open_containers, budget)
        finally:
            open_containers.discard(id(value))
    numpy = sys.modules.get("numpy")  # only a result made with numpy can hold numpy values
    if numpy is not None and isinstance(value, numpy.ndarray):
        _spend(budget, int(value.size) * 2)  # "0," each, before .tolist() builds an object per element
        return _to_json(value.tolist(), open_containers, budget)
    if numpy is not None and isinstance(value, numpy.generic):
        return _to_json(value.item(), open_containers, budget)
    raise NotJSONError(f"{type(value).__name__} is not JSON")


def _container_to_json(
    value: list[Any] | tuple[Any, ...] | dict[Any, Any], open_containers: set[int], budget: list[int]
) -> Any:
    # The base classes' own iteration: a subclass's __iter__/items() overrides are not called.
    if isinstance(value, dict):
        converted: dict[str, Any] = {}
        for key, item in dict.items(value):
            if not isinstance(key, str):
                raise NotJSONError("dict keys must be strings")
            _spend(budget, len(key) + 4)  # "key":,
            converted[str.__str__(key)] = _to_json(item, open_containers, budget)
        return converted
    items = list.__iter__(value) if isinstance(value, list) else tuple.__iter__(value)
    converted_items = []
    for item in items:
        _spend(budget, 1)  # the comma
        converted_items.append(_to_json(item, open_containers, budget))
    return converted_items


def _number_or_string(value: str | int | float) -> str | int | float:
    # Unbound base-class methods: a subclass's __str__/__int__/__float__ overrides are not called.
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # bool was handled by the caller: only int and its subclasses here
        number = int.__int__(value)
        if _exceeds_str_digits(number):
            raise NotJSONError(f"an int over {INT_MAX_STR_DIGITS} digits is not written as JSON")
        return number
    real = float.__float__(value)
    if not math.isfinite(real):
        raise NotJSONError("NaN and infinities are not JSON")
    return real


_BIG: int = 10**INT_MAX_STR_DIGITS


def _exceeds_str_digits(number: int) -> bool:
    return number >= _BIG or number <= -_BIG


def decimal_digits(number: int) -> tuple[int, bool]:
    """Count an int's decimal digits without converting it to a string.

    Parameters
    ----------
    number : int
        Any int (the sign is ignored).

    Returns
    -------
    tuple of (int, bool)
        The digit count, and True when it is exact (False: it may be one too many, only for ints
        over ``EXACT_DIGITS_MAX_BITS`` bits that lie next to a power of ten).
    """
    number = abs(int.__int__(number))
    if number < 10:
        return 1, True
    log = math.log10(number)  # exact to ~1e-16 relative: only near a power of ten is floor() unsure
    nearest = round(log)
    if abs(log - nearest) > max(1e-9, log * 1e-13):
        return math.floor(log) + 1, True
    if number.bit_length() > EXACT_DIGITS_MAX_BITS:
        return nearest + 1, False
    return (nearest + 1 if number >= 10**nearest else nearest), True


def _int_placeholder(value: int) -> str:
    digits, exact = decimal_digits(value)
    count = f"{digits}" if exact else f"about {digits}"
    sign = "negative " if int.__int__(value) < 0 else ""
    return f"<{sign}{type(value).__name__} with {count} digits>"


def safe_repr(value: Any, limit: int = REPR_LIMIT) -> str:
    """Return ``repr(value)`` cut to ``limit`` characters, whatever the value does.

    Built-in containers (list, tuple, dict, set, frozenset) are written piece by piece, iteratively,
    and stop once ``limit`` characters exist, so a huge, deeply nested or self-referencing result
    costs at most about ``limit`` pieces (a cycle shows as ``[...]``, as ``repr`` shows it). Each
    other object is ``repr()``-ed on its own; an int too long to format shows as
    ``<int with 5001 digits>``; a repr that raises shows as
    ``<Type object; repr() failed: Error: text>``.

    Parameters
    ----------
    value : Any
        The result.
    limit : int
        The most characters returned.

    Returns
    -------
    str
        The repr; when longer than ``limit``, its first ``limit - 1`` characters plus ``…``.
    """
    with default_interpreter_limits():
        try:
            text = _bounded_repr(value, limit)
        except BaseException as exc:  # a container changed while it was walked, and the like
            text = _repr_failed(value, exc)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


class _Value:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


_CYCLE_MARKERS: dict[type, str] = {
    list: "[...]",
    tuple: "(...)",
    dict: "{...}",
    set: "set(...)",
    frozenset: "frozenset(...)",
}
_BRACKETS: dict[type, tuple[str, str]] = {list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}")}


def _bounded_repr(value: Any, limit: int) -> str:
    pieces: list[str] = []
    size = 0
    open_containers: set[int] = set()
    stack: list[tuple[Iterator[str | _Value], int | None]] = [(iter((_Value(value),)), None)]
    while stack and size <= limit:
        parts, container_id = stack[-1]
        piece = next(parts, None)
        if piece is None:
            stack.pop()
            if container_id is not None:
                open_containers.discard(container_id)
            continue
        if isinstance(piece, str):
            text = piece
        else:
            item = piece.value
            kind = type(item)
            if kind in _CYCLE_MARKERS:
                if id(item) in open_containers:
                    text = _CYCLE_MARKERS[kind]
                else:
                    open_containers.add(id(item))
                    stack.append((_container_parts(item), id(item)))
                    continue
            else:
                text = _scalar_repr(item, limit - size)
        pieces.append(text)
        size += len(text)
    return "".join(pieces)


def _container_parts(container: Any) -> Iterator[str | _Value]:
    kind = type(container)
    if kind is dict:
        yield "{"
        for index, (key, item) in enumerate(dict.items(container)):
            if index:
                yield ", "
            yield _Value(key)
            yield ": "
            yield _Value(item)
        yield "}"
        return
    if kind in (set, frozenset) and not container:
        yield f"{kind.__name__}()"
        return
    opening, closing = _BRACKETS.get(kind, ("frozenset({", "})"))
    yield opening
    count = 0
    for count, item in enumerate(container, start=1):
        if count > 1:
            yield ", "
        yield _Value(item)
    if kind is tuple and count == 1:
        yield ","
    yield closing


def _scalar_repr(value: Any, room: int) -> str:
    kind = type(value)
    if kind is int:
        return _int_placeholder(value) if _exceeds_str_digits(value) else int.__repr__(value)
    if kind in (str, bytes, bytearray) and len(value) > room + 2:
        return repr(value[: max(room, 0) + 2])  # cut anyway: never format a gigabyte to keep 10 kB
    try:
        return repr(value)
    except BaseException as exc:
        return _repr_failed(value, exc)


def _repr_failed(value: Any, exc: BaseException) -> str:
    kind = type(value)
    if isinstance(value, int) and not isinstance(value, bool):
        with contextlib.suppress(BaseException):
            if _exceeds_str_digits(int.__int__(value)):
                return _int_placeholder(value)
    return f"<{kind.__name__} object; repr() failed: {describe_exception(exc)}>"


@contextlib.contextmanager
def default_interpreter_limits() -> Iterator[None]:
    """Run a block under CPython's default int → str digit limit and recursion limit, then restore
    what the user's code set (it runs in this process and may have changed either)."""
    # An image's Python 3.9 before 3.9.14 has no digit limit at all (nothing to set or restore).
    get_digits = getattr(sys, "get_int_max_str_digits", None)
    set_digits = getattr(sys, "set_int_max_str_digits", None)
    digits = get_digits() if get_digits is not None else None
    recursion = sys.getrecursionlimit()
    if set_digits is not None:
        set_digits(INT_MAX_STR_DIGITS)
    with contextlib.suppress(RecursionError):  # only when the stack is already deeper than the limit
        sys.setrecursionlimit(RECURSION_LIMIT)
    try:
        yield
    finally:
        if set_digits is not None and digits is not None:
            set_digits(digits)
        sys.setrecursionlimit(recursion)


def render_preview(value: Any) -> bytes | None:
    """Draw the result as PNG (docs/http-api.md ``OutputPreviewImage``): a matplotlib Figure or a PIL image as
    drawn, anything else but None as its repr, rendered as text.

    Parameters
    ----------
    value : Any
        The result.

    Returns
    -------
    bytes or None
        The PNG (a Figure at ``PREVIEW_DPI`` dots per inch), or None for a None result.
    """
    drawn = draw_preview(value)
    return None if drawn is None else drawn[0]


def draw_preview(value: Any) -> tuple[bytes, PreviewKind] | None:
    """``render_preview``'s PNG and what it shows: ``"image"`` for a matplotlib Figure (drawn at
    ``PREVIEW_DPI``) or a PIL image (its pixels; a mode PNG cannot hold is converted to RGBA),
    ``"text"`` for the repr of anything else; None for a None result.

    Raises whatever the value's own methods raise while it is drawn (``encode_outcome`` guards it).
    """
    if value is None:
        return None
    figure_module = sys.modules.get("matplotlib.figure")  # a Figure result means matplotlib is loaded
    if figure_module is not None and isinstance(value, figure_module.Figure):
        buffer = io.BytesIO()
        value.savefig(buffer, format="png", dpi=PREVIEW_DPI)
        return buffer.getvalue(), "image"
    image_module = sys.modules.get("PIL.Image")  # likewise for a PIL image
    if image_module is not None and isinstance(value, image_module.Image):
        image = value if value.mode in _PNG_MODES else value.convert("RGBA")
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return buffer.getvalue(), "image"
    return render_text_preview(safe_repr(value)), "text"


#: The PIL image modes PNG stores as they are (Pillow's PNG plugin); others are converted to RGBA.
_PNG_MODES = frozenset({"1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"})


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


def dumps_document(document: dict[str, Any]) -> bytes:
    """``document`` as compact-enough UTF-8 JSON (non-ASCII kept, no NaN or Infinity: raises
    ``ValueError`` for them). A lone surrogate (only possible inside a string) becomes the JSON
    escape ``\\udXXX``, so the bytes are always valid UTF-8 and load back to the same string."""
    return json.dumps(document, ensure_ascii=False, allow_nan=False).encode("utf-8", "backslashreplace")


def _cut(text: str, limit: int) -> str:
    """``text`` when it has at most ``limit`` characters, else its start and end around a marker."""
    if len(text) <= limit:
        return text
    marker = f"\n… {len(text) - limit} characters cut …\n"
    head = (limit - len(marker)) // 4
    return text[:head] + marker + text[len(text) - (limit - len(marker) - head) :]
