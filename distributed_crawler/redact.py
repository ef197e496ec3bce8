"""Hide credentials in URLs and in error texts that quote them, for logs, stats and messages.

One job, every URL shape the crawler is given: Redis (`redis://:pw@host`, `rediss://user:pw@host`),
proxies (`http://user:pw@host:port`, malformed ones included), databases (`postgresql://u:pw@h/db`,
`?password=` query parameters, libpq `key=value` conninfo strings). Passwords are often pasted
unencoded, so `@`, `/`, `?` or `#` inside one must not leak its tail: erring can only mask too much.
Imports nothing of ours, so any layer may use it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"

_KV_PASSWORD_RE = re.compile(r"""(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]+)""", re.IGNORECASE)
_QUERY_PASSWORD_RE = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)


def _userinfo_end(rest: str) -> int:
    """Index of the `@` closing the userinfo of `rest` (URL minus scheme), or -1.

    Prefer the last `@` before any query or fragment delimiter (tolerating unencoded `@` and `/`
    in the password, e.g. `user:pa@ss/w@host/db`, while an `@` in a query stays put); failing
    that, the last `@` at all. An `@` in a path can only make it mask more.
    """
    clean = -1
    for i, ch in enumerate(rest):
        if ch in "?#":
            break
        if ch == "@":
            clean = i
    return clean if clean != -1 else rest.rfind("@")


def mask_url(url: str) -> str:
    """`scheme://user:secret@host/...` -> `scheme://user:***@host/...`, for logs and errors.

    A `password=` query parameter or libpq `key=value` entry is masked too; a URL without a
    password comes back unchanged.
    """
    if not url:
        return url
    sep = url.find("://")
    if sep == -1:  # libpq key=value conninfo ("host=h user=u password=secret")
        return _KV_PASSWORD_RE.sub(rf"\g<1>{MASK}", url)
    head, rest = url[: sep + 3], url[sep + 3 :]
    at = _userinfo_end(rest)
    if at != -1:
        userinfo, hostpart = rest[:at], rest[at + 1 :]
        if ":" in userinfo:
            rest = f"{userinfo.split(':', 1)[0]}:{MASK}@{hostpart}"
    return head + _QUERY_PASSWORD_RE.sub(rf"\g<1>{MASK}", rest)


def url_password(url: str) -> str | None:
    """The raw password embedded in `url`, if any (to scrub texts that quote it)."""
    sep = url.find("://")
    if sep == -1:
        m = _KV_PASSWORD_RE.search(url)
        return m.group(2).strip("'") if m else None
    rest = url[sep + 3 :]
    at = _userinfo_end(rest)
    if at != -1 and ":" in rest[:at]:
        return rest[:at].split(":", 1)[1] or None
    m = _QUERY_PASSWORD_RE.search(rest)
    return (m.group(2) or None) if m else None


def scrub(text: str, url: str) -> str:
    """`text` with the password of `url` (as written and percent-decoded) replaced by `***`."""
    password = url_password(url)
    if password:
        for secret in {password, unquote(password)}:
            if secret:
                text = text.replace(secret, MASK)
    return text


def safe_error_text(exc: BaseException | str, url: str) -> str:
    """An error as one line, with the password of `url` scrubbed: safe to log."""
    return scrub(" ".join(str(exc).split()) or type(exc).__name__, url)
