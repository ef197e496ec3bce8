"""The records of a source registry file (`dcrawl sources SPIDER import FILE`, docs/sources.md).

One source a record: CSV with a header, YAML (a list of mappings) or JSON Lines, chosen by the
file's extension. Every record is checked before anything is written, and each bad one is one
line (`line 4: deny ('[') is not a regex (...)`), so an import is whole or nothing. A `Source` is
also what the registry hash holds (its JSON), read back through the same checks: data from Redis
is untrusted.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from distributed_crawler.core.traps import registered_domain
from distributed_crawler.news.rules import parse_rules
from distributed_crawler.urlhost import url_host

FIELDS = (
    "url",
    "name",
    "country",
    "language",
    "tags",
    "allow",
    "deny",
    "subdomains",
    "max_depth",
    "rate",
    "recrawl",
    "extraction",
)
LIST_FIELDS = ("tags", "allow", "deny", "subdomains")
CSV_LIST_SEPARATOR = ";"  # a list in one CSV cell: `politics;national`
FORMATS = {".csv": "csv", ".yaml": "yaml", ".yml": "yaml", ".jsonl": "jsonl", ".ndjson": "jsonl"}
MAX_RECORDS = 200_000  # a file with more is refused whole (the registry is meant for ~100,000 sources)
MAX_TEXT = 200  # name, tag
MAX_PATTERN = 500  # one allow / deny regex
MAX_LIST = 100  # tags, allow, deny, subdomains of one source
MAX_RATE = 100.0  # requests/s of one source
_COUNTRY = re.compile(r"^[A-Z]{2}$")
_LANGUAGE = re.compile(r"^[a-z]{2,3}(?:-[A-Za-z0-9]{2,8})?$")
_LABELS = re.compile(r"^(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")


NOTHING: Mapping[str, Any] = MappingProxyType({})  # no recrawl / extraction rule: one shared empty mapping


class RecordError(ValueError):
    """One bad record, or a file that cannot be read: one line that says where and what to fix."""


@dataclass(frozen=True, slots=True)
class Source:
    """One registered source: `site` (its URL's host without `www.`) is its key in the registry."""

    site: str
    url: str
    name: str
    country: str = ""
    language: str = ""
    tags: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    subdomains: tuple[str, ...] = ()  # full host names; () = every host under `site`
    max_depth: int | None = None
    rate: float | None = None
    recrawl: Mapping[str, Any] = field(default_factory=lambda: NOTHING)
    extraction: Mapping[str, Any] = field(default_factory=lambda: NOTHING)

    def as_record(self) -> dict[str, Any]:
        """The fields as a file record (what `export` writes and `import` reads back), unset ones left out."""
        out: dict[str, Any] = {"url": self.url, "name": self.name}
        for name in FIELDS[2:]:
            value = getattr(self, name)
            if value in (None, "", (), {}):
                continue
            out[name] = (
                list(value) if isinstance(value, tuple) else (dict(value) if isinstance(value, Mapping) else value)
            )
        return out

    def to_json(self) -> str:
        return json.dumps(self.as_record(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def site_of(url: str) -> str:
    """The registry key of a source URL: its host, lowercased, without a leading `www.`."""
    host = url_host(url)
    return host[4:] if host.startswith("www.") and host.count(".") > 1 else host


def parse_record(raw: Mapping[str, Any], where: str) -> Source:
    """A record -> Source; RecordError (one line naming `where` and the field) when a field is wrong."""
    unknown = sorted(str(k) for k in raw if k not in FIELDS)
    if unknown:
        raise RecordError(f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(FIELDS)})")
    url = raw.get("url")
    if not isinstance(url, str) or not url.strip():
        raise RecordError(f"{where}: url is required (the site's home page, e.g. https://www.example.com/)")
    url = url.strip()
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok or len(url) > 2000:
        raise RecordError(f"{where}: url ({url[:80]!r}) must be an http(s) URL with a host, e.g. https://example.com/")
    url = urlunsplit((parts.scheme, parts.netloc.lower(), parts.path or "/", parts.query, ""))
    site = site_of(url)
    name = _text(raw.get("name"), "name", where) or registered_domain(site)
    country = _text(raw.get("country"), "country", where)
    if country and not _COUNTRY.match(country.upper()):
        raise RecordError(f"{where}: country ({country!r}) must be a two-letter ISO 3166 code, e.g. FR")
    language = _text(raw.get("language"), "language", where)
    if language and not _LANGUAGE.match(language.lower()):
        raise RecordError(f"{where}: language ({language!r}) must be an ISO 639 code, e.g. fr or pt-br")
    # values many sources share (country, tags, rules) are interned: one copy for 100,000 sources
    country, language = sys.intern(country.upper()), sys.intern(language.lower())
    tags = tuple(sys.intern(_text(t, "tags", where)) for t in _list(raw.get("tags"), "tags", where))
    allow = tuple(sys.intern(_pattern(p, "allow", where)) for p in _list(raw.get("allow"), "allow", where))
    deny = tuple(sys.intern(_pattern(p, "deny", where)) for p in _list(raw.get("deny"), "deny", where))
    subdomains = tuple(_subdomain(s, site, where) for s in _list(raw.get("subdomains"), "subdomains", where))
    return Source(
        site=site,
        url=url,
        name=name,
        country=country,
        language=language,
        tags=tuple(t for t in tags if t),
        allow=allow,
        deny=deny,
        subdomains=subdomains,
        max_depth=_depth(raw.get("max_depth"), where),
        rate=_rate(raw.get("rate"), where),
        recrawl=_recrawl(raw.get("recrawl"), where),
        extraction=_extraction(raw.get("extraction"), site, where),
    )


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _text(value: Any, name: str, where: str) -> str:
    if _empty(value):
        return ""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise RecordError(f"{where}: {name} ({value!r}) must be text")
    text = str(value).strip()
    if len(text) > MAX_TEXT or any(c in text for c in "\r\n\t"):
        raise RecordError(f"{where}: {name} ({text[:40]!r}...) must be one line of at most {MAX_TEXT} characters")
    return text


def _list(value: Any, name: str, where: str) -> list[Any]:
    """A list field: a list, or (CSV) one string of items separated by `;`."""
    if _empty(value):
        return []
    if isinstance(value, str):
        value = [v.strip() for v in value.split(CSV_LIST_SEPARATOR) if v.strip()]
    if not isinstance(value, list):
        raise RecordError(f"{where}: {name} ({value!r}) must be a list (in CSV: items separated by ';')")
    if len(value) > MAX_LIST:
        raise RecordError(f"{where}: {name} has {len(value)} items; at most {MAX_LIST}")
    return value


def _pattern(value: Any, name: str, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_PATTERN:
        raise RecordError(
            f"{where}: {name} ({value!r}) must be a regex over the URL of at most {MAX_PATTERN} characters"
        )
    try:
        re.compile(value)
    except re.error as exc:
        raise RecordError(f"{where}: {name} ({value!r}) is not a regex ({exc})") from None
    return value


def _subdomain(value: Any, site: str, where: str) -> str:
    """`regionale` or `regionale.example.com` -> `regionale.example.com` (a host under the site)."""
    host = str(value).strip().lower().rstrip(".") if isinstance(value, str) else ""
    if host and not host.endswith("." + site) and host != site:
        host = f"{host}.{site}"
    if not host or not _LABELS.match(host):
        raise RecordError(
            f"{where}: subdomains ({value!r}) must be a host of {site} (e.g. regionale or regionale.{site})"
        )
    return host


def _depth(value: Any, where: str) -> int | None:
    if _empty(value):
        return None
    if isinstance(value, bool) or not str(value).strip().isdigit():
        raise RecordError(f"{where}: max_depth ({value!r}) must be a whole number >= 0 (links from the home page)")
    return int(str(value).strip())


def _rate(value: Any, where: str) -> float | None:
    if _empty(value):
        return None
    try:
        rate = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        rate = math.nan
    if not (0 < rate <= MAX_RATE):
        raise RecordError(f"{where}: rate ({value!r}) must be requests per second, > 0 and <= {MAX_RATE:g}")
    return rate


def _json_object(value: Any, name: str, where: str) -> Mapping[str, Any]:
    if _empty(value):
        return NOTHING
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise RecordError(f"{where}: {name} ({value[:60]!r}) is not JSON ({exc})") from None
    if not isinstance(value, Mapping):
        raise RecordError(f"{where}: {name} ({value!r}) must be an object")
    return dict(value)


def _recrawl(value: Any, where: str) -> Mapping[str, Any]:
    """As RECRAWL_RULES: {"regex": seconds | [min_seconds, max_seconds]} (0 = never revisit)."""
    rules = _json_object(value, "recrawl", where)
    for pattern, interval in rules.items():
        _pattern(pattern, "recrawl pattern", where)
        bounds = interval if isinstance(interval, list) and len(interval) == 2 else [interval, interval]
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in bounds)
        if not numbers or not (bounds == [0, 0] or 0 < bounds[0] <= bounds[1]):
            raise RecordError(
                f"{where}: recrawl[{pattern!r}] ({interval!r}) must be seconds or [min_seconds, max_seconds], "
                "0 < min <= max"
            )
    return rules


def _extraction(value: Any, site: str, where: str) -> Mapping[str, Any]:
    """As one site's EXTRACTION_RULES entry: {"text": css, "published_at": css|xpath, "exclude": [css]}."""
    rule = _json_object(value, "extraction", where)
    if rule:
        try:
            parse_rules({site: rule})
        except ValueError as exc:
            problem = str(exc).split("; e.g.")[0].replace(f"EXTRACTION_RULES [{site!r}]", "extraction", 1)
            raise RecordError(f"{where}: {problem}") from None
    return rule


# -- files ---------------------------------------------------------------------------------------


def file_format(path: str) -> str:
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise RecordError(f"{path}: unknown format; name it .csv (with a header), .yaml or .jsonl")
    return fmt


def read_records(path: str) -> Iterator[tuple[str, Any]]:
    """(where, record) of each record of the file, in order; a record that does not parse comes as
    (where, RecordError) so every bad line is reported; a file that cannot be read raises RecordError."""
    fmt = file_format(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"cannot read {path} ({exc}); give a UTF-8 .csv, .yaml or .jsonl file") from None
    yield from {"csv": _csv, "yaml": _yaml, "jsonl": _jsonl}[fmt](text, path)


def _csv(text: str, path: str) -> Iterator[tuple[str, Any]]:
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    if "url" not in header:
        raise RecordError(f"{path}: the first line must be a header naming the columns, with url among them")
    for row in reader:
        where = f"line {reader.line_num}"
        if None in row:
            yield where, RecordError(f"{where}: more cells than the header has columns")
        else:
            yield where, {k: v for k, v in row.items() if not _empty(v)}


def _yaml(text: str, path: str) -> Iterator[tuple[str, Any]]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RecordError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
    if isinstance(data, Mapping) and "sources" in data:
        data = data["sources"]
    if not isinstance(data, list):
        raise RecordError(f"{path}: must be a YAML list of sources (- url: https://example.com/ ...)")
    for i, record in enumerate(data, 1):
        where = f"record {i}"
        yield where, record if isinstance(record, Mapping) else RecordError(f"{where}: must be a mapping with url")


def _jsonl(text: str, path: str) -> Iterator[tuple[str, Any]]:
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"line {lineno}"
        try:
            record = json.loads(line)
        except ValueError as exc:
            yield where, RecordError(f"{where}: not JSON ({exc})")
            continue
        yield where, record if isinstance(record, Mapping) else RecordError(f"{where}: must be a JSON object with url")


def load_sources(records: Iterable[tuple[str, Any]]) -> tuple[list[Source], list[str]]:
    """(sources, errors): every record checked, and no two naming the same site or the same name."""
    sources: list[Source] = []
    errors: list[str] = []
    sites: dict[str, str] = {}
    names: dict[str, str] = {}
    for count, (where, record) in enumerate(records, 1):
        if count > MAX_RECORDS:
            errors.append(f"more than {MAX_RECORDS} records: split the file")
            break
        try:
            if isinstance(record, RecordError):
                raise record
            source = parse_record(record, where)
            for seen, key, what in ((sites, source.site, "site"), (names, source.name.lower(), "name")):
                if key in seen:
                    raise RecordError(f"{where}: {what} {key} is also {seen[key]}; one record a source")
            sites[source.site], names[source.name.lower()] = where, where
            sources.append(source)
        except RecordError as exc:
            errors.append(str(exc))
    return sources, errors


def decode_source(raw: Any) -> Source | None:
    """A registry hash value -> Source, None when it is not one (the registry is untrusted)."""
    try:
        record = json.loads(raw)
        return parse_record(record, "registry") if isinstance(record, Mapping) else None
    except (TypeError, ValueError):
        return None


def write_records(sources: Iterable[Source], fmt: str) -> str:
    """The sources as a file of format `fmt` (csv, yaml, jsonl) that `import` reads back."""
    records = [s.as_record() for s in sources]
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)
    if fmt == "yaml":
        return str(yaml.safe_dump(records, allow_unicode=True, sort_keys=False))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow(
            {
                k: CSV_LIST_SEPARATOR.join(v) if k in LIST_FIELDS else (json.dumps(v) if isinstance(v, dict) else v)
                for k, v in r.items()
            }
        )
    return out.getvalue()
