"""What a released child copies from its parents (``functions.domain.parent_inputs``): the patterns
over output names, an array's children's files, the result objects, the copy keys and manifest, and
the per-child limits (sizes only: no bytes are made)."""

from __future__ import annotations

import json

from functions.domain.dependencies import InputsFrom
from functions.domain.parent_inputs import (
    MAX_INPUT_BYTES,
    MAX_INPUT_OBJECTS,
    MAX_OBJECT_BYTES,
    ParentCopies,
    copy_prefix,
    output_name,
    over_limit_reason,
    parent_copies,
    wanted,
)

PARENT = "job-01JAAAAAAAAAAAAAAAAAAAAAAB"
CHILD = "job-01JAAAAAAAAAAAAAAAAAAAAAAC"


def test_output_names_of_a_job_and_of_an_array_child() -> None:
    assert output_name("files/model/weights.pt") == "model/weights.pt"
    assert output_name("3/files/part.csv") == "3/part.csv"
    assert [output_name(k) for k in ("outcome.json", "3/outcome.json", "files/", "x/files/a")] == [None] * 4


def test_the_patterns_choose_output_files_and_the_result_objects_always_come() -> None:
    patterns = ("model/*", "*.csv")
    assert wanted("files/model/w.pt", patterns) and wanted("files/a.csv", patterns)
    assert not wanted("files/notes.txt", patterns)
    assert all(wanted(name, patterns) for name in ("outcome.json", "result.json", "result.pickle"))
    # A preview, an array child's own outcome and messages are no inputs
    assert not any(wanted(k, ()) for k in ("preview.png", "2/outcome.json", "messages.json"))
    # No patterns: every output file; patterns are case-sensitive
    assert wanted("files/any/thing", ()) and not wanted("files/A.CSV", ("*.csv",))


def test_the_copies_keep_their_keys_below_the_childs_prefix_and_the_manifest_lists_them() -> None:
    # Given a parent's objects, one under another job's prefix
    objects = [
        (f"outputs/{PARENT}/outcome.json", 10),
        (f"outputs/{PARENT}/files/b.csv", 2),
        (f"outputs/{PARENT}/files/a.txt", 1),
        (f"outputs/{PARENT}x/files/c.csv", 1),
    ]

    copies = parent_copies(CHILD, InputsFrom(PARENT, ("*.csv",)), objects)

    prefix = f"inputs/{CHILD}/from/{PARENT}/"
    assert copy_prefix(CHILD, PARENT) == prefix
    assert [(c.source, c.target, c.size) for c in copies.copies] == [
        (f"outputs/{PARENT}/files/b.csv", f"{prefix}files/b.csv", 2),
        (f"outputs/{PARENT}/outcome.json", f"{prefix}outcome.json", 10),
    ]
    assert copies.manifest_key == f"{prefix}manifest.json"
    assert json.loads(copies.manifest) == {
        "format": "remote-batch.inputs/1",
        "objects": ["files/b.csv", "outcome.json"],
    }


def _sized(*sizes: int, parent: str = PARENT) -> ParentCopies:
    objects = [(f"outputs/{parent}/files/{i}", size) for i, size in enumerate(sizes)]
    return parent_copies(CHILD, InputsFrom(parent), objects)


def test_the_limits_are_per_child_over_all_its_parents() -> None:
    other = "job-01JAAAAAAAAAAAAAAAAAAAAAAD"
    # At the limits: fine
    assert over_limit_reason([_sized(*[1] * (MAX_INPUT_OBJECTS - 1)), _sized(1, parent=other)]) is None
    assert (
        over_limit_reason([_sized(MAX_INPUT_BYTES // 2), _sized(MAX_INPUT_BYTES // 2, parent=other)]) is None
    )
    # One object more, over both parents
    assert over_limit_reason([_sized(*[1] * MAX_INPUT_OBJECTS), _sized(1, parent=other)]) == (
        f"The inputs from this job's dependencies are more than {MAX_INPUT_OBJECTS} objects "
        "(the most a job copies); narrow inputsFrom's files patterns"
    )
    # One byte more, over both parents
    total = MAX_INPUT_BYTES + 1
    assert over_limit_reason(
        [_sized(MAX_INPUT_BYTES // 2), _sized(MAX_INPUT_BYTES // 2 + 1, parent=other)]
    ) == (
        f"The inputs from this job's dependencies are {total} bytes, over the {MAX_INPUT_BYTES} bytes "
        "(5 GiB) a job copies; narrow inputsFrom's files patterns"
    )
    # One object over what one CopyObject copies: named by its parent
    assert over_limit_reason([_sized(1), _sized(MAX_OBJECT_BYTES + 1, parent=other)]) == (
        f"Dependency {other} has an output of {MAX_OBJECT_BYTES + 1} bytes, over the {MAX_OBJECT_BYTES} "
        "bytes (5 GiB) one input copy may be"
    )
