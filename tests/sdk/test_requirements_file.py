"""pip requirements files read into an environment's spec: what pip reads is taken, what the service
could not honour is refused naming the file and the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_batch.requirements_file import RequirementsFileError, read_requirements


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_comments_blank_lines_continuations_markers_and_extras_are_read_as_pip_reads_them(tmp_path):
    path = write(
        tmp_path / "requirements.txt",
        "# the model's packages\n"
        "\n"
        "scikit-learn==1.9.1   # pinned\n"
        "numpy>=2,\\\n"
        "  <3\n"
        'six == 1.16.0 ; python_version >= "3.8"\n'
        "Requests[socks]>=2.31\n",
    )

    found = read_requirements(path)

    assert found.requirements == [
        "scikit-learn==1.9.1",
        "numpy<3,>=2",
        'six==1.16.0; python_version >= "3.8"',
        "Requests[socks]>=2.31",
    ]
    assert found.origins == [f"{path}, line {n}" for n in (3, 4, 6, 7)]
    assert found.index_url is None and found.extra_index_urls == []


def test_includes_are_relative_to_the_file_that_names_them_and_keep_their_place(tmp_path):
    write(tmp_path / "shared" / "base.txt", "six==1.16.0\n-r ../more/extra.txt\n")
    write(tmp_path / "more" / "extra.txt", "attrs==24.2.0\n")
    top = write(tmp_path / "app" / "requirements.txt", "numpy==2.1.3\n-r ../shared/base.txt\nrich\n")

    found = read_requirements(top)

    assert found.requirements == ["numpy==2.1.3", "six==1.16.0", "attrs==24.2.0", "rich"]
    assert found.origins[2].endswith("extra.txt, line 1")


def test_index_lines_are_taken_the_last_index_url_winning_as_in_pip(tmp_path):
    path = write(
        tmp_path / "r.txt",
        "--index-url https://first.example/simple\n"
        "-i https://mirror.example/simple\n"
        "--extra-index-url https://extra.example/simple\n"
        "--extra-index-url=https://more.example/simple\n"
        "six\n",
    )

    found = read_requirements(path)

    assert found.index_url == "https://mirror.example/simple"
    assert found.extra_index_urls == ["https://extra.example/simple", "https://more.example/simple"]
    assert found.requirements == ["six"]


def test_urls_go_as_pep_508_name_at_url(tmp_path):
    path = write(
        tmp_path / "r.txt",
        "tiny @ https://files.example/tiny-1.0-py3-none-any.whl\n"
        "https://files.example/other-2.0-py3-none-any.whl\n",
    )

    assert read_requirements(path).requirements == [
        "tiny @ https://files.example/tiny-1.0-py3-none-any.whl",
        "other @ https://files.example/other-2.0-py3-none-any.whl",
    ]


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        (
            "six\nnot a requirement at all\n",
            2,
            "'not a requirement at all' is not a requirement (PEP 508): Expected semicolon",
        ),
        (
            "-c constraints.txt\n",
            1,
            "a constraints file (-c constraints.txt) is not taken by environments: put its pins in the "
            "requirements instead",
        ),
        ("-e git+https://example.com/x.git#egg=x\n", 1, "an editable (-e) requirement is not taken"),
        ("./packages/mine/\n", 1, "is not on a package index"),
        ("mine @ file:///home/me/mine-1.0-py3-none-any.whl\n", 1, "is not on a package index"),
        ("--find-links ./wheels\nsix\n", 1, "--find-links"),
        ("six==1.16.0 --hash=sha256:" + "0" * 64 + "\n", 1, "per-requirement options (--hash"),
        ("--pre\nsix\n", 1, "the pip option --pre is not taken by environments: they take requirement"),
        ("--trusted-host mirror.example\n", 1, "the pip option --trusted-host is not taken"),
        ("six\n--index-url https://${TOKEN}@mirror.example/simple\n", 2, "${VARIABLE} references"),
    ],
)
def test_what_the_service_could_not_honour_is_refused_naming_the_file_and_line(tmp_path, text, line, says):
    path = write(tmp_path / "requirements.txt", text)

    with pytest.raises(RequirementsFileError) as caught:
        read_requirements(path)

    assert caught.value.path == path
    assert caught.value.line == line
    assert str(caught.value).startswith(f"{path}, line {line}: ")
    assert says in caught.value.reason


def test_a_missing_include_names_the_missing_file(tmp_path):
    path = write(tmp_path / "requirements.txt", "six\n-r nowhere.txt\n")

    with pytest.raises(RequirementsFileError) as caught:
        read_requirements(path)

    assert caught.value.path == tmp_path / "nowhere.txt"
    assert str(caught.value) == f"{tmp_path / 'nowhere.txt'}: no such file"


def test_an_include_cycle_is_refused_instead_of_recursing_forever(tmp_path):
    write(tmp_path / "a.txt", "six\n-r b.txt\n")
    write(tmp_path / "b.txt", "-r a.txt\n")

    with pytest.raises(RequirementsFileError) as caught:
        read_requirements(tmp_path / "a.txt")

    assert "it includes itself" in caught.value.reason
    assert "a.txt -> " in caught.value.reason and "b.txt -> " in caught.value.reason


def test_a_file_with_a_byte_order_mark_and_crlf_lines_reads_the_same(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_bytes(b"\xef\xbb\xbfsix==1.16.0\r\n# note\r\nattrs\r\n")

    assert read_requirements(path).requirements == ["six==1.16.0", "attrs"]


def test_a_folder_is_not_a_requirements_file(tmp_path):
    with pytest.raises(RequirementsFileError, match="not a file"):
        read_requirements(tmp_path)
