"""Every relative link in the project's Markdown resolves in a clone: to a file or folder of the
repository and, when it names an ``#anchor``, to a heading of that file.

Anchors are GitHub's heading slugs (lowercased; characters other than letters, digits, ``_``, ``-``
and spaces dropped; spaces made ``-``; a repeated heading gets ``-1``, ``-2``, ...). Links inside
fenced code blocks and code spans are not links; absolute URLs are not checked (no network).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([REPO_ROOT / "README.md", REPO_ROOT / "CHANGELOG.md", *(REPO_ROOT / "docs").glob("*.md")])

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target) and [text](target "title"); images too (the leading ! is irrelevant here).
LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def _prose(text: str) -> str:
    """The text outside fenced code blocks and code spans."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (Markdown emphasis and code marks removed first)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor the headings of ``path`` define, duplicates numbered as GitHub numbers them."""
    seen: Counter[str] = Counter()
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def relative_links(path: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(_prose(path.read_text(encoding="utf-8")))
        if not EXTERNAL.match(target)
    ]


def test_the_documents_exist() -> None:
    names = {path.relative_to(REPO_ROOT).as_posix() for path in DOCUMENTS}
    assert {"README.md", "CHANGELOG.md", "docs/http-api.md", "docs/architecture.md"} <= names


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.relative_to(REPO_ROOT).as_posix())
def test_every_relative_link_resolves(document: Path) -> None:
    broken = []
    for target in relative_links(document):
        file_part, _, anchor = target.partition("#")
        resolved = (document.parent / file_part).resolve() if file_part else document
        if not resolved.is_relative_to(REPO_ROOT) or not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(REPO_ROOT)}")
    assert broken == [], f"{document.relative_to(REPO_ROOT)}: {broken}"


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Changes to version 1", "changes-to-version-1"),
        ("Where a job's requests go", "where-a-jobs-requests-go"),
        ("Submit: `POST /jobs` → `202 Job`", "submit-post-jobs--202-job"),
        ("Python SDK and CLI", "python-sdk-and-cli"),
    ],
)
def test_headings_get_githubs_anchors(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_headings_in_code_blocks_are_not_anchors_and_repeats_are_numbered(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Same\n\n## Same\n\n```sh\n# not a heading\n```\n", encoding="utf-8")

    assert anchors(page) == {"title", "same", "same-1"}


def test_only_relative_links_in_prose_are_checked(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        '[a](other.md#part) [b](https://example.com/x) `[c](in-code.md)` [d](../up.md "title")\n'
        "```\n[e](fenced.md)\n```\n",
        encoding="utf-8",
    )

    assert relative_links(page) == ["other.md#part", "../up.md"]
