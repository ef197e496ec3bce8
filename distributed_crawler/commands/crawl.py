"""`scrapy crawl`, with a preflight: an unreachable Redis or storage is one clear line, exit 2.

Without it, a missing Redis surfaces as a traceback from deep inside the engine, and a missing
database as a crawl that closes at once with exit code 0.
"""

from __future__ import annotations

import argparse
import sys

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.utils.misc import load_object

from distributed_crawler.connection import RedisConfig, RedisUnavailable
from distributed_crawler.pipelines import StorageConfig, StoragePipeline
from distributed_crawler.storage import StorageError, open_storage


class Command(ScrapyCrawlCommand):
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        try:
            RedisConfig.from_settings(self.settings).check_reachable()
            if any(StoragePipeline is _load(p) for p in self.settings.getdict("ITEM_PIPELINES")):
                open_storage(StorageConfig.from_settings(self.settings).url).close()
        except (RedisUnavailable, StorageError, ValueError) as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            self.exitcode = 2
            return
        super().run(args, opts)


def _load(path: object) -> object:
    try:
        return load_object(path) if isinstance(path, str) else path
    except (ImportError, NameError, ValueError):
        return None
