"""This interpreter as the service sees it: the Python (``major.minor``) a pickle made here loads on,
which a function's job and an environment asked for without one run on."""

from __future__ import annotations

import sys


def python_version() -> str:
    """This interpreter's ``major.minor`` (``3.11``): what a pickle is made with."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"
