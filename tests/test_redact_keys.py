"""Rule 1 of `tunefleet._redact`: which config keys look secret, by their word parts."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tunefleet._redact import REDACTED, is_secret_key, redact, redact_text

SECRET = ["key", "apikey", "authkey", "token", "secret", "password", "passwd", "pwd"]
SECRET += ["passphrase", "credential", "auth", "oauth", "bearer", "pat", "jwt", "cookie"]
HARMLESS = ["hf", "openai", "github", "db", "my", "prod", "session", "client", "aws", "wandb"]
HARMLESS += ["lr", "batch", "hidden", "layer", "dropout", "tokenizer", "monkey", "author"]
HARMLESS += ["secretary", "passage", "patience", "keyboard", "turkey", "dim", "v2", "old"]
COUNTS = ["max", "min", "num", "n", "per", "count", "limit", "total", "size", "len"]


@pytest.mark.parametrize(
    "key",
    [
        *["api_keys", "tokens", "hf_tokens", "openai_apikeys", "authkeys", "github_pat"],
        *["jwt", "session_cookie", "sessionCookies", "HF_TOKENS", "hftokens", "github-pats"],
        *["jwts", "client.secrets", "db_passwords", "credentials", "apiKeys", "OAuthTokens"],
    ],
)
def test_plural_and_compound_secret_keys(key: str) -> None:
    assert is_secret_key(key)
    assert redact({key: "s3cr3t-value"}) == {key: REDACTED}


@pytest.mark.parametrize(
    "key",
    [
        *["keys_per_batch", "max_tokens", "tokenizer", "monkey", "author", "maxNewTokens"],
        *["num_keys", "n_tokens", "tokens_per_second", "maxtokens", "metric_keys", "keys"],
        *["total-tokens", "tokens.count", "patience", "authors", "tokenizers", "monkeys"],
    ],
)
def test_counts_and_look_alikes_are_not_secret(key: str) -> None:
    assert not is_secret_key(key)


def test_numbers_under_secret_keys_survive() -> None:
    assert redact({"key_dim": 64, "tokens": 3}) == {"key_dim": 64, "tokens": 3}


def test_plural_secret_names_in_free_text() -> None:
    out = redact_text("connect(hf_tokens='hf-abcdef123') ?api_keys=sk-98765&max_tokens=512")
    assert "hf-abcdef123" not in out and "sk-98765" not in out and "max_tokens=512" in out


def _join(parts: list[str], style: str) -> str:
    if style == "camel":
        return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])
    joined = {"snake": "_", "kebab": "-", "dot": "."}[style].join(parts)
    return joined.upper() if style == "snake" and len(joined) % 2 else joined


STYLES = st.sampled_from(["snake", "kebab", "dot", "camel"])
_harmless = st.lists(st.sampled_from(HARMLESS), max_size=3)


@given(_harmless, st.sampled_from(SECRET), st.booleans(), _harmless, STYLES)
def test_keys_built_from_a_secret_word_match(
    before: list[str], word: str, plural: bool, after: list[str], style: str
) -> None:
    parts = [*before, word + "s" * plural, *after]
    assume(parts != ["keys"])  # "keys" alone names a dict's keys (the module doc)
    assert is_secret_key(_join(parts, style)), parts


@given(st.lists(st.sampled_from(HARMLESS + COUNTS), min_size=1, max_size=4), STYLES)
def test_keys_built_from_harmless_words_do_not_match(parts: list[str], style: str) -> None:
    key = _join(parts, style)
    assert not is_secret_key(key), key


@given(_harmless, st.sampled_from(COUNTS), st.sampled_from(SECRET), _harmless, STYLES)
def test_plural_secret_word_with_a_count_word_is_a_count(
    before: list[str], count: str, word: str, after: list[str], style: str
) -> None:
    key = _join([*before, count, word + "s", *after], style)
    assert not is_secret_key(key), key
