// admin-webhooks.js: the webhooks' card of the operators' dashboard (admin.js
// mounts it with its calls). Through the admin API (docs/api.md, "Webhooks"):
//   GET  /v1/admin/webhooks/failed   the events given up after --webhook-retry-for
//   POST /v1/admin/webhooks/replay   send them all again, each under its own id
//
// Read at each refresh of the figures (one store read). The delivery's lag and
// its failures as they happen are in the metrics (docs/metrics.md). Text only.

const SHOWN = 20;

const $ = (id) => document.getElementById(id);

/** The card, wired to `api(method, path, query, body)` and `guarded(work)` of
 * admin.js; returns `refresh()`. */
export function mountWebhooks({ api, guarded }) {
  async function read() {
    const doc = await guarded(() => api("GET", "/v1/admin/webhooks/failed",
      { limit: String(SHOWN) }));
    if (doc) show(doc);
  }

  function show(doc) {
    $("webhooks-failed").tBodies[0].replaceChildren(...doc.failed.map((failed) => {
      const row = document.createElement("tr");
      row.dataset.event = failed.id;
      row.insertCell().textContent = failed.id;
      row.insertCell().textContent = failed.type ?? "";
      row.insertCell().textContent = failed.room ?? "";
      row.insertCell().textContent = failed.why;
      row.insertCell().textContent = new Date(failed.failed_ms).toLocaleString();
      return row;
    }));
    $("webhooks-count").textContent = doc.count === 0
      ? "no event given up"
      : `${doc.count.toLocaleString("en")} event${doc.count === 1 ? "" : "s"} given up` +
        (doc.count > doc.failed.length ? ` (the oldest ${doc.failed.length} shown)` : "");
    $("webhooks-replay").disabled = doc.count === 0;
  }

  $("webhooks-replay").addEventListener("click", async () => {
    const button = $("webhooks-replay");
    button.disabled = true;
    const done = await guarded(() => api("POST", "/v1/admin/webhooks/replay", null, {}));
    const note = $("webhooks-note");
    if (done) {
      note.textContent = `${done.count} event${done.count === 1 ? "" : "s"} sent again.`;
      note.hidden = false;
    }
    await read();
  });

  return read;
}
