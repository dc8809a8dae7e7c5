// Listen to a room from Node and say something in it, with liveroom.js.
//
//   liveroom serve                       # in one shell
//   node examples/node-listen.mjs        # in another (Node 18 or later)
//
// It prints the room's recent messages and what arrives, sends one message
// once listening, and stops when that message comes back. The server's URL
// comes from LIVEROOM_URL (what `liveroom serve` prints), else the default.
// With the npm package installed (npm install ./proxy/static), import from
// "liveroom" instead of the file.

import { listen, send } from "../proxy/static/liveroom.js";

const base = process.env.LIVEROOM_URL ?? "http://127.0.0.1:8080";
const room = process.argv[2] ?? "demo";
const uid = `node-${process.pid}`;
const text = `hi from ${uid}`;

let sent = false;
const listener = listen(room, {
  base,
  uid,
  onImportant: (messages) => messages.forEach((m) => console.log(`${m.seq} [important] ${m.uid}: ${JSON.stringify(m.body)}`)),
  onMessages: (messages) => {
    for (const m of messages) {
      console.log(`${m.seq} ${m.uid}: ${typeof m.body === "string" ? m.body : JSON.stringify(m.body)}`);
      if (m.uid === uid && m.body === text) listener.stop();
    }
  },
  onAnswer: () => {
    if (sent) return;
    sent = true; // once listening: the message comes back in a later answer
    send(room, text, { base, uid }).then(
      ({ seq }) => console.error(`-- sent seq ${seq} to ${room} at ${base}`),
      (error) => { console.error(`send failed: ${error.message}`); listener.stop(); });
  },
  onError: (error, retryInMs) => console.error(retryInMs === null
    ? `stopped: ${error.message}` : `${error.message}; again in ${retryInMs} ms`),
});

const stopped = await listener.closed;
process.exitCode = stopped === null ? 0 : 1;
