// The room page (/rooms/{room}): listens with liveroom.js and shows the room.
//
// Important messages go to their own box above the chat, highlighted, and are
// drawn before the chat of the same answer (liveroom.js calls onImportant
// first). Every message element carries data-order, the order it was drawn
// in. Gaps and resets are notices in the chat. The room's top givers show
// beside its likes while it has some (onRanking). A recalled message stays in
// its place, marked "message recalled" (its body gone: onRecall, or a
// tombstone in an answer); the viewer's own messages carry a "recall" button
// for the server's recall window. Slow mode shows under the input (onSlow).
// Failures are shown, never a blank page: the listener's in a banner (with
// the retry it is waiting for), a send's under the box (a mute or ban with the
// server's words, a slow room's refusal with the wait); a send held for review
// says so there, to its sender alone. Bodies are shown as text, never as markup.
//
// A new uid or ticket is a new listener, whose first poll brings the recent
// chat again: the page keeps the lines it shows and skips those it has
// drawn (see "what the chat shows").

import { Listener, LiveroomError, like, recall, roomStats, send } from "/static/liveroom.js";

const CHAT_KEEP = 500;       // messages drawn in the chat; older ones are removed
const IMPORTANT_KEEP = 50;
const STATS_EVERY_MS = 5000;
const TAPS_EVERY_MS = 500;   // taps are batched: one request for the taps of half a second
const RECALL_WINDOW_MS = 120_000; // the server's --recall-window (default): the own-recall button's life

const $ = (id) => document.getElementById(id);
const room = decodeURIComponent(location.pathname.split("/").filter(Boolean).pop() ?? "");
let drawn = 0;
let listener = null;

// -- who is speaking: the uid (remembered), the ticket or token (this tab only) --

function guestUid() {
  const bytes = new Uint8Array(3);
  crypto.getRandomValues(bytes);
  return "guest-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

const uidField = $("uid");
const ticketField = $("ticket");
uidField.value = localStorage.getItem("liveroom.uid") || guestUid();
ticketField.value = sessionStorage.getItem("liveroom.ticket") || "";

/** A ticket is a JWT (three dotted parts); anything else is a token, for sends only. */
const isTicket = (value) => value.split(".").length === 3;
const ticket = () => ticketField.value.trim();

/** The uid a ticket names (its "sub" claim, read, not verified: the server does that). */
function ticketUid(value) {
  try {
    const part = value.split(".")[1].replaceAll("-", "+").replaceAll("_", "/");
    const claims = JSON.parse(atob(part.padEnd(part.length + (4 - part.length % 4) % 4, "=")));
    return typeof claims.sub === "string" ? claims.sub : null;
  } catch {
    return null;
  }
}

/** Who the page speaks as: the ticket's uid, else the uid typed. */
function me() {
  const t = ticket();
  return t && isTicket(t) ? ticketUid(t) : uidField.value;
}

/** The options of a call as the viewer: its uid in open mode, its ticket or token. */
function asViewer() {
  const t = ticket();
  return { uid: t && isTicket(t) ? undefined : uidField.value, ticket: t || null };
}

function showWho() {
  const t = ticket();
  $("who-uid").textContent = t && isTicket(t) ? "the ticket's uid" : uidField.value;
}

// -- drawing -------------------------------------------------------------

const fieldText = (value) => (typeof value === "string" ? value : JSON.stringify(value));

// A body as people read it: a string as it is, {text} as its text, a signal
// ({event} or {type}, as a system message is sent) as its name and its fields
// ("gift · name rocket · count 3"), any other object as its fields; the raw
// JSON stays in the title.
function bodyText(body) {
  if (typeof body === "string") return body;
  if (body && typeof body === "object" && !Array.isArray(body)) {
    if (typeof body.text === "string") return body.text;
    const entries = Object.entries(body);
    const kind = entries.find(([key, value]) => (key === "event" || key === "type") && typeof value === "string");
    const fields = entries.filter((entry) => entry !== kind).map(([key, value]) => `${key} ${fieldText(value)}`);
    if (kind) return [kind[1].replaceAll("_", " "), ...fields].join(" · ");
    if (fields.length) return fields.join(" · ");
  }
  return JSON.stringify(body);
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

function messageItem(message) {
  const item = document.createElement("li");
  item.className = message.important ? "message important" : "message";
  item.dataset.uid = message.uid;
  if (message.uid === me()) item.classList.add("mine");
  if (message.to !== undefined) item.classList.add("personal");
  item.dataset.seq = String(message.seq ?? `p${message.pseq}`);
  item.dataset.ts = String(message.ts);
  item.dataset.order = String((drawn += 1));
  const who = document.createElement("span");
  who.className = "uid";
  who.textContent = message.uid;
  const when = document.createElement("time");
  when.dateTime = new Date(message.ts).toISOString();
  when.textContent = clock(message.ts);
  const text = document.createElement("span");
  text.className = "body";
  text.textContent = bodyText(message.body);
  if (typeof message.body !== "string") text.title = JSON.stringify(message.body);
  item.append(who, when, text);
  if (message.recalled) showRecalled(item);
  else if (message.to === undefined) offerRecall(item);
  return item;
}

function append(list, items, keep) {
  const chat = $("chat").parentElement;
  const atBottom = chat.scrollHeight - chat.scrollTop - chat.clientHeight < 40;
  list.append(...items);
  while (list.children.length > keep) list.firstElementChild.remove();
  $("empty").hidden = $("chat").children.length > 0;
  if (atBottom) chat.scrollTop = chat.scrollHeight;
}

function notice(text, kind) {
  const item = document.createElement("li");
  item.className = `notice ${kind}`;
  item.dataset.order = String((drawn += 1));
  item.textContent = text;
  append($("chat"), [item], CHAT_KEEP);
}

const plural = (n, one, many) => `${n.toLocaleString()} ${n === 1 ? one : many}`;

/** The lines already drawn follow the uid spoken as: its own are "mine",
 * with a recall button while they may be. */
function markMine() {
  for (const item of document.querySelectorAll(".message[data-uid]")) {
    item.classList.toggle("mine", item.dataset.uid === me());
    if (!item.classList.contains("personal") && item.dataset.seq) offerRecall(item);
  }
}

// -- recalls -----------------------------------------------------------------------
//
// A recalled message is marked where it was, not removed: the lines around
// it keep their places (a reader does not lose the line it was on), and the
// chat says that something was taken back. Its body is gone from the page as
// it is from the server.

/** Mark every line of message `seq` (chat or important box) as recalled. */
function markRecalled(seq) {
  for (const item of document.querySelectorAll(`.message[data-seq="${seq}"]`)) {
    if (!item.classList.contains("personal")) showRecalled(item);
  }
}

function showRecalled(item) {
  item.classList.add("recalled");
  item.dataset.recalled = "true";
  const text = item.querySelector(".body");
  text.textContent = "message recalled";
  text.removeAttribute("title");
  item.querySelector("button.recall")?.remove();
}

/** A recall button on the viewer's own line while the server's window lasts
 * (by the message's ts), none on anyone else's. */
function offerRecall(item) {
  const left = Number(item.dataset.ts) + RECALL_WINDOW_MS - Date.now();
  const wanted = item.dataset.uid === me() && !item.dataset.recalled && left > 0;
  const button = item.querySelector("button.recall");
  if (!wanted) {
    button?.remove();
    return;
  }
  if (button) return;
  const offer = document.createElement("button");
  offer.type = "button";
  offer.className = "recall";
  offer.textContent = "recall";
  offer.title = "take this message back (for everyone)";
  offer.setAttribute("aria-label", "recall this message");
  item.append(offer);
  setTimeout(() => offer.remove(), left);
}

async function recallOwn(event) {
  const button = event.target.closest("button.recall");
  if (!button) return;
  const item = button.closest(".message");
  const out = $("send-error");
  button.disabled = true;
  out.textContent = "";
  try {
    await recall(room, Number(item.dataset.seq), asViewer());
    markRecalled(item.dataset.seq); // at once: the listener hears of it too
  } catch (error) {
    // A bad uid in the field (liveroom.js checks names first) says so too.
    out.textContent = `Not recalled: ${error instanceof LiveroomError ? explain(error)
      : error.message}`;
    if (error.status === 403 || error.status === 404) button.remove();
    else button.disabled = false;
  }
}

// -- slow mode -----------------------------------------------------------------------

const SAY = "Say something";
let slowShown = 0;
let waiting = null; // the countdown of a refused send's wait

/** The room's slow mode under the input and as its placeholder (0: off). A
 * refused send's wait ends when slow mode is lifted or shortened (the server
 * tells held polls within a second or two), not when it is turned on or
 * lengthened: the wait the refusal gave still holds then. */
function showSlow(seconds) {
  if (seconds < slowShown && waiting !== null) stopWaiting();
  slowShown = seconds;
  const text = seconds > 0 ? `slow mode: one message per ${seconds.toLocaleString()} s` : "";
  $("slow").textContent = text;
  $("slow").hidden = seconds === 0;
  $("text").placeholder = text || SAY;
}

function stopWaiting() {
  clearInterval(waiting);
  waiting = null;
  $("send-error").textContent = "";
  $("send").querySelector("button[type=submit]").disabled = false;
}

/** A refused send's wait, counted down under the box; the button waits with it. */
function waitToSend(seconds, said) {
  clearInterval(waiting);
  const out = $("send-error");
  const button = $("send").querySelector("button[type=submit]");
  const until = Date.now() + seconds * 1000;
  const tick = () => {
    const left = Math.ceil((until - Date.now()) / 1000);
    if (left <= 0) {
      stopWaiting();
      return;
    }
    out.textContent = `${said} Wait ${left.toLocaleString()} s before your next message.`;
  };
  button.disabled = true;
  tick();
  waiting = setInterval(tick, 250);
}

// -- what the chat shows ---------------------------------------------------------
//
// Speaking as another uid (or with a ticket) starts a new listener, and its
// first poll brings the room's recent messages again. The page keeps the
// lines it shows and draws only those it has not: clearing the chat and
// drawing the first poll's would bring back only the last `recent` (20) of
// up to CHAT_KEEP lines, so whoever had scrolled up to read would lose them,
// and the room's chat is the same whoever you speak as. Within one epoch a
// message is known by its seq (a listener gets them in order, so the last
// one drawn is enough); a reset, or a first answer in another epoch than the
// lines shown (the broadcast ended meanwhile), starts the chat over under a
// divider. A first poll brings no old important or personal messages, so
// their boxes never see one twice.

const shown = { epoch: null, seq: 0 }; // the chat's epoch and the last seq drawn in it

/** A new log (an ended broadcast, a lost one): a divider under the lines
 * shown, and the important box emptied. */
function startOver(answer) {
  // The chat is a timeline: its lines stay where they were, above a divider
  // that says they are from before, so a viewer reading them loses nothing.
  if (drawn > 0) {
    notice(`The room started over (epoch ${answer.epoch}): the chat above is from before.`,
      "reset");
  }
  // The important box is no timeline: it sits above the chat as what matters
  // now, and an ended broadcast's pinned message would read as the new
  // one's. Personal messages stay: they are the viewer's own.
  $("important").replaceChildren();
  $("important-box").hidden = true;
  // The lines kept are of the numbering before: a recall names seqs of the
  // new one, so they no longer answer to their seq (a recall of the new
  // message 3 must not mark the old line 3), nor offer a recall (the old
  // line 5's button would take back the new message 5).
  for (const item of document.querySelectorAll(".message[data-seq]")) {
    item.dataset.before = item.dataset.seq;
    delete item.dataset.seq;
    item.querySelector("button.recall")?.remove();
  }
  shown.epoch = answer.epoch;
  shown.seq = 0;
  // The likes never go down within a broadcast; a new one counts from its
  // own total (the answer's, drawn next), not from the ended one's.
  likesShown = 0;
}

/** Called with every answer before it is drawn: an epoch the page has not shown starts over. */
function follow(answer) {
  if (shown.epoch === null) shown.epoch = answer.epoch;
  else if (answer.epoch !== shown.epoch) startOver(answer);
}

function newChat(messages, answer) {
  follow(answer);
  const fresh = messages.filter((message) => message.seq > shown.seq);
  if (fresh.length > 0) shown.seq = fresh[fresh.length - 1].seq;
  return fresh;
}

// -- state shown in the bar ----------------------------------------------------

function status(state, text) {
  const el = $("status");
  el.dataset.state = state;
  el.textContent = text;
}

function problem(text, canRetry = false) {
  $("error-text").textContent = text;
  $("retry").hidden = !canRetry;
  $("error").hidden = false;
}

function clearProblem() {
  $("error").hidden = true;
}

function pace(intervalMs) {
  if (intervalMs === 0) return "every message at once";
  return `1 answer / ${(intervalMs / 1000).toLocaleString()} s`;
}

function explain(error) {
  const why = {
    unauthorized: "This server wants a ticket: paste one under “as …” below.",
    forbidden: "This ticket or token may not do that.",
    rate_limited: "Slow down a little.",
    muted: "A moderator muted you in this room: you can still read it.",
    banned: "A moderator banned you from this room.",
    store_unavailable: "The server cannot reach its store right now.",
    overloaded: "The server is full right now.",
    network: "The server cannot be reached.",
  }[error.code];
  return `${error.message}${why ? ` — ${why}` : ""}`;
}

// -- listening -----------------------------------------------------------------

function startListening() {
  listener?.stop();
  clearProblem();
  status("connecting", "connecting…");
  // A new listener echoes no ranking: its first answer brings the room's top
  // givers again, if it has any.
  showRanking([]);
  showSlow(0); // and its first answer says whether the room is slow
  const t = ticket();
  listener = new Listener(room, {
    uid: t && isTicket(t) ? undefined : uidField.value, // a ticket names its uid
    ticket: t && isTicket(t) ? t : null, // the listener restarts when it changes
    onRanking: ({ top }) => showRanking(top),
    onSlow: showSlow,
    onReset: startOver,
    onGap: ({ gap, igap, pgap }) => {
      const parts = [];
      if (pgap > 0) parts.push(plural(pgap, "message for you", "messages for you"));
      if (igap > 0) parts.push(plural(igap, "important message", "important messages"));
      if (gap > 0) parts.push(plural(gap, "message", "messages"));
      notice(`${parts.join(" and ")} missed: the room moved faster than its cache.`, "gap");
    },
    onRecall: (seqs) => seqs.forEach(markRecalled),
    onPersonalRecall: (pseqs) => {
      for (const pseq of pseqs) {
        for (const item of document.querySelectorAll(`.message.personal[data-seq="p${pseq}"]`)) {
          showRecalled(item);
        }
      }
    },
    onPersonal: (messages, answer) => {
      // For this listener alone ("to": its uid): apart from the room's.
      follow(answer);
      $("personal-box").hidden = false;
      append($("personal"), messages.map(messageItem), IMPORTANT_KEEP);
    },
    onImportant: (messages, answer) => {
      follow(answer);
      $("important-box").hidden = false;
      append($("important"), messages.map(messageItem), IMPORTANT_KEEP);
    },
    onMessages: (messages, answer) => {
      // A tombstone of a line drawn before (a new listener's first poll
      // brings the recent ones again) marks that line.
      for (const message of messages) if (message.recalled) markRecalled(message.seq);
      const fresh = newChat(messages, answer);
      if (fresh.length > 0) append($("chat"), fresh.map(messageItem), CHAT_KEEP);
    },
    onAnswer: (answer) => {
      follow(answer);
      clearProblem();
      status("live", "live");
      // A room nobody has sent to yet does not exist (epoch "0"): it has no
      // figures to show, and takes no likes until its first message.
      roomAbsent = answer.epoch === "0";
      $("unstarted").hidden = !roomAbsent;
      $("heart").disabled = roomAbsent;
      if (roomAbsent) {
        for (const id of ["online", "viewers", "likes"]) $(id).textContent = "–";
      } else {
        $("online").textContent = answer.online.toLocaleString();
        showLikes(answer.likes ?? 0);
      }
      if (!roomAbsent && answer.online > viewersShown) refreshStatsSoon(); // a new viewer
      $("interval").textContent = pace(answer.interval_ms);
      $("interval").dataset.ms = String(answer.interval_ms);
    },
    onError: (error, retryInMs) => {
      if (retryInMs === null) {
        status("stopped", "stopped");
        problem(`Listening stopped: ${explain(error)}`, true);
      } else {
        const seconds = Math.max(1, Math.round(retryInMs / 1000));
        status("retrying", `retrying in ${seconds} s`);
        problem(`${explain(error)} Trying again in ${seconds} s.`);
      }
    },
  });
  listener.start();
}

let viewersShown = 0;
let refreshing = null;
/** Whether the room does not exist yet (the last answer's epoch "0"). */
let roomAbsent = false;

/** Stats again within a second, once however often it is asked. */
function refreshStatsSoon() {
  refreshing ??= setTimeout(() => { refreshing = null; refreshStats(); }, 1000);
}

async function refreshStats() {
  try {
    const stats = await roomStats(room);
    if (roomAbsent) return; // its zeros are no figures: the note says why
    viewersShown = stats.viewers;
    $("online").textContent = stats.online.toLocaleString();
    showLikes(stats.likes ?? 0);
    $("viewers").textContent = stats.viewers.toLocaleString() + (stats.viewers_exact ? "" : " (about)");
    $("vip").hidden = !stats.vip;
  } catch (error) {
    if (!(error instanceof LiveroomError)) throw error;
    // The listener's banner says what is wrong with the server; stats just wait.
  }
}

// -- the top givers --------------------------------------------------------------

/** The room's top givers, best first, as the last answer that carried them
 * said (an empty top after the broadcast ended hides them). */
function showRanking(top) {
  $("ranking").replaceChildren(...top.map(({ uid, score }) => {
    const item = document.createElement("li");
    item.dataset.uid = uid;
    const who = document.createElement("span");
    who.className = "uid";
    who.textContent = uid;
    const worth = document.createElement("span");
    worth.className = "score";
    worth.textContent = score.toLocaleString();
    item.append(who, " ", worth);
    return item;
  }));
  $("givers").hidden = top.length === 0;
}

// -- likes -----------------------------------------------------------------------

let likesShown = 0;
let taps = 0;
let tapping = null;

/** The room's likes: never drawn lower than a total seen (the node's own taps come first). */
function showLikes(total) {
  if (total <= likesShown && likesShown > 0) return;
  likesShown = total;
  $("likes").textContent = total.toLocaleString();
}

/** Taps wait TAPS_EVERY_MS, then go as one request (at most 100 taps each). */
async function sendTaps() {
  tapping = null;
  const count = Math.min(taps, 100);
  taps -= count;
  if (taps > 0) tapping = setTimeout(sendTaps, TAPS_EVERY_MS);
  const t = ticket();
  try {
    showLikes(await like(room, count, {
      uid: t && isTicket(t) ? undefined : uidField.value,
      ticket: t && isTicket(t) ? t : null,
    }));
  } catch (error) {
    // Refused (muted, banned, slow mode, a bad uid): the taps drawn at once
    // were never counted, so the count shown takes them back.
    likesShown = Math.max(0, likesShown - count);
    $("likes").textContent = likesShown.toLocaleString();
    $("heart").title = `not counted: ${error instanceof LiveroomError ? explain(error)
      : error.message}`;
  }
}

$("heart").addEventListener("click", () => {
  taps += 1;
  showLikes(likesShown + 1); // at once, as the node will count it
  $("heart").classList.remove("beat");
  void $("heart").offsetWidth; // restart the animation
  $("heart").classList.add("beat");
  tapping ??= setTimeout(sendTaps, TAPS_EVERY_MS);
});

// -- sending -------------------------------------------------------------------

$("send").addEventListener("submit", async (event) => {
  event.preventDefault();
  const field = $("text");
  const text = field.value.trim();
  const out = $("send-error");
  if (!text) return;
  if (!uidField.checkValidity()) {
    $("who").open = true;
    uidField.reportValidity();
    return;
  }
  const button = event.submitter ?? $("send").querySelector("button");
  button.disabled = true;
  out.textContent = "";
  let refused = null;
  try {
    const sent = await send(room, { text }, {
      ...asViewer(),
      important: $("important-flag").checked,
      // In a slow room a refusal's wait is the viewer's to see, not a pause.
      ...(slowShown > 0 ? { maxWait: 0 } : {}),
    });
    field.value = "";
    // Kept back for a moderator: pending, for its sender's eyes only.
    if (sent.held) {
      out.textContent = `Held for review: “${text}” shows in the chat once a moderator `
        + "approves it.";
    }
  } catch (error) {
    if (!(error instanceof LiveroomError)) throw error;
    refused = error;
    out.textContent = `Not sent: ${explain(error)}`;
  } finally {
    button.disabled = false;
    field.focus();
  }
  if (refused?.status === 429 && refused.retryAfter !== null) {
    waitToSend(refused.retryAfter, slowShown > 0
      ? `Not sent: slow mode, one message per ${slowShown.toLocaleString()} s.`
      : `Not sent: ${explain(refused)}`);
  }
});

$("chat").addEventListener("click", recallOwn);
$("important").addEventListener("click", recallOwn);

uidField.addEventListener("change", () => {
  if (!uidField.checkValidity()) return;
  localStorage.setItem("liveroom.uid", uidField.value);
  showWho();
  markMine();
  startListening(); // the online count counts uids: listen as the new one
});

ticketField.addEventListener("change", () => {
  sessionStorage.setItem("liveroom.ticket", ticket());
  showWho();
  startListening();
});

$("retry").addEventListener("click", () => startListening());

// -- start -----------------------------------------------------------------------

if (!/^[A-Za-z0-9_.-]{1,64}$/.test(room)) {
  status("stopped", "no room");
  problem(`“${room}” is not a room name: letters, digits, _ . - (up to 64).`);
} else {
  document.title = `${room} · liveroom`;
  $("title").textContent = room;
  localStorage.setItem("liveroom.uid", uidField.value);
  showWho();
  startListening();
  refreshStats();
  setInterval(() => { if (!document.hidden) refreshStats(); }, STATS_EVERY_MS);
}
