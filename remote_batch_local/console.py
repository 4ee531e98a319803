"""The web console's files at ``/console/`` (same origin as the API), as CloudFront serves them deployed.

The files are ``make console``'s build (``build/console``: ``index.html`` and hashed ``assets/``);
``/docs/assets/`` serves Swagger UI's bundle and stylesheet (from the ``swagger-ui-dist`` npm package,
copied there by the build) for the api's ``GET /docs``. No token is needed for these files: they hold
no account data; every call the console makes carries the token. Every answer carries the console's
Content-Security-Policy: scripts, styles and fetches from this origin only, no inline script, no
framing, and links (downloads) to anywhere.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from werkzeug.security import safe_join
from werkzeug.wrappers import Request, Response

CONSOLE_PREFIX = "/console/"
# The Swagger UI assets the api's GET /docs page links to (functions.handlers.api.meta, enable_swagger).
SWAGGER_ASSETS_PREFIX = "/docs/assets/"
# `make console`'s output, infra.constants.DEFAULT_CONSOLE_ASSETS_DIR (what `make deploy-console` uploads).
CONSOLE_DIST = Path(__file__).resolve().parent.parent / "build" / "console"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
# The index names the hashed assets of one build: never cached; the assets, named by their hash, are.
INDEX_CACHE = "no-cache"
ASSET_CACHE = "public, max-age=31536000, immutable"
NOT_BUILT_MESSAGE = "The console is not built: run `make console` (it needs npm), then reload."


def security_headers(response: Response) -> Response:
    """Add the console's Content-Security-Policy and the headers that go with it to ``response``."""
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


class ConsoleFiles:
    """Serves ``root`` (the console's build) at ``/console/`` and its ``swagger/`` at ``/docs/assets/``.

    Parameters
    ----------
    root : Path
        The build folder (``build/console``); missing: every path answers 503 with ``NOT_BUILT_MESSAGE``.
    """

    def __init__(self, root: Path = CONSOLE_DIST) -> None:
        self._root = root

    @staticmethod
    def serves(path: str) -> bool:
        """Whether ``path`` is one of these files' (``/console``, ``/console/...``, ``/docs/assets/...``)."""
        return path == "/console" or path.startswith((CONSOLE_PREFIX, SWAGGER_ASSETS_PREFIX))

    def answer(self, request: Request) -> Response:
        """The file for ``request``: 200 with its type, 404 for a path the build lacks, 405 for a method
        other than GET/HEAD, a redirect from ``/console`` to ``/console/``."""
        if request.method not in ("GET", "HEAD"):
            response = Response("Method not allowed", status=405, content_type="text/plain")
            response.headers["Allow"] = "GET, HEAD"
            return security_headers(response)
        if request.path == "/console":
            return security_headers(Response(status=308, headers={"Location": CONSOLE_PREFIX}))
        if not (self._root / "index.html").is_file():
            return security_headers(Response(NOT_BUILT_MESSAGE, status=503, content_type="text/plain"))
        if request.path.startswith(SWAGGER_ASSETS_PREFIX):
            relative = "swagger/" + request.path[len(SWAGGER_ASSETS_PREFIX) :]
        else:
            relative = request.path[len(CONSOLE_PREFIX) :] or "index.html"
        found = safe_join(str(self._root), relative)
        if found is None or not Path(found).is_file():
            return security_headers(Response("Not found", status=404, content_type="text/plain"))
        file = Path(found)
        kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind in ("application/javascript", "text/javascript"):
            kind += "; charset=utf-8"
        response = Response(file.read_bytes(), content_type=kind)
        response.headers["Cache-Control"] = INDEX_CACHE if file.name == "index.html" else ASSET_CACHE
        return security_headers(response)
