// admin.js: the operators' dashboard at /admin (a plain ES module, no build step).
//
// Every figure and every action goes through the HTTP API with the admin
// token (docs/api.md, "Operators"):
//   GET  /v1/admin/rooms?limit=N           the biggest rooms now
//   GET  /v1/admin/nodes                   the live nodes and what each holds
//   GET  /v1/rooms/{room}/stats            a room's figures
//   GET  /v1/rooms/{room}/stats/online     its online curve (hour, day, week, 90 days)
//   GET  /v1/rooms/{room}/stats/likes      its likes a step, drawn on the same chart
//   GET  /v1/rooms/{room}/leaderboard      its top givers in the current broadcast
//   GET  /v1/rooms/{room}/broadcasts       its ended broadcasts
//   GET  /v1/admin/vip/{room}              its sect: pinned or automatic, since, moves
//   PUT|DELETE /v1/admin/vip/{room}/pin    pin it to a sect, or give it back to the rule
//   POST /v1/admin/rooms/{room}/end        end a broadcast (after a confirmation)
//   GET  /v1/admin/rooms/{room}/messages   its latest messages, to recall one
//   DELETE /v1/rooms/{room}/messages/{seq} recall it
//   PUT|DELETE /v1/admin/rooms/{room}/muted/{uid}, .../banned/{uid}   mute, ban, lift
//   GET  /v1/admin/rooms/{room}/muted, .../banned                      those in force
//   PUT  /v1/admin/rooms/{room}/slow       slow mode (0 lifts it)
//   GET  /v1/admin/rooms/{room}/moderation its slow mode and audit, newest first
//   GET  /v1/admin/rooms/{room}/review     its messages held for review, oldest first
//   POST /v1/admin/rooms/{room}/review/{id}/approve|deny   decide one (after a confirmation)
//   GET|PUT|DELETE /v1/admin/filters[/{name}]   the word filter's lists (admin-filters.js)
//   GET /v1/admin/webhooks/failed, POST .../replay   the events given up (admin-webhooks.js)
//
// The token is asked once and kept in sessionStorage: this tab only, gone
// when it closes. A refused token (401, or 403 for the publisher token)
// brings the form back with the server's reason; any other failure shows a
// banner and the last figures stay, refreshed again on the next tick.
// Figures refresh every REFRESH_MS while the tab is visible. Charts are drawn
// with uPlot (vendored in /static/vendor/uplot/, loaded by admin.html as a
// classic script: the global `uPlot`). Nothing from the server is ever put
// into the page as markup: text only.

import { mountFilters } from "./admin-filters.js";
import { mountWebhooks } from "./admin-webhooks.js";

const TOKEN_KEY = "liveroom.admin.token";
const REFRESH_MS = 5000;
const ROOMS_LIMIT = 20;
const NAME = /^[A-Za-z0-9_.-]{1,64}$/;

const $ = (id) => document.getElementById(id);

/** A failed call: the server's {"error", "message"}, or what the network did. */
class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }

  /** What a person reads: the reason and the status it came with. */
  get explained() {
    if (this.status === 0) return `Cannot reach the server: ${this.message}`;
    return `${this.message} (${this.status} ${this.code})`;
  }
}

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  room: null, // the room shown in the room panel
  range: 3600, // seconds of online curve shown
  timer: null,
  plot: null,
  vip: null, // the shown room's vip flag, as last read
  sect: null, // the shown room's sect record (GET /v1/admin/vip/{room}), as last read
  busy: false,
  failure: null, // what went wrong since the last refresh began
  window: [0, 0], // the curve's time axis: the whole range asked for, [since, until]
  filters: null, // the word filter card's refresh (admin-filters.js)
  webhooks: null, // the webhooks card's refresh (admin-webhooks.js)
};

// -- calling the API -----------------------------------------------------------------

async function api(method, path, query = null, body = undefined) {
  const url = query ? `${path}?${new URLSearchParams(query)}` : path;
  const headers = { Authorization: `Bearer ${state.token}`, Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (error) {
    throw new ApiError(0, "network", error.message || String(error));
  }
  let doc = null;
  try {
    doc = await resp.json();
  } catch {
    // Not JSON (a proxy's error page): the status says enough.
  }
  if (!resp.ok) {
    const code = doc?.error ?? "http_error";
    const message = doc?.message ?? resp.statusText ?? "request failed";
    throw new ApiError(resp.status, code, message);
  }
  return doc;
}

/** Run a call; null when it failed: a refused token signs out with the
 * reason, any other failure shows in the banner (until a refresh succeeds). */
async function guarded(work) {
  try {
    return await work();
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    if (error.status === 401 || error.status === 403) {
      state.failure = refusal(error);
      signOut(state.failure);
    } else {
      state.failure = `${error.explained}. Figures refresh every ${REFRESH_MS / 1000} s.`;
      showError(state.failure);
    }
    return null;
  }
}

function refusal(error) {
  if (error.status === 403) {
    return `That token cannot run the admin API (${error.message}): use the admin token, ` +
      "not the publisher token.";
  }
  return `The admin token was refused: ${error.explained}.`;
}

function showError(text) {
  const banner = $("error");
  banner.hidden = !text;
  banner.textContent = text ?? "";
}

// -- signing in and out ----------------------------------------------------------------

function signOut(reason) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  clearInterval(state.timer);
  state.timer = null;
  $("dashboard").hidden = true;
  $("sign-out").hidden = true;
  $("login").hidden = false;
  $("status").textContent = "";
  showError(reason);
  $("token").focus();
}

async function signIn(event) {
  event.preventDefault();
  const token = $("token").value.trim();
  if (!token) return;
  state.token = token;
  const button = event.submitter ?? $("login-form").querySelector("button");
  button.disabled = true;
  try {
    await api("GET", "/v1/admin/nodes");
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    state.token = null;
    showError(error.status === 401 || error.status === 403 ? refusal(error)
      : `Cannot check the token: ${error.explained}.`);
    return;
  } finally {
    button.disabled = false;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  start();
}

function start() {
  showError(null);
  $("login").hidden = true;
  $("dashboard").hidden = false;
  $("sign-out").hidden = false;
  const wanted = new URLSearchParams(location.hash.slice(1)).get("room");
  if (wanted && NAME.test(wanted)) choose(wanted);
  refresh();
  state.timer = setInterval(() => {
    if (!document.hidden) refresh();
  }, REFRESH_MS);
}

async function refresh() {
  if (state.busy || !state.token) return;
  state.busy = true;
  state.failure = null;
  try {
    await Promise.all([refreshRooms(), refreshNodes(), state.room && refreshRoom(),
      state.filters?.(), state.webhooks?.()]);
    showError(state.failure);
    if (state.token && !state.failure) $("status").textContent = `updated ${clock(Date.now())}`;
  } finally {
    state.busy = false;
  }
}

// -- the biggest rooms -------------------------------------------------------------------

function tierText(intervalMs) {
  return intervalMs > 0 ? `${+(intervalMs / 1000).toFixed(1)} s` : "plain";
}

function cell(row, text, className = "") {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

async function refreshRooms() {
  const doc = await guarded(() => api("GET", "/v1/admin/rooms", { limit: ROOMS_LIMIT }));
  if (!doc) return;
  const body = $("rooms").tBodies[0];
  body.replaceChildren();
  for (const r of doc.rooms) {
    const row = body.insertRow();
    row.dataset.room = r.room;
    row.tabIndex = 0;
    row.classList.toggle("chosen", r.room === state.room);
    cell(row, r.room, "room");
    cell(row, r.online.toLocaleString("en"), "n");
    cell(row, tierText(r.interval_ms), "n");
    const vip = cell(row, "");
    if (r.vip) {
      const badge = document.createElement("span");
      badge.className = "badge";
      badge.textContent = "vip";
      vip.append(badge);
    }
    cell(row, r.messages_per_minute === null ? "–" : r.messages_per_minute.toLocaleString("en"),
      "n");
  }
  $("rooms-empty").hidden = doc.rooms.length > 0;
  $("rooms-updated").textContent = `${doc.rooms.length} shown, by online count`;
}

function onRoomRow(event) {
  const row = event.target.closest("tr[data-room]");
  if (!row) return;
  if (event.type === "keydown" && event.key !== "Enter") return;
  choose(row.dataset.room);
  reveal();
}

/** On a narrow screen the room's panel is below the list: bring it into view. */
function reveal() {
  if (!matchMedia("(min-width: 900px)").matches) {
    $("room").scrollIntoView({ block: "start" });
  }
}

// -- one room -------------------------------------------------------------------------------

function choose(room) {
  if (room !== state.room) {
    state.room = room;
    state.vip = null;
    destroyPlot();
    $("broadcasts").replaceChildren();
    // Every list of the room before goes: a list is drawn again only when its
    // key changes, and held messages' ids are per room (room B's message 1
    // must never sit under room A's text, its approve or deny acting on B).
    for (const id of ["recent", "muted", "banned", "audit", "held", "givers"]) {
      $(id).replaceChildren();
      delete $(id).dataset.key;
    }
    $("held-count").textContent = "";
    $("slow-now").textContent = "–";
    for (const id of ["room-online", "room-viewers", "room-tier", "room-seq", "room-vip",
      "room-likes"]) {
      $(id).textContent = "–";
    }
    note(null);
    modNote(null);
  }
  $("room").hidden = false;
  $("room-name").textContent = room;
  $("room-page").href = `/rooms/${encodeURIComponent(room)}`;
  $("vip-toggle").disabled = state.vip === null;
  if (room !== state.sect?.room) {
    state.sect = null;
    $("room-sect").textContent = "–";
    $("vip-unpin").hidden = true;
  }
  history.replaceState(null, "", `#room=${encodeURIComponent(room)}`);
  for (const row of $("rooms").tBodies[0].rows) {
    row.classList.toggle("chosen", row.dataset.room === room);
  }
  refreshRoom();
}

async function refreshRoom() {
  const room = state.room;
  const path = `/v1/rooms/${encodeURIComponent(room)}`;
  const until = Math.floor(Date.now() / 1000);
  const since = Math.max(0, until - state.range);
  const [stats, series, likes, givers, past, sect] = await Promise.all([
    guarded(() => api("GET", `${path}/stats`)),
    guarded(() => api("GET", `${path}/stats/online`, { since })),
    guarded(() => api("GET", `${path}/stats/likes`, { since })),
    guarded(() => api("GET", `${path}/leaderboard`, { limit: 10 })),
    guarded(() => api("GET", `${path}/broadcasts`)),
    guarded(() => api("GET", `/v1/admin/vip/${encodeURIComponent(room)}`)),
    refreshModeration(),
  ]);
  if (room !== state.room) return; // another room was chosen meanwhile
  if (stats) showStats(stats);
  if (sect) showSect(sect);
  if (series) {
    // A sample stamped past the browser's now (its clock behind the node's)
    // still shows.
    const last = series.points.length ? series.points[series.points.length - 1][0] : until;
    state.window = [since, Math.max(until, last)];
    drawSeries(series, likes ? likes.points : []);
  }
  if (givers) showGivers(givers);
  if (past) showBroadcasts(past.broadcasts);
}

function showStats(stats) {
  $("room-online").textContent = stats.online.toLocaleString("en");
  $("room-viewers").textContent = (stats.viewers_exact ? "" : "≈ ") +
    stats.viewers.toLocaleString("en");
  $("room-seq").textContent = stats.seq.toLocaleString("en");
  $("room-likes").textContent = (stats.likes ?? 0).toLocaleString("en");
  $("room-vip").textContent = stats.vip ? "yes" : "no";
  const row = [...$("rooms").tBodies[0].rows].find((r) => r.dataset.room === stats.room);
  $("room-tier").textContent = row ? row.cells[2].textContent : "–";
  state.vip = stats.vip;
  const toggle = $("vip-toggle");
  toggle.textContent = stats.vip ? "Pin to normal" : "Pin to vip";
  toggle.disabled = false;
  toggle.dataset.vip = String(stats.vip);
}

// Which sect, pinned or automatic, since when; its moves are marked on the curve.
function showSect(sect) {
  state.sect = sect;
  const dd = $("room-sect");
  dd.textContent = sect.pinned ? "pinned" : "auto";
  dd.title = sect.since === null ? "never moved"
    : `in the ${sect.vip ? "vip" : "normal"} sect since ${new Date(sect.since).toLocaleString("en")}`;
  dd.dataset.since = sect.since === null ? "" : String(sect.since);
  const unpin = $("vip-unpin");
  unpin.hidden = !sect.pinned;
  unpin.disabled = false;
  if (state.plot) state.plot.redraw(false, false);
}

// The current broadcast's top givers, best first, and its gift total.
function showGivers(board) {
  const list = $("givers");
  list.replaceChildren();
  if (!board.top.length) {
    const li = document.createElement("li");
    li.className = "hint";
    li.textContent = "no gifts yet";
    list.append(li);
  }
  board.top.forEach((giver, i) => {
    const li = document.createElement("li");
    li.textContent = `${i + 1}. ${giver.uid}: ${giver.score.toLocaleString("en")}`;
    list.append(li);
  });
  list.dataset.total = String(board.total);
}

function showBroadcasts(broadcasts) {
  const list = $("broadcasts");
  list.replaceChildren();
  if (!broadcasts.length) {
    const li = document.createElement("li");
    li.className = "hint";
    li.textContent = "none kept";
    list.append(li);
  }
  for (const b of broadcasts) {
    const li = document.createElement("li");
    const viewers = (b.viewers_exact ? "" : "≈ ") + b.viewers.toLocaleString("en");
    li.textContent = `#${b.broadcast}, ended ${new Date(b.ended_at).toLocaleString("en")}: ` +
      `${viewers} watched, ${(b.likes ?? 0).toLocaleString("en")} likes, ` +
      `${(b.gifts ?? 0).toLocaleString("en")} in gifts`;
    list.append(li);
  }
}

function note(text) {
  const p = $("room-note");
  p.hidden = !text;
  p.textContent = text ?? "";
}

async function toggleVip() {
  const room = state.room;
  if (!room || state.vip === null) return;
  const sect = state.vip ? "normal" : "vip";
  await changeSect($("vip-toggle"), "PUT", { sect }, (doc) => doc.vip
    ? `${room} is pinned to the vip sect (other nodes follow within seconds).`
    : `${room} is pinned to the normal sect.`);
}

async function unpin() {
  const room = state.room;
  if (!room) return;
  await changeSect($("vip-unpin"), "DELETE", null, (doc) =>
    `${room} is unpinned: it stays ${doc.vip ? "vip" : "normal"} and moves by its online count.`);
}

async function changeSect(button, method, query, said) {
  const room = state.room;
  button.disabled = true;
  try {
    const doc = await guarded(() => api(method,
      `/v1/admin/vip/${encodeURIComponent(room)}/pin`, query));
    if (doc) {
      note(said(doc));
      await refresh();
    }
  } finally {
    button.disabled = false;
  }
}

function askEnd() {
  if (!state.room) return;
  $("confirm-room").textContent = state.room;
  $("confirm-end").returnValue = "";
  $("confirm-end").showModal();
}

async function onConfirmClosed() {
  if ($("confirm-end").returnValue !== "end" || !state.room) return;
  const room = state.room;
  const doc = await guarded(() => api("POST", `/v1/admin/rooms/${encodeURIComponent(room)}/end`));
  if (doc) {
    note(`Broadcast ${doc.broadcast} of ${room} started (epoch ${doc.epoch}); ` +
      "its listeners reset into it.");
    await refresh();
  }
}

// -- moderation --------------------------------------------------------------------------------
//
// The chosen room's latest messages (each with a recall), its mutes and bans
// (each with the time left and a lift), its slow mode and its audit. Every
// action goes through the API, then the panel reads the room again: what it
// shows is what the server holds.

const RECENT_LIMIT = 20;
const AUDIT_LIMIT = 20;
const HELD_LIMIT = 50;

/** "45 s", "10 min", "1 h 30 min", "2 d 3 h": a duration as people read it. */
function duration(seconds) {
  const parts = [];
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]]) {
    if (seconds >= size && parts.length < 2) {
      parts.push(`${Math.floor(seconds / size)} ${unit}`);
      seconds %= size;
    } else if (parts.length) {
      break;
    }
  }
  return parts.join(" ") || "0 s";
}

/** A body as a line of text: a string as it is, {text} as its text, else its JSON. */
function bodyText(body) {
  if (typeof body === "string") return body;
  if (body && typeof body === "object" && typeof body.text === "string") return body.text;
  return JSON.stringify(body);
}

/** Draw `list`'s lines again (`make()`) only when `key`, what they show, changed:
 * a refresh that brings the same keeps them, with a click on its way. */
function redraw(list, key, make) {
  if (list.dataset.key === key) return;
  list.dataset.key = key;
  list.replaceChildren(...make());
}

function roomPath(room, tail) {
  return `/v1/admin/rooms/${encodeURIComponent(room)}/${tail}`;
}

let moderationAsked = 0; // reads of the moderation asked for so far
let moderationShown = 0; // the last of them drawn

async function refreshModeration() {
  const room = state.room;
  const asked = (moderationAsked += 1);
  const [recent, muted, banned, audit, held] = await Promise.all([
    guarded(() => api("GET", roomPath(room, "messages"), { limit: RECENT_LIMIT })),
    guarded(() => api("GET", roomPath(room, "muted"))),
    guarded(() => api("GET", roomPath(room, "banned"))),
    guarded(() => api("GET", roomPath(room, "moderation"), { limit: AUDIT_LIMIT })),
    guarded(() => api("GET", roomPath(room, "review"), { limit: HELD_LIMIT })),
  ]);
  // A read that began before an action must not draw what it undid.
  if (room !== state.room || asked < moderationShown) return;
  moderationShown = asked;
  if (recent) showRecent(recent.messages);
  if (muted) showSanctions("muted", muted.muted);
  if (banned) showSanctions("banned", banned.banned);
  if (audit) {
    showSlow(audit.slow);
    showAudit(audit.audit);
  }
  if (held) showHeld(held);
}

function showRecent(messages) {
  const key = messages.map((m) => `${m.seq}${m.recalled ? "r" : ""}`).join(" ");
  redraw($("recent"), key, () => messages.slice().reverse().map((m) => {
    const li = document.createElement("li");
    li.dataset.seq = String(m.seq);
    li.dataset.uid = m.uid;
    if (m.recalled) li.className = "recalled";
    const when = document.createElement("time");
    when.dateTime = new Date(m.ts).toISOString();
    when.textContent = clock(m.ts);
    const who = document.createElement("button");
    who.type = "button";
    who.className = "link uid";
    who.title = "mute or ban this uid";
    who.textContent = m.uid;
    const text = document.createElement("span");
    text.className = "text";
    text.textContent = `${m.important ? "★ " : ""}${m.recalled ? "recalled" : bodyText(m.body)}`;
    li.append(when, who, text);
    if (m.extra && !m.recalled) {
      const extra = document.createElement("span");
      extra.className = "extra";
      extra.title = "what the backend's send hook attached to it";
      extra.textContent = JSON.stringify(m.extra);
      li.append(extra);
    }
    if (!m.recalled) {
      const recall = document.createElement("button");
      recall.type = "button";
      recall.className = "danger recall";
      recall.textContent = "recall";
      li.append(recall);
    }
    return li;
  }));
  $("recent-empty").hidden = messages.length > 0;
}

/** The messages held for review (a word filter's or the send hook's), oldest
 * first, each with Approve and Deny. Nobody else sees them. */
function showHeld(queue) {
  const key = `${queue.room} ${queue.held.map((h) => h.id).join(" ")}`;
  redraw($("held"), key, () => queue.held.map((h) => {
    const li = document.createElement("li");
    li.dataset.id = h.id;
    li.dataset.uid = h.uid;
    const when = document.createElement("time");
    when.dateTime = new Date(h.at_ms).toISOString();
    when.textContent = clock(h.at_ms);
    const who = document.createElement("span");
    who.className = "uid";
    who.textContent = h.uid;
    const text = document.createElement("span");
    text.className = "text";
    const lane = h.kind === "important" ? "★ " : h.kind === "personal" ? `to ${h.to}: ` : "";
    text.textContent = `${lane}${bodyText(h.body)}`;
    const why = document.createElement("span");
    why.className = "why";
    why.textContent = h.why;
    const approve = document.createElement("button");
    approve.type = "button";
    approve.className = "approve";
    approve.dataset.verdict = "approve";
    approve.textContent = "approve";
    const deny = document.createElement("button");
    deny.type = "button";
    deny.className = "danger deny";
    deny.dataset.verdict = "deny";
    deny.textContent = "deny";
    li.append(when, who, text, why, approve, deny);
    return li;
  }));
  const more = queue.count - queue.held.length;
  $("held-count").textContent = queue.count
    ? `${queue.count} waiting, oldest first${more > 0 ? ` (${more} more not shown)` : ""}` : "";
  $("held-empty").hidden = queue.count > 0;
}

function showSanctions(kind, sanctions) {
  const list = $(kind);
  const key = JSON.stringify(sanctions.map((s) => [s.uid, s.until_ms, s.at_ms, s.reason]));
  redraw(list, key, () => {
    if (!sanctions.length) {
      const li = document.createElement("li");
      li.className = "hint";
      li.textContent = "nobody";
      return [li];
    }
    return sanctions.map((s) => {
      const li = document.createElement("li");
      li.dataset.uid = s.uid;
      const who = document.createElement("span");
      who.className = "text";
      who.textContent = s.reason ? `${s.uid}: ${s.reason}` : s.uid;
      const left = document.createElement("span");
      left.className = "left";
      left.title = s.until_ms ? `until ${new Date(s.until_ms).toLocaleString("en")}, by ${s.by}`
        : `by ${s.by}`;
      const lift = document.createElement("button");
      lift.type = "button";
      lift.className = "quiet lift";
      lift.dataset.kind = kind;
      lift.textContent = "lift";
      li.append(who, left, lift);
      return li;
    });
  });
  // The time left moves on every refresh: in place.
  for (const s of sanctions) {
    const left = list.querySelector(`li[data-uid="${s.uid}"] .left`);
    left.textContent = s.seconds_left === null ? "until lifted" : `${duration(s.seconds_left)} left`;
  }
}

function showSlow(seconds) {
  const now = $("slow-now");
  now.textContent = seconds ? `on: one message per ${duration(seconds)}` : "off";
  now.dataset.seconds = String(seconds);
  $("slow-lift").hidden = !seconds;
}

function auditText(entry) {
  let target = entry.target;
  if (entry.action === "recall") target = `message ${entry.target.replace(/^room:/, "")}`;
  else if (entry.action === "approve" || entry.action === "deny") {
    const [uid, id] = entry.target.split(":");
    target = `held message ${id} of ${uid}`;
  }
  let what = `${entry.action}${target ? ` ${target}` : ""}`;
  if (entry.action === "slow") what = entry.seconds ? `slow mode ${duration(entry.seconds)}` : "slow mode off";
  else if (entry.action === "ban") what += entry.seconds ? ` for ${duration(entry.seconds)}` : " until lifted";
  else if (entry.seconds) what += ` for ${duration(entry.seconds)}`;
  return `${entry.by}: ${what}${entry.reason ? ` (${entry.reason})` : ""}`;
}

function showAudit(entries) {
  const list = $("audit");
  const key = JSON.stringify(entries.map((e) => [e.at_ms, e.action, e.target]));
  redraw(list, key, () => (entries.length ? entries : [null]).map((entry) => {
    if (entry === null) {
      const li = document.createElement("li");
      li.className = "hint";
      li.textContent = "no action this broadcast";
      return li;
    }
    const li = document.createElement("li");
    li.dataset.action = entry.action;
    li.dataset.target = entry.target;
    const when = document.createElement("time");
    when.dateTime = new Date(entry.at_ms).toISOString();
    when.textContent = clock(entry.at_ms);
    const text = document.createElement("span");
    text.className = "text";
    text.textContent = auditText(entry);
    li.append(when, text);
    return li;
  }));
}

/** What the last moderation did, at the top of its part of the panel. */
function modNote(text) {
  const p = $("mod-note");
  p.hidden = !text;
  p.textContent = text ?? "";
}

/** One moderation call with `button` disabled meanwhile; on success the note
 * says `said(doc)` and the room is read again. */
async function moderate(button, call, said) {
  const room = state.room;
  button.disabled = true;
  try {
    const doc = await guarded(call);
    if (doc) {
      modNote(said(doc, room));
      if (room === state.room) await refreshModeration();
    }
  } finally {
    button.disabled = false;
  }
}

async function onRecent(event) {
  const li = event.target.closest("li[data-seq]");
  if (!li) return;
  if (event.target.closest("button.uid")) {
    $("sanction-uid").value = li.dataset.uid;
    $("sanction-uid").focus();
    return;
  }
  const button = event.target.closest("button.recall");
  if (!button) return;
  // A recall cannot be undone: it is asked first (issue 46), as an end is.
  pendingRecall = { button, room: state.room, seq: li.dataset.seq };
  $("recall-seq").textContent = li.dataset.seq;
  $("recall-uid").textContent = li.dataset.uid;
  $("recall-text").textContent = li.querySelector(".text")?.textContent ?? "";
  $("confirm-recall").returnValue = "";
  $("confirm-recall").showModal();
}

/** The recall the moderator asked for, once confirmed. */
let pendingRecall = null;

async function onRecallClosed() {
  const asked = pendingRecall;
  pendingRecall = null;
  if (!asked || $("confirm-recall").returnValue !== "recall") return;
  await moderate(asked.button,
    () => api("DELETE", `/v1/rooms/${encodeURIComponent(asked.room)}/messages/${asked.seq}`),
    (doc) => `Message ${doc.seq} of ${doc.uid} recalled in ${doc.room}.`);
}

/** The decision the moderator asked for, once confirmed. */
let pendingReview = null;

/** Approve or deny a held message: asked first, as a recall is (neither can be undone). */
function onHeld(event) {
  const button = event.target.closest("button[data-verdict]");
  if (!button) return;
  const li = button.closest("li[data-id]");
  const verdict = button.dataset.verdict;
  pendingReview = { button, room: state.room, id: li.dataset.id, verdict };
  $("review-verdict").textContent = verdict === "approve" ? "Approve" : "Deny";
  $("review-id").textContent = li.dataset.id;
  $("review-uid").textContent = li.dataset.uid;
  $("review-text").textContent = li.querySelector(".text")?.textContent ?? "";
  $("review-approve-note").hidden = verdict !== "approve";
  $("review-deny-note").hidden = verdict === "approve";
  const yes = $("confirm-review-yes");
  yes.textContent = verdict === "approve" ? "Approve" : "Deny";
  yes.className = verdict === "approve" ? "" : "danger";
  $("confirm-review").returnValue = "";
  $("confirm-review").showModal();
}

async function onReviewClosed() {
  const asked = pendingReview;
  pendingReview = null;
  if (!asked || $("confirm-review").returnValue !== "yes") return;
  await moderate(asked.button,
    () => api("POST", roomPath(asked.room, `review/${asked.id}/${asked.verdict}`)),
    (doc) => (doc.denied ? `Held message ${doc.id} of ${doc.uid} denied in ${doc.room}.`
      : `Held message ${doc.id} of ${doc.uid} approved in ${doc.room}: sent as ${
        doc.pseq ? `personal message p${doc.pseq} to ${doc.to}`
          : `message ${doc.iseq ?? doc.seq}`}.`));
}

/** Mute (1 min to 1 day) or ban (those, or until lifted) the uid typed. */
async function onSanction(event) {
  event.preventDefault();
  const kind = event.submitter?.value ?? "muted";
  const field = $("sanction-uid");
  const uid = field.value.trim();
  if (!NAME.test(uid)) {
    field.reportValidity();
    return;
  }
  const seconds = Number($("sanction-for").value);
  const reason = $("sanction-reason").value.trim();
  const room = state.room;
  await moderate(event.submitter ?? $("mute"),
    () => api("PUT", roomPath(room, `${kind}/${encodeURIComponent(uid)}`), null,
      reason ? { seconds, reason } : { seconds }),
    () => `${uid} is ${kind} in ${room} ${seconds ? `for ${duration(seconds)}` : "until lifted"}.`);
  $("sanction-reason").value = "";
}

/** A mute can't be "until lifted": the server wants its end. */
function onSanctionFor() {
  $("mute").disabled = $("sanction-for").value === "0";
}

async function onLift(event) {
  const button = event.target.closest("button.lift");
  if (!button) return;
  const uid = button.closest("li").dataset.uid;
  const kind = button.dataset.kind;
  const room = state.room;
  await moderate(button, () => api("DELETE", roomPath(room, `${kind}/${encodeURIComponent(uid)}`)),
    () => `${uid} is no longer ${kind} in ${room}.`);
}

async function setSlow(button, seconds) {
  const room = state.room;
  await moderate(button, () => api("PUT", roomPath(room, "slow"), null, { seconds }),
    () => (seconds ? `Slow mode in ${room}: one message per ${duration(seconds)} a uid.`
      : `Slow mode lifted in ${room}.`));
}

// -- the online curve -------------------------------------------------------------------------

function destroyPlot() {
  if (state.plot) {
    state.plot.destroy();
    state.plot = null;
  }
  delete $("chart").dataset.ticks;
}

function chartWidth() {
  return Math.max(240, $("chart").clientWidth);
}

/** A tick's label, as fine as the ticks are apart (`step` seconds): the
 * date for days (and for midnight among hours), else the time, to the
 * second under a minute. */
function axisTime(seconds, step) {
  const d = new Date(seconds * 1000);
  const midnight = d.getHours() === 0 && d.getMinutes() === 0;
  if (step >= 86400 || (step >= 3600 && midnight)) return `${d.getMonth() + 1}/${d.getDate()}`;
  const minutes = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return step >= 60 ? minutes : `${minutes}:${pad(d.getSeconds())}`;
}

// The time axis's labels, by the ticks' spacing rather than the range asked
// for: a span shorter than the range (a narrow chart, a resize) still gets
// one label per tick. The chart's data-ticks lists those drawn.
function timeLabels(u, ticks, axis, space, step) {
  const labels = ticks.map((t) => axisTime(t, step ?? (ticks[1] - ticks[0] || 1)));
  $("chart").dataset.ticks = labels.join(" ");
  return labels;
}

function pad(n) {
  return String(n).padStart(2, "0");
}

function clock(ms) {
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function stepText(seconds) {
  return seconds % 3600 === 0 ? `${seconds / 3600} h` : `${seconds / 60} min`;
}

// The online curve (average and peak) and the likes a step, on one time axis:
// both series have the same steps (the server picks them alike), so their
// points meet at the same times; a time with one and not the other is a gap
// in the online curve and no likes.
function drawSeries(series, likes) {
  const points = series.points;
  $("chart-empty").hidden = points.length > 0 || likes.length > 0;
  const online = new Map(points.map((p) => [p[0], p]));
  const tapped = new Map(likes.map((p) => [p[0], p[1]]));
  const times = [...new Set([...online.keys(), ...tapped.keys()])].sort((a, b) => a - b);
  const data = [times, times.map((t) => online.get(t)?.[1] ?? null),
    times.map((t) => online.get(t)?.[2] ?? null), times.map((t) => tapped.get(t) ?? 0)];
  $("chart").dataset.likes = String(likes.reduce((sum, p) => sum + p[1], 0));
  if (state.plot && state.plot.liveroomStep === series.step) {
    state.plot.setData(data);
    return;
  }
  destroyPlot();
  const opts = {
    width: chartWidth(),
    height: 240,
    scales: {
      // The whole range asked for, even where the room has no samples yet.
      // uPlot's own extent is not used: a single sample (a room's first
      // minute) is padded by days, and every tick fell on a midnight.
      x: { time: true, range: () => [...state.window] },
      y: { range: (u, min, max) => [0, Math.max(1, Math.ceil(max * 1.1))] },
      likes: { range: (u, min, max) => [0, Math.max(1, Math.ceil(max * 1.1))] },
    },
    axes: [
      { values: timeLabels, stroke: "#5d6677" },
      { stroke: "#5d6677", values: (u, ticks) => ticks.map((t) => t.toLocaleString("en")) },
      { scale: "likes", side: 1, stroke: "#d6336c", grid: { show: false },
        values: (u, ticks) => ticks.map((t) => t.toLocaleString("en")) },
    ],
    series: [
      { value: (u, t) => (t == null ? "–" : new Date(t * 1000).toLocaleString("en")) },
      { label: `average per ${stepText(series.step)}`, stroke: "#2b6cd4", width: 2,
        fill: "rgba(43,108,212,0.12)" },
      { label: "peak", stroke: "#e4572e", width: 1, dash: [4, 3] },
      { label: `likes per ${stepText(series.step)}`, scale: "likes", stroke: "#d6336c",
        width: 1 },
    ],
    hooks: { draw: [markMoves] },
  };
  state.plot = new globalThis.uPlot(opts, data, $("chart"));
  state.plot.liveroomStep = series.step;
}

// A vertical line where the room moved sect, labelled "vip" or "normal" and
// its reason; the chart's data-marks lists those drawn ("vip:auto normal:pin").
function markMoves(u) {
  const marks = [];
  const moves = state.sect && state.sect.room === state.room ? state.sect.moves : [];
  const ctx = u.ctx;
  const [lo, hi] = [u.scales.x.min, u.scales.x.max];
  for (const move of moves) {
    const t = move.at / 1000;
    if (t < lo || t > hi) continue;
    const x = Math.round(u.valToPos(t, "x", true));
    ctx.save();
    ctx.strokeStyle = move.to === "vip" ? "#7b3fbf" : "#5d6677";
    ctx.lineWidth = 2 * devicePixelRatio;
    ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
    ctx.beginPath();
    ctx.moveTo(x, u.bbox.top);
    ctx.lineTo(x, u.bbox.top + u.bbox.height);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = ctx.strokeStyle;
    ctx.font = `${11 * devicePixelRatio}px sans-serif`;
    const label = `→ ${move.to} (${move.reason})`;
    const width = ctx.measureText(label).width;
    const gap = 4 * devicePixelRatio;
    // Right of the line, or left of it when it would run off the chart.
    const left = x + gap + width > u.bbox.left + u.bbox.width ? x - gap - width : x + gap;
    ctx.fillText(label, left, u.bbox.top + 12 * devicePixelRatio);
    ctx.restore();
    marks.push(`${move.to}:${move.reason}`);
  }
  $("chart").dataset.marks = marks.join(" ");
}

function chooseRange(event) {
  const button = event.target.closest("button[data-range]");
  if (!button) return;
  state.range = Number(button.dataset.range);
  for (const b of $("ranges").querySelectorAll("button")) {
    b.setAttribute("aria-pressed", String(b === button));
  }
  destroyPlot();
  if (state.room) refreshRoom();
}

// -- the live nodes ----------------------------------------------------------------------------

async function refreshNodes() {
  const doc = await guarded(() => api("GET", "/v1/admin/nodes"));
  if (!doc) return;
  const body = $("nodes").tBodies[0];
  body.replaceChildren();
  const now = Date.now();
  for (const n of doc.nodes) {
    const row = body.insertRow();
    row.dataset.node = n.node;
    cell(row, n.node, "room");
    for (const figure of [n.rooms_cached, n.held_polls, n.members, n.rooms_merged]) {
      cell(row, figure.toLocaleString("en"), "n");
    }
    const ago = Math.max(0, Math.round((now - n.announced_at) / 1000));
    cell(row, ago <= 1 ? "now" : `${ago} s ago`, "n");
  }
  $("nodes-updated").textContent = `${doc.nodes.length} over this store`;
}

// -- wiring -----------------------------------------------------------------------------------

function main() {
  $("login-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => signOut(null));
  $("rooms").addEventListener("click", onRoomRow);
  $("rooms").addEventListener("keydown", onRoomRow);
  $("pick").addEventListener("submit", (event) => {
    event.preventDefault();
    const room = $("pick-room").value.trim();
    if (NAME.test(room)) {
      choose(room);
      reveal();
    }
  });
  $("vip-toggle").addEventListener("click", toggleVip);
  $("vip-unpin").addEventListener("click", unpin);
  $("end-broadcast").addEventListener("click", askEnd);
  $("confirm-end").addEventListener("close", onConfirmClosed);
  $("confirm-recall").addEventListener("close", onRecallClosed);
  $("confirm-review").addEventListener("close", onReviewClosed);
  $("ranges").addEventListener("click", chooseRange);
  $("recent").addEventListener("click", onRecent);
  $("held").addEventListener("click", onHeld);
  $("sanction").addEventListener("submit", onSanction);
  $("sanction-for").addEventListener("change", onSanctionFor);
  $("muted").addEventListener("click", onLift);
  $("banned").addEventListener("click", onLift);
  $("slow").addEventListener("submit", (event) => {
    event.preventDefault();
    const field = $("slow-seconds");
    if (!field.checkValidity()) {
      field.reportValidity();
      return;
    }
    setSlow($("slow-set"), Number(field.value));
  });
  $("slow-lift").addEventListener("click", () => setSlow($("slow-lift"), 0));
  state.filters = mountFilters({ api, guarded });
  state.webhooks = mountWebhooks({ api, guarded });
  new ResizeObserver(() => state.plot?.setSize({ width: chartWidth(), height: 240 }))
    .observe($("chart"));
  if (typeof globalThis.uPlot !== "function") {
    showError("The chart library did not load (/static/vendor/uplot/uPlot.iife.min.js).");
  }
  if (state.token) {
    start();
  } else {
    $("login").hidden = false;
    $("token").focus();
  }
}

main();
