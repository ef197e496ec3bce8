"""The dashboard's control (only with DASHBOARD_TOKEN): per-host set / unset / block / unblock / purge and
pause / resume of a spider, as `POST /api/control/<spider>` with a JSON body, and the audit list
(`GET /api/audit/<spider>`). The actions are core/control.py's, recorded with source `dashboard`.

Why a token in a header: a POST the page sends carries `Authorization: Bearer <token>`, which a page
of another site cannot add to a request it makes a browser send (no cookie is ever involved), and
the Host check (DNS rebinding) applies as for every request. Without DASHBOARD_TOKEN the dashboard
stays read-only and says how to enable control.
"""

from __future__ import annotations

import json
from typing import Any

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.core.control import OVERRIDE_FIELDS, HostChange, host_action, pause_action
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.frontier.factory import frontier_from_settings

MAX_BODY = 4096
AUDIT_SHOWN = 50
READ_ONLY = "the dashboard is read-only: start it with DASHBOARD_TOKEN=<secret> to control the crawl from here"


def _control(server: Any, spider: str) -> CrawlControl:
    return CrawlControl.of(frontier_from_settings(server.settings, spider, server.client))


def post(server: Any, spider: str, raw: bytes) -> tuple[int, dict[str, Any]]:
    """One control action from the page: (HTTP code, JSON answer)."""
    if len(raw) > MAX_BODY:
        return 413, {"error": "body too large"}
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        return 400, {"error": "the body must be a JSON object"}
    if not isinstance(body, dict) or not spider:
        return 400, {"error": "the body must be a JSON object and the path name a spider"}
    by = str(body.get("by") or "dashboard")[:100]
    action = str(body.get("action", ""))
    control = _control(server, spider)
    try:
        if action in ("pause", "resume"):
            pause_action(control, server.settings, action, body.get("drain") is True, by, "dashboard")
            return 200, {"ok": True, "action": action, "spider": spider}
        if action == "purge":
            change = HostChange({"dead_letter": body.get("dead_letter") is True})
        else:
            change = HostChange.of(
                action,
                body.get("delay"),
                body.get("concurrency"),
                body.get("max_pages"),
                body.get("render"),
                body.get("for"),
                body.get("reason"),
            )
            if action == "unset":  # `fields`: the names to remove; none = every override of the host
                fields = body.get("fields")
                names: list[Any] = fields if isinstance(fields, list) else []
                change = HostChange.of("unset", *(True if n in names else None for n in OVERRIDE_FIELDS))
        host, now, dropped = host_action(
            control, server.settings, str(body.get("host", "")), action, change, by, "dashboard"
        )
    except ValueError as exc:  # BadInput, or what the frontier cannot do (purge without per-host queues)
        return 400, {"error": str(exc)}
    return 200, {"ok": True, "action": action, "host": host, "override": now, "purged": dropped}


def audit(server: Any, spider: str) -> list[dict[str, str]]:
    """The latest control actions of a spider, newest first."""
    entries = run_sync(_control(server, spider).latest_audit(AUDIT_SHOWN))
    out = []
    for entry_id, fields in entries:
        row = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in fields.items()}
        row["id"] = entry_id.decode()
        out.append(row)
    return out


def control_script(enabled: bool) -> str:
    """The page's control panel (JS), wrapped around spiderSection."""
    return CONTROL_JS.replace("__CONTROL_ENABLED__", "true" if enabled else "false").replace(
        "__READ_ONLY__", json.dumps(READ_ONLY)
    )


CONTROL_JS = r"""
const CONTROL = __CONTROL_ENABLED__;
function when(t) { return t ? new Date(t * 1000).toLocaleString() : ""; }
// an audit entry's old or new value (JSON) in words, as `dcrawl audit` prints it (core/control.py audit_words)
function words(action, raw) {
  let o; try { o = JSON.parse(raw); } catch (e) { return String(raw || ""); }
  if (o === null || o === undefined) return action === "pause" || action === "resume" ? "running" : "none";
  if (typeof o !== "object") return String(o);
  if ("dropped" in o) return o.dropped + " pending dropped" + (o.dead_letter ? " (dead-lettered)" : "");
  if ("since" in o) return "paused by " + o.by + (o.drain ? " (drain)" : "");
  const parts = ["delay", "concurrency", "max_pages", "render"].filter(k => k in o).map(k => k.replace("_", " ") + " " + o[k]);
  if (o.until) parts.push("blocked until " + when(o.until) + (o.reason ? " (" + o.reason + ")" : ""));
  return parts.join(", ") || "none";
}
async function control(spider, body) {
  const response = await fetch("api/control/" + encodeURIComponent(spider), {
    method: "POST", cache: "no-store", headers: { ...headers, "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const answer = await response.json().catch(() => ({}));
  const out = document.querySelector(`[data-control-result="${spider}"]`);
  if (out) out.textContent = response.ok ? "done: " + JSON.stringify(answer) : "refused: " + (answer.error || response.status);
  return response.ok;
}
// The form (inputs, buttons, the last answer) is built once per spider and moved into each refresh's
// panel: a refresh every few seconds must not wipe what an operator is typing or the answer they read.
const forms = {};
function controlForm(spider) {
  if (forms[spider]) return forms[spider];
  const button = (label, name, fn) => { const b = el("button", { type: "button", "data-action": name }, label); b.addEventListener("click", fn); return b; };
  const inputs = {};
  const field = (name, label, placeholder) => {
    inputs[name] = el("input", { name, placeholder, "data-field": name, size: 10, id: "control-" + spider + "-" + name });
    return el("label", { for: inputs[name].id, style: "margin-right:8px" }, label + " ", inputs[name]);
  };
  const v = (name) => inputs[name].value.trim();
  const host = field("host", "host or domain", "news.example.com"), delay = field("delay", "delay (s)", "2"), conc = field("concurrency", "in flight", "2"), pages = field("max_pages", "max pages", "1000"), dur = field("for", "block for", "2h");
  forms[spider] = el("div", { "data-control-form": spider },
    el("div", {}, button("pause", "pause", () => control(spider, { action: "pause" })), " ",
      button("pause (drain)", "pause-drain", () => control(spider, { action: "pause", drain: true })), " ",
      button("resume", "resume", () => control(spider, { action: "resume" }))),
    el("div", { style: "margin-top:8px" }, host),
    el("div", { style: "margin-top:4px" }, delay, conc, pages,
      button("set", "set", () => control(spider, { action: "set", host: v("host"), delay: v("delay"), concurrency: v("concurrency"), max_pages: v("max_pages") })), " ",
      button("unset all", "unset", () => { if (confirm("Remove every override of " + v("host") + " (a block too)?")) control(spider, { action: "unset", host: v("host") }); })),
    el("div", { style: "margin-top:4px" }, dur,
      button("block", "block", () => control(spider, { action: "block", host: v("host"), for: v("for") })), " ",
      button("unblock", "unblock", () => control(spider, { action: "unblock", host: v("host") })), " ",
      button("purge", "purge", () => { if (confirm("Drop every pending request of " + v("host") + "?")) control(spider, { action: "purge", host: v("host") }); })),
    el("div", { class: "empty", "data-control-result": spider }, ""));
  return forms[spider];
}
function controlPanel(s) {
  const panel = el("div", { class: "panel control", style: "margin-top:14px", "data-control": s.spider }, el("h3", {}, "control"));
  const c = s.control || {};
  if (c.paused) panel.append(el("div", { class: "skipped", "data-paused": "1" }, "paused since " + clock(c.paused.since) + " by " + c.paused.by + (c.paused.drain ? " (drain)" : "")));
  if (c.overrides) panel.append(el("div", {}, c.overrides + " override(s)" + (c.blocked ? ", " + c.blocked + " blocked: " + (c.blocks || []).map(b => b.target + " until " + clock(b.until)).join(", ") : "")));
  if (!CONTROL) { panel.append(el("div", { class: "empty", "data-read-only": "1" }, __READ_ONLY__)); return panel; }
  panel.append(controlForm(s.spider));
  const list = el("div", { "data-audit": s.spider }, "");
  fetch("api/audit/" + encodeURIComponent(s.spider), { headers, cache: "no-store" }).then(r => r.json()).then(rows => {
    list.replaceWith(el("div", { "data-audit": s.spider }, el("h3", {}, "audit"), listTable(rows || [], [["when", a => when(Number(a.time))], ["action", a => a.action], ["target", a => a.target, true], ["change", a => words(a.action, a.old) + " -> " + words(a.action, a.new), true], ["by", a => a.by], ["from", a => a.source]], "no control action yet")));
  }).catch(() => {});
  panel.append(list);
  return panel;
}
const plainSection = spiderSection;
spiderSection = function (s) { const section = plainSection(s); if (!s.error) section.append(controlPanel(s)); return section; };
"""
