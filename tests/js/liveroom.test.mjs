// The poll loop of liveroom.js against a running server (node --test).
//
// Run by tests/faces/test_liveroom_js.py, which starts the servers and passes:
//   LIVEROOM_JS       path of liveroom.js (copied to a .mjs file)
//   LIVEROOM_URL      a node with a sender rate limit of 1 a second per uid,
//                     20 normal and 5 important messages cached per room
//   LIVEROOM_FULL_URL a node that holds at most one poll (503 beyond)
//   LIVEROOM_ADMIN_TOKEN, LIVEROOM_PUBLISHER_TOKEN
// Every wait is on an event of the client (a callback, a promise), bounded by
// the test's own timeout; fetch is the real one, wrapped only to record what
// was asked and when.

import assert from "node:assert/strict";
import { test } from "node:test";

const { listen, send, like, recall, roomStats, Listener, LiveroomError } = await import(process.env.LIVEROOM_JS);
const BASE = process.env.LIVEROOM_URL;
const FULL = process.env.LIVEROOM_FULL_URL;
const ADMIN = process.env.LIVEROOM_ADMIN_TOKEN;
const PUBLISHER = process.env.LIVEROOM_PUBLISHER_TOKEN;

let rooms = 0;
const freshRoom = (name) => `${name}-${process.pid}-${(rooms += 1)}`;

/** The real fetch, recording each request's URL and start time. */
function recordingFetch() {
  const calls = [];
  const fetcher = (url, init) => {
    calls.push({ url: new URL(url), at: performance.now(), init });
    return fetch(url, init);
  };
  return { calls, fetcher };
}

/** A promise and the function that resolves it. */
function signal() {
  let resolve;
  const promise = new Promise((r) => { resolve = r; });
  return { promise, resolve };
}

/** Resolves with the first value `pick` returns (not undefined) among calls of a callback. */
function watch(pick) {
  const { promise, resolve } = signal();
  return { promise, callback: (...args) => { const v = pick(...args); if (v !== undefined) resolve(v); } };
}

test("a first poll without a cursor, then at once with the answer's cursor", { timeout: 15_000 }, async () => {
  const room = freshRoom("cursor");
  await send(room, "before", { base: BASE, uid: "c1" });
  const { calls, fetcher } = recordingFetch();
  const answers = [];
  const got = watch((messages) => messages.some((m) => m.body === "after") ? true : undefined);
  const first = signal();
  const listener = listen(room, {
    base: BASE, uid: "listener", fetch: fetcher, timeout: 10,
    onAnswer: (answer) => { answers.push(answer); first.resolve(); },
    onMessages: got.callback,
  });
  await first.promise;
  await send(room, "after", { base: BASE, uid: "c2" });
  await got.promise;
  const stopping = performance.now();
  listener.stop();  // between an answer and the next poll: that poll never goes out
  assert.equal(await listener.closed, null);
  assert.ok(performance.now() - stopping < 1000);

  const [one, two] = calls.map((c) => c.url.searchParams);
  assert.equal(one.get("epoch"), null);
  assert.equal(one.get("seq"), null);
  assert.equal(one.get("uid"), "listener");
  assert.deepEqual(answers[0].messages.map((m) => m.body), ["before"]);
  for (const name of ["epoch", "seq", "iseq", "ctx", "pseq"]) {
    assert.equal(two.get(name), String(answers[0][name]), name);
  }
  const last = answers.at(-1);
  assert.deepEqual(listener.cursor, {
    epoch: last.epoch, seq: last.seq, iseq: last.iseq, ctx: last.ctx, pseq: last.pseq });
  assert.equal(listener.intervalMs, 0);
  assert.equal(typeof listener.online, "number");
});

test("onImportant runs before onMessages, for chat sent earlier in the same answer", { timeout: 15_000 }, async () => {
  const room = freshRoom("order");
  await send(room, "opening", { base: BASE, uid: "o1" });
  const order = [];
  const first = signal();
  const both = signal();
  const listener = new Listener(room, {
    base: BASE, uid: "listener", timeout: 10,
    onAnswer: () => first.resolve(),
    onImportant: (messages) => order.push(["important", messages.map((m) => m.body)]),
    onMessages: (messages, answer) => {
      order.push(["messages", messages.map((m) => m.body)]);
      if (answer.important.length > 0) both.resolve(answer);
    },
  }).start();
  await first.promise;
  listener.stop();  // so that both messages wait for one answer
  order.length = 0;
  await send(room, "chat first", { base: BASE, uid: "o2" });
  await send(room, { event: "gift" }, { base: BASE, uid: "host", important: true, ticket: PUBLISHER });
  listener.start();
  const answer = await both.promise;
  listener.stop();
  assert.deepEqual(order, [["important", [{ event: "gift" }]], ["messages", ["chat first"]]]);
  assert.ok(answer.important[0].seq > answer.messages[0].seq);
});

test("a stop() inside a callback: the next start() runs the rest of that answer first", { timeout: 15_000 }, async () => {
  const room = freshRoom("cut");
  await send(room, "opening", { base: BASE, uid: "c1" });
  const first = signal();
  const cut = signal();
  const order = [];
  let stopHere = false;
  const listener = new Listener(room, {
    base: BASE, uid: "listener", timeout: 10,
    onAnswer: (answer) => { order.push(["answer", answer.seq]); first.resolve(); },
    onImportant: (messages) => {
      order.push(["important", messages.map((m) => m.body)]);
      if (stopHere) { listener.stop(); cut.resolve(); }
    },
    onMessages: (messages) => order.push(["messages", messages.map((m) => m.body)]),
  }).start();
  await first.promise;
  listener.stop();  // so that both messages wait for one answer
  await send(room, "chat", { base: BASE, uid: "c2" });
  await send(room, { event: "cohost" }, { base: BASE, uid: "host", important: true, ticket: PUBLISHER });
  order.length = 0;
  stopHere = true;
  listener.start();
  await cut.promise;
  assert.equal(await listener.closed, null);
  assert.deepEqual(order, [["important", [{ event: "cohost" }]]]);  // nothing after the stop
  const { seq } = listener.cursor;
  stopHere = false;
  const resumed = signal();
  listener.options.onAnswer = (answer) => { order.push(["answer", answer.seq]); resumed.resolve(); };
  listener.start();
  await resumed.promise;
  listener.stop();
  assert.deepEqual(order, [["important", [{ event: "cohost" }]], ["messages", ["chat"]], ["answer", seq]]);
});

test("a gap is reported when more was sent than the room's cache keeps", { timeout: 15_000 }, async () => {
  const room = freshRoom("gap");
  await send(room, "m0", { base: BASE, ticket: PUBLISHER, uid: "burst" });
  const first = signal();
  const gap = watch((missed, answer) => ({ missed, answer }));
  const listener = listen(room, { base: BASE, uid: "listener", onAnswer: () => first.resolve(), onGap: gap.callback });
  await first.promise;
  listener.stop();
  for (let i = 1; i <= 30; i += 1) {
    await send(room, `m${i}`, { base: BASE, ticket: PUBLISHER, uid: "burst" });
  }
  listener.start();
  const { missed, answer } = await gap.promise;
  listener.stop();
  assert.deepEqual(missed, { gap: 10, igap: 0, pgap: 0 });  // 30 sent, 20 cached
  assert.equal(answer.messages.length, 20);
  assert.equal(answer.messages[0].body, "m11");
});

test("missed important messages are reported as igap, before the ones that came", { timeout: 15_000 }, async () => {
  const room = freshRoom("igap");
  await send(room, "m0", { base: BASE, ticket: PUBLISHER, uid: "burst" });
  const first = signal();
  const calls = [];
  const gap = watch((missed) => missed);
  const listener = listen(room, {
    base: BASE, uid: "listener", onAnswer: () => first.resolve(),
    onGap: (...args) => { calls.push("gap"); gap.callback(...args); },
    onImportant: () => calls.push("important"),
  });
  await first.promise;
  listener.stop();
  for (let i = 1; i <= 8; i += 1) {
    await send(room, { signal: i }, { base: BASE, ticket: PUBLISHER, uid: "system", important: true });
  }
  listener.start();
  assert.deepEqual(await gap.promise, { gap: 0, igap: 3, pgap: 0 });  // 8 sent, 5 cached
  listener.stop();
  assert.deepEqual(calls, ["gap", "important"]);
});

test("a personal message reaches its addressee alone, through onPersonal, first", { timeout: 15_000 }, async () => {
  const room = freshRoom("personal");
  await send(room, "open", { base: BASE, uid: "host" });
  const calls = [];
  const mine = watch((messages) => messages);
  const firsts = [signal(), signal()];
  const listeners = ["alice", "bob"].map((uid, i) => listen(room, {
    base: BASE, uid, timeout: 10, onAnswer: () => firsts[i].resolve(),
    onPersonal: (messages) => { calls.push([uid, messages.map((m) => m.body)]); if (uid === "alice") mine.callback(messages); },
  }));
  try {
    await Promise.all(firsts.map((f) => f.promise));
    const sent = await send(room, { won: "a rocket" }, { base: BASE, uid: "system", to: "alice", ticket: PUBLISHER });
    assert.equal(sent.to, "alice");
    const got = await mine.promise;
    assert.equal(got[0].pseq, sent.pseq);
    assert.equal(got[0].n, 1);
    assert.equal(listeners[0].cursor.pseq, sent.pseq);
  } finally {
    for (const listener of listeners) listener.stop();
  }
  assert.deepEqual(calls, [["alice", [{ won: "a rocket" }]]]);
});

test("a recalled personal message: its addressee hears its pseq through onPersonalRecall", { timeout: 15_000 }, async () => {
  const room = freshRoom("precall");
  await send(room, "open", { base: BASE, uid: "host" });
  const mine = watch((messages) => messages);
  const recalls = watch((pseqs) => pseqs);
  const first = signal();
  const listener = listen(room, {
    base: BASE, uid: "alice", timeout: 10, onAnswer: () => first.resolve(),
    onPersonal: mine.callback, onPersonalRecall: recalls.callback,
  });
  try {
    await first.promise;
    const sent = await send(room, "you won", { base: BASE, uid: "system", to: "alice", ticket: PUBLISHER });
    await mine.promise;
    const response = await fetch(`${BASE}/v1/rooms/${room}/personal/${sent.pseq}`, {
      method: "DELETE", headers: { Authorization: `Bearer ${PUBLISHER}` } });
    assert.equal(response.status, 200);
    assert.deepEqual(await recalls.promise, [sent.pseq]);
  } finally {
    listener.stop();
  }
});

test("a reset carries on in the new epoch", { timeout: 15_000 }, async () => {
  const room = freshRoom("reset");
  await send(room, "old", { base: BASE, uid: "r1" });
  const first = signal();
  const reset = watch((answer) => answer);
  const later = watch((messages) => messages.find((m) => m.body === "new") ? messages : undefined);
  const listener = listen(room, {
    base: BASE, uid: "listener", timeout: 10, onAnswer: () => first.resolve(), onReset: reset.callback,
    onMessages: later.callback,
  });
  await first.promise;
  const before = listener.cursor.epoch;
  const ended = await fetch(`${BASE}/v1/admin/rooms/${room}/end`,
    { method: "POST", headers: { Authorization: `Bearer ${ADMIN}` } });
  assert.equal(ended.status, 200);
  const { epoch } = await ended.json();
  const answer = await reset.promise;
  assert.equal(answer.reset, true);
  assert.equal(answer.epoch, epoch);
  assert.notEqual(epoch, before);
  await send(room, "new", { base: BASE, uid: "r2" });
  await later.promise;
  listener.stop();
  assert.equal(listener.cursor.epoch, epoch);
});

test("a 429 on a send is retried no sooner than Retry-After, with the same client_msg_id", { timeout: 15_000 }, async () => {
  const room = freshRoom("limited");
  await send(room, "one", { base: BASE, uid: "chatty" });
  const { calls, fetcher } = recordingFetch();
  const sent = await send(room, "two", { base: BASE, uid: "chatty", fetch: fetcher });
  assert.equal(calls.length, 2, "the first try is refused (1 a second), the second stored");
  const waited = calls[1].at - calls[0].at;
  assert.ok(waited >= 1000, `retried after ${waited} ms, Retry-After was 1 s`);
  const ids = calls.map((c) => JSON.parse(c.init.body).client_msg_id);
  assert.equal(ids[0], ids[1]);
  assert.equal(sent.seq, 2);
  // Beyond maxWait the refusal is the caller's to show.
  await assert.rejects(send(room, "three", { base: BASE, uid: "chatty", maxWait: 0 }),
    (error) => error instanceof LiveroomError && error.status === 429
      && error.code === "rate_limited" && error.retryAfter >= 1);
});

test("a 503 on a poll is retried no sooner than Retry-After", { timeout: 20_000 }, async () => {
  // The full node holds one poll: this one, held as long as the test runs.
  const holder = new AbortController();
  const first = await (await fetch(`${FULL}/v1/rooms/hold/poll?uid=h`)).json();
  const held = fetch(`${FULL}/v1/rooms/hold/poll?uid=h&epoch=${first.epoch}&seq=${first.seq}`
    + `&iseq=${first.iseq}&ctx=${encodeURIComponent(first.ctx)}&timeout=60`, { signal: holder.signal })
    .catch(() => null);
  const { calls, fetcher } = recordingFetch();
  const refusals = [];
  const twice = signal();
  const listener = listen("busy", {
    base: FULL, uid: "listener", fetch: fetcher, timeout: 10,
    onError: (error, retryInMs) => {
      refusals.push({ error, retryInMs, at: performance.now() });
      if (refusals.length === 2) twice.resolve();
    },
  });
  await twice.promise;
  listener.stop();
  holder.abort();
  await held;
  for (const { error, retryInMs } of refusals) {
    assert.equal(error.status, 503);
    assert.equal(error.code, "overloaded");
    assert.equal(error.retryAfter, 2);
    assert.ok(retryInMs >= 2000, `${retryInMs} ms`);
  }
  // calls: the first poll (answered), the refused cursor poll, its retry (refused).
  assert.equal(calls.length, 3);
  assert.ok(calls[2].at - calls[1].at >= 2000, `retried after ${calls[2].at - calls[1].at} ms`);
});

test("stop() aborts the held poll at once and nothing runs after it", { timeout: 15_000 }, async () => {
  const room = freshRoom("stop");
  const { calls, fetcher } = recordingFetch();
  const first = signal();
  let after = 0;
  let stopped = false;
  const listener = listen(room, {
    base: BASE, uid: "listener", fetch: fetcher, timeout: 60,
    onAnswer: () => { if (stopped) after += 1; first.resolve(); },
    onMessages: () => { if (stopped) after += 1; },
    onError: () => { if (stopped) after += 1; },
  });
  await first.promise;
  // Wait until the second poll is on its way (held by the server).
  while (calls.length < 2) await new Promise((r) => setImmediate(r));
  const start = performance.now();
  stopped = true;
  listener.stop();
  assert.equal(listener.running, false);
  assert.equal(await listener.closed, null);
  assert.ok(performance.now() - start < 1000);
  assert.equal(calls[1].init.signal.aborted, true);
  await send(room, "too late", { base: BASE, uid: "s1" });
  const stats = await roomStats(room, { base: BASE });
  assert.equal(stats.room, room);
  assert.equal(stats.seq, 1);
  assert.equal(stats.vip, false);
  assert.equal(after, 0);
  assert.equal(calls.length, 2);
});

test("a bad request stops the loop with the server's error", { timeout: 15_000 }, async () => {
  const failed = watch((error, retryInMs) => ({ error, retryInMs }));
  const listener = listen(freshRoom("bad"), { base: BASE, uid: "listener", recent: 1000, onError: failed.callback });
  const { error, retryInMs } = await failed.promise;
  assert.equal(retryInMs, null);
  assert.equal(error.status, 400);
  assert.equal(error.code, "bad_request");
  assert.match(error.message, /recent/);
  assert.equal(await listener.closed, error);
  assert.equal(listener.running, false);
});

test("a network error is retried after a growing backoff", { timeout: 15_000 }, async () => {
  const delays = [];
  const three = signal();
  // Nobody listens on port 9 of the loopback (discard): connections are refused.
  const listener = listen("nowhere", {
    base: "http://127.0.0.1:9", uid: "listener",
    onError: (error, retryInMs) => {
      assert.equal(error.code, "network");
      delays.push(retryInMs);
      if (delays.length === 3) three.resolve();
    },
  });
  await three.promise;
  listener.stop();
  assert.ok(delays[0] >= 250 && delays[0] <= 500, `${delays}`);
  assert.ok(delays[1] >= 500 && delays[1] <= 1000, `${delays}`);
  assert.ok(delays[2] >= 1000 && delays[2] <= 2000, `${delays}`);
});

test("a ticket function that fails is an error tried again, not the end of the loop", { timeout: 15_000 }, async () => {
  const room = freshRoom("ticketfn");
  await send(room, "hello", { base: BASE, uid: "host" });
  let asked = 0;
  const errors = [];
  const answered = signal();
  const listener = listen(room, {
    base: BASE, uid: "listener", timeout: 1,
    // The page's backend away at first: the function throws, then recovers
    // (an open node takes the poll without a ticket).
    ticket: () => { asked += 1; if (asked === 1) throw new Error("backend away"); return null; },
    onError: (error, retryInMs) => errors.push([error.code, retryInMs]),
    onAnswer: () => answered.resolve(),
  });
  await answered.promise;
  listener.stop();
  assert.equal(errors.length, 1, JSON.stringify(errors));
  assert.equal(errors[0][0], "ticket");
  assert.ok(errors[0][1] > 0, JSON.stringify(errors));
  assert.equal(await listener.closed, null);
});

test("names are checked before anything is sent", () => {
  assert.throws(() => new Listener("bad name", { base: BASE }), TypeError);
  assert.throws(() => new Listener("room", { base: BASE, uid: "a/b" }), TypeError);
  assert.throws(() => new Listener("room", { base: BASE, timeout: 0 }), RangeError);
  assert.throws(() => new Listener("room", {}), /base/);
});

test("a vip room's routing hint is echoed, and dropped once the answers drop it", { timeout: 15_000 }, async () => {
  const room = freshRoom("spread");
  const admin = { Authorization: `Bearer ${ADMIN}` };
  const pinned = await fetch(`${BASE}/v1/admin/vip/${room}/pin?sect=vip`, { method: "PUT", headers: admin });
  assert.equal(pinned.status, 200);
  const { calls, fetcher } = recordingFetch();
  const answers = [];
  const three = signal();
  const listener = listen(room, {
    base: BASE, uid: "hinted", fetch: fetcher, timeout: 1,
    onAnswer: (answer) => { answers.push(answer); if (answers.length === 3) three.resolve(); },
  });
  await three.promise;
  const hint = answers[0].spread;
  assert.equal(typeof hint, "number");
  assert.equal(calls[0].url.searchParams.get("spread"), null);
  assert.equal(calls[1].url.searchParams.get("spread"), String(hint));
  assert.equal(listener.spread, hint);
  const released = await fetch(`${BASE}/v1/admin/vip/${room}`, { method: "DELETE", headers: admin });
  assert.equal(released.status, 200);
  const plain = watch((answer) => answer.spread === undefined ? true : undefined);
  listener.options.onAnswer = plain.callback;
  await plain.promise;
  const after = signal();
  listener.options.onAnswer = () => after.resolve();
  await after.promise;
  listener.stop();
  assert.equal(listener.spread, null);
  assert.equal(calls.at(-1).url.searchParams.get("spread"), null);
});

test("likes: taps are counted, and a listener hears the total change through onLikes", { timeout: 15_000 }, async () => {
  const room = freshRoom("likes");
  await send(room, "hello", { base: BASE, uid: "l1" });
  const totals = [];
  const seen = watch((likes) => (likes >= 12 ? likes : undefined));
  const first = signal();
  const listener = listen(room, {
    base: BASE, uid: "heart", timeout: 2,
    onLikes: (likes) => { totals.push(likes); seen.callback(likes); },
    onAnswer: () => first.resolve(),
  });
  await first.promise;
  assert.equal(await like(room, 5, { base: BASE, uid: "fan" }), 5);
  assert.equal(await like(room, 7, { base: BASE, uid: "fan2" }), 12);
  await send(room, "a message wakes the listener", { base: BASE, uid: "l2" });
  assert.equal(await seen.promise, 12);
  listener.stop();
  await listener.closed;
  assert.equal(totals[0], 0);  // the first answer: before any tap
  assert.equal(listener.likes, 12);
  await assert.rejects(() => like(room, 0, { base: BASE, uid: "fan" }), RangeError);
  await assert.rejects(() => like(room, 101, { base: BASE, uid: "fan" }), RangeError);
});

/** A gift through the API: the backend's call, with the publisher token. */
async function gift(room, uid, value) {
  const response = await fetch(`${BASE}/v1/rooms/${room}/gifts`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${PUBLISHER}` },
    body: JSON.stringify({ uid, value, gift: "rose" }),
  });
  assert.equal(response.status, 201, await response.text());
}

test("ranking: the top givers come through onRanking once each, their version echoed", { timeout: 20_000 }, async (t) => {
  const room = freshRoom("ranking");
  await send(room, "on air", { base: BASE, uid: "r1" });  // the room exists
  for (const [uid, value] of [["ann", 30], ["bob", 50], ["cat", 5], ["dan", 1], ["ann", 25]]) {
    await gift(room, uid, value);
  }
  const { calls, fetcher } = recordingFetch();
  const heard = [];  // [callback, ranking] in the order the callbacks ran
  let answers = 0;
  const first = watch((ranking) => ranking);
  const later = watch(() => (answers >= 3 ? answers : undefined));
  const topped = watch((ranking) => (ranking.top[0]?.uid === "dan" ? ranking : undefined));
  // The node reads the rankings of the rooms polled about once a second: a
  // 1 s hold brings an answer after each read.
  const listener = listen(room, {
    base: BASE, uid: "fan", timeout: 1, fetch: fetcher,
    onRanking: (ranking, answer) => {
      assert.equal(answer.ranking, ranking);
      heard.push(["ranking", ranking]);
      first.callback(ranking);
      topped.callback(ranking);
    },
    onAnswer: () => {
      heard.push(["answer"]);
      if (heard.some(([name]) => name === "ranking")) answers += 1;
      later.callback();
    },
  });
  t.after(() => listener.stop());  // failed or timed out too: the loop must not keep Node up
  const ranking = await first.promise;
  assert.deepEqual(ranking.top, [
    { uid: "ann", score: 55 }, { uid: "bob", score: 50 }, { uid: "cat", score: 5 }]);
  assert.equal(typeof ranking.version, "number");
  assert.deepEqual(listener.ranking, ranking);
  await later.promise;  // two answers more: neither carries the ranking again
  assert.equal(heard.filter(([name]) => name === "ranking").length, 1);
  const at = heard.findIndex(([name]) => name === "ranking");
  assert.equal(heard[at + 1][0], "answer");  // onRanking runs before onAnswer
  const echoed = calls.map((c) => c.url.searchParams.get("ranking"));
  assert.equal(echoed[0], null);
  assert.equal(echoed.at(-1), String(ranking.version));
  await gift(room, "dan", 99);
  const changed = await topped.promise;
  assert.deepEqual(changed.top, [
    { uid: "dan", score: 100 }, { uid: "ann", score: 55 }, { uid: "bob", score: 50 }]);
  assert.notEqual(changed.version, ranking.version);
  assert.deepEqual(listener.ranking, changed);
  assert.equal(heard.filter(([name]) => name === "ranking").length, 2);
});

test("recall: the sender recalls its own, listeners hear it through onRecall before the answer's messages", { timeout: 20_000 }, async (t) => {
  const room = freshRoom("recall");
  const { seq } = await send(room, "oops", { base: BASE, uid: "alice" });
  const heard = [];  // [callback, what] in the order the callbacks ran
  const first = signal();
  const recalled = watch((seqs) => seqs);
  const listener = new Listener(room, {
    base: BASE, uid: "bob", timeout: 10,
    onRecall: (seqs, answer) => {
      assert.equal(answer.recalled, seqs);
      heard.push(["recall", seqs]);
      recalled.callback(seqs);
    },
    onMessages: (messages) => heard.push(["messages", messages.map((m) => m.body)]),
    onAnswer: () => first.resolve(),
  }).start();
  t.after(() => listener.stop());
  await first.promise;
  listener.stop();  // so that the recall and the next message wait for one answer
  assert.deepEqual(heard, [["messages", ["oops"]]]);
  heard.length = 0;
  // Someone else may not; the sender may, within the window.
  await assert.rejects(recall(room, seq, { base: BASE, uid: "mallory" }),
    (error) => error instanceof LiveroomError && error.status === 403 && error.code === "forbidden");
  const { fetcher, calls } = recordingFetch();
  const done = await recall(room, seq, { base: BASE, uid: "alice", fetch: fetcher });
  assert.deepEqual(done, { room, seq, uid: "alice", recalled: true, notice: seq + 1 });
  assert.equal(calls[0].init.method, "DELETE");
  assert.equal(calls[0].url.pathname, `/v1/rooms/${room}/messages/${seq}`);
  assert.equal(calls[0].url.searchParams.get("uid"), "alice");
  // Twice answers the same.
  assert.deepEqual(await recall(room, seq, { base: BASE, uid: "alice" }), done);
  await send(room, "after", { base: BASE, uid: "carol" });
  listener.start();
  assert.deepEqual(await recalled.promise, [seq]);
  const more = watch((messages) => (messages.some((m) => m.body === "after") ? true : undefined));
  listener.options.onMessages = (messages) => {
    heard.push(["messages", messages.map((m) => m.body)]);
    more.callback(messages);
  };
  if (!heard.some(([name, what]) => name === "messages" && what.includes("after"))) await more.promise;
  listener.stop();
  assert.deepEqual(heard, [["recall", [seq]], ["messages", ["after"]]]);

  // A newcomer reads the tombstone in its first answer, as it is.
  const tomb = watch((messages) => messages);
  const newcomer = listen(room, { base: BASE, uid: "dora", timeout: 10, onMessages: tomb.callback });
  t.after(() => newcomer.stop());
  const messages = await tomb.promise;
  newcomer.stop();
  assert.deepEqual(messages.map((m) => [m.seq, m.uid, m.body, m.recalled]),
    [[seq, "alice", null, true], [seq + 2, "carol", "after", undefined]]);
  // The publisher token recalls anyone's; a message the room never had is a 404.
  assert.equal((await recall(room, seq + 2, { base: BASE, ticket: PUBLISHER })).uid, "carol");
  await assert.rejects(recall(room, 999, { base: BASE, ticket: PUBLISHER }),
    (error) => error instanceof LiveroomError && error.status === 404);
  await assert.rejects(recall("bad name", 1, { base: BASE }), TypeError);
  await assert.rejects(recall(room, 0, { base: BASE, uid: "alice" }), RangeError);
});

/** The admin's call to set a room's slow mode (0 lifts it). */
async function slowMode(room, seconds) {
  const response = await fetch(`${BASE}/v1/admin/rooms/${room}/slow`, {
    method: "PUT",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${ADMIN}` },
    body: JSON.stringify({ seconds }),
  });
  assert.equal(response.status, 200, await response.text());
}

test("slow mode: listener.slow and onSlow when it changes, a send refused with the wait", { timeout: 20_000 }, async (t) => {
  const room = freshRoom("slow");
  await send(room, "hello", { base: BASE, uid: "s1" });
  const changes = [];
  let answers = 0;
  const first = signal();
  const slowed = watch((seconds) => (seconds === 30 ? seconds : undefined));
  const lifted = watch((seconds) => (seconds === 0 ? seconds : undefined));
  const listener = listen(room, {
    base: BASE, uid: "reader", timeout: 1,
    onSlow: (seconds, answer) => {
      assert.equal(answer.slow ?? 0, seconds);
      changes.push(seconds);
      slowed.callback(seconds);
      lifted.callback(seconds);
    },
    onAnswer: () => { answers += 1; first.resolve(); },
  });
  t.after(() => listener.stop());
  await first.promise;
  assert.equal(listener.slow, 0);
  await slowMode(room, 30);
  assert.equal(await slowed.promise, 30);
  assert.equal(listener.slow, 30);
  const seen = answers;
  // One message per 30 s a uid: the next is refused, with the wait.
  await send(room, "one", { base: BASE, uid: "chatty" });
  await assert.rejects(send(room, "two", { base: BASE, uid: "chatty", maxWait: 0 }),
    (error) => error instanceof LiveroomError && error.status === 429
      && error.retryAfter >= 1 && error.retryAfter <= 30);
  // Answers go on without telling it again.
  const later = watch(() => (answers >= seen + 2 ? true : undefined));
  listener.options.onAnswer = () => { answers += 1; later.callback(); };
  await later.promise;
  assert.deepEqual(changes, [30]);
  await slowMode(room, 0);
  assert.equal(await lifted.promise, 0);
  listener.stop();
  assert.equal(listener.slow, 0);
  assert.deepEqual(changes, [30, 0]);
});
