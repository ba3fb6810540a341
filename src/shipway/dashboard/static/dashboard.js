// shipway dashboard: plain JavaScript, no build step. It reads the server's JSON reads
// (/api/...) and polls them every POLL_MS, redrawing in place: never a reload; the
// operations under way come as they happen from /api/live (live.js). Every value is set as
// text (textContent), never as HTML.
"use strict";

const POLL_MS = 2000;
let timer = null;
let generation = 0; // a view's polls stop when another view is shown

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function read(path) {
  const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  const doc = await response.json();
  if (!response.ok) throw new Error(doc.error || response.statusText);
  return doc;
}

function age(stamp) {
  if (!stamp) return "-";
  const seconds = Math.max(0, Math.floor((Date.now() - Date.parse(stamp)) / 1000));
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (seconds >= size) return `${Math.floor(seconds / size)}${unit} ago`;
  }
  return `${seconds}s ago`;
}

function stateClass(word) {
  return "state " + String(word || "unknown").split(" ")[0];
}

function stamped(readAt) {
  const when = readAt ? new Date(readAt * 1000) : new Date();
  document.getElementById("updated").textContent = "read " + when.toLocaleTimeString();
}

function slotHref(app, slot) {
  return `#/slot/${encodeURIComponent(app)}/${encodeURIComponent(slot)}`;
}

function query(params) {
  return new URLSearchParams(params).toString();
}

// -- the overview: every app and slot ----------------------------------------------------

function slotLine(row) {
  const health = row.desired ? `${row.ready}/${row.desired} ready` : "";
  const detail = [row.backend, health, row.health.join(" "), row.description]
    .filter(Boolean).join(" · ");
  return el("a", { class: "slot", href: slotHref(row.app, row.slot),
                   "data-app": row.app, "data-slot": row.slot },
    el("span", { class: "slot-name", text: row.slot }),
    el("span", { class: stateClass(row.state), text: row.state, title: row.state_line }),
    el("span", { class: "release", text: row.release === null ? "-" : `r${row.release}` }),
    el("span", { class: "detail" },
      el("span", { class: "age", "data-at": row.deployed_at, text: age(row.deployed_at) }),
      detail ? ` · ${detail}` : ""));
}

function drawOverview(doc) {
  const main = document.getElementById("main");
  const parts = [];
  if (doc.problems.length) {
    parts.push(el("ul", { class: "problems" }, doc.problems.map((p) => el("li", { text: p }))));
  }
  if (!doc.apps.length) {
    parts.push(el("p", { class: "note",
      text: "no app here yet: give specs with -f, or deploy one to this machine" }));
  }
  parts.push(el("div", { class: "apps" }, doc.apps.map((app) =>
    el("section", { class: "card", "data-app": app.app },
      el("h2", { text: app.app }), app.slots.map(slotLine)))));
  main.replaceChildren(...parts);
  markSlots(); // the operations under way (live.js)
  stamped(doc.read_at);
}

// -- a slot's page -----------------------------------------------------------------------

const chosen = { a: null, b: null }; // the two releases whose diff is shown

function table(rows, columns, extra) {
  if (!rows.length) return el("p", { class: "note", text: "none" });
  return el("div", { class: "table" }, el("table", {},
    el("thead", {}, el("tr", {}, columns.map(([, title, cls]) =>
      el("th", { class: cls, text: title })))),
    el("tbody", {}, rows.map((row) => el("tr", extra ? extra(row) : {},
      columns.map(([key, , cls]) => {
        const value = typeof key === "function" ? key(row) : row[key];
        const shown = value === null || value === undefined || value === "" ? "-" : value;
        return el("td", { class: cls }, shown);
      }))))));
}

function processColumns(rows) {
  const skip = new Set(["process", "desired", "ready"]);
  const more = [...new Set(rows.flatMap((r) => Object.keys(r)))]
    .filter((k) => !skip.has(k) && rows.some((r) => r[k] !== null && r[k] !== ""));
  return [["process", "process"], [(r) => `${r.ready}/${r.desired}`, "ready"],
          ...more.map((k) => [k, k.replace(/_/g, " "), k === "url" ? "wrap" : null])];
}

function pick(which, revision) {
  return el("input", { type: "radio", name: `pick-${which}`, value: revision,
                       "aria-label": `${which === "a" ? "from" : "to"} r${revision}`,
                       checked: chosen[which] === revision });
}

function historyTable(history) {
  const columns = [
    [(r) => pick("a", r.revision), "from"],
    [(r) => pick("b", r.revision), "to"],
    [(r) => `r${r.revision}`, "release"],
    [(r) => el("span", { class: stateClass(r.status), text: r.status }), "status"],
    [(r) => age(r.updated_at), "when"],
    ["changed", "changed", "wrap"],
    ["description", "description", "wrap hide-narrow"],
    ["actor", "by", "hide-narrow"],
  ];
  return table(history, columns, (r) => ({ "data-revision": r.revision }));
}

function diffLines(doc) {
  return el("pre", { id: "diff-text" }, doc.lines.map((line) => {
    const bare = line.trimStart();
    const cls = bare.startsWith("+") ? "diff-add" : bare.startsWith("-") ? "diff-del" : null;
    return el("span", { class: cls }, line + "\n");
  }));
}

async function showDiff(app, slot) {
  const box = document.getElementById("diff");
  if (!box || chosen.a === null || chosen.b === null) return;
  if (chosen.a === chosen.b) {
    box.replaceChildren(el("p", { class: "note", text: "pick two different releases" }));
    return;
  }
  try {
    const doc = await read("/api/diff?" + query({ app, slot, a: chosen.a, b: chosen.b }));
    box.replaceChildren(diffLines(doc));
  } catch (error) {
    box.replaceChildren(el("p", { class: "problems", text: String(error.message) }));
  }
}

function drawSlot(doc) {
  const main = document.getElementById("main");
  const logs = doc.logs.lines.map((l) => (l.source ? `${l.source} | ` : "") + l.text).join("\n");
  const keepScroll = document.getElementById("logs");
  const atBottom = !keepScroll ||
    keepScroll.scrollTop + keepScroll.clientHeight >= keepScroll.scrollHeight - 4;
  const oldDiff = document.getElementById("diff");
  main.replaceChildren(...[
    el("p", {}, el("a", { href: "#/", text: "← every app" })),
    el("h1", {}, `${doc.app} / ${doc.slot} `,
      el("span", { class: stateClass(doc.state), id: "slot-state", text: doc.state })),
    el("p", { id: "state-line", text: doc.state_line }),
    live.box, // the operation under way (live.js), kept as it is across redraws
    el("p", { class: "note" },
      `${doc.backend} backend · live release `,
      el("strong", { id: "live-release",
                     text: doc.deployed ? `r${doc.deployed.revision}` : "none" }),
      doc.deployed ? ` · ${doc.deployed.image || ""} · ${age(doc.deployed.updated_at)}` : ""),
    el("h2", { text: "processes" }), table(doc.processes, processColumns(doc.processes)),
    doc.generations.length ? el("h2", { text: "generations" }) : null,
    doc.generations.length ? table(doc.generations,
      [["name", "generation"], [(g) => el("span", { class: stateClass(g.state), text: g.state }), "state"],
       [(g) => g.release === null ? "-" : `r${g.release}`, "release"], ["created_at", "created"]]) : null,
    el("h2", { text: "volumes" }), table(doc.volumes,
      [["name", "volume"], ["state", "state"], ["where", "where", "wrap"],
       [(v) => v.size_bytes === null ? "-" : `${v.size_bytes} B`, "size"]]),
    el("h2", { text: "accessories" }), table(doc.accessories,
      [["name", "accessory"], ["kind", "kind"], ["version", "version"],
       [(a) => el("span", { class: stateClass(a.state), text: a.state }), "state"],
       ["address", "address", "wrap"]]),
    el("h2", { text: "history" }),
    el("p", { class: "note", text: "pick a release in each column to see what differs" }),
    el("div", { id: "history" }, historyTable(doc.history)),
    oldDiff || el("div", { id: "diff" }),
    el("h2", { text: "logs" }),
    doc.logs.about ? el("p", { class: "note", text: doc.logs.about }) : null,
    doc.logs.error ? el("p", { class: "problems", text: doc.logs.error }) : null,
    el("pre", { id: "logs", text: logs || "(no lines)" }),
  ].filter(Boolean));
  const box = document.getElementById("logs");
  box.scrollTop = atBottom ? box.scrollHeight : keepScroll.scrollTop;
  stamped();
}

function slotView(app, slot, mine) {
  chosen.a = null;
  chosen.b = null;
  document.getElementById("main").onchange = (event) => {
    const target = event.target;
    if (!(target instanceof HTMLInputElement) || !target.name.startsWith("pick-")) return;
    chosen[target.name.slice(5)] = Number(target.value);
    showDiff(app, slot);
  };
  const poll = async () => {
    const doc = await read("/api/slot?" + query({ app, slot }));
    if (mine !== generation) return;
    if (chosen.a === null && doc.history.length > 1) {
      chosen.a = doc.history[1].revision; // the live release against the one before it
      chosen.b = doc.history[0].revision;
      drawSlot(doc);
      showDiff(app, slot);
      return;
    }
    drawSlot(doc);
  };
  attachLive(app, slot); // the slot's operation under way, live (live.js)
  return poll;
}

// -- routing: #/ is the overview, #/slot/APP/SLOT a slot's page ------------------------

function route() {
  generation += 1;
  const mine = generation;
  clearTimeout(timer);
  const match = location.hash.match(/^#\/slot\/([^/]+)\/([^/]+)$/);
  let poll;
  if (match) {
    const [app, slot] = [decodeURIComponent(match[1]), decodeURIComponent(match[2])];
    document.title = `${app}/${slot} · shipway`;
    poll = slotView(app, slot, mine);
  } else {
    document.title = "shipway";
    document.getElementById("main").onchange = null;
    attachLive(); // every slot's operation under way, as a marker (live.js)
    poll = async () => {
      const doc = await read("/api/overview");
      if (mine === generation) drawOverview(doc);
    };
  }
  const loop = async () => {
    try {
      await poll();
    } catch (error) {
      document.getElementById("updated").textContent = `cannot read: ${error.message}`;
    }
    if (mine === generation) timer = setTimeout(loop, POLL_MS);
  };
  loop();
}

window.addEventListener("hashchange", route);
route();
