"""Request data from Redis cannot act outside its request (frontier/metapolicy.py): malicious queue
entries on a real redis-server are dead-lettered with their reason, never run; the add-on turns
Scrapy's file, s3 and ftp handlers off unless the project lists them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy import Request, Spider
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from distributed_crawler.addon import Addon
from distributed_crawler.core.scheduler import RedisScheduler
from distributed_crawler.frontier.codec import PayloadError, RequestCodec, read_payload
from distributed_crawler.frontier.seeds import SeedError, parse_seed


class _Spider(Spider):
    name = "evil"

    def parse(self, response: Any) -> None:
        return None

    def on_console(self, message: Any) -> None:
        return None

    def _secret(self, *args: Any) -> None:
        raise AssertionError("must never run")


def _payload(codec: RequestCodec, meta: dict[str, Any], url: str = "http://site.test/a") -> str:
    """A payload as an attacker writes it: valid JSON of our format, with the meta they chose."""
    d = {"v": 1, **read_payload(codec.encode(Request("http://site.test/a")))}
    d["meta"], d["url"] = meta, url
    return json.dumps(d)


def _malicious(tmp_path: Path) -> dict[str, tuple[dict[str, Any], str]]:
    return {
        "har": ({"playwright_context_kwargs": {"record_har_path": str(tmp_path / "x.har")}}, "record_har_path"),
        "video": ({"playwright_context_kwargs": {"record_video_dir": str(tmp_path)}}, "record_video_dir"),
        "profile": ({"playwright_context_kwargs": {"user_data_dir": str(tmp_path / "p")}}, "user_data_dir"),
        "tls": ({"playwright_context_kwargs": {"ignore_https_errors": True}}, "ignore_https_errors"),
        "csp": ({"playwright_context_kwargs": {"bypass_csp": True, "permissions": ["camera"]}}, "bypass_csp"),
        "ctx_proxy": ({"playwright_context_kwargs": {"proxy": {"server": "http://10.0.0.1:3128"}}}, "proxy"),
        "handler": ({"playwright_page_event_handlers": {"console": "_secret"}}, "not a public method"),
        "unknown_handler": ({"playwright_page_event_handlers": {"console": "nope"}}, "not a public method"),
        "init": ({"playwright_page_init_callback": "os.system"}, "names code to import"),
        "goto": ({"playwright_page_goto_kwargs": {"path": "/etc/passwd"}}, "may only set"),
        "proxy": ({"proxy": "http://169.254.169.254:80"}, "link-local"),
    }


def test_malicious_queue_entries_are_dead_lettered_never_run(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    redis_client.flushdb()
    crawler = get_crawler(_Spider, {"ADDONS": {"distributed_crawler.Addon": 0}, "REDIS_URL": redis_url})
    crawler.spider = spider = _Spider.from_crawler(crawler)
    crawler.stats.open_spider()
    scheduler = RedisScheduler.from_crawler(crawler)
    codec = RequestCodec(spider)
    cases = _malicious(tmp_path)
    members = [f"0:0:{_payload(codec, meta)}".encode() for meta, _ in cases.values()]
    members.append(f"0:0:{_payload(codec, {}, url='file:///etc/passwd')}".encode())
    members.append(f"0:0:{_payload(codec, {}, url='s3://bucket/key')}".encode())
    good = {
        "playwright_context_kwargs": {"locale": "de-DE"},
        "playwright_page_event_handlers": {"console": "on_console"},
    }
    members.append(f"0:0:{_payload(codec, good)}".encode())

    async def accept() -> None:
        parts = await scheduler.open_parts(spider)
        try:
            await parts.feeder.accept(members)
        finally:
            await scheduler.context.release()

    asyncio.run(accept())
    letters = [json.loads(x) for x in redis_client.lrange(scheduler.frontier.keys.failed, 0, -1)][::-1]
    assert len(letters) == len(members) - 1
    for (name, (_, why)), letter in zip(cases.items(), letters):
        assert why in letter["reason"], (name, letter["reason"])
    assert "is not http or https" in letters[-2]["reason"] and "is not http or https" in letters[-1]["reason"]
    assert scheduler.stats.get_value("scheduler/undecodable/meta") == len(cases)
    (accepted,) = scheduler.parts.held.buffer
    assert accepted.meta["playwright_context_kwargs"] == {"locale": "de-DE"}
    assert list(tmp_path.iterdir()) == []  # nothing wrote a file


def test_meta_that_is_itself_a_tagged_value_is_refused() -> None:
    """Meta is an object: a tagged tuple of pairs is refused, not made meta by Request's dict()."""
    codec = RequestCodec(_Spider())
    tagged = {"__dc_type__": "tuple", "items": [["download_timeout", 1]]}
    with pytest.raises(PayloadError, match="meta is a tagged tuple") as refused:
        codec.decode(_payload(codec, tagged))
    assert refused.value.kind == "meta"


def test_a_seed_asking_for_more_than_its_request_is_refused(tmp_path: Path) -> None:
    for meta, why in _malicious(tmp_path).values():
        seed = json.dumps({"url": "http://site.test/", "meta": meta})
        if "public method" in why:
            parse_seed(seed, 65536)  # handler names: checked by the node, which knows the spider
            continue
        with pytest.raises(SeedError, match=why):
            parse_seed(seed, 65536)


def test_the_addon_turns_file_s3_and_ftp_off_unless_the_project_lists_them() -> None:
    settings = Settings({"ADDONS": {"distributed_crawler.Addon": 0}})
    Addon().update_settings(settings)
    handlers = settings.getdict("DOWNLOAD_HANDLERS")
    assert handlers["file"] is None and handlers["s3"] is None and handlers["ftp"] is None
    own = Settings({"DOWNLOAD_HANDLERS": {"ftp": "scrapy.core.downloader.handlers.ftp.FTPDownloadHandler"}})
    Addon().update_settings(own)
    kept = own.getdict("DOWNLOAD_HANDLERS")
    assert kept["ftp"] == "scrapy.core.downloader.handlers.ftp.FTPDownloadHandler" and kept["file"] is None
