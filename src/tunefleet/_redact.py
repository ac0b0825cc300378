"""Secrets never written: the rules that hide them in every file, log and printed line.

Three rules, applied by `redact` (nested data) and `redact_text` (free text):

1. A key looks like a secret when one of its word parts (split at ``_ - .``, spaces
   and camelCase, lower-cased) is one of `SECRET_WORDS`, or ends with one of
   `SECRET_SUFFIXES` (``dbpassword``, ``authtoken``), or is the plural of one (an
   ``s`` added: ``api_keys``, ``hf_tokens``, ``authkeys``, ``session_cookies``). A plural
   is read as a count or a list of names, not as secrets, when another word part of
   the key (or the run-together word before it: ``maxtokens``) is one of `COUNT_WORDS`
   (``max_tokens``, ``keys_per_batch``, ``num_keys``, ``metric_keys``), and so is a key
   that is just ``keys``. So ``api_key``, ``apiKey``, ``AUTH_TOKEN``, ``tokens``,
   ``github_pat``, ``jwt`` and ``credentials`` match; ``keys_per_batch``,
   ``max_tokens``, ``tokenizer``, ``monkey`` and ``author`` do not. Under such a key
   every string, bytes or other object is replaced by ``"***"`` (in nested dicts and
   lists too); numbers, booleans and None are kept, so ``{"key_dim": 64}`` survives.
2. A `Secret` anywhere is ``"***"``; only the trial sees its value (`reveal`).
3. In every string: the password of a URL (``scheme://user:PASSWORD@host``), the
   value of a secret-looking query parameter (``?api_key=...``), a ``Bearer`` token
   and a quoted value assigned to a secret-looking name (``api_key='...'``,
   ``"token": "..."``) become ``***``.

Every secret value hidden by these rules (at least `MIN_SCRUB_LEN` characters) is
remembered by this process, and `redact_text` also hides it wherever it shows up
later in free text: an exception message, a traceback, a stderr tail, a log line,
a trial name. In nested data that is done for the free-text fields of failure
records and names (`FREE_TEXT_KEYS`) only, so that a config value under a
secret-looking key (say ``{"key": "val_loss"}``) cannot rewrite paths or metric names.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Iterable
from typing import Any, TypeVar

REDACTED = "***"
MIN_SCRUB_LEN = 4
"""Shorter secret values are hidden where they are stored, but not searched for in text."""

SECRET_WORDS = frozenset(
    {
        "key",
        "apikey",
        "passkey",
        "authkey",
        "token",
        "secret",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "credential",
        "auth",
        "oauth",
        "authorization",
        "bearer",
        "pat",
        "jwt",
        "cookie",
    }
)
"""Word parts that make a key secret, and their plurals (``s`` added)."""
SECRET_SUFFIXES = (
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "authkey",
    "passkey",
    "accesskey",
    "secretkey",
    "privatekey",
    "credential",
    "cookie",
    "jwt",
)
COUNT_WORDS = frozenset(
    {"max", "min", "num", "n", "nb", "per", "count", "cnt", "limit", "total", "size", "len"}
    | {"length", "number", "budget", "metric", "metrics", "param", "params", "sort", "group"}
    | {"column", "columns", "field", "fields", "index", "dict"}
)
"""Word parts that make a plural secret word a count or a list of names (``max_tokens``)."""
_T = TypeVar("_T")
FREE_TEXT_KEYS = frozenset({"message", "traceback", "stderr_tail", "name"})
_MAX_KNOWN = 4096

_WORD_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# Bounded repeats and word-start lookbehinds keep every pattern linear in the text's length
# (a 64 KB stderr tail of one line must not take seconds).
_URL_PASSWORD = re.compile(
    r"(?<![A-Za-z0-9+.\-])(?P<head>[A-Za-z][A-Za-z0-9+.\-]{0,32}://[^\s:/?#@'\"<>]{0,256}:)"
    r"(?P<pw>[^\s'\"<>]{0,1024})@"
)
_QUERY_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[^=&#\s;?]{1,64})=)(?P<value>[^&#\s;'\"<>]*)")
_BEARER = re.compile(r"(?P<head>\b[Bb]earer\s{1,8})(?P<value>[A-Za-z0-9._~+/\-]+=*)")
_QUOTED_ASSIGN = re.compile(
    r"(?<![\w.\-])(?P<head>(?P<name>[A-Za-z_][\w.\-]{0,64})['\"]?\s{0,8}[:=]\s{0,8})"
    r"(?P<q>['\"])(?P<value>[^'\"\n]*)(?P=q)"
)


class Secret:
    """A config value that tunefleet never writes or prints: only the trial sees it.

    Its repr and str are ``Secret('***')``, the experiment store records ``"***"``,
    and the trainable receives the plain value in its config.

    Args:
        value: the secret (a string, bytes, or any picklable value).

    Example:
        >>> token = Secret("hf_abc123")
        >>> token
        Secret('***')
        >>> token.get_secret_value()
        'hf_abc123'
    """

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value.get_secret_value() if isinstance(value, Secret) else value

    def get_secret_value(self) -> Any:
        """The plain value (what the trial receives)."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({REDACTED!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and bool(other._value == self._value)

    def __hash__(self) -> int:
        try:
            return hash((Secret, self._value))
        except TypeError:
            return hash(Secret)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled only to reach the trial's process (over a socket), never to disk.
        return (Secret, (self._value,))


@functools.lru_cache(maxsize=8192)
def is_secret_key(key: str) -> bool:
    """Whether a config key looks like it holds a secret (rule 1 of the module doc)."""
    parts = [p.lower() for p in _WORD_PART.findall(key)]
    heads: list[str] = []  # the run-together words before each plural secret word
    for part in parts:
        if _secret_word(part) is not None:
            return True
        head = _secret_word(part[:-1]) if part.endswith("s") else None
        if head is not None:
            heads.append(head)
    if not heads or parts == ["keys"]:  # "keys" alone names a dict's keys
        return False
    return not any(p in COUNT_WORDS for p in (*parts, *heads))


def _secret_word(part: str) -> str | None:
    """What comes before the secret word that `part` is or ends with; None if none."""
    if part in SECRET_WORDS:
        return ""
    for suffix in SECRET_SUFFIXES:
        if part.endswith(suffix):
            return part[: -len(suffix)]
    return None


# -- the values learnt so far ----------------------------------------------------------------
class _Known:
    """Secret values seen by this process, and one regex that finds any of them."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._stale = False
        self._lock = threading.Lock()

    def add(self, value: Any) -> None:
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not isinstance(value, str) or len(value) < MIN_SCRUB_LEN or value == REDACTED:
            return
        if value in self.values or len(self.values) >= _MAX_KNOWN:
            return
        with self._lock:
            self.values.add(value)
            self._stale = True

    def pattern(self) -> re.Pattern[str] | None:
        if self._stale:
            with self._lock:
                ordered = sorted(self.values, key=len, reverse=True)  # longest first
                self._pattern = re.compile("|".join(map(re.escape, ordered)))
                self._stale = False
        return self._pattern


_KNOWN = _Known()


def remember(values: Iterable[Any]) -> None:
    """Add secret values that `redact_text` must hide from now on in this process."""
    for value in values:
        _KNOWN.add(value)


# -- free text ---------------------------------------------------------------------------------
def redact_text(text: str, extra: Iterable[str] = ()) -> str:
    """`text` with URL passwords, secret query parameters, bearer tokens, quoted values
    of secret-looking names, and every secret value remembered (or in `extra`) hidden.

    Example:
        >>> redact_text("cannot connect to postgresql://bob:hunter2@db/prod")
        'cannot connect to postgresql://bob:***@db/prod'
    """
    text = _patterns(text)
    pattern = _KNOWN.pattern()
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    more = sorted(
        (v for v in extra if isinstance(v, str) and len(v) >= MIN_SCRUB_LEN and v != REDACTED),
        key=len,
        reverse=True,
    )
    for value in more:
        text = text.replace(value, REDACTED)
    return text


def _patterns(text: str) -> str:
    """Rule 3: the redactions that need no knowledge of the config."""
    if "://" in text:
        text = _URL_PASSWORD.sub(_url_sub, text)
    if "=" in text:
        text = _QUERY_PARAM.sub(_query_sub, text)
    if "earer" in text:
        text = _BEARER.sub(_bearer_sub, text)
    if ("'" in text or '"' in text) and (":" in text or "=" in text):
        text = _QUOTED_ASSIGN.sub(_assign_sub, text)
    return text


def _url_sub(match: re.Match[str]) -> str:
    password = match.group("pw")
    if not password or password == REDACTED:
        return match.group(0)
    _KNOWN.add(password)
    return f"{match.group('head')}{REDACTED}@"


def _query_sub(match: re.Match[str]) -> str:
    value = match.group("value")
    if not value or value == REDACTED or not is_secret_key(match.group("name")):
        return match.group(0)
    _KNOWN.add(value)
    return match.group("head") + REDACTED


def _bearer_sub(match: re.Match[str]) -> str:
    _KNOWN.add(match.group("value"))
    return match.group("head") + REDACTED


_EXCEPTION_NAME = re.compile(r"(Error|Exception|Warning)$")


def _assign_sub(match: re.Match[str]) -> str:
    value = match.group("value")
    name = match.group("name")
    if not value or value == REDACTED or not is_secret_key(name):
        return match.group(0)
    if _EXCEPTION_NAME.search(name):  # "KeyError: 'lr'" names a key, it assigns nothing
        return match.group(0)
    _KNOWN.add(value)
    quote = match.group("q")
    return f"{match.group('head')}{quote}{REDACTED}{quote}"


# -- nested data -----------------------------------------------------------------------------
def redact(obj: Any) -> Any:
    """A copy of `obj` (dicts, lists, tuples of anything) with every secret hidden.

    Parts without secrets are returned as they are (not copied). Secrets found are
    remembered for `redact_text`.

    Example:
        >>> redact({"api_key": "sk-123456", "lr": 0.1, "db": "mysql://u:pw1234@h/x"})
        {'api_key': '***', 'lr': 0.1, 'db': 'mysql://u:***@h/x'}
    """
    before = len(_KNOWN.values)
    out = _walk(obj, 0)
    if len(_KNOWN.values) != before:  # a name seen before the secret it contains
        out = _walk(out, 0)
    return out


def redact_state(obj: Any) -> Any:
    """A copy of an algorithm's saved state (a searcher's, scheduler's, stopper's,
    callback's) with every secret hidden, that still reads back exactly.

    Unlike `redact`, the names of the keys are not looked at: a state's keys are the
    algorithm's own (Ax's ``generator_key: "Sobol"``), and hiding their values would
    change what a resumed run does. Hidden are: a `Secret`, a string that is a secret
    already known to this process (a config value under a secret-looking key, hidden
    when the trial or the search space was recorded), and the text patterns of rule 3.

    Example:
        >>> redact_state({"generator_key": "Sobol", "lr": 0.1})
        {'generator_key': 'Sobol', 'lr': 0.1}
    """
    return _walk(obj, 0, by_key=False)


_SCALARS = frozenset({type(None), bool, int, float})


def _walk(obj: Any, depth: int, *, by_key: bool = True) -> Any:
    kind = type(obj)
    if kind in _SCALARS:
        return obj
    if kind is str:
        return _string(obj, by_key)
    if isinstance(obj, Secret):
        _collect(obj.get_secret_value(), 0)
        return REDACTED
    if depth > 64:
        return obj
    if isinstance(obj, dict):
        return _walk_dict(obj, depth, by_key)
    if isinstance(obj, (list, tuple)):
        items: list[Any] | None = None  # copied at the first change only
        for i, value in enumerate(obj):
            if type(value) in _SCALARS:
                continue
            new = _walk(value, depth + 1, by_key=by_key)
            if new is not value:
                if items is None:
                    items = list(obj)
                items[i] = new
        if items is None:
            return obj
        return items if isinstance(obj, list) else tuple(items)
    if isinstance(obj, str):  # a str subclass
        return _string(str(obj), by_key)
    return obj


def _string(text: str, by_key: bool) -> str:
    if not by_key and text in _KNOWN.values:  # a state holding a known secret itself
        return REDACTED
    return _patterns(text)


def _walk_dict(obj: dict[Any, Any], depth: int, by_key: bool) -> dict[Any, Any]:
    out: dict[Any, Any] | None = None  # copied at the first change only
    for key, value in obj.items():
        kind = type(value)
        if kind in _SCALARS:  # numbers are never secrets: the common case, kept fast
            continue
        if by_key and isinstance(key, str) and is_secret_key(key):
            new = _hide(value, depth + 1)
        elif kind is str:  # what `_walk` would do, without the call (every result has some)
            new = redact_text(value) if key in FREE_TEXT_KEYS else _string(value, by_key)
        elif kind is dict and depth < 64:
            new = _walk_dict(value, depth + 1, by_key)
        elif key in FREE_TEXT_KEYS and isinstance(value, str):
            new = redact_text(value)
        else:
            new = _walk(value, depth + 1, by_key=by_key)
        if new is not value:
            if out is None:
                out = dict(obj)
            out[key] = new
    return obj if out is None else out


def _hide(value: Any, depth: int) -> Any:
    """Everything under a secret-looking key except numbers, booleans and None."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict) and depth <= 64:
        return {k: _hide(v, depth + 1) if not _dunder(k) else v for k, v in value.items()}
    if isinstance(value, (list, tuple)) and depth <= 64:
        return [_hide(v, depth + 1) for v in value]
    _collect(value, 0)
    return REDACTED


def _dunder(key: Any) -> bool:
    # Structural markers such as the search space's "__domain__" are never secrets.
    return isinstance(key, str) and key.startswith("__") and key.endswith("__")


def _collect(value: Any, depth: int) -> None:
    """Remember the strings of a secret value (a Secret may hold a dict of them)."""
    if isinstance(value, Secret):
        _collect(value.get_secret_value(), depth + 1)
    elif isinstance(value, (str, bytes)):
        _KNOWN.add(value)
    elif isinstance(value, dict) and depth < 16:
        for v in value.values():
            _collect(v, depth + 1)
    elif isinstance(value, (list, tuple)) and depth < 16:
        for v in value:
            _collect(v, depth + 1)


def secret_values(config: Any) -> set[str]:
    """Every secret string in a (real) config: under secret-looking keys, in `Secret`s,
    and URL passwords. Also remembers them for `redact_text`."""
    found: set[str] = set()

    def visit(obj: Any, under_secret: bool, depth: int) -> None:
        if depth > 64:
            return
        if isinstance(obj, Secret):
            visit(obj.get_secret_value(), True, depth + 1)
        elif isinstance(obj, bytes) and under_secret:
            found.add(obj.decode("utf-8", "replace"))
        elif isinstance(obj, str):
            if under_secret:
                found.add(obj)
            for match in _URL_PASSWORD.finditer(obj):
                found.add(match.group("pw"))
        elif isinstance(obj, dict):
            for key, value in obj.items():
                secret = under_secret or (isinstance(key, str) and is_secret_key(key))
                visit(value, secret, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                visit(value, under_secret, depth + 1)

    visit(config, False, 0)
    found = {v for v in found if len(v) >= MIN_SCRUB_LEN and v != REDACTED}
    remember(found)
    return found


# -- the trial side ----------------------------------------------------------------------------
def reveal(config: dict[str, Any]) -> dict[str, Any]:
    """The config the trainable receives: a copy with every `Secret` replaced by its value."""
    revealed: dict[str, Any] = {k: _reveal(v, 0) for k, v in config.items()}
    return revealed


def _reveal(obj: Any, depth: int) -> Any:
    if isinstance(obj, Secret):
        return obj.get_secret_value()
    if depth > 64:
        return obj
    if isinstance(obj, dict):
        return {k: _reveal(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_reveal(v, depth + 1) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_reveal(v, depth + 1) for v in obj)
    return obj


def scrub_failure(failure: _T, config: dict[str, Any]) -> _T:
    """Hide the trial's secrets in a failure record's message, traceback and stderr tail.

    Runs where the real config is known (the trial's process), so a secret the
    trainable put into an exception message never leaves it. Returns `failure`.
    """
    values = secret_values(config)
    for field in ("message", "traceback", "stderr_tail"):
        text = getattr(failure, field, None)
        if isinstance(text, str):
            setattr(failure, field, redact_text(text, values))
    return failure


class RedactingFilter(logging.Filter):
    """A logging filter that runs `redact_text` over each record's message."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's problem, not ours
            return True
        hidden = redact_text(message)
        if hidden != message:
            record.msg, record.args = hidden, None
        return True


def get_logger(name: str) -> logging.Logger:
    """`logging.getLogger(name)` with `RedactingFilter` on it.

    A logger's filters only see the records logged on it, not those of its children,
    so every tunefleet logger needs its own (the one on "tunefleet" does not cover
    "tunefleet.search").
    """
    logger = logging.getLogger(name)
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())
    return logger
