"""`dcrawl dashboard`: one self-refreshing web page and a JSON endpoint, stdlib only; read-only unless DASHBOARD_TOKEN.

- `GET /`                      the page (nodes, queues, hosts, revisits, page types, sources, pages/min over the last hour, alerts, failures)
- `GET /api/status`            `{"time", "spiders": {name: status}}` for every spider found in Redis
- `GET /api/status/<spider>`   exactly what `dcrawl status <spider> --json` prints
- `GET /api/spiders`           the spider names shown

Binds to 127.0.0.1 by default. A request whose `Host` header names neither the bind address nor a
name of `DASHBOARD_ALLOWED_HOSTS` gets 421 (DNS rebinding: a page of another site whose name was
made to resolve to this address cannot read the dashboard). With `DASHBOARD_TOKEN` (env var or setting) every request needs
`Authorization: Bearer <token>` or `?token=<token>` (the page passes its own `?token=` on), and the
page gets control buttons (`POST /api/control/<spider>`, token in the header only; the audit list
from `GET /api/audit/<spider>`: monitoring/dashboard_control.py); without a token it is read-only.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

from scrapy.settings import BaseSettings

from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.policy import RedisPolicy, RedisUnreachable, is_transient
from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.monitoring import dashboard_control
from distributed_crawler.monitoring.status import status_now

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 2.0
DISCOVERY_CACHE_SECONDS = 10.0


def key_pattern(template: str) -> tuple[str, re.Pattern[str]]:
    """A key setting like `{%(spider)s}:nodes` as a SCAN pattern and a regex that captures the spider."""
    marker = "\x00"
    filled = template.replace("%(spider)s", marker).replace("%(name)s", marker)
    glob = filled.replace("*", r"\*").replace("?", r"\?").replace("[", r"\[").replace(marker, "*")
    first, *rest = filled.split(marker)
    regex = (
        "^"
        + re.escape(first)
        + ("(.+)" if rest else "")
        + "".join(re.escape(p) if i == 0 else r"\1" + re.escape(p) for i, p in enumerate(rest))
        + "$"
    )
    return glob, re.compile(regex)


def discover_spiders(client: SyncRedis, settings: BaseSettings) -> list[str]:
    """Spiders with nodes, a queue or seeds in Redis (SCAN, a few patterns)."""
    names: set[str] = set()
    for setting in ("NODES_KEY", "SCHEDULER_QUEUE_KEY", "REDIS_START_URLS_KEY"):
        glob, regex = key_pattern(SettingsReader(settings).str(setting))
        for key in client.scan_iter(match=glob, count=1000):
            match = regex.match(key.decode("utf-8", "replace") if isinstance(key, bytes) else key)
            if match and match.group(1).isprintable() and "\ufffd" not in match.group(1):
                names.add(match.group(1))
    return sorted(names)


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        settings: BaseSettings,
        spider: str | None,
        token: str,
        allowed_hosts: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(address, DashboardHandler)
        self.settings = settings
        self.spider = spider
        self.token = token
        self.allowed_hosts = allowed_hosts | bind_names(address[0])
        config = RedisConfig.from_settings(settings)
        self.client = config.sync_client()  # thread-safe pool
        self.policy = RedisPolicy(config.masked_url)  # READ: an outage is a 503 with the one line
        self._spiders: tuple[float, list[str]] = (0.0, [])
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = cast(tuple[str, int], self.server_address[:2])  # an AF_INET server
        return f"http://{host}:{port}/"

    def spiders(self) -> list[str]:
        if self.spider:
            return [self.spider]
        with self._lock:
            found_at, names = self._spiders
            if time.monotonic() - found_at > DISCOVERY_CACHE_SECONDS:
                names = discover_spiders(self.client, self.settings)
                self._spiders = (time.monotonic(), names)
            return names

    def status(self, spider: str) -> dict[str, Any]:
        """The spider's status; a failure other than an outage is one line for that spider, not a 500."""
        try:
            return status_now(self.client, self.settings, spider)
        except Exception as exc:  # data in Redis must never take the page down
            if is_transient(exc):
                raise  # the page says Redis is away (503), not that this spider's data is bad
            logger.warning("Status of %s not readable: %s: %s", spider, type(exc).__name__, exc)
            return {"spider": spider, "error": f"status not readable: {type(exc).__name__}: {str(exc)[:300]}"}


class DashboardHandler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "dcrawl-dashboard"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
        )
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, data: Any) -> None:
        self._send(
            code, json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8"
        )

    def _authorized(self, query: dict[str, list[str]]) -> bool:
        token = self.server.token
        if not token:
            return True
        header = self.headers.get("Authorization", "")
        given = header[7:] if header.startswith("Bearer ") else (query.get("token") or [""])[0]
        return hmac.compare_digest(given.encode(), token.encode())

    def _host_allowed(self) -> bool:
        """The Host header names this server: its bind address, a loopback name when bound to
        loopback, an IP address when bound to every address, or DASHBOARD_ALLOWED_HOSTS."""
        host = host_of_header(self.headers.get("Host", ""))
        if host in self.server.allowed_hosts:
            return True
        return self.server.server_address[0] in ("0.0.0.0", "::") and _is_ip(host)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if not self._host_allowed():
            self._json(421, {"error": "unknown Host: add it to DASHBOARD_ALLOWED_HOSTS"})
            return
        path = parts.path.rstrip("/") or "/"
        if not self._authorized(parse_qs(parts.query)):
            if path in ("/", "/index.html"):  # a person at the page: a form, not a JSON error
                self._send(401, LOGIN_PAGE.encode("utf-8"), "text/html; charset=utf-8")
                return
            self._json(401, {"error": "DASHBOARD_TOKEN required: ?token=... or Authorization: Bearer ..."})
            return
        if path in ("/", "/index.html"):
            page = PAGE.replace("__REFRESH_MS__", str(int(REFRESH_SECONDS * 1000)))
            page = page.replace("__CONTROL__", dashboard_control.control_script(bool(self.server.token)))
            self._send(200, page.encode("utf-8"), "text/html; charset=utf-8")
            return
        try:
            with self.server.policy.reading():  # the reads only: a client gone mid-send is not Redis
                code, data = self._read(path)
        except RedisUnreachable as exc:
            code, data = 503, {"error": str(exc)}
        self._json(code, data)

    def _read(self, path: str) -> tuple[int, Any]:
        if path == "/api/spiders":
            return 200, self.server.spiders()
        if path == "/api/status":
            spiders = {name: self.server.status(name) for name in self.server.spiders()}
            return 200, {"time": round(time.time(), 3), "spiders": spiders}
        if path.startswith("/api/status/"):
            return 200, self.server.status(unquote(path[len("/api/status/") :]))
        if path.startswith("/api/audit/"):
            return 200, dashboard_control.audit(self.server, unquote(path[len("/api/audit/") :]))
        return 404, {"error": "not found"}

    do_HEAD = do_GET

    def _read_only(self) -> None:
        self._json(405, {"error": "read-only"})

    do_PUT = do_PATCH = do_DELETE = _read_only

    def do_POST(self) -> None:
        """Control (monitoring/dashboard_control.py): only with DASHBOARD_TOKEN, the token in the
        Authorization header (never the query: a link cannot carry it), and a Host of this server."""
        parts = urlsplit(self.path)
        if not self._host_allowed():
            self._json(421, {"error": "unknown Host: add it to DASHBOARD_ALLOWED_HOSTS"})
            return
        if not self.server.token:
            self._json(403, {"error": dashboard_control.READ_ONLY})
            return
        header = self.headers.get("Authorization", "")
        given = header[7:] if header.startswith("Bearer ") else ""
        if not hmac.compare_digest(given.encode(), self.server.token.encode()):
            self._json(401, {"error": "control needs the DASHBOARD_TOKEN in the Authorization: Bearer header"})
            return
        if not parts.path.startswith("/api/control/"):
            self._read_only()  # every other path only reads
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= dashboard_control.MAX_BODY:
            self._json(413, {"error": "body too large"})
            return
        spider = unquote(parts.path[len("/api/control/") :])
        try:
            with self.server.policy.reading():
                code, data = dashboard_control.post(self.server, spider, self.rfile.read(length))
        except RedisUnreachable as exc:
            code, data = 503, {"error": str(exc)}
        self._json(code, data)


def host_of_header(value: str) -> str:
    """The host of a Host header, lower case, without port or IPv6 brackets ("" if unreadable)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else ""
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def bind_names(host: str) -> frozenset[str]:
    """Host header values that name a server bound to `host`: the address, loopback names on
    loopback, and this machine's own names otherwise (a rebinding attacker uses a name of theirs)."""
    names = {host.lower().strip("[]")}
    if is_loopback(host):
        names |= {"localhost", "127.0.0.1", "::1"}
    else:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset(names)


def allowed_hosts(settings: BaseSettings) -> frozenset[str]:
    """DASHBOARD_ALLOWED_HOSTS (env var or setting): a list, or names separated by commas."""
    return frozenset(host_of_header(item) for item in SettingsReader(settings).list("DASHBOARD_ALLOWED_HOSTS"))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(settings: BaseSettings, host: str, port: int, spider: str | None) -> int:
    token = SettingsReader(settings).str("DASHBOARD_TOKEN")
    if not is_loopback(host) and not token:
        print(
            f"dcrawl: warning: the dashboard on {host} is open to anyone who can reach it; "
            "set DASHBOARD_TOKEN to require a token",
            file=sys.stderr,
        )
    try:
        server = DashboardServer((host, port), settings, spider, token, allowed_hosts(settings))
    except OSError as exc:
        raise ValueError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port or --host"
        ) from None
    what = f"spider {spider}" if spider else "every spider in Redis"
    print(f"Dashboard of {what} on {server.url}{'?token=...' if token else ''} (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


LOGIN_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>distributed_crawler dashboard: token</title>
<style>
  body { margin: 0; font: 14px/1.4 system-ui, sans-serif; background: #f5f6f8; color: #1d2330; }
  form { max-width: 360px; margin: 60px auto; background: #fff; border: 1px solid #e3e6ec; border-radius: 8px;
         padding: 16px; display: grid; gap: 10px; }
  h1 { font-size: 17px; margin: 0; } p { color: #6b7385; margin: 0; } input { width: 100%; padding: 6px; }
</style></head>
<body><form method="get" action="" data-login="1">
<h1>distributed_crawler dashboard</h1>
<p>This dashboard is protected: enter the DASHBOARD_TOKEN it was started with.</p>
<label for="token">Token</label><input id="token" name="token" type="password" autocomplete="current-password" autofocus required>
<button type="submit">Open the dashboard</button>
</form></body></html>
"""

PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>distributed_crawler dashboard</title>
<style>
  :root { --bg: #f5f6f8; --card: #fff; --ink: #1d2330; --muted: #6b7385; --line: #e3e6ec;
          --ok: #1f9d55; --idle: #2b7bb9; --warn: #c77c02; --bad: #d64545; --bar: #4a6cf7; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; background: var(--bg); color: var(--ink); }
  header { background: #1d2330; color: #fff; padding: 10px 20px; display: flex; gap: 16px; align-items: baseline; }
  header h1 { font-size: 17px; margin: 0; font-weight: 600; }
  header .meta { color: #b8c0d0; font-size: 13px; }
  #error { color: #fff; background: var(--bad); padding: 6px 20px; display: none; }
  main { padding: 16px 20px; display: grid; gap: 24px; }
  section.spider h2 { margin: 0 0 10px; font-size: 18px; }
  .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(104px, 1fr)); gap: 10px; margin-bottom: 14px; }
  .card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 8px 12px; }
  .card .v { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
  .card .k { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .03em; }
  .grid2 { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 14px; margin-top: 14px; }
  .panel { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; overflow: auto; }
  .panel h3 { margin: 0 0 8px; font-size: 13px; color: var(--muted); text-transform: uppercase; letter-spacing: .03em; }
  table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
  th, td { text-align: right; padding: 5px 8px; border-bottom: 1px solid var(--line); white-space: nowrap; }
  th { color: var(--muted); font-weight: 500; font-size: 12px; }
  th:first-child, td:first-child, td.text, th.text { text-align: left; }
  td.wrap { white-space: normal; overflow-wrap: anywhere; min-width: 12em; }
  .state { font-weight: 600; }
  .state.running { color: var(--ok); } .state.idle { color: var(--idle); } .state.draining { color: var(--warn); }
  .state.closed { color: var(--muted); } .state.dead, .state.stalled { color: var(--bad); } .state.paused { color: var(--warn); }
  .banner { background: #fff4d6; border: 1px solid var(--warn); border-radius: 8px; padding: 8px 12px; margin: 0 0 12px; font-weight: 600; }
  .legend { display: flex; gap: 14px; color: var(--muted); font-size: 12px; margin-top: 4px; }
  .legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; vertical-align: -1px; }
  tr.dead td, tr.stalled td { background: #fdf0f0; }
  .empty { color: var(--muted); }
  .skipped { color: var(--warn); margin: 0 0 8px; overflow-wrap: anywhere; }
  svg text { fill: var(--muted); font-size: 11px; }
  @media (max-width: 900px) { .grid2 { grid-template-columns: 1fr; } }
</style>
</head>
<body>
<header><h1>distributed_crawler</h1><span class="meta" id="updated">loading…</span></header>
<div id="error"></div>
<main id="main"></main>
<script>
"use strict";
const REFRESH_MS = __REFRESH_MS__;
const token = new URLSearchParams(location.search).get("token");
const headers = token ? { "Authorization": "Bearer " + token } : {};

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
function svgEl(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}
function num(n) { return Number(n || 0).toLocaleString("en-US", { maximumFractionDigits: 1 }); }
function bytes(n) { return n ? (n / 1048576).toFixed(1) + " MiB" : ""; }
function dur(s) {
  if (s === null || s === undefined) return "?";
  s = Math.max(0, Math.round(s));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
}
function clock(t) { return t ? new Date(t * 1000).toLocaleTimeString() : ""; }
function card(label, value, id) { return el("div", { class: "card", "data-card": id }, el("div", { class: "v" }, value), el("div", { class: "k" }, label)); }

function chart(history) {
  const W = 620, H = 130, pad = 44, n = history.length || 1, bw = (W - pad) / n;
  const max = Math.max(1, ...history.map(h => h.pages));
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H + 18}`, width: "100%", role: "img", "aria-label": "pages per minute, last hour" });
  svg.append(svgEl("line", { x1: pad, y1: H, x2: W, y2: H, stroke: "#c9ced8" }));
  history.forEach((h, i) => {
    const bh = h.pages / max * (H - 10);
    const bar = svgEl("rect", { x: pad + i * bw + 1, y: H - bh, width: Math.max(1, bw - 2), height: bh, fill: h.errors ? "#e8833a" : "#4a6cf7", rx: 1 });
    const tip = svgEl("title", {}); tip.textContent = `${clock(h.minute)}: ${h.pages} pages, ${h.items} items, ${h.errors} errors`;
    bar.append(tip); svg.append(bar);
  });
  const label = (x, y, text, anchor) => { const t = svgEl("text", { x, y, "text-anchor": anchor || "start" }); t.textContent = text; svg.append(t); };
  label(pad - 4, 12, num(max), "end"); label(pad - 4, H, "0", "end");
  label(pad, H + 14, "-60 min"); label(W, H + 14, "now", "end");
  const legend = el("div", { class: "legend", "data-legend": "1" },
    el("span", {}, el("i", { style: "background:#4a6cf7" }), "pages fetched per minute"),
    el("span", {}, el("i", { style: "background:#e8833a" }), "a minute with errors"),
    el("span", {}, "scale: 0 to " + num(max) + " pages"));
  return el("div", {}, svg, legend);
}

function nodesTable(status) {
  const cols = ["node", "state", "pages/min", "pages", "stored", "errors", "in flight", "leases", "RSS", "browser", "last seen"];
  const table = el("table", { class: "nodes" }, el("thead", {}, el("tr", {}, ...cols.map((c, i) => el("th", i < 2 ? { class: "text" } : {}, c)))));
  const body = el("tbody");
  for (const n of status.nodes) {
    body.append(el("tr", { class: "node " + n.state, "data-node": n.id },
      el("td", { class: "id" }, n.id), el("td", { class: "state text " + n.state }, n.state),
      el("td", { class: "rate" }, Math.round(n.rate)), el("td", {}, num(n.pages)), el("td", {}, num(n.items)),
      el("td", {}, num(n.errors)), el("td", {}, num(n.in_flight)), el("td", {}, num(n.leases)),
      el("td", {}, bytes(n.rss)), el("td", {}, num(n.browser_pages)), el("td", {}, dur(status.time - n.last_seen) + " ago")));
  }
  if (!status.nodes.length) body.append(el("tr", {}, el("td", { class: "empty", colspan: cols.length }, "no node has reported yet")));
  table.append(body);
  return table;
}

function listTable(rows, cols, empty) {
  if (!rows.length) return el("div", { class: "empty" }, empty);
  const table = el("table", {}, el("thead", {}, el("tr", {}, ...cols.map(c => el("th", { class: "text" }, c[0])))));
  const body = el("tbody");
  for (const r of rows) body.append(el("tr", {}, ...cols.map(c => el("td", { class: c[2] ? "text wrap" : "text" }, c[1](r)))));
  table.append(body);
  return table;
}

function skipLines(s) {
  const lines = [];
  const skipped = Object.entries(s.skipped || {});
  if (skipped.length) lines.push("skipped unreadable entries: " + skipped.map(([k, n]) => n + " in " + k).join(", "));
  for (const w of s.wrong_type || []) lines.push(w.message);
  return lines.map(line => el("div", { class: "skipped" }, line));
}

function spiderSection(s) {
  if (s.error) return el("section", { class: "spider", "data-spider": s.spider }, el("h2", {}, s.spider), el("div", { class: "skipped" }, s.error));
  const t = s.totals;
  const paused = (s.control || {}).paused;
  const cards = el("div", { class: "cards" },
    card("pages/min", Math.round(t.rate), "rate"), card("pending", s.pending === null ? "unknown" : num(s.pending), "pending"), card("leased", num(s.leased), "leased"),
    card("delayed", num(s.delayed), "delayed"), card("failed", num(s.failed), "failed"), card("seen (dedup)", num(s.dedup.count), "seen"),
    card("pages", num(t.pages), "pages"), card("stored", num(t.stored === undefined ? t.items : t.stored), "stored"),
    card(t.nodes_dead ? `nodes alive (${t.nodes_dead} dead)` : "nodes alive", t.nodes_alive, "nodes"),
    card("drains in", paused ? "paused" : s.pending ? dur(t.eta_seconds) : "—", "eta"));
  if (s.proxies.total || s.proxies.dead) cards.append(card(s.proxies.dead ? `proxies healthy (${s.proxies.dead} dead)` : "proxies healthy", `${s.proxies.healthy}/${s.proxies.total}`, "proxies"));
  const h = s.hosts || { count: 0, top: [] };
  if (h.count) cards.append(card(`hosts (${num(h.ready)} ready, ${num(h.blocked)}${h.blocked_exact === false ? "+" : ""} blocked, ${num(h.over_budget)} over budget)`, num(h.count), "hosts"));
  for (const [type, c] of Object.entries(s.page_types || {})) {
    if (c.stored || c.skipped) cards.append(card(`${type} pages stored (${num(c.skipped)} not stored)`, num(c.stored), "page-type-" + type));
  }
  const rv = s.recrawl || { scheduled: 0 };
  if (rv.scheduled) cards.append(card(`revisits (${num(rv.due_now)} due now, ${num(rv.due_next_hour)} next hour)`, num(rv.scheduled), "revisits"));
  const hostRows = (h.top || []).concat((h.blocked_hosts || []).filter(b => !(h.top || []).some(t => t.host === b.host)));
  const hosts = listTable(hostRows, [["host", r => r.host, true], ["pending", r => num(r.pending)], ["due in", r => r.due_in === null ? "" : r.due_in > 0 ? dur(r.due_in) : "now"],
    ["blocked until", r => r.blocked_until ? clock(r.blocked_until) + " (" + dur(r.blocked_for) + ")" : ""], ["why", r => r.why || "", true],
    ["pages", r => num(r.pages)], ["budget", r => r.budget === null ? "" : num(r.budget)], ["over", r => r.over_budget ? "yes" : ""]], "no host queued");
  const alerts = listTable(s.alerts, [["when", a => clock(a.time)], ["kind", a => a.kind], ["node", a => a.node], ["message", a => a.message, true]], "no alerts");
  const bars = " ▁▂▃▄▅▆▇█", spark = d => { const m = Math.max(0, ...d); return d.map(n => n ? bars[Math.max(1, Math.ceil(8 * n / m))] : bars[0]).join(""); };
  const ev = s.events || { top_sources: [] };
  const sources = listTable(ev.top_sources || [], [["source", r => r.source, true], ["articles/day, 28 days", r => spark(r.articles_per_day || [])],
    ["28d", r => num(r.articles_28d)], ["last new", r => r.since_last_seconds === null ? "" : dur(r.since_last_seconds) + " ago"],
    ["lag p95", r => r.lag_p95_seconds === null ? "" : dur(r.lag_p95_seconds)], ["state", r => r.silent ? "SILENT" : ((r.drift || []).length ? "DRIFT " + r.drift.join(",") : (r.coverage_low ? "LOW COVERAGE" : "ok"))]], "no source yet");
  const failures = listTable(s.failures, [["when", f => clock(f.time)], ["url", f => f.url || "", true], ["reason", f => f.reason || "", true], ["node", f => f.node || ""]], "no failures");
  return el("section", { class: "spider", id: "spider-" + s.spider, "data-spider": s.spider },
    el("h2", {}, s.spider),
    ...(paused ? [el("div", { class: "banner", "data-pause-banner": "1" }, "PAUSED since " + clock(paused.since) + " by " + paused.by +
      (paused.drain ? ": workers finish what they hold" : ": nothing is leased") + " — resume with dcrawl resume " + s.spider)] : []),
    ...skipLines(s), cards,
    el("div", { class: "panel" }, el("h3", {}, "nodes"), nodesTable(s)),
    ...(h.count ? [el("div", { class: "panel hosts", style: "margin-top:14px" }, el("h3", {}, `hosts, top by pending (of ${num(h.scanned)} read; dcrawl hosts lists more)`), hosts)] : []),
    el("div", { class: "grid2" },
      el("div", { class: "panel" }, el("h3", {}, "pages per minute, last hour"), chart(s.history)),
      el("div", { class: "panel" }, el("h3", {}, "recent alerts"), alerts)),
    ...((ev.top_sources || []).length ? [el("div", { class: "panel sources", style: "margin-top:14px" }, el("h3", {}, `sources, least healthy first (${num(ev.sources)} tracked, ${num(ev.silent_sources)} silent; dcrawl sources lists all)`), sources)] : []),
    el("div", { class: "panel", style: "margin-top:14px" }, el("h3", {}, "recent failures"), failures));
}

function showError(text) { const e = document.getElementById("error"); e.textContent = text; e.style.display = text ? "block" : "none"; }

async function refresh() {
  try {
    const response = await fetch("api/status", { headers, cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const data = await response.json();
    const main = el("main", { id: "main" });
    const names = Object.keys(data.spiders);
    if (!names.length) main.append(el("div", { class: "empty" }, "No spider found in Redis yet: seed one with dcrawl seed SPIDER URL."));
    // a field kept across refreshes (the control form) loses focus when it moves: give it back, caret included
    const focused = document.activeElement, caret = focused && "selectionStart" in focused ? [focused.selectionStart, focused.selectionEnd] : null;
    for (const name of names) main.append(spiderSection(data.spiders[name]));
    document.getElementById("main").replaceWith(main);
    if (focused && focused !== document.body && focused.isConnected && document.activeElement !== focused) {
      focused.focus();
      if (caret && caret[0] !== null) focused.setSelectionRange(caret[0], caret[1]);
    }
    document.getElementById("updated").textContent = "updated " + clock(data.time) + " · refreshes every " + REFRESH_MS / 1000 + "s";
    showError("");
  } catch (err) {
    showError("Cannot load the status: " + err.message);
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}
__CONTROL__
refresh();
</script>
</body>
</html>
"""
