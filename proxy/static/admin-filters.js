// admin-filters.js: the word filter's card of the operators' dashboard (admin.js
// mounts it with its calls). Through the admin API (docs/api.md, "The word filter"):
//   GET    /v1/admin/filters          every list, with its words
//   PUT    /v1/admin/filters/{name}   add or replace a list
//   DELETE /v1/admin/filters/{name}   delete it
//
// The lists are read when the dashboard opens, after each change made here, and
// every LISTS_EVERY_MS (another operator's changes; each read brings every word,
// so not at every refresh of the figures). A list's name puts it in the form, to
// edit and save again; "delete" deletes it. Text only, never markup.

const LISTS_EVERY_MS = 60000;
const NAME = /^[A-Za-z0-9_.-]{1,64}$/;

const $ = (id) => document.getElementById(id);

/** The card, wired to `api(method, path, query, body)` and `guarded(work)` of
 * admin.js; returns `refresh()`, which reads the lists again when they are due
 * (or at once with `now`). */
export function mountFilters({ api, guarded }) {
  let lists = [];
  let readAt = 0;

  async function read() {
    const doc = await guarded(() => api("GET", "/v1/admin/filters"));
    if (!doc) return;
    readAt = Date.now();
    lists = doc.lists;
    show(doc);
  }

  function show(doc) {
    const body = $("filters").tBodies[0];
    body.replaceChildren(...doc.lists.map((list) => {
      const row = document.createElement("tr");
      row.dataset.list = list.name;
      const name = row.insertCell();
      const pick = document.createElement("button");
      pick.type = "button";
      pick.className = "link pick";
      pick.title = "edit this list";
      pick.textContent = list.name;
      name.append(pick);
      row.insertCell().textContent = list.action;
      const count = row.insertCell();
      count.className = "n";
      count.textContent = list.count.toLocaleString("en");
      const rooms = row.insertCell();
      rooms.className = "rooms";
      rooms.textContent = list.rooms.length ? list.rooms.join(", ") : "every room";
      const remove = document.createElement("button");
      remove.type = "button";
      remove.className = "danger delete";
      remove.textContent = "delete";
      row.insertCell().append(remove);
      return row;
    }));
    $("filters-empty").hidden = doc.lists.length > 0;
    $("filters-updated").textContent =
      `${doc.lists.length} of ${doc.limits.lists} lists, up to ` +
      `${doc.limits.words.toLocaleString("en")} words each`;
  }

  function note(text) {
    const p = $("filters-note");
    p.hidden = !text;
    p.textContent = text ?? "";
  }

  async function onRow(event) {
    const row = event.target.closest("tr[data-list]");
    if (!row) return;
    const list = lists.find((l) => l.name === row.dataset.list);
    if (!list) return;
    if (event.target.closest("button.pick")) {
      $("filter-name").value = list.name;
      $("filter-action").value = list.action;
      $("filter-rooms").value = list.rooms.join(", ");
      $("filter-words").value = list.words.join("\n");
      $("filter-words").focus();
      return;
    }
    const button = event.target.closest("button.delete");
    if (!button) return;
    button.disabled = true;
    try {
      const doc = await guarded(() =>
        api("DELETE", `/v1/admin/filters/${encodeURIComponent(list.name)}`));
      if (doc) {
        note(`Word list ${doc.name} deleted: every node drops it within a second.`);
        await read();
      }
    } finally {
      button.disabled = false;
    }
  }

  async function onSave(event) {
    event.preventDefault();
    const field = $("filter-name");
    const name = field.value.trim();
    if (!NAME.test(name)) {
      field.reportValidity();
      return;
    }
    const words = $("filter-words").value.split("\n").map((w) => w.trim()).filter(Boolean);
    const rooms = $("filter-rooms").value.split(",").map((r) => r.trim()).filter(Boolean);
    const action = $("filter-action").value;
    const button = $("filter-put");
    button.disabled = true;
    try {
      // A refused list (a word too long, too many lists) is said in the note,
      // the form kept as typed: the banner is for the server's troubles.
      let doc;
      try {
        doc = await api("PUT", `/v1/admin/filters/${encodeURIComponent(name)}`, null,
          { words, action, rooms });
      } catch (error) {
        if (error.status === 400 || error.status === 409 || error.status === 413) {
          note(`Not saved: ${error.message}`);
          return;
        }
        await guarded(() => Promise.reject(error));
        return;
      }
      note(`Word list ${doc.name} saved: ${doc.action}, ${doc.count} words, ` +
        `${doc.rooms.length ? doc.rooms.join(", ") : "every room"}.`);
      $("filter-form").reset();
      await read();
    } finally {
      button.disabled = false;
    }
  }

  $("filters").addEventListener("click", onRow);
  $("filter-form").addEventListener("submit", onSave);

  return async function refresh(now = false) {
    if (now || Date.now() - readAt >= LISTS_EVERY_MS) await read();
  };
}
