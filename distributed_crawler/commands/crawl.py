"""`scrapy crawl`, with a preflight: an unreachable Redis is one clear line and exit code 2.

Without it, a missing Redis surfaces as a traceback from deep inside the engine.
"""

from __future__ import annotations

import argparse
import sys

from scrapy.commands.crawl import Command as ScrapyCrawlCommand

from distributed_crawler.connection import RedisConfig, RedisUnavailable


class Command(ScrapyCrawlCommand):
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        try:
            RedisConfig.from_settings(self.settings).check_reachable()
        except (RedisUnavailable, ValueError) as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            self.exitcode = 2
            return
        super().run(args, opts)
