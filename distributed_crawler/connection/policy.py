"""One Redis failure policy per node: what a call does when Redis is away depends on what it is for.

Every Redis call of a node is run through the node's `RedisPolicy` (one per crawler, on
`core.context.RedisContext`) and names its `Purpose`. The table `BEHAVIOUR` says what a transient
error (connection refused, timeout, failover, `maxmemory`: `TRANSIENT_ERRORS`) does to it:

- RETRY   (ack, push, dead letter): the call carries work that must land (at-least-once): it is
          retried with capped, jittered backoff until it succeeds or the node stops.
- WAIT    (lease, seeds, a download's permit): the call asks for work or a go-ahead; while Redis
          is away there is none: the caller waits, and wakes as soon as Redis is back.
- DEGRADE (heartbeat, stats, shared caches): skip this round, return `default`; the caller keeps
          its counts locally and tries again next time.
- STOP    (operator reads: CLI, dashboard): raise `RedisUnreachable`, one line that names the
          (masked) URL, the reason and the fix; the caller shows it (nothing is logged).

The node logs one line when an outage starts and one when it ends (a failure within `GRACE` of
Redis answering again is the same outage), whatever the number of calls and purposes caught in
it, and counts `redis/outages`, `redis/outage_seconds` and, per purpose,
`redis/<purpose>/<retried|waited|degraded|stopped>` (calls that met the outage). Errors that are
not transient (a WRONGTYPE key, a script refusing data) are the caller's: `on_error` logs them
with their fix (then RETRY/WAIT back off and try again, DEGRADE returns `default`), or they
propagate.

A refusal by the Redis ACL (NOPERM: the user's rule lacks a command, a key or a channel, e.g. an
operator changed it mid-crawl) is neither: the policy logs one ERROR a minute per kind of refusal,
naming what was refused and the rule the node needs, and counts `redis/denied`; RETRY/WAIT calls
back off (up to `max_delay`) and try again, so the node resumes, work intact, as soon as the rule
is fixed (one WARNING per purpose: "push calls work again after 12.3s of ACL refusals"); DEGRADE
returns `default`; STOP raises `ReadDenied` (one line, a `RedisUnreachable`). The node is not
stopped: its leases and outbox stay as they are, nothing is lost, and a restart would only meet
the same rule at start (commands/crawl.py checks it: exit code 2).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from redis.exceptions import OutOfMemoryError, RedisError

from distributed_crawler.connection.clients import TRANSIENT_ERRORS, RedisUnavailable
from distributed_crawler.connection.permissions import (
    PermissionDenied,
    denied_command,
    fix_for_commands,
    is_permission_error,
    what_was_denied,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_DELAY = 0.1  # seconds before the first retry
MAX_DELAY = 5.0  # backoff cap: a node notices Redis is back within ~this (or at once, see WAIT)
# A failure this soon after Redis answered again is the same outage: a full Redis answers reads
# but refuses writes, a failover answers on some connections first; one episode, not a line a flap.
GRACE = 10.0
DENIED_LOG_SECONDS = 60.0  # an ACL refusal that goes on: one ERROR per kind this often


class Purpose(enum.Enum):
    """What a Redis call is for (its value names its stats: `redis/<value>/...`)."""

    LEASE = "lease"  # take work from the frontier
    ACK = "ack"  # release finished work (its lease)
    PUSH = "push"  # write new work: discovered links, retries, recrawls
    SEED = "seed"  # take seeds from the start URLs key
    DEADLETTER = "deadletter"  # move a request that cannot be fetched to the failed list
    PERMIT = "permit"  # a download's cluster-wide go-ahead: politeness token, proxy pick
    HEARTBEAT = "heartbeat"  # node liveness and its periodic upkeep (lease and seed hold renewal)
    STATS = "stats"  # shared counters and outcomes (page and refusal counts, proxy health, alerts, gauges)
    CACHE = "cache"  # shared hints a node can do without (robots.txt, render verdicts, validators, host blocks)
    READ = "read"  # an operator's read (CLI, dashboard)


class Behaviour(enum.Enum):
    RETRY = "retried"
    WAIT = "waited"
    DEGRADE = "degraded"
    STOP = "stopped"


BEHAVIOUR: MappingProxyType[Purpose, Behaviour] = MappingProxyType(
    {
        Purpose.LEASE: Behaviour.WAIT,
        Purpose.ACK: Behaviour.RETRY,
        Purpose.PUSH: Behaviour.RETRY,
        Purpose.SEED: Behaviour.WAIT,
        Purpose.DEADLETTER: Behaviour.RETRY,
        Purpose.PERMIT: Behaviour.WAIT,
        Purpose.HEARTBEAT: Behaviour.DEGRADE,
        Purpose.STATS: Behaviour.DEGRADE,
        Purpose.CACHE: Behaviour.DEGRADE,
        Purpose.READ: Behaviour.STOP,
    }
)

_DOING = {
    Behaviour.RETRY: "retry until it is back",
    Behaviour.WAIT: "wait for it",
    Behaviour.DEGRADE: "skip rounds (counted locally)",
    Behaviour.STOP: "stop with an error",
}


class NodeStopping(asyncio.CancelledError):
    """A RETRY/WAIT call ended because the node (or its caller) stops; its work stays where it was."""


class RedisUnreachable(RedisUnavailable):
    """STOP: an operator's read met a Redis outage; the message is the one line to print."""


class ReadDenied(RedisUnreachable, PermissionDenied):
    """STOP: an operator's read refused by the Redis ACL; shown wherever an unreachable Redis is."""


class Stats(Protocol):
    def inc_value(self, key: str, count: int | float = 1, start: int | float = 0) -> None: ...


def is_transient(exc: BaseException) -> bool:
    """Redis is not there right now (as opposed to a bug or data of the wrong type)."""
    return isinstance(exc, TRANSIENT_ERRORS)


def reason(exc: BaseException) -> str:
    """An error as one line: `Type: message`."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def unreachable_line(masked_url: str, exc: BaseException) -> str:
    """The one line an operator gets when a read cannot reach Redis."""
    return f"cannot reach Redis at {masked_url}: {reason(exc)}; check REDIS_URL and that Redis runs"


def denied_line(masked_url: str, exc: BaseException, needs: str) -> str:
    """What an ACL refused, and the rule that fixes it (`needs`: who needs what, may be empty)."""
    what = " ".join(str(exc).split())[:300]
    command = denied_command(exc)
    add = f"`{' '.join(fix_for_commands([command]))}`" if command else "it"
    return (
        f"Redis at {masked_url} refused this user's call: it may not {what_was_denied(exc)} ({what}); "
        f"add {add} to the user's ACL rule{'; ' + needs if needs else ''} (docs/security.md#redis-acl-and-tls)"
    )


class RedisPolicy:
    """A node's one answer to "Redis is away": per-purpose behaviour, one log line per outage, one stat set.

    `stopped()` (given or set by `close()`) ends RETRY/WAIT loops with `NodeStopping` (an
    `asyncio.CancelledError`) instead of a retry: the caller's work stays where it was (leased,
    in its outbox). The first try always runs (a last ack at close is not refused).
    """

    def __init__(
        self,
        masked_url: str,
        stats: Stats | None = None,
        *,
        first_delay: float = FIRST_DELAY,
        max_delay: float = MAX_DELAY,
        grace: float = GRACE,
        needs: Callable[[], str] | None = None,
    ) -> None:
        """`needs()`: who needs which ACL rule, for the line of a refusal ("a node of spider 'news'
        needs `~{news}* ...`"); asked when a refusal is logged."""
        self.masked_url = masked_url
        self.stats = stats
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.grace = grace
        self.since: float | None = None  # monotonic start of the current outage
        self._answered: float | None = None  # when Redis first answered again (the outage ends GRACE later)
        self.outages = 0  # outages seen so far (a caller can tell whether one happened since)
        self.closed = False
        self._used: set[Purpose] = set()
        self._hit: Counter[Purpose] = Counter()  # calls of each purpose caught in this outage
        self._back: asyncio.Event | None = None
        self._listeners: list[Callable[[], None]] = []
        self._denied_logged: dict[str, float] = {}  # kind of refusal -> when it was last logged
        self._denied_since: Counter[str] = Counter()  # refusals of each kind since its last line
        self._refused_purposes: dict[Purpose, float] = {}  # purposes whose calls wait on a refusal -> since
        self._needs = needs

    # -- running calls ----------------------------------------------------------------------
    # `run` and `run_sync` return `Any`: the call's result, or `default` when the purpose's behaviour
    # gives up (DEGRADE, a refused STOP) and never for RETRY/WAIT; which one a caller can get is
    # decided by `purpose` at run time, a distinction `T | D` would force every RETRY caller to undo.
    async def run(
        self,
        purpose: Purpose,
        call: Callable[[], Awaitable[T]],
        *,
        default: Any = None,
        stopped: Callable[[], bool] | None = None,
        on_error: Callable[[BaseException], Awaitable[None]] | None = None,
        on_ok: Callable[[], Awaitable[None]] | None = None,
    ) -> Any:
        """`await call()` under the purpose's behaviour; see the module docstring.

        `default` is what DEGRADE returns (and what is returned after `on_error` swallowed a
        non-transient error for DEGRADE/STOP). `on_ok` runs after a success (e.g. "the key is
        fixed" checks). A transient error inside `on_error` counts as the call's; inside `on_ok`
        it starts the outage but the call's result stands.
        """
        behaviour = BEHAVIOUR[purpose]
        self._used.add(purpose)
        delay = self.first_delay
        hit = False
        refused = False  # this call was refused by the ACL and waits for the rule to be fixed
        while True:
            transient: BaseException | None = None
            try:
                result = await call()
            except TRANSIENT_ERRORS as exc:
                transient = exc
            except Exception as exc:
                if is_permission_error(exc):  # the ACL's, not the caller's: backs off like bad data
                    refused = True
                    self.denied(purpose, exc)
                    if behaviour is Behaviour.STOP:
                        raise ReadDenied(denied_line(self.masked_url, exc, self._needs_text())) from None
                    if behaviour is Behaviour.DEGRADE:
                        return default
                elif on_error is None:
                    raise
                else:
                    try:
                        await on_error(exc)  # logs it with its fix, or re-raises what is a bug
                    except TRANSIENT_ERRORS as lost:  # Redis went away while the error was looked into
                        transient = lost
                    else:
                        if behaviour in (Behaviour.DEGRADE, Behaviour.STOP):
                            return default
            else:
                self.ok()
                if refused:
                    self._accepted(purpose)
                if on_ok is not None:
                    try:
                        await on_ok()
                    except TRANSIENT_ERRORS as lost:  # the call landed; its follow-up is looked at next time
                        self.failed(purpose, lost)
                return result
            if transient is not None:
                if not hit:
                    hit = True
                    self._count(purpose, behaviour)
                if behaviour is Behaviour.STOP:  # the operator gets the line, not the log
                    raise RedisUnreachable(unreachable_line(self.masked_url, transient)) from None
                self.failed(purpose, transient)
                if behaviour is Behaviour.DEGRADE:
                    return default
            await self._pause(delay, stopped)
            if self._stopping(stopped):
                raise NodeStopping
            delay = min(delay * 2, self.max_delay)

    def run_sync(self, purpose: Purpose, call: Callable[[], T], *, default: Any = None) -> Any:
        """A blocking call (sync client) for a DEGRADE or STOP purpose: one try, never a sleep."""
        behaviour = BEHAVIOUR[purpose]
        if behaviour not in (Behaviour.DEGRADE, Behaviour.STOP):
            raise ValueError(f"run_sync({purpose}): {behaviour.name} would block the reactor; use `await run()`")
        self._used.add(purpose)
        try:
            result = call()
        except TRANSIENT_ERRORS as exc:
            self._count(purpose, behaviour)
            if behaviour is Behaviour.STOP:
                raise RedisUnreachable(unreachable_line(self.masked_url, exc)) from None
            self.failed(purpose, exc)
            return default
        except Exception as exc:
            if not is_permission_error(exc):
                raise
            self.denied(purpose, exc)
            if behaviour is Behaviour.STOP:
                raise ReadDenied(denied_line(self.masked_url, exc, self._needs_text())) from None
            return default
        self.ok()
        return result

    @contextmanager
    def reading(self) -> Iterator[None]:
        """READ for a block of blocking calls (a CLI command): an outage inside is `RedisUnreachable`."""
        self._used.add(Purpose.READ)
        try:
            yield
        except TRANSIENT_ERRORS as exc:
            if not _from_redis(exc):
                raise  # e.g. a file that is not there, a closed stdout: not Redis's
            self._count(Purpose.READ, Behaviour.STOP)
            raise RedisUnreachable(unreachable_line(self.masked_url, exc)) from None
        except Exception as exc:
            if not is_permission_error(exc):
                raise
            if self.stats is not None:
                self.stats.inc_value("redis/denied")
            raise ReadDenied(denied_line(self.masked_url, exc, self._needs_text())) from None

    # -- the outage -------------------------------------------------------------------------
    @property
    def down(self) -> bool:
        """Redis is in an outage: a call failed transiently and none has succeeded since."""
        return self.since is not None and self._answered is None

    def failed(self, purpose: Purpose, exc: BaseException) -> None:
        """A call of `purpose` met a transient error: starts the outage (one log line, one stat)."""
        self._hit[purpose] += 1
        now = time.monotonic()
        if self.since is not None:
            if self._answered is None:
                return
            if now - self._answered < self.grace:
                self._answered = None  # a flap: still the same outage
                return
            self._end()
        self.since = now
        self.outages += 1
        if self.stats is not None:
            self.stats.inc_value("redis/outages")
        started = time.strftime("%H:%M:%S", time.gmtime())
        if isinstance(exc, OutOfMemoryError):
            logger.error(
                "Redis at %s is full (maxmemory reached) since %s UTC: it refuses writes; raise maxmemory "
                "or free memory (docs/scaling.md); meanwhile %s",
                self.masked_url,
                started,
                self._plan(),
            )
            return
        logger.warning(
            "Redis at %s unreachable since %s UTC (first seen by a %s call: %s); meanwhile %s",
            self.masked_url,
            started,
            purpose.value,
            reason(exc),
            self._plan(),
        )

    def denied(self, purpose: Purpose, exc: BaseException) -> None:
        """A call of `purpose` was refused by the ACL: one ERROR a minute per kind of refusal."""
        if self.stats is not None:
            self.stats.inc_value("redis/denied")
        kind = what_was_denied(exc)
        self._denied_since[kind] += 1
        now = time.monotonic()
        if BEHAVIOUR[purpose] in (Behaviour.RETRY, Behaviour.WAIT):
            self._refused_purposes.setdefault(purpose, now)
        last = self._denied_logged.get(kind)
        if last is not None and now - last < DENIED_LOG_SECONDS:
            return
        self._denied_logged[kind] = now
        refused = self._denied_since.pop(kind)
        logger.error(
            "%s; meanwhile %s calls %s%s",
            denied_line(self.masked_url, exc, self._needs_text()),
            purpose.value,
            "are skipped" if BEHAVIOUR[purpose] is Behaviour.DEGRADE else "wait and try again",
            "" if last is None else f" ({refused} refused since the last line)",
        )

    def _accepted(self, purpose: Purpose) -> None:
        """A call of `purpose` the ACL refused went through: one line per purpose and episode."""
        since = self._refused_purposes.pop(purpose, None)
        if since is not None:
            logger.warning(
                "Redis at %s: %s calls work again after %.1fs of ACL refusals",
                self.masked_url,
                purpose.value,
                time.monotonic() - since,
            )

    def _needs_text(self) -> str:
        if self._needs is None:
            return ""
        try:
            return self._needs()
        except (ValueError, RuntimeError):  # settings or spider not there: the line goes without it
            return ""

    def ok(self) -> None:
        """A call succeeded: wakes the waiters at once; the outage ends (one log line, the stats)
        once no call has failed for `grace` seconds."""
        if self.since is None:
            return
        now = time.monotonic()
        if self._answered is not None:
            if now - self._answered >= self.grace:
                self._end()
            return
        self._answered = now
        for callback in self._listeners:
            callback()
        if self._back is not None:
            self._back.set()
            self._back = None
        if self.grace <= 0:
            self._end()
            return
        try:
            asyncio.get_running_loop().call_later(self.grace, self._settled)
        except RuntimeError:  # no event loop (a blocking caller): nothing else will look again
            self._end()

    def when_back(self, callback: Callable[[], None]) -> None:
        """Call `callback()` each time Redis answers again after failing (e.g. forget what a
        failover may have lost: writes Redis acknowledged before it went away)."""
        self._listeners.append(callback)

    async def wait_until_back(self, timeout: float | None = None) -> bool:
        """Wait until Redis answers again (at once if it does); False on timeout."""
        if not self.down:
            return True
        if self._back is None:
            self._back = asyncio.Event()
        try:
            await asyncio.wait_for(self._back.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """The node stops: RETRY/WAIT loops end (their work stays put); an open outage is accounted."""
        self.closed = True
        if self.since is not None:
            self._end()

    # -- inside ------------------------------------------------------------------------------
    def _settled(self) -> None:
        if self.since is not None and self._answered is not None and time.monotonic() - self._answered >= self.grace:
            self._end()

    def _end(self) -> None:
        assert self.since is not None
        answered = self._answered
        seconds = (answered if answered is not None else time.monotonic()) - self.since
        hit = ", ".join(
            f"{purpose.value} {BEHAVIOUR[purpose].value} {n}x" for purpose, n in sorted(self._hit.items(), key=_order)
        )
        self.since = self._answered = None
        self._hit.clear()
        if self.stats is not None:
            self.stats.inc_value("redis/outage_seconds", round(seconds, 3))
        how = "back after %.1fs" if answered is not None else "still unreachable as the node stops, after %.1fs"
        logger.warning("Redis at %s " + how + " (%s)", self.masked_url, seconds, hit or "no call waited")
        if self._back is not None:
            self._back.set()
            self._back = None

    def _stopping(self, stopped: Callable[[], bool] | None) -> bool:
        return self.closed or (stopped is not None and stopped())

    def _count(self, purpose: Purpose, behaviour: Behaviour) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"redis/{purpose.value}/{behaviour.value}")

    def _plan(self) -> str:
        """What the node does meanwhile, by behaviour, for the purposes it has used."""
        groups: dict[Behaviour, list[str]] = {}
        for purpose in sorted(self._used, key=lambda p: list(Purpose).index(p)):
            groups.setdefault(BEHAVIOUR[purpose], []).append(purpose.value)
        return "; ".join(f"{', '.join(names)}: {_DOING[b]}" for b, names in groups.items()) or "calls wait"

    async def _pause(self, delay: float, stopped: Callable[[], bool] | None) -> None:
        """Sleep the jittered backoff, cut short when Redis is back (any call of the node succeeded)
        or when the node stops."""
        pause = min(delay, self.max_delay) * (0.5 + random.random())
        deadline = time.monotonic() + pause
        outage = self.down  # a data error (no outage) backs off the whole pause
        while not self._stopping(stopped):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if not outage:
                await asyncio.sleep(min(left, 0.5))
            elif await self.wait_until_back(min(left, 0.5)):
                return


def _from_redis(exc: BaseException) -> bool:
    """A transient error that a Redis client raised (redis-py's own, or a socket error on its way
    out), not any OSError of the code around it."""
    if isinstance(exc, RedisError):
        return True
    return isinstance(exc, (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError, TimeoutError))


def _order(item: tuple[Purpose, int]) -> int:
    return list(Purpose).index(item[0])
