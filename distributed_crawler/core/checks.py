"""What an admission check is: a function of a request that may refuse it, with a reason.

Its own module so the modules that define checks (core/admission.py, core/traps.py) and the one that
lists them in order (core/admission.py `CHECKS`) do not import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from scrapy.exceptions import IgnoreRequest

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings


class Refusal(NamedTuple):
    reason: str  # snake_case: stat dc/refused/<reason>, the dead letter's reason, a `dcrawl hosts` column
    detail: str  # one line for the operator: what was refused and which setting decides


class ForbiddenByRobots(IgnoreRequest):
    """The site's robots.txt disallows the request (downloadermiddlewares/robotstxt.py raises it
    where Scrapy raises a bare IgnoreRequest): a refusal of the site, which coverage names."""


Check = Callable[["Request"], Refusal | None]
CheckFactory = Callable[["BaseSettings"], Check | None]
