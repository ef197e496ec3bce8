"""TLS (`rediss://`) connection failures, named by their cause with the setting that fixes them.

A TLS failure reaches us as redis-py's ConnectionError (or a Cluster error wrapping one) whose text
quotes OpenSSL; "cannot reach Redis, start redis-server" would send the operator the wrong way.
The settings a TLS connection takes (connection/params.py): `ssl_ca_certs`, `ssl_certfile`,
`ssl_keyfile`, ... in REDIS_PARAMS or as query parameters of REDIS_URL.
"""

from __future__ import annotations

from urllib.parse import urlsplit

CA_FIX = (
    "give the CA file that signed it: end REDIS_URL with `?ssl_ca_certs=/path/to/ca.crt`, or set "
    'REDIS_PARAMS to {"ssl_ca_certs": "/path/to/ca.crt"} (docs/security.md#redis-acl-and-tls)'
)


def _texts(exc: BaseException) -> str:
    """The error's text with the texts of the errors it was raised from (a Cluster wraps them)."""
    parts = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(str(current))
        current = current.__cause__ or current.__context__
    return " ".join(parts)


def tls_hint(url: str, exc: BaseException) -> str | None:
    """What to do about a connection failure that is a TLS problem, or None when it is not one."""
    text = _texts(exc)
    lower = text.lower()
    secure = urlsplit(url).scheme == "rediss"
    if "certificate_verify_failed" in lower or "certificate verify failed" in lower:
        if "mismatch" in lower:
            return (
                "the server's TLS certificate does not name the host of REDIS_URL: connect by a name or "
                "address the certificate lists (its subjectAltName), or reissue the certificate"
            )
        if "expired" in lower:
            return "the server's TLS certificate has expired: renew it (tls-cert-file in redis.conf)"
        return f"the server's TLS certificate cannot be verified with the CAs this machine trusts: {CA_FIX}"
    if "certificate required" in lower or "certificate_required" in lower:
        return (
            "the server asks for a client certificate (tls-auth-clients): set REDIS_PARAMS "
            '{"ssl_certfile": "/path/client.crt", "ssl_keyfile": "/path/client.key"} '
            "(or the same as query parameters of REDIS_URL)"
        )
    if secure and ("wrong version number" in lower or "wrong_version_number" in lower or "record layer" in lower):
        return "the server does not speak TLS on this port: use redis://, or the port of its tls-port"
    if secure and "timeout connecting" in lower:
        return (
            "no TLS handshake within the timeout: is this port the server's tls-port? "
            "(a port without TLS never answers one; use redis:// for it)"
        )
    if not secure and ("reset by peer" in lower or "closed by server" in lower):
        return "the server closed the connection at once: if this port is its tls-port, use rediss://"
    return None
