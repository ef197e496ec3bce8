"""redact.py: every URL shape the crawler logs (Redis, proxies, databases) loses its password."""

from __future__ import annotations

import pytest

from distributed_crawler.redact import mask_url, safe_error_text, scrub, url_password


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        # Redis (REDIS_URL)
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:secret@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:secret@host:6380/1", "rediss://user:***@host:6380/1"),
        ("redis://user:p%40ss@host/0", "redis://user:***@host/0"),
        ("unix:///tmp/redis.sock", "unix:///tmp/redis.sock"),
        # proxies (PROXY_LIST, dcrawl proxies), malformed ones included
        ("http://user:secret@host:3128", "http://user:***@host:3128"),
        ("http://host:3128", "http://host:3128"),
        ("http://user:secret@host:notaport", "http://user:***@host:notaport"),
        ("http://user:secret@host:99999", "http://user:***@host:99999"),
        ("https://user:secret@[::1]:443", "https://user:***@[::1]:443"),
        # databases (STORAGE_URL)
        ("postgresql://user:secret@host:5432/db", "postgresql://user:***@host:5432/db"),
        ("postgres://user:secret@host/db", "postgres://user:***@host/db"),
        ("postgresql://user:p%40ss%2Fw@host/db", "postgresql://user:***@host/db"),
        ("postgresql://user:pa@ss@host/db", "postgresql://user:***@host/db"),  # unencoded @
        ("postgresql://user:pa/ss@host/db", "postgresql://user:***@host/db"),  # unencoded /
        ("postgresql://user:pa?ss@host/db", "postgresql://user:***@host/db"),  # unencoded ?
        ("postgresql://:secret@host/db", "postgresql://:***@host/db"),
        ("postgresql://user:secret@[::1]:5432/db", "postgresql://user:***@[::1]:5432/db"),
        ("postgresql://user:@host/db", "postgresql://user:***@host/db"),
        ("postgresql://user@host/db", "postgresql://user@host/db"),
        ("postgresql://host/db", "postgresql://host/db"),
        (
            "postgresql://user:secret@host/db?sslmode=require&application_name=a@b",
            "postgresql://user:***@host/db?sslmode=require&application_name=a@b",
        ),
        (
            "postgresql://host/db?user=u&password=secret&sslmode=require",
            "postgresql://host/db?user=u&password=***&sslmode=require",
        ),
        ("postgresql://host/db?PASSWORD=secret", "postgresql://host/db?PASSWORD=***"),
        ("mysql://user:secret@host:3306/db", "mysql://user:***@host:3306/db"),
        ("mariadb://user:secret@host/db", "mariadb://user:***@host/db"),
        ("mysql+pymysql://user:secret@host/db", "mysql+pymysql://user:***@host/db"),
        ("mysql://user:se%40cret@host/db", "mysql://user:***@host/db"),
        ("mysql://user:se@cret/x:y@127.0.0.1:3306/db", "mysql://user:***@127.0.0.1:3306/db"),  # unencoded @ / :
        ("mysql://user:secret@[::1]:3306/db", "mysql://user:***@[::1]:3306/db"),
        (
            "mysql://user:secret@localhost/db?unix_socket=/run/mysqld/mysqld.sock",
            "mysql://user:***@localhost/db?unix_socket=/run/mysqld/mysqld.sock",
        ),
        ("mysql://root@host/db", "mysql://root@host/db"),
        ("host=h user=u password=secret dbname=d", "host=h user=u password=*** dbname=d"),
        ("host=h password='se cret' dbname=d", "host=h password=*** dbname=d"),
        ("host=h password = secret", "host=h password = ***"),
        ("sqlite:///data/items.db", "sqlite:///data/items.db"),
        ("sqlite:////abs/items.db", "sqlite:////abs/items.db"),
        ("items.db", "items.db"),
        ("", ""),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked
    assert "secret" not in mask_url(url) and "se cret" not in mask_url(url)


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("redis://:secret@host/0", "secret"),
        ("postgresql://user:pa@ss@host/db", "pa@ss"),
        ("mysql://user:pa@ss/w:x@host:3306/db", "pa@ss/w:x"),
        ("postgresql://user:@host/db", None),
        ("postgresql://host/db?password=secret&x=1", "secret"),
        ("host=h password='se cret'", "se cret"),
        ("http://host:3128", None),
        ("", None),
    ],
)
def test_url_password(url: str, password: str | None) -> None:
    assert url_password(url) == password


def test_scrub_hides_the_password_as_written_and_decoded() -> None:
    url = "postgresql://user:p%40ss@host/db"
    assert scrub("auth failed for p%40ss and p@ss", url) == "auth failed for *** and ***"
    assert scrub("nothing to hide", "http://host:3128") == "nothing to hide"
    assert scrub("line one\nline two", "redis://host") == "line one\nline two"  # text kept as is


def test_mysql_error_texts_lose_the_password() -> None:
    url = "mysql://crawler:p%40ss/w@db:3306/items"
    text = safe_error_text(RuntimeError("(1045, \"Access denied for 'crawler' p@ss/w and p%40ss/w\")"), url)
    assert "p@ss" not in text and "p%40ss" not in text and "Access denied" in text


def test_safe_error_text_is_one_line_without_the_password() -> None:
    exc = RuntimeError('connection to "host" failed:\n  FATAL: password authentication failed (s3cret)')
    text = safe_error_text(exc, "postgresql://crawler:s3cret@host/items")
    assert "\n" not in text and "s3cret" not in text and "FATAL" in text
    assert safe_error_text(ValueError(""), "x") == "ValueError"
    assert safe_error_text("plain  text", "host=h password=pw") == "plain text"
