// agensh dashboard. Plain JavaScript, no build step, no dependency.
//
// Every text that comes from the organization (records, messages, steps, titles) goes into
// the page through textContent or a text node, never as markup. The page talks to the hub
// with its session cookie only: it never sees a token.
"use strict";

const STATES = ["busy", "idle", "parked", "starting", "stalled", "stopped", "dead"];
const ROW = 30; // px, the workers table's row height (app.css .row)
const FEED_KEPT = 200;

const state = {
  workers: new Map(), // id -> row
  states: {},
  stats: {},
  health: {},
  overview: null,
  feed: [], // newest first: {at, text, kind}
  cursor: null,
  sort: { key: "id", asc: true },
  view: "overview",
  worker: null, // id shown in the worker view
  diffBranch: null, // the branch its diff shows, null: the one it committed to last
  workerTab: "turns",
  conv: null, // the messages view's conversation, null: all
  prTab: "open",
  grep: null, // the board's query, null: the recent view
  connected: false,
};

// ---------- helpers ----------

function $(id) { return document.getElementById(id); }

/** An element with attributes and children; strings become text nodes. */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-") || k === "title" || k === "href" || k === "type" || k === "value") e.setAttribute(k, String(v));
    else if (k === "onclick") e.addEventListener("click", v);
    else e[k] = v;
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
function fill(node, ...children) { clear(node); for (const c of children.flat()) if (c) node.appendChild(c); return node; }

function num(n) { return (n || 0).toLocaleString("en-US"); }
function money(n) { return "$" + (n || 0).toFixed(n >= 100 ? 0 : 2); }
function ago(ms) {
  if (!ms) return "";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  if (s < 86400) return Math.floor(s / 3600) + "h ago";
  return Math.floor(s / 86400) + "d ago";
}
function span(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return (h ? h + "h " : "") + (h || m ? m + "m " : "") + sec + "s";
}
function clock(ms) { return ms ? new Date(ms).toLocaleTimeString() : ""; }

function toast(text) {
  const t = $("toast");
  t.textContent = text;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 6000);
}

/** A call to the hub's API as the logged-in operator. */
async function api(path, opts) {
  const o = Object.assign({ credentials: "same-origin", headers: {} }, opts || {});
  if (o.json !== undefined) {
    o.body = JSON.stringify(o.json);
    o.headers["content-type"] = "application/json";
    delete o.json;
  }
  const r = await fetch("/api/v1" + path, o);
  if (r.status === 401) { location.reload(); throw new Error("logged out"); }
  const text = await r.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = text; }
  if (!r.ok) {
    const msg = body && body.error ? body.error.message : r.status + " " + text;
    const err = new Error(msg);
    err.code = body && body.error ? body.error.code : String(r.status);
    throw err;
  }
  return body;
}

function recordLine(r, opts) {
  const o = opts || {};
  return el("li", { "data-record": r.id },
    el("span", { class: "rec-id", title: "unfold", onclick: () => unfold(r.id) }, r.id),
    el("span", { class: "kind k-" + r.kind }, r.kind),
    el("span", { class: "who" }, r.author),
    r.label ? el("span", { class: "label" }, r.label) : null, " ",
    el("span", { class: "text" }, r.text),
    r.invalidated ? el("span", { class: "label" }, "invalidated") : null,
    o.live ? el("span", { class: "label" }, "live") : null,
    el("span", { class: "when" }, ago(r.created_at)));
}

// ---------- routing ----------

function route() {
  const hash = location.hash.replace(/^#/, "") || "overview";
  const [view, arg] = hash.split("/");
  state.view = view === "worker" ? "worker" : (document.querySelector(`[data-view="${view}"]`) ? view : "overview");
  for (const s of document.querySelectorAll("section[data-view]")) s.hidden = s.dataset.view !== state.view;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.tab === state.view || (state.view === "worker" && a.dataset.tab === "workers"));
  if (state.view === "worker") { state.worker = decodeURIComponent(arg || ""); showWorker(); }
  if (state.view === "workers") renderWorkers();
  if (state.view === "board") loadBoard();
  if (state.view === "messages") loadMessages();
  if (state.view === "prs") loadPrs();
  if (state.view === "issues") loadIssues();
  if (state.view === "overview") loadOverview();
}

// ---------- the live stream ----------

let source = null;
/** Opens the stream from `after` (the recent changes start with what came before the page
 * did); the browser resumes it after a break with the last frame's id. */
function connect(after) {
  source = new EventSource("/api/v1/stream" + (after >= 0 ? "?after=" + after : ""));
  source.addEventListener("open", () => setLive(true));
  source.addEventListener("error", () => setLive(false));
  source.addEventListener("frame", (m) => {
    let f;
    try { f = JSON.parse(m.data); } catch (_) { return; }
    applyFrame(f);
  });
}

function setLive(on) {
  state.connected = on;
  const l = $("live");
  l.textContent = on ? "live" : "reconnecting";
  l.className = "live " + (on ? "on" : "off");
}

function applyFrame(f) {
  if (f.reset) state.workers.clear();
  for (const w of f.workers || []) state.workers.set(w.id, w);
  if (f.states) state.states = f.states;
  if (f.stats) state.stats = f.stats;
  if (f.health) state.health = f.health;
  state.cursor = f.cursor;
  const kinds = new Set();
  for (const e of f.events || []) { kinds.add(e.kind.split(".")[0]); onEvent(e); }
  if ((f.workers || []).length || f.states) {
    if (state.view === "workers") renderWorkers();
    if (state.view === "worker") renderWorkerNow();
  }
  renderCounts();
  if (state.view === "overview") { renderFeed(); if (kinds.has("pr") || kinds.has("main") || kinds.has("notice")) throttle("overview", loadOverview, 2000); }
  if (state.view === "prs" && kinds.has("pr")) throttle("prs", loadPrs, 1000);
  if (state.view === "issues" && kinds.has("issue")) throttle("issues", loadIssues, 1000);
}

const timers = {};
function throttle(name, fn, ms) {
  if (timers[name]) return;
  timers[name] = setTimeout(() => { timers[name] = null; fn(); }, ms);
}

function describe(e) {
  const p = e.payload || {};
  switch (e.kind) {
    case "board.record": return `${p.author} posted ${p.kind} ${p.id}: ${p.text}`;
    case "msg.channel": return `${p.from} in ${p.to}: ${p.text}`;
    case "msg.dm": return `${p.from} → ${p.to}: ${p.text}`;
    case "msg.unseen": return `to ${e.target || ""}: ${p.text || ""}`;
    case "notice": return `notice: ${p.text || p.notice || ""}`;
    case "pr.opened": return `${p.author || e.source || ""} opened PR #${p.number}: ${p.title || ""}`;
    case "pr.merged": return `PR #${p.number} merged: ${p.title || ""}`;
    case "pr.closed": return `PR #${p.number} closed`;
    case "pr.merge_failed": return `PR #${p.number} could not merge`;
    case "main.updated": return `main moved to ${(p.commit || "").slice(0, 10)}`;
    case "claim.taken_over": return `${p.author} took over claim ${p.id}`;
    case "worker.stop": return `stopped ${e.target || "everyone"}: ${p.reason || ""}`;
    default:
      if (e.kind.startsWith("issue.")) return `issue #${p.number} ${e.kind.slice(6)}${p.title ? ": " + p.title : ""}`;
      return e.kind;
  }
}

function onEvent(e) {
  state.feed.unshift({ at: e.created_at, text: describe(e), kind: e.kind, seq: e.seq });
  if (state.feed.length > FEED_KEPT) state.feed.length = FEED_KEPT;
  const p = e.payload || {};
  if (e.kind === "board.record" && state.view === "board" && state.grep === null) {
    const list = $("board-list");
    if (!list.querySelector(`[data-record="${CSS.escape(p.id)}"]`)) {
      list.insertBefore(recordLine({ id: p.id, kind: p.kind, author: p.author, text: p.text, label: p.label, created_at: e.created_at }), list.firstChild);
    }
  }
  if ((e.kind === "msg.channel" || e.kind === "msg.dm") && state.view === "messages") {
    if (!state.conv || state.conv === p.to || state.conv === p.from) appendMessage(p);
  }
}

// ---------- header and overview ----------

function renderCounts() {
  const total = Object.values(state.states).reduce((a, b) => a + b, 0);
  $("ov-workers").textContent = num(total);
  fill($("ov-states"), STATES.map((s) => el("span", { class: "chip s-" + s, "data-state": s }, el("i", { class: "dot" }), s + " " + num(state.states[s]))));
  $("ov-merged").textContent = num(state.stats.prs_merged);
  const h = state.health || {};
  fill($("ov-health"),
    el("dt", {}, "event → node p50 / p99"), el("dd", { "data-health": "delivery" }, `${num(h.delivery_p50_ms)} / ${num(h.delivery_p99_ms)} ms`),
    el("dt", {}, "duplicate claims"), el("dd", {}, `${num(h.claim_overlaps)} of ${num(h.claims)} claims overlapped`),
    el("dt", {}, "idle share"), el("dd", {}, Math.round((h.idle_share || 0) * 100) + "%"),
    el("dt", {}, "PRs waiting"), el("dd", {}, num(h.prs_waiting)),
    el("dt", {}, "urgent items not yet seen"), el("dd", { "data-health": "urgent-waiting" }, num(h.urgent_waiting)),
    el("dt", {}, "stored → seen p50 / p99"), el("dd", { "data-health": "presented" }, presentedTimes(h.presented)));
  const st = state.stats;
  fill($("ov-counts"),
    el("dt", {}, "records"), el("dd", {}, num(st.records)),
    el("dt", {}, "messages"), el("dd", {}, num(st.messages)),
    el("dt", {}, "events"), el("dd", {}, num(st.events)),
    el("dt", {}, "PRs open / merged / closed"), el("dd", {}, `${num(st.prs_open)} / ${num(st.prs_merged)} / ${num(st.prs_closed)}`));
}

/** Stored → presented times per kind (the last hour's), one line each. */
function presentedTimes(list) {
  if (!list || !list.length) return "none in the last hour";
  return list.map((l, i) => el("span", { "data-kind": l.kind, title: num(l.samples) + " shown" },
    i ? el("br") : null, `${l.kind}: ${span(l.p50_ms)} / ${span(l.p99_ms)}`));
}

function renderFeed() {
  fill($("ov-feed"), state.feed.slice(0, 40).map((f) => el("li", { "data-kind": f.kind }, f.text, el("span", { class: "when" }, ago(f.at)))));
}

async function loadOverview() {
  try {
    const o = await api("/overview");
    state.overview = o;
    const g = $("goal");
    g.textContent = o.goal;
    g.title = o.goal;
    state.states = o.states; state.stats = o.stats; state.health = o.health;
    renderCounts();
    renderOverview();
    renderFeed();
  } catch (e) { toast(e.message); }
}

function line(svg, points, xmax, ymax, label) {
  clear(svg);
  const ns = "http://www.w3.org/2000/svg";
  const W = 300, H = 150, P = 18;
  const mk = (tag, attrs) => { const e = document.createElementNS(ns, tag); for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v); return e; };
  svg.appendChild(mk("line", { x1: P, y1: H - P, x2: W - 4, y2: H - P, class: "axis" }));
  svg.appendChild(mk("line", { x1: P, y1: 4, x2: P, y2: H - P, class: "axis" }));
  if (!points.length) return;
  const x0 = points[0][0];
  const span_ = Math.max(1, xmax - x0);
  const d = points.map(([x, y], i) => `${i ? "L" : "M"}${(P + (x - x0) / span_ * (W - P - 4)).toFixed(1)},${(H - P - y / Math.max(ymax, 1e-9) * (H - P - 6)).toFixed(1)}`).join(" ");
  svg.appendChild(mk("path", { d, class: "line" }));
  const t = mk("text", { x: P + 2, y: 12 }); t.textContent = label; svg.appendChild(t);
}

// The goal (organization.done_when) and what each result cost.
function renderGoal(o) {
  const d = o.done || {};
  const rows = [];
  if (!(d.conditions || []).length) {
    rows.push(el("dt", {}, "goal"), el("dd", { class: "muted" }, "no done_when: the run goes on to its end"));
  } else if (d.met_at) {
    const from = o.run ? o.run.started_at : d.met_at;
    rows.push(el("dt", {}, "goal"), el("dd", { "data-goal": "met" }, `met at ${(d.met_commit || "").slice(0, 10)}` + (o.run ? `, ${span(d.met_at - from)} after the start` : "")));
  } else {
    rows.push(el("dt", {}, "goal"), el("dd", { "data-goal": "open" }, "not met yet"));
  }
  for (const c of d.checks || []) {
    const last = (c.detail || "").trim().split("\n").pop();
    rows.push(el("dt", {}, c.condition), el("dd", { class: c.met ? "" : "muted" }, (c.met ? "holds" : "fails") + (last ? ` — ${last}` : "")));
  }
  const e = d.economy;
  if (e) {
    const p = e.per_merged_pr;
    rows.push(el("dt", {}, "per merged PR"), el("dd", {}, p ? `${p.requests.toFixed(1)} requests, ${num(Math.round(p.tokens))} tokens, ${money(p.cost_usd)}` : "nothing merged yet"));
    if (e.mark) {
      const what = e.mark === "goal_met" ? "after the goal" : "after the last merge";
      rows.push(el("dt", {}, what), el("dd", {}, `${num(e.after.requests)} of ${num(e.total.requests)} requests (${Math.round(e.share_after * 100)}%), ${money(e.after.cost_usd)}`));
    }
  }
  fill($("ov-goal"), rows);
}

function renderOverview() {
  const o = state.overview;
  if (!o) return;
  const now = Date.now();
  const rows = [el("dt", {}, "now"), el("dd", {}, clock(now))];
  if (o.run) {
    rows.push(el("dt", {}, "running for"), el("dd", {}, span(now - o.run.started_at)));
    if (o.run.ends_at) rows.push(el("dt", {}, "time left"), el("dd", { id: "ov-left" }, span(o.run.ends_at - now)));
  }
  fill($("ov-time"), rows);
  fill($("ov-notices"), (o.notices || []).slice(-5).reverse().map((n) => el("li", {}, (n.payload && (n.payload.text || n.payload.notice)) || "notice", el("span", { class: "when" }, ago(n.created_at)))));
  const merges = o.merges || [];
  // A step per merge, from the run's start (or the first merge) to now.
  const from = Math.min(o.run ? o.run.started_at : now, merges.length ? merges[0].at : now);
  const steps = [[from, 0]];
  merges.forEach((m, i) => { steps.push([m.at, i], [m.at, i + 1]); });
  steps.push([now, merges.length]);
  line($("ov-merges"), steps, now, Math.max(1, merges.length), merges.length ? `${merges.length} merge(s) since ${clock(from)}` : "no merge yet");
  const b = o.budget || {};
  const spent = b.organization_spent || {};
  const lim = b.organization || {};
  const bar = (v, max) => {
    const share = max > 0 ? Math.min(1, v / max) : 0;
    return el("div", { class: "bar" + (share >= 1 ? " over" : share >= (b.notice_at || 0.8) ? " warn" : "") }, el("i", {}));
  };
  const tokBar = bar(spent.tokens || 0, lim.tokens || 0);
  tokBar.firstChild.style.width = (lim.tokens ? Math.min(100, 100 * (spent.tokens || 0) / lim.tokens) : 0) + "%";
  const costBar = bar(spent.cost_usd || 0, lim.cost_usd || 0);
  costBar.firstChild.style.width = (lim.cost_usd ? Math.min(100, 100 * (spent.cost_usd || 0) / lim.cost_usd) : 0) + "%";
  fill($("ov-spend"),
    el("div", {}, `tokens ${num(spent.tokens)}` + (lim.tokens ? ` of ${num(lim.tokens)}` : " (no budget)")), tokBar,
    el("div", {}, `cost ${money(spent.cost_usd)}` + (lim.cost_usd ? ` of ${money(lim.cost_usd)}` : " (no budget)")), costBar,
    el("div", { class: "muted" }, `${num(spent.requests)} model requests` + (b.organization_stopped_for ? ` — stopped: ${b.organization_stopped_for}` : "")));
  renderGoal(o);
  const scores = o.scores || [];
  $("ov-score-card").hidden = !scores.length;
  if (scores.length) {
    $("ov-score").textContent = (scores[scores.length - 1].score * 100).toFixed(1) + "%";
    line($("ov-scores"), scores.map((s) => [s.at, s.score]), Math.max(now, scores[scores.length - 1].at), 1, scores[scores.length - 1].label);
  }
}

// ---------- workers table (virtualised: only the rows in sight are in the page) ----------

function sortedWorkers() {
  const want = $("wk-state").value;
  const q = $("wk-filter").value.trim().toLowerCase();
  let rows = [...state.workers.values()];
  if (want) rows = rows.filter((w) => w.status === want);
  if (q) rows = rows.filter((w) => [w.id, w.claim, w.step, w.agent].some((t) => t && t.toLowerCase().includes(q)));
  const { key, asc } = state.sort;
  rows.sort((a, b) => {
    const x = a[key] ?? "", y = b[key] ?? "";
    const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y), "en", { numeric: true });
    return asc ? c : -c;
  });
  return rows;
}

let sorted = [];
function renderWorkers() {
  sorted = sortedWorkers();
  $("wk-count").textContent = `${num(sorted.length)} of ${num(state.workers.size)} workers`;
  $("wk-spacer").style.height = sorted.length * ROW + "px";
  for (const h of document.querySelectorAll("#wk-head > div")) {
    h.classList.toggle("sorted", h.dataset.key === state.sort.key);
    h.classList.toggle("asc", h.dataset.key === state.sort.key && state.sort.asc);
  }
  drawRows();
}

function drawRows() {
  const vp = $("wk-viewport");
  const first = Math.max(0, Math.floor(vp.scrollTop / ROW) - 5);
  const last = Math.min(sorted.length, first + Math.ceil(vp.clientHeight / ROW) + 10);
  const spacer = clear($("wk-spacer"));
  for (let i = first; i < last; i++) {
    const w = sorted[i];
    const action = w.step || (w.last_action ? "last: " + w.last_action : (w.status === "idle" ? "waiting for events" : ""));
    const r = el("div", { class: "row s-" + w.status, "data-worker": w.id, "data-status": w.status, onclick: () => { location.hash = "#worker/" + encodeURIComponent(w.id); } },
      el("div", {}, w.id),
      el("div", {}, el("span", { class: "dot s-" + w.status }), " " + w.status),
      el("div", { title: w.claim || "" }, w.claim ? `${w.claim_id} ${w.claim}` : ""),
      el("div", { title: action }, action),
      el("div", {}, ago(w.step_since || w.last_action_at || w.last_activity)),
      el("div", {}, num(w.turns)),
      el("div", {}, num(w.tokens)),
      el("div", {}, money(w.cost_usd)),
      el("div", {}, num(w.restarts)),
      el("div", {}, num(w.open_prs)));
    r.style.top = i * ROW + "px";
    spacer.appendChild(r);
  }
}

// ---------- one worker ----------

function renderWorkerNow() {
  const w = state.workers.get(state.worker);
  $("w-title").textContent = state.worker;
  if (!w) { fill($("w-now"), el("dd", {}, "no such worker")); return; }
  fill($("w-status"), el("span", { class: "chip s-" + w.status, "data-status": w.status }, el("i", { class: "dot" }), w.status));
  fill($("w-now"),
    el("dt", {}, "agent"), el("dd", {}, w.agent || "—"),
    el("dt", {}, "step"), el("dd", {}, w.step ? `${w.step} (${ago(w.step_since)})` : "—"),
    el("dt", {}, "last action"), el("dd", {}, w.last_action ? `${w.last_action} (${ago(w.last_action_at)})` : "—"),
    el("dt", {}, "claim"), el("dd", {}, w.claim ? `${w.claim_id} ${w.claim}` : "—"),
    el("dt", {}, "last request"), el("dd", {}, ago(w.last_activity) || "—"),
    el("dt", {}, "turns"), el("dd", {}, num(w.turns)),
    el("dt", {}, "tokens / cost"), el("dd", {}, `${num(w.tokens)} / ${money(w.cost_usd)}`),
    el("dt", {}, "restarts"), el("dd", {}, num(w.restarts)),
    el("dt", {}, "open PRs"), el("dd", {}, num(w.open_prs)),
    w.stopped_for ? el("dt", {}, "stopped for") : null, w.stopped_for ? el("dd", {}, w.stopped_for) : null);
}

function showWorker() {
  renderWorkerNow();
  for (const b of document.querySelectorAll("#w-tabs button")) b.classList.toggle("active", b.dataset.wtab === state.workerTab);
  loadWorkerTab();
}

async function loadWorkerTab() {
  const id = state.worker, body = $("w-body");
  const q = encodeURIComponent(id);
  try {
    if (state.workerTab === "turns") {
      const turns = await api(`/workers/${q}/turns?limit=50`);
      fill(body, turns.length ? el("ul", { class: "list" }, turns.map(turnItem)) : el("p", { class: "muted" }, "no turn reported yet"));
    } else if (state.workerTab === "records") {
      const recs = await api(`/board/grep?q=${encodeURIComponent("author:" + id)}&limit=200`);
      fill(body, recs.length ? el("ul", { class: "list" }, recs.map((r) => recordLine(r))) : el("p", { class: "muted" }, "no record yet"));
    } else if (state.workerTab === "messages") {
      const msgs = await api(`/messages?with=${q}&limit=200`);
      fill(body, msgs.length ? el("ul", { class: "list" }, msgs.map(messageItem)) : el("p", { class: "muted" }, "no message yet"));
    } else if (state.workerTab === "diff") {
      const want = state.diffBranch && state.diffBranch.startsWith(id + "/") ? `?branch=${encodeURIComponent(state.diffBranch)}` : "";
      const d = await api(`/workers/${q}/diff${want}`);
      const pick = el("select", { id: "w-branch" }, d.branches.map((b) => el("option", { value: b }, b)));
      pick.value = d.branch;
      pick.addEventListener("change", () => { state.diffBranch = pick.value; loadWorkerTab(); });
      fill(body,
        el("p", {}, "branch ", pick),
        el("p", {}, `${d.commits.length} commit(s) ahead of main, ${d.files.length} file(s); ` + mergeability(d.mergeability)),
        el("ul", { class: "list" }, d.commits.map((c) => el("li", {}, el("code", {}, c.sha.slice(0, 10)), " ", c.subject))),
        diffBlock(d.patch, d.truncated));
    } else if (state.workerTab === "prs") {
      const prs = await api(`/prs?author=${q}&limit=100`);
      fill(body, prs.length ? el("ul", { class: "list" }, prs.map(prItem)) : el("p", { class: "muted" }, "no pull request yet"));
    }
  } catch (e) {
    fill(body, el("p", { class: "muted" }, e.message));
  }
}

function turnItem(t) {
  const calls = t.tool_calls || [];
  return el("li", { "data-turn": t.turn },
    el("div", {}, el("b", {}, `turn ${t.turn}`), el("span", { class: "when" }, `${clock(t.started_at)} · ${span((t.ended_at || t.started_at) - t.started_at)} · ${num(t.input_tokens)} in / ${num(t.output_tokens)} out · ${t.stop_reason || ""}`)),
    t.events && t.events.length ? el("div", { class: "muted" }, `notices delivered: ${t.events.length}`) : null,
    el("details", {}, el("summary", {}, "prompt"), el("pre", {}, t.prompt || "")),
    calls.length ? el("details", {}, el("summary", {}, `${calls.length} tool call(s)`), el("ul", { class: "list" }, calls.map((c) => el("li", {}, el("code", {}, c.name || "tool"), " ", c.title || "", c.status ? el("span", { class: "when" }, c.status) : null)))) : null,
    t.last_action ? el("div", { class: "muted" }, "last: " + t.last_action) : null);
}

function mergeability(m) {
  if (!m) return "";
  if (m.state === "conflict" || m.files) return "conflicts with main in " + (m.files || []).join(", ");
  return typeof m === "string" ? m : (m.state || JSON.stringify(m));
}

function diffBlock(patch, truncated) {
  const pre = el("pre", { class: "diff" });
  for (const l of (patch || "").split("\n")) {
    const cls = l.startsWith("+") && !l.startsWith("+++") ? "add" : l.startsWith("-") && !l.startsWith("---") ? "del" : l.startsWith("@@") ? "hunk" : null;
    pre.appendChild(cls ? el("span", { class: cls }, l) : document.createTextNode(l));
    pre.appendChild(document.createTextNode("\n"));
  }
  return el("div", {}, pre, truncated ? el("p", { class: "muted" }, "cut at 512 KiB") : null);
}

// ---------- board ----------

async function loadBoard() {
  const list = $("board-list");
  try {
    if (state.grep === null) {
      $("board-mode").textContent = "recent view, live";
      const view = await api("/board/recent?cap=300");
      const live = (r) => r.kind === "CLAIM" && !r.released_at;
      fill(list, view.map((r) => recordLine(r, { live: live(r) })));
    } else {
      $("board-mode").textContent = "grep over all history";
      const found = await api(`/board/grep?q=${encodeURIComponent(state.grep)}&limit=200`);
      fill(list, found.length ? found.map((r) => recordLine(r)) : [el("li", { class: "muted" }, "nothing matches")]);
    }
  } catch (e) { toast(e.message); }
}

async function unfold(id) {
  try {
    const u = await api(`/board/records/${encodeURIComponent(id)}`);
    const r = u.record || u;
    $("unfold-card").hidden = false;
    if (state.view !== "board") location.hash = "#board";
    fill($("unfold"),
      el("p", {}, el("span", { class: "rec-id" }, r.id), el("span", { class: "kind k-" + r.kind }, r.kind), el("span", { class: "who" }, r.author), r.label ? el("span", { class: "label" }, r.label) : null, el("span", { class: "when" }, clock(r.created_at))),
      el("p", { class: "detail" }, r.text),
      r.detail ? el("pre", {}, r.detail) : null,
      r.paths && r.paths.length ? el("p", { class: "muted" }, "paths: " + r.paths.join(", ")) : null,
      u.superseded_by ? el("p", { class: "muted" }, "superseded by ", el("span", { class: "rec-id", onclick: () => unfold(u.superseded_by.id) }, u.superseded_by.id)) : null,
      u.invalidated_by ? el("p", { class: "muted" }, "invalidated by ", el("span", { class: "rec-id", onclick: () => unfold(u.invalidated_by.id) }, u.invalidated_by.id)) : null);
  } catch (e) { toast(e.message); }
}

// ---------- messages ----------

function messageItem(m) {
  return el("li", { "data-message": "M" + m.seq },
    el("span", { class: "who" }, m.from), el("span", { class: "muted" }, "→ " + m.to + " "),
    el("span", { class: "text" }, m.text), el("span", { class: "when" }, ago(m.created_at)));
}

function appendMessage(m) {
  const list = $("msg-list");
  if (list.querySelector(`[data-message="M${m.seq}"]`)) return;
  list.appendChild(messageItem(m));
}

async function loadMessages() {
  try {
    const with_ = state.conv ? `&with=${encodeURIComponent(state.conv)}` : "";
    const msgs = await api(`/messages?limit=200${with_}`);
    $("msg-title").textContent = state.conv || "every message";
    fill($("msg-list"), msgs.map(messageItem));
    // Conversations: the channels seen, and the workers.
    const convs = new Set(["#general"]);
    for (const m of msgs) if (m.to.startsWith("#")) convs.add(m.to);
    const items = [el("li", { class: state.conv ? "" : "active", onclick: () => { state.conv = null; loadMessages(); } }, "every message")];
    for (const c of [...convs].sort()) items.push(el("li", { class: state.conv === c ? "active" : "", "data-conv": c, onclick: () => { state.conv = c; $("msg-to").value = c; loadMessages(); } }, c));
    for (const id of [...state.workers.keys()].sort().slice(0, 500)) items.push(el("li", { class: state.conv === id ? "active" : "", "data-conv": id, onclick: () => { state.conv = id; $("msg-to").value = id; loadMessages(); } }, id));
    fill($("msg-convs"), items);
  } catch (e) { toast(e.message); }
}

async function sendMessage(ev) {
  ev.preventDefault();
  const to = $("msg-to").value.trim(), text = $("msg-text").value;
  if (!to || !text.trim()) { toast("name a channel (#general) or a worker (w01), and write a message"); return; }
  try {
    const m = await api("/messages", { method: "POST", json: { to, text } });
    $("msg-text").value = "";
    appendMessage(m);
  } catch (e) { toast(e.message); }
}

// ---------- pull requests ----------

// Where an open PR's merge waits in the merge queue: its place, batch and gate run.
function queueNote(q) {
  if (!q) return null;
  let t = `merging: place ${q.place}`;
  if (q.batch) t += ` · batch ${q.batch}`;
  if (q.gate_run) t += ` · waits for gate run ${q.gate_run}`;
  return el("span", { class: "queue" }, " " + t);
}

function prItem(p) {
  return el("li", { "data-pr": p.number, onclick: () => showPr(p.number) },
    el("b", {}, `#${p.number} `), el("span", { class: "text" }, p.title), " ",
    el("span", { class: "state-" + p.state }, p.state), el("span", { class: "muted" }, ` ${p.author} · ${p.branch}`),
    queueNote(p.queue), el("span", { class: "when" }, ago(p.updated_at)));
}

async function loadPrs() {
  for (const b of document.querySelectorAll("#pr-tabs button")) b.classList.toggle("active", b.dataset.prs === state.prTab);
  try {
    if (state.prTab === "failed") {
      const f = await api("/merge-failures");
      fill($("pr-list"), f.length ? f.slice().reverse().map((x) => {
        const r = x.reason || {};
        const d = r.details || {};
        return el("li", { "data-failure": x.number, onclick: () => showPr(x.number) }, el("b", {}, `#${x.number} `), el("span", {}, r.code || "failed"), el("span", { class: "when" }, ago(x.at)),
          d.files ? el("div", { class: "muted" }, "conflicting files: " + d.files.join(", ")) : null,
          d.output_tail ? el("pre", {}, d.output_tail) : null,
          !d.files && !d.output_tail ? el("div", { class: "muted" }, r.message || "") : null);
      }) : [el("li", { class: "muted" }, "no failed merge since the hub started")]);
      return;
    }
    const prs = await api(`/prs?state=${state.prTab}&limit=200`);
    fill($("pr-list"), prs.length ? prs.map(prItem) : [el("li", { class: "muted" }, `no ${state.prTab} pull request`)]);
    // A merge queue moves without events between its gate runs: look again while it holds any.
    if (prs.some((p) => p.queue)) throttle("prs", () => { if (state.view === "prs") loadPrs(); }, 2000);
  } catch (e) { toast(e.message); }
}

async function showPr(n) {
  try {
    const p = await api(`/prs/${n}`);
    $("pr-card").hidden = false;
    const bs = p.branch_summary;
    fill($("pr-detail"),
      el("h3", {}, `#${p.number} `, el("span", {}, p.title)),
      el("p", { class: "muted" }, `${p.state} · ${p.author} · ${p.branch} → ${p.base} · ${p.approvals} approval(s)` + (p.merge_commit ? ` · merged as ${p.merge_commit.slice(0, 10)}` : ""), queueNote(p.queue)),
      p.body ? el("p", { class: "detail" }, p.body) : null,
      bs ? el("p", {}, `${bs.commits.length} commit(s), ${bs.files.length} file(s): ` + mergeability(bs.mergeability)) : null,
      bs ? el("ul", { class: "list" }, bs.files.map((f) => el("li", {}, el("code", {}, f.path), ` +${f.added ?? "bin"} −${f.removed ?? "bin"}`))) : null,
      el("h4", {}, "reviews and comments"),
      el("ul", { class: "list" }, (p.reviews || []).map((r) => el("li", {}, el("span", { class: "who" }, r.reviewer || r.author), r.verdict, " ", r.text || "")),
        (p.comments || []).map((c) => el("li", {}, el("span", { class: "who" }, c.author), c.text))));
  } catch (e) { toast(e.message); }
}

// ---------- issues ----------

function issueItem(i) {
  return el("li", { "data-issue": i.number, onclick: () => showIssue(i.number) },
    el("b", {}, `#${i.number} `), el("span", { class: "text" }, i.title), " ",
    el("span", { class: "state-" + i.state }, i.state),
    (i.labels || []).map((l) => el("span", { class: "label" }, l)),
    i.assignee ? el("span", { class: "muted" }, " · " + i.assignee) : null,
    el("span", { class: "when" }, ago(i.updated_at)));
}

async function loadIssues() {
  try {
    const st = $("is-state").value;
    const list = await api(`/issues?limit=200${st ? "&state=" + st : ""}`);
    fill($("is-list"), list.length ? list.map(issueItem) : [el("li", { class: "muted" }, "no issue")]);
  } catch (e) { fill($("is-list"), el("li", { class: "muted" }, e.message)); }
}

async function showIssue(n) {
  try {
    const i = await api(`/issues/${n}`);
    $("is-card").hidden = false;
    const comment = el("textarea", { rows: 3, cols: 70, id: "is-comment", placeholder: "comment" });
    const assignee = el("input", { type: "text", id: "is-assignee", placeholder: "w01", size: 8 });
    fill($("is-detail"),
      el("h3", {}, `#${i.number} `, el("span", {}, i.title), " ", el("span", { class: "state-" + i.state }, i.state)),
      el("p", { class: "muted" }, `opened by ${i.author} ${ago(i.created_at)}` + (i.assignee ? ` · assigned to ${i.assignee}` : "") + (i.closed_by ? ` · closed by ${i.closed_by}` : "")),
      el("p", {}, (i.labels || []).map((l) => el("span", { class: "label" }, l))),
      i.body ? el("p", { class: "detail" }, i.body) : null,
      el("ul", { class: "list" }, (i.comments || []).map((c) => el("li", {}, el("span", { class: "who" }, c.author), el("span", { class: "text" }, c.text), el("span", { class: "when" }, ago(c.created_at))))),
      el("p", {}, comment),
      el("p", {},
        el("button", { class: "primary", type: "button", onclick: () => issueAction(n, "comments", { text: comment.value }) }, "comment"), " ",
        assignee, el("button", { class: "plain", type: "button", onclick: () => issueAction(n, "assign", { assignee: assignee.value.trim() || null }) }, "assign"), " ",
        i.state === "open"
          ? el("button", { class: "plain", type: "button", id: "is-close", onclick: () => issueAction(n, "close", {}) }, "close")
          : el("button", { class: "plain", type: "button", onclick: () => issueAction(n, "reopen", {}) }, "reopen")));
  } catch (e) { toast(e.message); }
}

async function issueAction(n, what, body) {
  try {
    await api(`/issues/${n}/${what}`, { method: "POST", json: body });
    await showIssue(n);
    loadIssues();
  } catch (e) { toast(e.message); }
}

async function openIssue(ev) {
  ev.preventDefault();
  const title = $("is-title").value.trim();
  const labels = $("is-labels").value.split(",").map((l) => l.trim()).filter(Boolean);
  const body = $("is-body").value;
  if (!title) { toast("an issue needs a title"); return; }
  try {
    const i = await api("/issues", { method: "POST", json: { title, body: body || null, labels } });
    $("is-title").value = ""; $("is-body").value = ""; $("is-labels").value = "";
    $("is-new").hidden = true;
    await loadIssues();
    showIssue(i.number);
  } catch (e) { toast(e.message); }
}

// ---------- start ----------

function start() {
  window.addEventListener("hashchange", route);
  for (const h of document.querySelectorAll("#wk-head > div")) {
    h.addEventListener("click", () => {
      const key = h.dataset.key;
      state.sort = { key, asc: state.sort.key === key ? !state.sort.asc : true };
      renderWorkers();
    });
  }
  $("wk-viewport").addEventListener("scroll", () => requestAnimationFrame(drawRows));
  $("wk-state").addEventListener("change", renderWorkers);
  $("wk-filter").addEventListener("input", renderWorkers);
  for (const b of document.querySelectorAll("#w-tabs button")) b.addEventListener("click", () => { state.workerTab = b.dataset.wtab; showWorker(); });
  for (const b of document.querySelectorAll("#pr-tabs button")) b.addEventListener("click", () => { state.prTab = b.dataset.prs; loadPrs(); });
  $("grep-form").addEventListener("submit", (e) => { e.preventDefault(); const q = $("grep-q").value.trim(); state.grep = q || null; loadBoard(); });
  $("grep-clear").addEventListener("click", () => { state.grep = null; $("grep-q").value = ""; loadBoard(); });
  $("msg-form").addEventListener("submit", sendMessage);
  $("is-state").addEventListener("change", loadIssues);
  $("is-new-toggle").addEventListener("click", () => { $("is-new").hidden = !$("is-new").hidden; });
  $("is-new").addEventListener("submit", openIssue);
  setInterval(() => { if (state.view === "overview") renderOverview(); }, 1000);
  route();
  api("/stats").then((st) => connect(Math.max(0, (st.events || 0) - 40))).catch(() => connect(0));
}

document.addEventListener("DOMContentLoaded", start);
