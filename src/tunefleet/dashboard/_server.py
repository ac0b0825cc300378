"""The dashboard's HTTP server: read-only pages and JSON over the standard library.

Security rules, all enforced here:

- It binds 127.0.0.1 unless told otherwise; any other address needs a token.
- With a token, every request carries it: ``?token=`` once (it is then kept in a
  cookie), an ``Authorization: Bearer`` or an ``X-Tunefleet-Token`` header; else 401.
- Without a token, the ``Host`` header must name a loopback host (403 otherwise), so
  a web page cannot reach the dashboard through DNS rebinding.
- Only GET and HEAD exist (every other method: 405). Nothing runs code or writes a
  file; the store is read through `StoreReader` (read-only SQLite) for the length of
  one request.
- An experiment name is served only if it is one of the experiments listed under the
  storage root: no path ever comes from the request.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import mimetypes
import threading
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tunefleet.dashboard import _data
from tunefleet.dashboard._curves import MAX_POINTS
from tunefleet.dashboard._json import to_json

logger = logging.getLogger("tunefleet")

STATIC_DIR = Path(__file__).with_name("static")
STATIC_FILES = ("index.html", "app.js", "plots.js", "app.css")
COOKIE = "tunefleet_dashboard_token"
MIN_TOKEN_LEN = 8
#: trials per page of the experiment view (``?limit=``)
PAGE_SIZE = 200
_LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost"})
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or ``localhost``) only reaches this machine."""
    name = host.strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback address without a token, and a token that is too short.

    Raises:
        ValueError: naming the host or the token's length, and the rule.
    """
    if token is not None and len(token) < MIN_TOKEN_LEN:
        raise ValueError(
            f"--token is {len(token)} characters long; a token must have at least "
            f"{MIN_TOKEN_LEN} (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
        )
    if not is_loopback(host) and not token:
        raise ValueError(
            f"--host {host!r} is not a loopback address: serving the dashboard beyond this "
            "machine requires a token (--token T or $TUNEFLEET_DASHBOARD_TOKEN), which every "
            "request must then carry"
        )


class DashboardServer(ThreadingHTTPServer):
    """Serves the experiments under `root` (or only `only`, one experiment in it).

    Args:
        root: the storage root.
        host, port: where to listen (port 0: a free port; see `url`).
        token: required on every request when set.
        only: serve this experiment alone (the command was given its directory).

    Raises:
        ValueError: a non-loopback host without a token (`check_bind`).
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        root: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        only: str | None = None,
    ) -> None:
        check_bind(host, token)
        self.root = root
        self.token = token or None
        self.only = only
        self.bind_host = host
        if ":" in host:  # an IPv6 address
            import socket

            self.address_family = socket.AF_INET6
        super().__init__((host.strip("[]"), port), _Handler)

    @property
    def url(self) -> str:
        """The address to open (with the token, if one is needed)."""
        host = self.bind_host
        shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
        if host in ("0.0.0.0", "::"):
            shown = "127.0.0.1"  # listening everywhere: this machine's address works
        base = f"http://{shown}:{self.server_address[1]}/"
        return base + (f"?token={quote(self.token)}" if self.token else "")

    def names(self) -> list[str]:
        """The experiment names that may be served (read fresh: new ones appear)."""
        names = _data.experiment_names(self.root)
        return [n for n in names if n == self.only] if self.only is not None else names

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that went away mid-answer is normal: log it quietly, not a traceback."""
        logger.debug("dashboard: a request from %s failed", client_address, exc_info=True)

    def start_background(self) -> threading.Thread:
        """Serve in a daemon thread (tests, notebooks); stop with `shutdown()`."""
        thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, name="tunefleet-dashboard"
        )
        thread.daemon = True
        thread.start()
        return thread


def _int_arg(query: dict[str, list[str]], name: str, default: int) -> int:
    """``?name=`` as an integer (`default` when absent).

    Raises:
        ValueError: not an integer, naming the parameter.
    """
    given = query.get(name)
    if not given or given[0] == "":
        return default
    try:
        return int(given[0])
    except ValueError:
        raise ValueError(f"?{name}={given[0]!r}: must be an integer") from None


def _host_name(header: str) -> str:
    """The host in a Host header: ``[::1]:8080`` -> ``::1``, ``localhost:80`` -> ``localhost``."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "tunefleet-dashboard"
    sys_version = ""

    def __getattr__(self, name: str) -> Any:
        # BaseHTTPRequestHandler looks up do_<METHOD>: every method but GET/HEAD gets 405.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self._send_error(HTTPStatus.METHOD_NOT_ALLOWED, "read-only: only GET and HEAD")

    def do_HEAD(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("dashboard: " + format, *args)

    # -- dispatch ---------------------------------------------------------------------------
    def _serve(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if not self._allowed(query):
            return
        if "token" in query and url.path in ("/", "/index.html"):
            # a page opened with ?token=: keep the token in a cookie, out of the address bar
            self.send_response(HTTPStatus.SEE_OTHER)
            self.send_header("Location", url.path or "/")
            self.send_header(
                "Set-Cookie",
                f"{COOKIE}={quote(query['token'][0])}; Path=/; HttpOnly; SameSite=Strict",
            )
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path = unquote(url.path)
        try:
            self._route(path, query)
        except FileNotFoundError as exc:
            self._send_error(HTTPStatus.NOT_FOUND, str(exc))
        except ValueError as exc:  # a bad ?offset=, ?limit=, ?sort=...: the message names it
            self._send_error(HTTPStatus.BAD_REQUEST, str(exc))
        except Exception as exc:  # the store changed under us, or a bug: say so, keep serving
            logger.warning("dashboard: %s failed: %s", path, exc)
            self._send_error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    def _route(self, path: str, query: dict[str, list[str]]) -> None:
        if path in ("/", "/index.html"):
            self._send_file("index.html")
        elif path.startswith("/static/"):
            self._send_file(path[len("/static/") :])
        elif path == "/api/experiments":
            rows = _data.experiments_list(self.server.root, only=self.server.only)
            self._send_json({"experiments": rows})
        elif path.startswith("/api/experiments/"):
            self._experiment_api(path[len("/api/experiments/") :].split("/"), query)
        else:
            raise FileNotFoundError(f"no page {path!r}")

    def _experiment_api(self, parts: list[str], query: dict[str, list[str]]) -> None:
        name, rest = parts[0], "/".join(parts[1:])
        names = self.server.names()
        if name not in names:
            shown = ", ".join(names[:10]) or "none"
            raise FileNotFoundError(f"no experiment {name!r} under the storage root ({shown})")
        path = self.server.root / name  # `name` is one of the directory's own entries
        if rest == "":
            self._send_json(
                _data.experiment_view(
                    path,
                    offset=_int_arg(query, "offset", 0),
                    limit=_int_arg(query, "limit", PAGE_SIZE),
                    sort=(query.get("sort") or [""])[0] or None,
                    descending=(query.get("descending") or ["0"])[0] in ("1", "true"),
                    state=(query.get("state") or [""])[0] or None,
                )
            )
        elif rest == "poll":
            self._send_json(_data.poll(path))
        elif rest == "curves":
            metric = (query.get("metric") or [""])[0]
            if not metric:
                raise FileNotFoundError("curves need ?metric=NAME")
            given = query.get("trials")
            trials = [t for t in ",".join(given).split(",") if t] if given else None
            points = _int_arg(query, "points", MAX_POINTS)
            self._send_json(_data.curves(path, metric, trials, points))
        else:
            raise FileNotFoundError(f"no endpoint {rest!r} for experiment {name!r}")

    # -- the rules ----------------------------------------------------------------------------
    def _allowed(self, query: dict[str, list[str]]) -> bool:
        token = self.server.token
        if token is None:
            host = _host_name(self.headers.get("Host") or "")
            if not is_loopback(host):
                self._send_error(HTTPStatus.FORBIDDEN, f"Host {host!r} is not a loopback name")
                return False
            return True
        given = [*query.get("token", [])]
        auth = self.headers.get("Authorization") or ""
        if auth.lower().startswith("bearer "):
            given.append(auth[7:].strip())
        given.append(self.headers.get("X-Tunefleet-Token") or "")
        cookie = SimpleCookie()
        try:
            cookie.load(self.headers.get("Cookie") or "")
        except Exception:  # a malformed cookie header counts as no cookie
            pass
        if COOKIE in cookie:
            given.append(unquote(cookie[COOKIE].value))
        if any(hmac.compare_digest(g.encode(), token.encode()) for g in given if g):
            return True
        self._send_error(HTTPStatus.UNAUTHORIZED, "this dashboard needs its token (?token=...)")
        return False

    # -- responses -----------------------------------------------------------------------------
    def _send_file(self, name: str) -> None:
        if name not in STATIC_FILES:  # a fixed list: no path from the request reaches the disk
            raise FileNotFoundError(f"no static file {name!r}")
        body = (STATIC_DIR / name).read_bytes()
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        self._send(HTTPStatus.OK, body, f"{kind}; charset=utf-8")

    def _send_json(self, data: Any) -> None:
        self._send(HTTPStatus.OK, to_json(data).encode(), "application/json")

    def _send_error(self, status: HTTPStatus, message: str) -> None:
        body = to_json({"error": message, "status": status.value}).encode()
        self._send(status, body, "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", _CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        if status == HTTPStatus.METHOD_NOT_ALLOWED:
            self.send_header("Allow", "GET, HEAD")
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", 'Bearer realm="tunefleet"')
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
