"""Every `request.meta` key our components pass each other: one name per key, one home.

Private keys start with `_dc_` (PRIVATE_META_PREFIX): they describe one node's handling of one
delivery and never travel to Redis (frontier/codec.py drops them). Public keys are per-request
switches a spider sets (snake_case, like Scrapy's `dont_retry`). Keys owned by Scrapy or
scrapy-playwright are listed too when we read or write them, so a rename shows up here.

This module imports nothing of ours: every layer may use it.
"""

from __future__ import annotations

# -- private: one node, one delivery (never written to Redis) ---------------------------------
PRIVATE_META_PREFIX = "_dc_"  # frontier/codec.py drops keys with it; frontier/seeds.py refuses them in seeds
# Set by core/scheduler.py on each request it leases (the lease id); read by the scheduler (ack,
# hand-over), retry.py, proxy.py and politeness.py ("did this request come from our queue?").
LEASE_META = "_dc_lease"
# Set by downloadermiddlewares/retry.py on a retry copy (seconds to wait); read by core/scheduler.py,
# which parks the copy in {spider}:delayed for that long.
RETRY_DELAY_META = "_dc_retry_delay"
# Set by downloadermiddlewares/robotstxt.py on the copy of a leased request it gives back to the
# scheduler: an awaitable; core/intake.py then holds the copy on this node, with its lease, until it
# is done (the host's robots.txt cached and one interval passed) instead of handing it back to Redis
# (a scheduler that cannot hold it drops the key and uses RETRY_DELAY_META). Never encoded.
HOLD_META = "_dc_hold"
# Set by downloadermiddlewares/proxy.py on a response that is a ban (the reason); read by retry.py,
# which retries it whatever its status.
PROXY_BAN_META = "_dc_proxy_ban"
# Set by downloadermiddlewares/proxy.py: the masked pool proxy of this attempt; read by retry.py
# (dead-letter entry, re-pick on retry), politeness.py (per-proxy rate key) and frontier/codec.py (the
# proxy, `_auth_proxy` and the Proxy-Authorization header are the pool's: never shipped).
POOL_PROXY_META = "_dc_proxy"
# Set by downloadermiddlewares/proxy.py on a request a pool proxy failed (ban or network error):
# proxies.pool.proxy_digest of each (the last MAX_FAILED_PROXIES, no credentials); it travels with
# the retry copy through Redis (public key), and proxy.py picks the retry's proxy among the others
# while there are others (lua/proxy_pick.lua). Untrusted when read: proxy.py checks its shape.
FAILED_PROXIES_META = "failed_proxies"
MAX_FAILED_PROXIES = 4
# Set by downloadermiddlewares/proxy.py on an attempt its pool proxy failed (a ban answer, 407, or a
# network error it blames on the proxy): the reason; read by retry.py, which sends the request
# through another proxy without spending its RETRY_TIMES (proxies/retries.py).
PROXY_FAILURE_META = "_dc_proxy_failure"
# Set with PROXY_FAILURE_META: PROXY_RETRY_TIMES as it stands for this attempt ("auto" resolved to the
# pool size, at least 3); read by retry.py.
PROXY_RETRY_LIMIT_META = "_dc_proxy_retry_limit"
# Set by downloadermiddlewares/retry.py on a retry copy after a proxy failure: how many attempts of this
# request a pool proxy failed (RETRY_TIMES_META counts the site's failures only). Travels with the
# copy through Redis (public key): untrusted when read (proxies/retries.py).
PROXY_RETRY_TIMES_META = "proxy_retry_times"
# Set by downloadermiddlewares/proxy.py with PROXY_FAILURE_META: the last MAX_PROXY_FAILURES
# [masked proxy, reason] pairs of this request (no password); retry.py names them in a `proxy_failed`
# dead letter. Travels like PROXY_RETRY_TIMES_META; untrusted when read.
PROXY_FAILURES_META = "proxy_failures"
MAX_PROXY_FAILURES = 10
# Host mode: the scheduler sets these on each request it leases from the per-host frontier, so the
# middlewares feed politeness back to the slot the request was served from: the lease's slot (frontier/config.py
# slot_of: the host it was queued under) and the host's backoff level `bo` when leased (int, 0 =
# none). Read by downloadermiddlewares/retry.py: a 429/503/Retry-After blocks that slot for every
# node (lua/host_block.lua), and a success from a slot leased with bo > 0 resets it to 0.
HOST_SLOT_META = "_dc_slot"
#: Set by DomainRateLimitMiddleware in the single-queue modes: [key, token] of the request's
#: in-flight token (DOMAIN_MAX_IN_FLIGHT), given back when its download ends.
IN_FLIGHT_TOKEN_META = "_dc_in_flight"
#: Set by AdaptiveDelayMiddleware (DOMAIN_DELAY_FACTOR) for the politeness middleware: the least
#: seconds between two requests of the request's domain, from the domain's response time.
MIN_INTERVAL_META = "_dc_min_interval"
HOST_BACKOFF_META = "_dc_host_bo"
# Set by downloadermiddlewares/proxy.py on a request the browser renders: the proxy URL (credentials
# included) the browser context must use; read by rendering/handler.py (one context per proxy).
BROWSER_PROXY_META = "_dc_browser_proxy"
# Set by rendering/middleware.py on a request PLAYWRIGHT_AUTO re-fetched in the browser (why its
# plain page looked script-built); read by spiders and tests.
AUTO_RENDER_META = "_dc_auto_render"
# Recrawl. Set by recrawl/middleware.py on a request that is revisitable (a RECRAWL_RULES
# match or meta["recrawl"]): RecrawlTicket (its schedule fingerprint, interval, whether validators
# were sent); read by recrawl/middleware.py (a 304) and recrawl/spidermiddleware.py (the digest).
RECRAWL_TICKET_META = "_dc_recrawl"

# -- public: per-request switches a spider sets ------------------------------------------------
# Read by rendering/config.py (RenderConfig.should_render): render this request in the browser.
RENDER_META = "render"
# Read by rendering/config.py: never render this request (wins over `render` and URL patterns).
DONT_RENDER_META = "dont_render"
# Read by rendering/config.py: PLAYWRIGHT_WAIT_FOR for this request (load state or CSS selector).
RENDER_WAIT_FOR_META = "render_wait_for"
# Read by rendering/config.py: PLAYWRIGHT_RENDER_TIMEOUT (seconds) for this request.
RENDER_TIMEOUT_META = "render_timeout"
# Read by rendering/config.py: PLAYWRIGHT_SETTLE_MS (milliseconds, 0 = do not wait) for this request.
RENDER_SETTLE_MS_META = "render_settle_ms"
# Read by downloadermiddlewares/politeness.py: skip the cluster-wide per-domain rate limit.
DONT_RATE_LIMIT_META = "dont_rate_limit"
# Read by core/scheduler.py (envelope): Unix time (seconds) after which this request is dropped at
# lease, never fetched (wins over REQUEST_TTL; docs/frontier.md "Expiry").
EXPIRES_AT_META = "expires_at"
# Read by recrawl/rules.py: revisit interval of this URL, seconds or [min, max]; 0 = never (wins over
# RECRAWL_RULES).
RECRAWL_META = "recrawl"
# Set by recrawl/spidermiddleware.py on the stored revisit of an article no rule matches (True); read
# by recrawl/rules.py: the revisit follows ARTICLE_REVISITS, then leaves the schedule. Travels with
# the request through Redis: untrusted when read (only `True` counts).
ARTICLE_REVISIT_META = "article_revisit"

# -- set by news spiders for themselves (spiders/news.py), shipped with the request -------------------
# On sitemap and feed requests: the site (a URL) whose entries are followed (same registered domain).
NEWS_SITE_META = "news_site"
# On sitemap requests: how many sitemap indexes led here (SITEMAP_MAX_DEPTH ends loops).
SITEMAP_DEPTH_META = "sitemap_depth"
# On the conventional /sitemap.xml tried when robots.txt lists none: its HTTP error is no dead letter.
SITEMAP_GUESSED_META = "sitemap_guessed"
# On article requests from a sitemap or feed entry: its date (ISO 8601) and title, used when the
# page itself has none.
ENTRY_DATE_META = "entry_date"
ENTRY_TITLE_META = "entry_title"
# On article requests from a feed item or a news sitemap entry: True (a page-type signal: they list stories).
LISTED_META = "listed"
# On article requests from a sitemap or feed entry: the entry's canonical URL, under which the
# page's outcome counts for its source's coverage (events/coverage.py; a redirect keeps it).
# Read from Redis: only a string that looks like a URL counts.
COVERAGE_URL_META = "listed_url"

# -- set for the spider -------------------------------------------------------------------------
# Set by rendering/handler.py after a render (every frame of the page); read by spiders through
# rendering/frames.py. Describes one download: frontier/codec.py never ships it.
FRAMES_META = "frames"

# -- owned by scrapy-playwright (we set or read them) ---------------------------------------------
# Set (True/False) by rendering/middleware.py (RenderingMiddleware, 650): THE decision "this request
# is rendered", made once; read by rendering/handler.py and by downloadermiddlewares/proxy.py (700),
# which leaves rendered requests to the browser.
PLAYWRIGHT_META = "playwright"
PLAYWRIGHT_CONTEXT_META = "playwright_context"  # read by rendering/handler.py (page pool per context)
# Set by rendering/handler.py for the length of a render through a proxy (the context's proxy).
PLAYWRIGHT_CONTEXT_KWARGS_META = "playwright_context_kwargs"
PLAYWRIGHT_INCLUDE_PAGE_META = "playwright_include_page"  # set/read by rendering/handler.py
PLAYWRIGHT_PAGE_META = "playwright_page"  # set by scrapy-playwright; popped by rendering/handler.py
PLAYWRIGHT_PAGE_GOTO_KWARGS_META = "playwright_page_goto_kwargs"  # set by rendering/handler.py (timeout, wait)
PLAYWRIGHT_PAGE_METHODS_META = "playwright_page_methods"  # read by rendering/handler.py (page reusable?)
PLAYWRIGHT_PAGE_EVENT_HANDLERS_META = "playwright_page_event_handlers"  # read by rendering/handler.py
PLAYWRIGHT_PAGE_INIT_CALLBACK_META = "playwright_page_init_callback"  # read by rendering/handler.py
# Page methods (in PLAYWRIGHT_PAGE_METHODS_META) that act on the current document only: a page that
# ran only these may serve a later render (rendering/pages.py). frontier/tagged.py's
# PAGE_METHOD_ALLOWLIST is these plus the methods a queued request may use to change the page.
DOCUMENT_PAGE_METHODS = frozenset(
    {
        "wait_for_selector",
        "wait_for_load_state",
        "wait_for_timeout",
        "wait_for_function",
        "wait_for_url",
        "evaluate",
        "click",
        "dblclick",
        "fill",
        "type",
        "press",
        "hover",
        "focus",
        "check",
        "uncheck",
        "select_option",
        "dispatch_event",
        "screenshot",
        "pdf",
        "content",
        "title",
        "reload",
    }
)

# -- owned by Scrapy (we set or read them) ----------------------------------------------------------
# Set by downloadermiddlewares/proxy.py (a pool proxy) or by the spider (its own, or None = none);
# read by Scrapy's HttpProxyMiddleware (750).
PROXY_META = "proxy"
# Set by Scrapy's HttpProxyMiddleware (private); dropped by proxy.py, retry.py and frontier/codec.py.
AUTH_PROXY_META = "_auth_proxy"
# Set by spiders/news.py on sitemap and feed requests (SITEMAP_MAX_BYTES); read by Scrapy's downloader.
DOWNLOAD_MAXSIZE_META = "download_maxsize"
# Set by downloadermiddlewares/robotstxt.py on robots.txt requests; read by downloadermiddlewares/sizecap.py:
# the download stops after this many bytes and the response keeps them (RFC 9309's 500 KiB).
DOWNLOAD_STOP_AT_META = "download_stop_at"
# Set by spiders/news.py on sitemap and feed requests; read (and popped) by Scrapy's DepthMiddleware:
# the request gets depth 0, so the entries it lists start at depth 1 of DEPTH_LIMIT.
DEPTH_RESET_META = "depth_reset"
# Set by `dcrawl seed --site URL --since --until` on a site seed, and by spiders/news.py on the
# robots.txt, sitemap, feed and story requests that follow from it: {"since": ISO, "until": ISO}, the
# backfill window (news/backfill.py; untrusted when read). Listings take only entries dated in it;
# the home page is not stored and no page's links are followed.
BACKFILL_META = "backfill"
# Set by spiders/news.py on the robots.txt request of a site seed when no node cached it yet.
DONT_OBEY_ROBOTSTXT_META = "dont_obey_robotstxt"
DONT_RETRY_META = "dont_retry"  # read by downloadermiddlewares/retry.py (Scrapy's meaning)
RETRY_TIMES_META = "retry_times"  # read by downloadermiddlewares/retry.py; frontier/deadletters.py resets it on requeue
# What one delivery's redirects and retries leave in meta: recrawl/middleware.py drops them from the
# request it stores for the next revisit (a revisit starts with fresh counts).
DELIVERY_META = frozenset(
    {
        RETRY_TIMES_META,
        PROXY_RETRY_TIMES_META,
        PROXY_FAILURES_META,
        "redirect_times",
        "redirect_ttl",
        "redirect_urls",
        "redirect_reasons",
        "download_slot",
    }
)

# Keys that describe one download, not the request: frontier/codec.py never ships them.
TRANSIENT_META = frozenset(
    {
        "download_slot",  # Scrapy's downloader
        "download_latency",  # Scrapy's downloader
        "download_timeout",  # Scrapy's DownloadTimeoutMiddleware
        "depth_checked",  # Scrapy's DepthMiddleware
        FRAMES_META,
    }
)
# What a pool proxy leaves in meta: frontier/codec.py drops these from a request carrying POOL_PROXY_META.
POOL_PROXY_FIELDS = frozenset({PROXY_META, AUTH_PROXY_META})
# Meta keys that hand a page to user code or change it beyond one document: such a page is not reused.
UNPOOLABLE_META = (
    PLAYWRIGHT_INCLUDE_PAGE_META,
    PLAYWRIGHT_PAGE_EVENT_HANDLERS_META,
    PLAYWRIGHT_PAGE_INIT_CALLBACK_META,
)
