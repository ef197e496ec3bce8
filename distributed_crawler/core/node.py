"""This node's name in heartbeats, leases and dead letters."""

from __future__ import annotations

import os
import socket

from scrapy.settings import BaseSettings

from distributed_crawler.defaults import SettingsReader


def node_id_from_settings(settings: BaseSettings) -> str:
    """`NODE_ID` (env var or setting), else `<host>-<pid>`: unique per worker process."""
    return SettingsReader(settings).str("NODE_ID") or f"{socket.gethostname()}-{os.getpid()}"
