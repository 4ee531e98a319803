"""The Lambdas' dependency bundle: built from ``functions/requirements.lock``, checked against it.

``python -m infra.lambda_bundle`` (what ``make lambda-bundle`` runs) installs the lock file's exact
pins into ``build/lambda/layer/python`` with pip's cross-platform options (``--platform``,
``--only-binary=:all:``, ``--python-version``, ``--implementation cp``: wheels for the deployed
interpreter and architecture, never built here) and ``--require-hashes``, byte-compiles it with
unchecked-hash ``.pyc`` files (below) and zips it into ``build/lambda/layer.zip`` with sorted entries
and fixed timestamps: an unchanged lock gives a byte-identical zip, so an unchanged layer asset hash.
It also installs ``functions/runtime.lock`` (the SDK the Lambda runtime itself carries) into
``build/lambda-runtime`` for the deployed-bundle test. The CDK app uploads that zip as the functions'
layer and refuses to synthesize when it does not hold exactly the lock's pins (:func:`check_bundle`).

The functions' code asset (:func:`build_code_asset`, run by the CDK app at every synth) is
``functions/`` copied with a ``.pyc`` beside each module, so a cold start never compiles the service's
code (about 100 ms of the api's import when it did).

Both are compiled in PEP 552's *unchecked-hash* mode: the interpreter loads the ``.pyc`` without
reading its source's mtime (which zip extraction does not keep: a timestamp ``.pyc`` would be stale at
every cold start, so compiled again) nor hashing the source (what *checked-hash* does at each import).
Nothing on Lambda changes a source beside its ``.pyc``, and both are rebuilt from the sources at each
build. A ``.pyc`` only loads in the interpreter version that wrote it (its magic number), so both are
compiled by Python ``LAMBDA_PYTHON_VERSION``: this interpreter when it is that version, else one of
that version found on the machine, else the build fails (:func:`runtime_interpreter`). pip runs in
this interpreter with ``--python-version``: it only downloads wheels, it never imports them.

Plain Python, no CDK: the Makefile, the CDK construct and the tests import it.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

from infra import constants

LOCK_FILE = constants.REPO_ROOT / constants.LAMBDA_LOCK_FILE
RUNTIME_LOCK_FILE = constants.REPO_ROOT / constants.LAMBDA_RUNTIME_LOCK_FILE
LAYER_DIR = constants.REPO_ROOT / constants.LAMBDA_LAYER_DIR
# Lambda adds a layer's python/ folder to sys.path (as /opt/python).
LAYER_SITE = LAYER_DIR / "python"
LAYER_ZIP = constants.REPO_ROOT / constants.LAMBDA_LAYER_ZIP
RUNTIME_SITE = constants.REPO_ROOT / constants.LAMBDA_RUNTIME_SDK_DIR
CONSTRAINTS_FILE = constants.REPO_ROOT / "build" / "lambda" / "constraints.txt"
# Where Lambda mounts layers: the path compiled into the .pyc files, so tracebacks name it.
LAYER_MOUNT = "/opt/python"
# Where Lambda unpacks the code asset (LAMBDA_TASK_ROOT): the path compiled into the code's .pyc files.
TASK_ROOT = "/var/task"
CODE_SOURCE = constants.REPO_ROOT / constants.LAMBDA_CODE_DIR
CODE_ASSETS = constants.REPO_ROOT / constants.LAMBDA_CODE_ASSET_DIR
# PEP 552: the .pyc is used as is, whatever the source's mtime (zip extraction does not keep mtimes).
INVALIDATION_MODE = "unchecked-hash"
# What the code asset leaves out of functions/: bytecode caches (it compiles its own), hidden files and
# the lock and .in files (build inputs of the layer, not code).
_CODE_SKIPPED_DIRS = frozenset({"__pycache__"})
_CODE_SKIPPED_SUFFIXES = (".pyc", ".lock", ".in")

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


class BundleError(RuntimeError):
    """The built bundle is missing or does not hold exactly the lock file's pins."""


def normalize(name: str) -> str:
    """A distribution name in PEP 503 normal form (``Typing_Extensions`` → ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(lock_file: Path = LOCK_FILE) -> dict[str, str]:
    """The ``name==version`` pins of a pip requirements/lock file, by normalized name.

    Hash continuation lines and comments are skipped. Raises ``BundleError`` for a requirement line
    that is not an exact ``==`` pin (a lock file pins everything).
    """
    pins: dict[str, str] = {}
    for raw in lock_file.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "--")):
            continue
        match = _PIN.match(line)
        if match is None:
            raise BundleError(f"{lock_file.name}: not an exact pin: {line!r}")
        pins[normalize(match.group(1))] = match.group(2)
    return pins


def installed_versions(site_dir: Path) -> dict[str, str]:
    """The distributions installed in ``site_dir``, read from each ``*.dist-info/METADATA``.

    Returns ``{normalized name: version}``; empty when the folder does not exist.
    """
    versions: dict[str, str] = {}
    for metadata in sorted(site_dir.glob("*.dist-info/METADATA")):
        headers = HeaderParser().parsestr(metadata.read_text(encoding="utf-8"))
        versions[normalize(headers["Name"])] = headers["Version"]
    return versions


def zip_versions(zip_file: Path, prefix: str = "python/") -> dict[str, str]:
    """The distributions in a layer zip (``python/*.dist-info/METADATA``), as ``installed_versions``."""
    pattern = re.compile(rf"^{re.escape(prefix)}[^/]+\.dist-info/METADATA$")
    versions: dict[str, str] = {}
    with zipfile.ZipFile(zip_file) as archive:
        for name in sorted(archive.namelist()):
            if pattern.match(name):
                headers = HeaderParser().parsestr(archive.read(name).decode("utf-8"))
                versions[normalize(headers["Name"])] = headers["Version"]
    return versions


def bundle_versions(bundle: Path) -> dict[str, str]:
    """The distributions of a layer zip or of a site folder."""
    return zip_versions(bundle) if bundle.is_file() else installed_versions(bundle)


def differences(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    """Human-readable differences between two ``{name: version}`` maps (empty when equal)."""
    problems = []
    for name in sorted(expected.keys() | actual.keys()):
        want, have = expected.get(name), actual.get(name)
        if want != have:
            problems.append(f"{name}: locked {want or '-'}, found {have or '-'}")
    return problems


def check_bundle(bundle: Path = LAYER_ZIP, lock_file: Path = LOCK_FILE) -> dict[str, str]:
    """Check that ``bundle`` (a layer zip or a site folder) holds exactly the pins of ``lock_file``.

    Returns the pins.

    Raises
    ------
    BundleError
        When the bundle was never built, or a distribution is missing, extra or another version
        (the lock changed since the last build: run ``make lambda-bundle``).
    """
    if not bundle.exists():
        raise BundleError(f"no Lambda dependency bundle at {bundle}: run `make lambda-bundle`")
    pins = read_pins(lock_file)
    problems = differences(pins, bundle_versions(bundle))
    if problems:
        raise BundleError(
            f"the bundle at {bundle} differs from {lock_file.name} (run `make lambda-bundle`): "
            + "; ".join(problems)
        )
    return pins


def pip_install_command(lock_file: Path, target: Path) -> list[str]:
    """The pip command that installs ``lock_file`` for the Lambda runtime into ``target``.

    Wheels only, for CPython ``LAMBDA_PYTHON_VERSION`` on ``LAMBDA_PLATFORM`` (the runtime's glibc
    and architecture), every file checked against the lock's hashes, no dependency resolution
    (the lock is complete), no bytecode (compiled afterwards, deterministically).
    """
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--require-hashes",
        "--only-binary=:all:",
        "--platform",
        constants.LAMBDA_PLATFORM,
        "--python-version",
        constants.LAMBDA_PYTHON_VERSION,
        "--implementation",
        "cp",
        "--no-compile",
        "--target",
        str(target),
        "--requirement",
        str(lock_file),
    ]


@functools.cache
def runtime_interpreter() -> str:
    """The path of a Python ``LAMBDA_PYTHON_VERSION`` interpreter: this one when it is that version,
    else one found by running it (``python3.X`` on PATH, pyenv's versions:
    ``remote_batch_local.interpreters``). It compiles the ``.pyc`` files and the deployed-bundle test
    runs each handler in it.

    Raises ``BundleError`` when there is none (a ``.pyc`` of another version would never load on
    Lambda: its magic number differs, so every module would be compiled at each cold start again).
    """
    wanted = constants.LAMBDA_PYTHON_VERSION
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == wanted:
        return getattr(sys, "_base_executable", sys.executable)
    from remote_batch_local.interpreters import find_interpreter

    found = find_interpreter(wanted)
    if found is None:
        running = sys.version.split()[0]
        raise BundleError(
            f"compile the Lambda code with Python {wanted} (this is {running}; no python{wanted} runs "
            f"here, on PATH or under pyenv's versions)"
        )
    return str(found.executable)


def compile_tree(folder: Path, *, prefix: str | None, source_root: Path | None = None) -> None:
    """Byte-compile every ``.py`` under ``folder`` in place, for the Lambda runtime's Python
    (:func:`runtime_interpreter`), as unchecked-hash ``.pyc`` files in ``__pycache__``.

    ``source_root`` (default ``folder``) is replaced by ``prefix`` in the file names compiled into the
    code (what tracebacks show: ``/var/task/functions/...``); ``prefix`` None keeps the paths.
    Deterministic: the same sources give byte-identical files. Raises ``BundleError`` (no interpreter
    of that version) or ``subprocess.CalledProcessError`` (a module does not compile).
    """
    argv = [runtime_interpreter(), "-m", "compileall", "-q", "-j", "0"]
    argv += ["--invalidation-mode", INVALIDATION_MODE, "-s", str(source_root or folder)]
    if prefix is not None:
        argv += ["-p", prefix]
    subprocess.run([*argv, str(folder)], check=True, stdout=subprocess.DEVNULL)  # noqa: S603 - fixed argv


def _install(lock_file: Path, target: Path, *, mount: str | None) -> None:
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    subprocess.run(pip_install_command(lock_file, target), check=True)  # noqa: S603 - fixed argv
    shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts: nothing runs them on Lambda
    compile_tree(target, prefix=mount)


def code_files(source: Path = CODE_SOURCE) -> list[Path]:
    """The files of ``functions/`` (``source``) the code asset ships, sorted: everything but bytecode
    caches, hidden files and the ``.lock``/``.in`` build inputs."""
    files = []
    for path in source.rglob("*"):
        parts = path.relative_to(source).parts
        if not path.is_file() or any(p in _CODE_SKIPPED_DIRS or p.startswith(".") for p in parts):
            continue
        if path.name.endswith(_CODE_SKIPPED_SUFFIXES):
            continue
        files.append(path)
    return sorted(files)


def build_code_asset(source: Path = CODE_SOURCE, assets: Path = CODE_ASSETS) -> Path:
    """The functions' code asset: a folder holding ``functions/`` (``source``'s :func:`code_files`)
    with each module's unchecked-hash ``.pyc`` (compiled for the runtime's Python, with
    ``/var/task/functions/...`` as the file names tracebacks show).

    The folder is ``assets/<digest>``, the digest of the shipped files' names and bytes and of the
    interpreter version: built once into a temporary folder and renamed into place (a synth running
    beside another never sees a half-built asset), reused while the sources are unchanged; other
    digests' folders are removed. Returns the folder (what ``Code.from_asset`` takes).

    Raises ``BundleError`` when no Python ``LAMBDA_PYTHON_VERSION`` is available to compile with,
    ``subprocess.CalledProcessError`` when a module does not compile.
    """
    files = code_files(source)
    digest = hashlib.sha256(f"{constants.LAMBDA_PYTHON_VERSION} {INVALIDATION_MODE}\n".encode())
    for path in files:
        digest.update(path.relative_to(source).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    target = assets / digest.hexdigest()[:20]
    if not target.is_dir():
        assets.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=assets))
        staging.chmod(0o755)  # mkdtemp's 0700 would otherwise be the asset root's mode
        package = staging / source.name
        for path in files:
            copy = package / path.relative_to(source)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
        compile_tree(package, prefix=f"{TASK_ROOT}/{source.name}", source_root=package)
        try:
            os.rename(staging, target)
        except OSError:  # another build renamed the same digest's folder first: the same bytes
            shutil.rmtree(staging, ignore_errors=True)
    for other in assets.iterdir():
        if other != target and not other.name.startswith(".staging-"):
            shutil.rmtree(other, ignore_errors=True)
    return target


def write_zip(source: Path, zip_file: Path) -> None:
    """Zip the folder ``source`` (its contents at the zip's root) reproducibly into ``zip_file``.

    Entries are sorted, dated 1980-01-01 and given mode 0644 (0755 when executable), so the same
    files give the same bytes whatever their mtimes or the umask: CDK then sees the same asset hash.
    """
    tmp = zip_file.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(path.relative_to(source).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes(), compresslevel=6)
    tmp.replace(zip_file)


def build() -> None:
    """Build the layer and the runtime-SDK folder from their lock files, then check the layer.

    Raises ``subprocess.CalledProcessError`` when pip cannot fetch a pinned wheel for the platform
    (or a hash differs), ``BundleError`` when the result does not match the lock.
    """
    runtime_interpreter()  # before any download: the bundle is compiled, and tested, by that Python
    _install(LOCK_FILE, LAYER_SITE, mount=LAYER_MOUNT)
    write_zip(LAYER_DIR, LAYER_ZIP)
    _install(RUNTIME_LOCK_FILE, RUNTIME_SITE, mount=None)
    check_bundle(RUNTIME_SITE, RUNTIME_LOCK_FILE)
    pins = check_bundle()
    size = LAYER_ZIP.stat().st_size / 2**20
    print(f"lambda bundle: {len(pins)} distributions, {constants.LAMBDA_LAYER_ZIP} ({size:.1f} MiB)")


def write_constraints(target: Path = CONSTRAINTS_FILE) -> None:
    """Write the lock's pins without hashes to ``target`` for ``pip install -c``.

    The venv installs the functions' packages through this file so the tests import exactly the
    deployed versions (a constraints file with hashes would put pip in hash-checking mode for the
    whole install, which an editable install cannot satisfy).
    """
    pins = read_pins()
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# Generated from {constants.LAMBDA_LOCK_FILE} by `python -m infra.lambda_bundle constraints`."]
    lines += [f"{name}=={version}" for name, version in sorted(pins.items())]
    target.write_text("\n".join(lines) + "\n")


def lock(*, upgrade: bool = False) -> None:
    """Resolve ``functions/requirements.in`` and ``runtime.in`` into their lock files with uv.

    Resolution is for CPython ``LAMBDA_PYTHON_VERSION`` on the Lambda platform, with the hashes of
    every file of each pinned version. Existing pins are kept unless ``upgrade`` (``make lock
    UPGRADE=1``) or the ``.in`` file no longer allows them.
    """
    from uv import find_uv_bin

    # uv names pip's platform tags the other way round.
    platform = {
        "manylinux2014_x86_64": "x86_64-manylinux2014",
        "manylinux2014_aarch64": "aarch64-manylinux2014",
    }[constants.LAMBDA_PLATFORM]
    for lock_file in (LOCK_FILE, RUNTIME_LOCK_FILE):
        argv = [
            find_uv_bin(),
            "pip",
            "compile",
            str(lock_file.with_suffix(".in").relative_to(constants.REPO_ROOT)),
        ]
        argv += ["--output-file", str(lock_file.relative_to(constants.REPO_ROOT)), "--quiet"]
        argv += ["--python-version", constants.LAMBDA_PYTHON_VERSION, "--python-platform", platform]
        argv += ["--generate-hashes", "--custom-compile-command", "make lock"]
        if upgrade:
            argv.append("--upgrade")
        subprocess.run(argv, check=True, cwd=constants.REPO_ROOT)  # noqa: S603 - fixed argv
    print(f"locked {len(read_pins())} distributions in {constants.LAMBDA_LOCK_FILE}")


def main(argv: list[str] | None = None) -> None:
    """``python -m infra.lambda_bundle [build | lock [--upgrade] | constraints]`` (default: build)."""
    parser = argparse.ArgumentParser(
        prog="python -m infra.lambda_bundle", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("build", help="build the layer and runtime-SDK folders from the lock files")
    lock_parser = sub.add_parser("lock", help="re-resolve the .in files into the lock files")
    lock_parser.add_argument("--upgrade", action="store_true", help="move every pin to the newest allowed")
    sub.add_parser("constraints", help=f"write {CONSTRAINTS_FILE.name} (the lock's pins, no hashes)")
    args = parser.parse_args(argv)
    if args.command == "lock":
        lock(upgrade=args.upgrade)
    elif args.command == "constraints":
        write_constraints()
    else:
        build()


if __name__ == "__main__":
    main()
