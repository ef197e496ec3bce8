from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from scrapy import Request, Spider
from scrapy.http import FormRequest, JsonRequest

from distributed_crawler.frontier.codec import (
    PayloadError,
    RequestCodec,
    UnserializableRequestError,
    payload_url,
    read_payload,
    write_payload,
)


class DemoSpider(Spider):
    name = "demo"

    def parse_item(self, response):
        pass

    def on_error(self, failure):
        pass

    def _private(self, response):
        pass


@pytest.fixture
def codec() -> RequestCodec:
    return RequestCodec(DemoSpider())


def test_round_trip_keeps_every_field(codec: RequestCodec) -> None:
    spider = codec.spider
    request = Request(
        "http://example.com/a?x=1",
        method="PUT",
        body=b"\x00\xffbinary body",
        headers={"X-Token": "abc", "Accept": ["text/html", "application/json"]},
        cookies={"session": "s1"},
        meta={"depth": 2, "nested": {"list": [1, "two", None, True]}},
        priority=7,
        dont_filter=True,
        callback=spider.parse_item,
        errback=spider.on_error,
        cb_kwargs={"page": 3},
        flags=["seed"],
        encoding="latin-1",
    )
    decoded = codec.decode(codec.encode(request))
    assert type(decoded) is Request
    assert decoded.url == request.url
    assert decoded.method == "PUT"
    assert decoded.body == b"\x00\xffbinary body"
    assert decoded.headers.getlist("Accept") == [b"text/html", b"application/json"]
    assert decoded.headers["X-Token"] == b"abc"
    assert decoded.cookies == {"session": "s1"}
    assert decoded.meta == request.meta
    assert decoded.priority == 7 and decoded.dont_filter
    assert decoded.callback == spider.parse_item and decoded.errback == spider.on_error
    assert decoded.cb_kwargs == {"page": 3}
    assert decoded.flags == ["seed"] and decoded.encoding == "latin-1"


def test_round_trip_form_and_json_requests(codec: RequestCodec) -> None:
    form = codec.decode(codec.encode(FormRequest("http://e.com/f", formdata={"a": "1"})))
    assert type(form) is FormRequest and form.body == b"a=1" and form.method == "POST"
    js = codec.decode(codec.encode(JsonRequest("http://e.com/j", data={"k": [1, 2]})))
    assert type(js) is JsonRequest and js.body == b'{"k": [1, 2]}'


def test_private_meta_is_not_shipped(codec: RequestCodec) -> None:
    request = Request("http://e.com/", meta={"_dc_lease": "1:0:x", "download_slot": "e.com", "keep": 1})
    assert codec.decode(codec.encode(request)).meta == {"keep": 1}


def test_equal_requests_make_distinct_payloads(codec: RequestCodec) -> None:
    request = Request("http://e.com/", dont_filter=True)
    assert codec.encode(request) != codec.encode(request)


def test_unserializable_meta_names_the_key(codec: RequestCodec) -> None:
    request = Request("http://e.com/", meta={"ok": 1, "item": {"when": object()}})
    with pytest.raises(UnserializableRequestError, match=r"meta\['item'\]\['when'\] \(object\)"):
        codec.encode(request)
    # bytes travel tagged now (tests/compat/test_codec_types.py); an arbitrary object never does
    with pytest.raises(UnserializableRequestError, match=r"cb_kwargs\['x'\] \(PosixPath\)"):
        codec.encode(Request("http://e.com/", cb_kwargs={"x": Path("/etc")}))


class CustomRequest(Request):
    pass


def test_allow_list_rejects_unknown_class_both_ways(codec: RequestCodec) -> None:
    with pytest.raises(UnserializableRequestError, match="REQUEST_CLASS_ALLOWLIST"):
        codec.encode(CustomRequest("http://e.com/"))
    allowing = RequestCodec(codec.spider, [f"{__name__}.CustomRequest"])
    payload = allowing.encode(CustomRequest("http://e.com/"))
    assert type(allowing.decode(payload)) is CustomRequest
    with pytest.raises(PayloadError, match="not allow-listed"):
        codec.decode(payload)
    forged = payload.replace(f"{__name__}.CustomRequest", "os.system")
    with pytest.raises(PayloadError, match="not allow-listed"):
        allowing.decode(forged)


def test_callbacks_must_be_public_spider_methods(codec: RequestCodec) -> None:
    payload = codec.encode(Request("http://e.com/"))
    for name in ("_private", "__init__", "no_such_method"):
        with pytest.raises(PayloadError):
            codec.decode(payload.replace('"callback":null', f'"callback":"{name}"'))


def test_callbacks_are_named_without_scanning_the_spider(codec: RequestCodec, monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect

    spider = codec.spider
    monkeypatch.setattr(inspect, "getmembers", lambda *a, **k: pytest.fail("scanned the spider's members"))
    d = read_payload(codec.encode(Request("http://e.com/", callback=spider.parse_item, errback=spider.on_error)))
    assert (d["callback"], d["errback"]) == ("parse_item", "on_error")
    monkeypatch.undo()

    # A method reachable only under another name, or bound to another spider: Scrapy's scan decides.
    def hidden(self: DemoSpider, response: object) -> None:
        pass

    DemoSpider.visible = hidden  # type: ignore[attr-defined]
    try:
        callback = spider.visible  # type: ignore[attr-defined]
        assert read_payload(codec.encode(Request("http://e.com/", callback=callback)))["callback"] == "visible"
    finally:
        del DemoSpider.visible  # type: ignore[attr-defined]
    with pytest.raises(UnserializableRequestError):
        codec.encode(Request("http://e.com/", callback=lambda response: None))
    other = DemoSpider()
    assert read_payload(codec.encode(Request("http://e.com/", callback=other.parse_item)))["callback"] == "parse_item"


class Exploit:
    """Unpickling this would create a file; decoding must never unpickle."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize(
    "garbage", [b"", b"not json", b"[1,2]", b'{"v": 99}', b"\xff\xfe", b'{"v":1,"class":"scrapy.http.request.Request"}']
)
def test_garbage_is_a_payload_error(codec: RequestCodec, garbage: bytes) -> None:
    with pytest.raises(PayloadError):
        codec.decode(garbage)


def test_pickle_bytes_are_never_unpickled(codec: RequestCodec, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Exploit(marker))
    with pytest.raises(PayloadError):
        codec.decode(payload)
    assert not marker.exists()


def test_pool_proxy_and_its_credentials_never_reach_the_payload(codec: RequestCodec) -> None:
    from scrapy.downloadermiddlewares.httpproxy import HttpProxyMiddleware

    pooled = Request(
        "http://example.com/p",
        headers={"X-Keep": "1"},
        meta={"proxy": "http://crawler:s3cret@127.0.0.1:3128", "_dc_proxy": "http://crawler:***@127.0.0.1:3128"},
    )
    HttpProxyMiddleware().process_request(pooled)  # as in a crawl: credentials -> header
    assert pooled.headers.get("Proxy-Authorization") and pooled.meta["_auth_proxy"]
    payload = codec.encode(pooled)
    assert "s3cret" not in payload and "Proxy-Authorization" not in payload and "3128" not in payload
    decoded = codec.decode(payload)
    assert not {"proxy", "_auth_proxy", "_dc_proxy"} & set(decoded.meta)
    assert decoded.headers["X-Keep"] == b"1"
    # A proxy the spider set itself (no pool marker) is the request's own: it travels.
    own = Request("http://example.com/o", meta={"proxy": "http://proxy.example:8888"})
    assert codec.decode(codec.encode(own)).meta["proxy"] == "http://proxy.example:8888"
    # ... unless it names a private address (ALLOWED_PRIVATE_NETWORKS): Redis may not pick the node's path
    internal = codec.encode(Request("http://example.com/o", meta={"proxy": "http://127.0.0.1:8888"}))
    with pytest.raises(PayloadError, match="127.0.0.1 is loopback"):
        codec.decode(internal)


# -- the compact payload format, and the JSON format written before it (docs/frontier.md) ---------
def test_a_link_is_its_url_and_the_fields_off_their_default(codec: RequestCodec) -> None:
    spider = codec.spider
    url = "https://www.example.com/2026/05/04/world/article-headline-a1b2c3d4e5.html"
    assert codec.encode(Request(url, callback=spider.parse, meta={"depth": 3})) == f'{url} {{"d":3}}'
    assert codec.encode(Request(url, callback=spider.parse)) == url  # everything at its default
    assert codec.encode(Request(url)) == f'{url} {{"callback":null}}'  # no callback is not "parse"
    assert codec.decode(url).callback == spider.parse
    assert codec.decode(f'{url} {{"callback":null}}').callback is None
    # the slot only when it is not the URL's own host; again always last (host_pop.lua reads it there)
    assert codec.encode(Request(url, callback=spider.parse), slot="www.example.com") == url
    again = codec.encode(Request(url, callback=spider.parse, meta={"depth": 1}), slot="example.com", again=True)
    assert again == f'{url} {{"d":1,"slot":"example.com","again":1}}'
    assert read_payload(again)["slot"] == "example.com" and codec.decode(again).meta == {"depth": 1}


def test_a_referer_of_the_same_origin_travels_as_its_path(codec: RequestCodec) -> None:
    spider = codec.spider
    url = "https://e.com/2026/a.html"
    same = Request(url, callback=spider.parse, headers={"Referer": "https://e.com/world/"}, meta={"depth": 2})
    assert codec.encode(same) == f'{url} {{"r":"/world/","d":2}}'
    assert codec.decode(codec.encode(same)).headers.getlist("Referer") == [b"https://e.com/world/"]
    for other in ("https://e.com:8443/x", "http://e.com/x", "https://www.e.com/x"):  # not this origin: a header
        request = Request(url, callback=spider.parse, headers={"Referer": other, "X-A": "1"})
        payload = codec.encode(request)
        assert '"r"' not in payload
        assert codec.decode(payload).headers.getlist("Referer") == [other.encode()]
    with_more = Request(url, callback=spider.parse, headers={"Referer": "https://e.com/", "X-A": "1"})
    decoded = codec.decode(codec.encode(with_more))
    assert decoded.headers["Referer"] == b"https://e.com/" and decoded.headers["X-A"] == b"1"


def test_payloads_written_before_the_compact_format_are_read(codec: RequestCodec) -> None:
    """JSON payloads as the previous release wrote them (every field, "v": 1, "id", "slot")."""
    old = (
        '{"v":1,"id":"2ada6204c66b5adc","class":"scrapy.http.request.Request","url":"https://e.com/a",'
        '"method":"GET","callback":"parse_item","errback":null,"headers":{"Referer":["https://e.com/"]},'
        '"body":"","cookies":{},"meta":{"depth":1},"encoding":"utf-8","priority":3,"dont_filter":false,'
        '"flags":[],"cb_kwargs":{},"slot":"e.com","again":1}'
    )
    request = codec.decode(old)
    assert (request.url, request.callback, request.priority, request.meta) == (
        "https://e.com/a",
        codec.spider.parse_item,
        3,
        {"depth": 1},
    )
    assert request.headers["Referer"] == b"https://e.com/"
    assert codec.decode('{"v":1,"class":"scrapy.http.request.Request","url":"https://e.com/"}').callback is None
    assert payload_url(old) == "https://e.com/a"
    # rewritten (dcrawl failed --requeue): the compact format, the same request
    again = write_payload(read_payload(old), "e.com", True)
    assert again.startswith("https://e.com/a {") and again.endswith(',"again":1}')
    assert codec.decode(again).callback == codec.spider.parse_item and codec.decode(again).priority == 3


def test_a_url_the_compact_format_cannot_hold_is_written_as_json(codec: RequestCodec) -> None:
    payload = write_payload({"url": "data:text/plain,hi there", "callback": None})
    assert payload.startswith('{"v":1,') and payload_url(payload) == "data:text/plain,hi there"


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ('https://e.com/ {"d":"3"}', "not an int"),
        ('https://e.com/ {"d":true}', "not an int"),
        ('https://e.com/ {"r":"e.com/x"}', "not a path"),
        ('https://e.com/ {"r":5}', "not a path"),
        ("https://e.com/ [1]", "not a JSON object"),
        ("https://e.com/ {oops", "not JSON"),
        ('https://e.com/ {"meta":[1],"d":2}', "field 'meta'"),
        ('https://e.com/ {"callback":"_private"}', "not a public spider method"),
        ('https://e.com/ {"class":"os.system"}', "not allow-listed"),
        ("/2026/05/04/a.html", "scheme"),  # a host queue's path form never reaches a node: garbage
        ("ftp://e.com/x", "scheme"),
    ],
)
def test_a_malformed_compact_payload_is_a_payload_error(codec: RequestCodec, payload: str, why: str) -> None:
    with pytest.raises(PayloadError, match=why):
        codec.decode(payload)
