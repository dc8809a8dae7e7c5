// liveroom.js: a client of liveroom's HTTP API (v1) for browsers and Node 18+.
//
// One ES module, no dependency, no build step: serve it as it is (liveroom
// serves it at /static/liveroom.js) and import it. Typings: liveroom.d.ts.
//
//   import { listen, send, recall, roomStats } from "/static/liveroom.js";
//   const listener = listen("demo", {
//     uid: "alice",                                  // open mode; a ticket names it otherwise
//     onPersonal: (messages) => toast(messages),      // for alice alone ("to": "alice")
//     onImportant: (messages) => show(messages, { highlight: true }),
//     onMessages: (messages) => show(messages),
//     onGap: ({ gap, igap }) => note(`${gap + igap} messages missed`),
//     onRanking: ({ top }) => showTopGivers(top),    // [{uid, score}], when it changed
//     onRecall: (seqs) => seqs.forEach(markRecalled), // before the answer's messages
//     onSlow: (seconds) => note(seconds ? `one message per ${seconds} s` : ""),
//     onError: (error, retryInMs) => note(error.message),
//   });
//   const { seq } = await send("demo", { text: "hi" }, { uid: "alice" });
//   await recall("demo", seq, { uid: "alice" });      // its sender, within 120 s
//   listener.stop();
//
// The poll loop follows the contract (docs/api.md, "Listening"): a first poll,
// then a poll again at once after every answer, passing back epoch, seq,
// iseq, ctx and pseq (and the version of the last ranking it got). The server
// does the waiting, pacing included: a client never
// sleeps between answers, whatever interval_ms says. Per answer the callbacks
// run in this order: onLikes (the room's likes, when they changed), onRanking
// (the room's top givers, {version, top}, when an answer carries them: only
// when they changed), onSlow (the room's slow mode, seconds, 0 when off:
// when it changed), onReset (the cursors no longer fitted the room: the
// answer is like a first poll), onGap (gap normal, igap important, pgap
// personal messages missed), onRecall (the seqs of messages recalled since
// the cursor: remove or mark them), onPersonalRecall (the pseqs of this
// listener's personal messages recalled), onPersonal (this listener's own
// messages), onImportant, onMessages (each only when it has messages),
// onAnswer. A recalled message still in an answer comes as it is, with
// `body: null, recalled: true`.
// A callback that throws is reported (console.error) and the loop goes on.
//
// Failures: a network error, a read past the poll's longest hold, a 408 or a
// 5xx is retried after a backoff (0.5 s doubling up to 30 s, with jitter); a
// 429 or a 503 with Retry-After is retried no sooner than Retry-After says. A
// 401 is retried (backoff) when `ticket` is a function (it may mint a fresh
// ticket), else it stops the loop like every other 4xx. Every failure goes to
// onError(error, retryInMs), with retryInMs null when the loop stopped.
//
// Only JSON is spoken (the server's msgpack is for other clients).

const NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 30_000;
const READ_SLACK_MS = 10_000;
const FIRST_HOLD_MS = 10_000; // the longest a first poll may be paced, before interval_ms is known

/** A failed request: the server's {"error", "message"}, or what the network did. */
export class LiveroomError extends Error {
  /**
   * @param {number} status HTTP status; 0 when no answer came (network, timeout)
   * @param {string} code the server's error code, or "network" / "timeout" / "bad_answer" /
   *   "ticket" (the ticket function failed)
   * @param {string} message
   * @param {number | null} retryAfter seconds from Retry-After, when the server sent it
   */
  constructor(status, code, message, retryAfter = null) {
    super(message);
    this.name = "LiveroomError";
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }

  /** Worth trying again later: no answer, 408, 429, or a server failure. */
  get temporary() {
    return this.status === 0 || this.status === 408 || this.status === 429 || this.status >= 500;
  }
}

function checkName(kind, value) {
  if (typeof value !== "string" || !NAME.test(value)) {
    throw new TypeError(`${kind} must match [A-Za-z0-9_.-]{1,64}, not ${JSON.stringify(value)}`);
  }
  return value;
}

function baseOf(options) {
  const base = options.base ?? "";
  if (!base && typeof location === "undefined") {
    throw new TypeError("outside a page, pass base: the server's URL (http://host:port)");
  }
  return base.replace(/\/+$/, "");
}

async function bearer(ticket) {
  let value = ticket;
  if (typeof ticket === "function") {
    try {
      value = await ticket();
    } catch (error) {
      // Asked before each call for a fresh ticket (the page's backend): its
      // failure is a call that got no answer, which a listener tries again.
      throw new LiveroomError(0, "ticket", `the ticket function failed: ${error?.message ?? error}`);
    }
  }
  return value ? { Authorization: `Bearer ${value}` } : {};
}

function retryAfterOf(response) {
  const header = response.headers.get("Retry-After");
  if (header === null) return null;
  const seconds = Number(header);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds;
  const date = Date.parse(header);
  return Number.isNaN(date) ? null : Math.max(0, (date - Date.now()) / 1000);
}

/** The answer's JSON, or a LiveroomError from the error answer (JSON or not). */
async function readAnswer(response) {
  const text = await response.text();
  let doc = null;
  try {
    doc = text ? JSON.parse(text) : null;
  } catch {
    doc = null;
  }
  if (response.ok) {
    if (doc === null || typeof doc !== "object") {
      throw new LiveroomError(response.status, "bad_answer", "the answer is not JSON");
    }
    return doc;
  }
  const code = doc && typeof doc.error === "string" ? doc.error : `http_${response.status}`;
  const message = doc && typeof doc.message === "string"
    ? doc.message : `${response.status} ${response.statusText}`.trim();
  throw new LiveroomError(response.status, code, message, retryAfterOf(response));
}

/** fetch() that gives up after `ms` and when `signal` aborts; failures become LiveroomErrors. */
async function request(fetcher, url, init, ms, signal) {
  const controller = new AbortController();
  const abort = () => controller.abort();
  if (signal?.aborted) controller.abort(); // an abort listener would never hear of it
  signal?.addEventListener("abort", abort, { once: true });
  let timedOut = false;
  const timer = setTimeout(() => { timedOut = true; controller.abort(); }, ms);
  try {
    const response = await fetcher(url, { ...init, signal: controller.signal });
    return await readAnswer(response);
  } catch (error) {
    if (error instanceof LiveroomError) throw error;
    if (signal?.aborted) throw error; // stopped: not a failure
    if (timedOut) throw new LiveroomError(0, "timeout", `no answer within ${ms / 1000} s`);
    throw new LiveroomError(0, "network", `network error: ${error?.message ?? error}`);
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", abort);
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => { clearTimeout(timer); signal.removeEventListener("abort", done); resolve(); };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/** The wait before attempt `failures` + 1: Retry-After when the server said, else a backoff. */
function retryDelay(error, failures) {
  if (error.retryAfter !== null && (error.status === 429 || error.status === 503)) {
    return error.retryAfter * 1000 * (1 + Math.random() * 0.1); // never sooner than asked
  }
  const ceiling = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** Math.min(failures - 1, 16));
  return ceiling / 2 + Math.random() * ceiling / 2;
}

function report(error) {
  if (typeof reportError === "function") reportError(error);
  else console.error(error);
}

/**
 * One listener of one room: the poll loop, from start() until stop() or a
 * failure that retrying cannot mend.
 */
export class Listener {
  /**
   * @param {string} room
   * @param {object} [options] see liveroom.d.ts (ListenOptions)
   */
  constructor(room, options = {}) {
    this.room = checkName("room", room);
    this.options = options;
    this.base = baseOf(options);
    if (options.uid !== undefined && options.uid !== null) checkName("uid", options.uid);
    const timeout = options.timeout ?? 25;
    if (!Number.isInteger(timeout) || timeout < 1 || timeout > 60) {
      throw new RangeError("timeout is whole seconds from 1 to 60");
    }
    this.timeout = timeout;
    /** @type {{epoch: string, seq: number, iseq: number, ctx: string, pseq: number} | null} */
    this.cursor = null;
    /** The room's current hold interval (ms) from the last answer; null before one. */
    this.intervalMs = null;
    /** The room's online count from the last answer; null before one. */
    this.online = null;
    /** The room's likes from the last answer; null before one. */
    this.likes = null;
    /** The room's top givers, {version, top}, from the last answer that carried them; null before one. */
    this.ranking = null;
    /** A vip room's routing hint from the last answer, echoed by the next poll; null: none. */
    this.spread = null;
    /** The room's slow mode from the last answer: seconds between two messages of a uid; 0: off. */
    this.slow = 0;
    this._controller = null;
    this._closed = null;
    // The callbacks of an answer that stop() cut short, for the next start().
    this._rest = [];
  }

  /** Whether the loop runs. */
  get running() {
    return this._controller !== null && !this._controller.signal.aborted;
  }

  /**
   * Resolves once the loop has ended: with null after stop(), or with the
   * LiveroomError that stopped it. Never rejects.
   */
  get closed() {
    return this._closed ?? Promise.resolve(null);
  }

  /**
   * Start polling (again, after a stop: from the cursor it had, and first the
   * callbacks of the last answer that a stop() inside one of them cut short).
   * Returns this.
   */
  start() {
    if (this.running) return this;
    const controller = new AbortController();
    this._controller = controller;
    this._closed = this._loop(controller.signal).catch((error) => {
      report(error);
      return error;
    }).finally(() => {
      if (this._controller === controller) this._controller = null;
    });
    return this;
  }

  /** Stop: the poll in flight is aborted, no callback runs after this returns. */
  stop() {
    this._controller?.abort();
    this._controller = null;
  }

  _url() {
    const params = new URLSearchParams();
    const o = this.options;
    if (o.uid) params.set("uid", o.uid);
    params.set("timeout", String(this.timeout));
    if (o.recent !== undefined) params.set("recent", String(o.recent)); // first poll or reset
    if (this.cursor !== null) {
      params.set("epoch", this.cursor.epoch);
      params.set("seq", String(this.cursor.seq));
      params.set("iseq", String(this.cursor.iseq));
      params.set("ctx", this.cursor.ctx);
      params.set("pseq", String(this.cursor.pseq));
    }
    // A vip room's hint: the load balancer hashes room and hint, spreading
    // the room's listeners over the nodes.
    if (this.spread !== null) params.set("spread", String(this.spread));
    // The ranking's version: answers carry it again only when it changed.
    if (this.ranking !== null) params.set("ranking", String(this.ranking.version));
    return `${this.base}/v1/rooms/${this.room}/poll?${params}`;
  }

  async _loop(signal) {
    const fetcher = this.options.fetch ?? globalThis.fetch.bind(globalThis);
    let failures = 0;
    // The answer's callbacks a stop() cut short: its cursor is already this
    // listener's, so they would never come again.
    const rest = this._rest;
    this._rest = [];
    if (rest.length > 0) {
      await null; // not inside start(): callbacks run from the loop, as they always do
      this._run(rest, signal);
    }
    while (!signal.aborted) {
      // Read for the hold: timeout, plus the pacing the room may add, plus slack.
      const hold = this.timeout * 1000 + (this.intervalMs ?? FIRST_HOLD_MS) + READ_SLACK_MS;
      let answer;
      try {
        const headers = { Accept: "application/json", ...(await bearer(this.options.ticket)) };
        if (signal.aborted) return null;
        answer = await request(fetcher, this._url(), { headers }, hold, signal);
      } catch (error) {
        if (signal.aborted) return null;
        if (!(error instanceof LiveroomError)) throw error;
        const retried = error.temporary
          || (error.status === 401 && typeof this.options.ticket === "function");
        if (!retried) {
          this._call("onError", error, null);
          return error;
        }
        failures += 1;
        const delay = retryDelay(error, failures);
        this._call("onError", error, delay);
        await pause(delay, signal);
        continue;
      }
      if (signal.aborted) return null;
      failures = 0;
      this._take(answer, signal);
    }
    return null;
  }

  _take(answer, signal) {
    this.cursor = {
      epoch: answer.epoch, seq: answer.seq, iseq: answer.iseq, ctx: answer.ctx,
      pseq: answer.pseq ?? 0,
    };
    this.intervalMs = answer.interval_ms;
    this.online = answer.online;
    const likes = answer.likes ?? 0;
    const likesChanged = likes !== this.likes;
    this.likes = likes;
    const ranking = answer.ranking ?? null;
    if (ranking !== null) this.ranking = ranking;
    this.spread = answer.spread ?? null;
    const slow = answer.slow ?? 0;
    const slowChanged = slow !== this.slow;
    this.slow = slow;
    const steps = [];
    if (likesChanged) steps.push(["onLikes", likes, answer]);
    if (ranking !== null) steps.push(["onRanking", ranking, answer]);
    if (slowChanged) steps.push(["onSlow", slow, answer]);
    if (answer.reset) steps.push(["onReset", answer]);
    const pgap = answer.pgap ?? 0;
    if (answer.gap > 0 || answer.igap > 0 || pgap > 0) {
      steps.push(["onGap", { gap: answer.gap, igap: answer.igap, pgap }, answer]);
    }
    const recalled = answer.recalled ?? [];
    if (recalled.length > 0) steps.push(["onRecall", recalled, answer]);
    const precalled = answer.precalled ?? [];
    if (precalled.length > 0) steps.push(["onPersonalRecall", precalled, answer]);
    const personal = answer.personal ?? [];
    if (personal.length > 0) steps.push(["onPersonal", personal, answer]);
    if (answer.important.length > 0) steps.push(["onImportant", answer.important, answer]);
    if (answer.messages.length > 0) steps.push(["onMessages", answer.messages, answer]);
    steps.push(["onAnswer", answer]);
    this._run(steps, signal);
  }

  /** Call each step's callback in order; those after a stop() wait for the next start(). */
  _run(steps, signal) {
    for (let i = 0; i < steps.length; i += 1) {
      if (signal.aborted) {
        this._rest = steps.slice(i);
        return;
      }
      this._call(...steps[i]);
    }
  }

  _call(name, ...args) {
    const callback = this.options[name];
    if (typeof callback !== "function") return;
    try {
      callback(...args);
    } catch (error) {
      report(error);
    }
  }
}

/** Start listening to `room`: a started Listener. */
export function listen(room, options = {}) {
  return new Listener(room, options).start();
}

function messageId() {
  const bytes = new Uint8Array(12);
  if (globalThis.crypto?.getRandomValues) globalThis.crypto.getRandomValues(bytes);
  else for (let i = 0; i < bytes.length; i += 1) bytes[i] = Math.floor(Math.random() * 256);
  return "js-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Run `attempt` (a request) again after failures worth retrying: network
 * errors and 5xx after a backoff, 429 and 503 after Retry-After when that is
 * at most maxWait seconds (default 10); `retries` tries after the first
 * (default 2). Anything else rejects with its LiveroomError.
 */
async function retrying(attempt, options, signal) {
  const retries = options.retries ?? 2;
  const maxWait = options.maxWait ?? 10;
  for (let failures = 0; ; failures += 1) {
    try {
      return await attempt();
    } catch (error) {
      if (!(error instanceof LiveroomError) || !error.temporary || failures >= retries) throw error;
      if (error.retryAfter !== null && error.retryAfter > maxWait) throw error;
      await pause(retryDelay(error, failures + 1), signal);
      if (signal.aborted) throw error;
    }
  }
}

/**
 * Send a message; resolves to {seq, epoch} ({pseq, epoch, to} with `to`), or to
 * {held} when a word filter or the send hook kept it back for a moderator (202:
 * not stored yet, nobody else sees it; show it as pending: approved, it comes
 * like any message, its sender's; denied, never). `body` is any JSON value (4 KiB
 * at most by default). With retries (default 2), a failure worth retrying is
 * tried again with the same client_msg_id, so the message is stored once:
 * network errors and 5xx after a backoff, 429 and 503 after Retry-After when
 * that is at most maxWait seconds (default 10). Anything else rejects with a
 * LiveroomError.
 */
export async function send(room, body, options = {}) {
  checkName("room", room);
  if (options.uid !== undefined && options.uid !== null) checkName("uid", options.uid);
  const base = baseOf(options);
  const fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
  const retries = options.retries ?? 2;
  const doc = { body, important: Boolean(options.important) || Boolean(options.to) };
  if (options.uid) doc.uid = options.uid;
  if (options.to) doc.to = checkName("to", options.to); // a personal message
  const id = options.clientMsgId ?? (retries > 0 ? messageId() : undefined);
  if (id !== undefined) doc.client_msg_id = id;
  const payload = JSON.stringify(doc);
  const signal = options.signal ?? new AbortController().signal;
  const answer = await retrying(async () => {
    const headers = { "Content-Type": "application/json", Accept: "application/json",
      ...(await bearer(options.ticket)) };
    return request(fetcher, `${base}/v1/rooms/${room}/messages`,
      { method: "POST", headers, body: payload }, (options.readTimeout ?? 15) * 1000, signal);
  }, options, signal);
  if (typeof answer.held === "string") return { held: answer.held };
  return options.to
    ? { pseq: answer.pseq, epoch: answer.epoch, to: answer.to }
    : { seq: answer.seq, epoch: answer.epoch };
}

/**
 * Recall (撤回) message `seq` of `room`; resolves to the server's answer,
 * {room, seq, uid, recalled: true, notice}. Who may: the sender itself within
 * the server's recall window (120 s by default), with its ticket or, in open
 * mode, its `uid`; the publisher token, the admin token or a ticket that may
 * publish, any message the room keeps. Recalling twice answers the same, so a
 * failure worth retrying is retried like a send's (`retries`, `maxWait`). A
 * message the room no longer keeps is a 404, someone else's (or one past the
 * window) a 403.
 */
export async function recall(room, seq, options = {}) {
  checkName("room", room);
  if (!Number.isInteger(seq) || seq < 1) {
    throw new RangeError(`seq must be a whole number from 1, not ${seq}`);
  }
  if (options.uid !== undefined && options.uid !== null) checkName("uid", options.uid);
  const fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
  const query = options.uid ? `?${new URLSearchParams({ uid: options.uid })}` : "";
  const url = `${baseOf(options)}/v1/rooms/${room}/messages/${seq}${query}`;
  const signal = options.signal ?? new AbortController().signal;
  return retrying(async () => {
    const headers = { Accept: "application/json", ...(await bearer(options.ticket)) };
    return request(fetcher, url, { method: "DELETE", headers },
      (options.readTimeout ?? 15) * 1000, signal);
  }, options, signal);
}

/**
 * Tap `count` (1-100) likes in `room`; resolves with the room's total as the
 * node knows it. A listener batches its taps: one call for the taps of the
 * last moment, not one a tap (each uid may send about 10 a second).
 */
export async function like(room, count = 1, options = {}) {
  checkName("room", room);
  if (options.uid !== undefined && options.uid !== null) checkName("uid", options.uid);
  if (!Number.isInteger(count) || count < 1 || count > 100) {
    throw new RangeError(`count must be a whole number from 1 to 100, not ${count}`);
  }
  const fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
  const doc = { count };
  if (options.uid) doc.uid = options.uid;
  const headers = { "Content-Type": "application/json", Accept: "application/json",
    ...(await bearer(options.ticket)) };
  const answer = await request(fetcher, `${baseOf(options)}/v1/rooms/${room}/likes`,
    { method: "POST", headers, body: JSON.stringify(doc) }, (options.readTimeout ?? 15) * 1000,
    options.signal ?? new AbortController().signal);
  return answer.likes;
}

/**
 * A room's figures: {room, online, viewers, viewers_exact, vip, seq, likes}
 * (GET /v1/rooms/{room}/stats, public). A room nobody used answers zeros.
 */
export async function roomStats(room, options = {}) {
  checkName("room", room);
  const fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
  return request(fetcher, `${baseOf(options)}/v1/rooms/${room}/stats`,
    { headers: { Accept: "application/json" } }, (options.readTimeout ?? 15) * 1000,
    options.signal);
}
