"""pip requirements files read into an environment's spec (``remote-batch env create -r FILE``,
``Environment.from_requirements_file``).

The file is read as pip reads it (pip's own parser, as ``pip-requirements-parser`` packages it):
comments (``#`` at a line's start or after a space), blank lines, ``\\`` continuations, the encoding
(a byte-order mark or a ``# -*- coding`` line), ``-r``/``--requirement`` includes relative to the file
that names them, and option lines. What an environment's spec holds is taken:

- requirement lines (PEP 508: ``numpy>=2``, ``six==1.16.0; python_version >= "3.8"``, ``pkg @ https://...``;
  a bare ``https://.../pkg-1.0-py3-none-any.whl`` becomes ``pkg @ https://...``);
- ``-i``/``--index-url`` (the last one wins, as in pip) and ``--extra-index-url``.

What the service could not honour is refused, naming the file and line (``RequirementsFileError``),
never dropped: constraints files (``-c``), editables (``-e``), local paths and ``file:`` URLs (the
service cannot read this machine's files), ``--find-links``, per-requirement options (``--hash``,
``--global-option``), other pip options (``--pre``, ``--no-binary``, ``--trusted-host`` ...), an include
that includes itself, and ``${VARIABLE}`` references (pip expands them from this machine's environment;
the spec is stored and shown to every member of the account, so a token does not belong in it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pip_requirements_parser import InstallRequirement

#: pip's environment variable references (``pip._internal.req.req_file.ENV_VAR_RE``).
_ENV_VARIABLE = re.compile(r"\$\{[A-Z0-9_]+\}")
#: The pip options refused with their own advice: (what it is, what to do instead).
_REFUSED_OPTIONS = {
    "constraints": ("a constraints file", "put its pins in the requirements instead"),
    "find_links": (
        "--find-links",
        "the service cannot read this machine's folders; serve the wheels from an index (--extra-index-url)",
    ),
}
#: What every other refused option's message says environments take instead.
_TAKEN = "they take requirement lines, -r, --index-url and --extra-index-url"
#: pip-requirements-parser's prefix of a line that is no requirement (``Invalid requirement: : ...``).
_INVALID_PREFIX = re.compile(r"^Invalid requirement:[\s:]*")


class RequirementsFileError(ValueError):
    """A requirements file, or one line of it, that cannot become an environment's spec.

    Attributes
    ----------
    path : Path
        The file (an included one when the line is there).
    line : int | None
        The line number (1-based), or None for the file as a whole (missing, unreadable, a cycle).
    reason : str
        What is wrong and what to do instead.
    """

    def __init__(self, path: Path, line: int | None, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {reason}")


@dataclass
class Requirements:
    """What a requirements file asks for: ``requirements`` (PEP 508 lines, in the file's order with its
    includes in place), where each came from (``origins``: ``"requirements.txt, line 4"``, for messages
    about a line the service refuses), ``index_url`` and ``extra_index_urls``."""

    requirements: list[str] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)


def read_requirements(path: Path) -> Requirements:
    """The spec's part of the requirements file ``path`` and of the files it includes.

    Raises ``RequirementsFileError`` naming the file and line of the first line that cannot be taken
    (see the module's docstring), or the file when it cannot be read."""
    found = Requirements()
    _read(path, (), found)
    return found


def _read(path: Path, including: tuple[Path, ...], found: Requirements) -> None:
    # pip's parser is imported when a file is read: it takes longer to import than the rest of the SDK.
    from pip_requirements_parser import (
        CommentRequirementLine,
        InstallationError,
        InstallRequirement,
        InvalidRequirementLine,
        OptionLine,
        RequirementsFile,
    )

    resolved = path.resolve()
    if resolved in including:
        chain = " -> ".join(str(p) for p in (*including, resolved))
        raise RequirementsFileError(path, None, f"it includes itself ({chain})")
    if not path.is_file():
        raise RequirementsFileError(path, None, "not a file" if path.exists() else "no such file")
    try:
        lines = list(RequirementsFile.parse(str(path), include_nested=False))
    except (InstallationError, OSError, UnicodeDecodeError) as exc:
        raise RequirementsFileError(path, None, f"cannot be read ({exc})") from None
    for item in lines:
        if isinstance(item, CommentRequirementLine):
            continue
        number = item.line_number
        if _ENV_VARIABLE.search(item.line or ""):
            raise RequirementsFileError(
                path,
                number,
                "${VARIABLE} references are not expanded: the spec is stored and shown to every member "
                "of the account; write the value itself (an index that needs no secret)",
            )
        if isinstance(item, InvalidRequirementLine):
            raise RequirementsFileError(path, number, _not_a_requirement(item.line, item.error_message))
        if isinstance(item, OptionLine):
            _take_options(path, number, item.options, (*including, resolved), found)
        elif isinstance(item, InstallRequirement):
            found.requirements.append(_requirement(path, number, item))
            found.origins.append(f"{path}, line {number}")


def _not_a_requirement(line: str | None, message: str | None) -> str:
    """``'six==' is not a requirement (PEP 508): Expected ...``: the parser's first line without its
    prefix (the lines after it repeat the line with a caret)."""
    lines = [text.strip() for text in (message or "").splitlines() if text.strip()]
    why = _INVALID_PREFIX.sub("", lines[0]) if lines else ""
    shown = (line or "").strip()[:200]
    return f"{shown!r} is not a requirement (PEP 508)" + (f": {why}" if why else "")


def _take_options(
    path: Path, number: int, options: dict[str, Any], including: tuple[Path, ...], found: Requirements
) -> None:
    from pip_requirements_parser import OPT_BY_OPTIONS_DEST

    for name, value in options.items():
        if name == "requirements":
            for included in value:
                _read(path.parent / included, including, found)
        elif name == "index_url":
            found.index_url = str(value)
        elif name == "extra_index_urls":
            found.extra_index_urls += [str(url) for url in value]
        else:
            flag = OPT_BY_OPTIONS_DEST.get(name, f"--{name.replace('_', '-')}")
            what, instead = _REFUSED_OPTIONS.get(name, (f"the pip option {flag}", _TAKEN))
            if name == "constraints":  # the files it names, which are not read
                what = f"a constraints file (-c {' '.join(map(str, value))})"
            raise RequirementsFileError(path, number, f"{what} is not taken by environments: {instead}")


def _requirement(path: Path, number: int, item: InstallRequirement) -> str:
    """The PEP 508 line of a parsed requirement, or ``RequirementsFileError`` for one the service
    cannot install from its spec."""
    if item.is_editable:
        raise RequirementsFileError(
            path,
            number,
            "an editable (-e) requirement is not taken: environments install from indexes (drop -e)",
        )
    if item.hash_options or item.global_options or item.install_options:
        raise RequirementsFileError(
            path,
            number,
            "per-requirement options (--hash, --global-option) are not taken: the service resolves the "
            "requirements to its own lock",
        )
    link = item.link
    requirement = item.req
    if requirement is None or (link is not None and link.scheme not in ("http", "https")):
        raise RequirementsFileError(
            path,
            number,
            f"{item.line!r} is not on a package index: the service cannot read this machine's files "
            "(publish it to an index, or write NAME @ https://URL)",
        )
    text = str(requirement)
    if link is not None and not requirement.url:  # a bare URL: its name and version came from the file name
        text = f"{requirement.name} @ {link.url}"
    if item.marker is not None and requirement.marker is None:
        text += f"; {item.marker}"
    return text
