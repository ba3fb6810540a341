// shipway dashboard: the operations running now, live. One EventSource on the server's
// /api/live (server-sent events of the one event stream every command writes); each
// message is one event of one operation, folded into that operation's state here and drawn
// without a reload: on a slot's page its plan, step i/n, waits, said lines, a canary's
// share and counts as a chart (inline SVG), its outcome; on the overview a marker per slot.
// Uses el(), query(), age() and stateClass() of dashboard.js. Every value set as text.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const SAID_KEPT = 8; // the last lines an operation said, shown under its waits
const CANARY_KEPT = 2000; // the canary figures kept per operation (one every 0.5 s)
const MARK_FOR_MS = 60000; // an ended operation's marker stays on the overview this long

const live = {
  ops: new Map(), // op id -> its state, folded from its events
  source: null, // the EventSource
  scope: null, // {app, slot} on a slot's page, null on the overview
  box: null, // the #live section (kept across the slot page's redraws)
  pending: false,
};

function opOf(msg) {
  let op = live.ops.get(msg.op);
  if (!op) {
    op = { op: msg.op, app: msg.app, slot: msg.slot, pid: msg.pid, operation: "",
           revision: null, summary: "", plan: [], step: null, waits: new Map(), said: [],
           canary: [], ended: null, gone: false, startedAt: null, who: null };
    live.ops.set(msg.op, op);
  }
  return op;
}

function fold(msg) {
  const op = opOf(msg);
  if (msg.gone) { op.gone = true; return; }
  const e = msg.event;
  switch (e.event) {
    case "started":
      Object.assign(op, { operation: e.operation, startedAt: e.at, who: e.who,
                          backend: e.backend });
      break;
    case "planned":
      Object.assign(op, { operation: e.operation || op.operation, revision: e.revision,
                          summary: e.summary, plan: e.plan || [] });
      break;
    case "step":
      op.step = e;
      op.waits = new Map(); // the waits shown are the current step's
      break;
    case "waiting":
      op.waits.set(e.process, e);
      break;
    case "said":
    case "recovered":
      op.said = [...op.said.slice(1 - SAID_KEPT), e.text || e.line];
      break;
    case "canary":
      op.canary = [...op.canary.slice(1 - CANARY_KEPT), e];
      break;
    case "ended":
      op.ended = e;
      break;
  }
}

// the operation a slot's page shows: the newest running one, else the newest one
function opFor(app, slot) {
  let newest = null;
  let running = null;
  for (const op of live.ops.values()) {
    if (op.app !== app || op.slot !== slot) continue;
    if (!newest || op.op > newest.op) newest = op;
    if (!op.ended && !op.gone && (!running || op.op > running.op)) running = op;
  }
  return running || newest;
}

function attachLive(app, slot) {
  live.box = live.box || document.getElementById("live");
  live.scope = app === undefined ? null : { app, slot };
  if (live.source) live.source.close();
  live.ops.clear();
  live.box.hidden = true;
  live.box.replaceChildren();
  const params = live.scope ? "?" + query(live.scope) : "";
  const source = new EventSource("/api/live" + params);
  live.source = source;
  source.addEventListener("reset", () => {
    live.ops.clear();
    connected(true);
    redrawLive();
  });
  source.onerror = () => { if (source === live.source) connected(false); };
  source.onmessage = (message) => {
    if (source !== live.source) return;
    fold(JSON.parse(message.data));
    redrawLive();
  };
  return live.box;
}

// the header says whether the live stream is there (the browser reconnects by itself)
function connected(yes) {
  document.documentElement.dataset.live = yes ? "open" : "retrying";
  document.getElementById("live-conn").textContent = yes ? "live" : "live: reconnecting…";
}

function redrawLive() {
  if (live.pending) return;
  live.pending = true;
  setTimeout(() => {
    live.pending = false;
    if (live.scope) drawLive(opFor(live.scope.app, live.scope.slot));
    else markSlots();
  }, 0);
}

// -- the overview: a marker on each slot with an operation under way (or just ended) ------

function markerText(op) {
  if (op.gone) return "operation gone";
  if (op.ended) return `${op.operation || "operation"}: ${op.ended.outcome}`;
  const step = op.step ? ` [${op.step.index}/${op.step.total}]` : "";
  const share = op.canary.length ? ` canary ${op.canary[op.canary.length - 1].percent}%` : "";
  return `${op.operation || "operation"}${op.revision ? " r" + op.revision : ""}${step}${share}`;
}

function markSlots() {
  for (const row of document.querySelectorAll("a.slot[data-app]")) {
    const op = opFor(row.dataset.app, row.dataset.slot);
    const over = op && (op.ended || op.gone);
    const recent = op && (!over || !op.ended ||
                          Date.now() - Date.parse(op.ended.at) < MARK_FOR_MS);
    let mark = row.querySelector(".live-mark");
    if (!op || !recent) { if (mark) mark.remove(); continue; }
    if (!mark) {
      mark = el("span", { class: "live-mark" });
      row.append(mark);
    }
    mark.className = "live-mark " + (over ? outcomeClass(op) : "running");
    mark.textContent = (over ? "" : "● ") + markerText(op);
  }
}

function outcomeClass(op) {
  if (op.gone) return "failed";
  const ok = op.ended.exit_code === 0;
  return ok ? "ok" : "failed";
}

// -- a slot's page: the operation under way, or the last one ----------------------------

function drawLive(op) {
  const box = live.box;
  if (!op) { box.hidden = true; box.replaceChildren(); return; }
  box.hidden = false;
  const state = op.gone ? "gone" : op.ended ? op.ended.outcome : "running";
  const who = op.who ? [op.who.user, op.who.host].filter(Boolean).join("@") : "";
  const parts = [
    el("h2", {}, "operation ",
      el("span", { id: "live-state", class: "state " + (op.ended || op.gone ? outcomeClass(op) : "deploying"),
                   text: state })),
    el("p", { class: "note", id: "live-what" },
      [op.operation, op.revision ? `r${op.revision}` : "", op.summary].filter(Boolean).join(" · "),
      who ? ` · by ${who}` : "", op.startedAt ? ` · started ${age(op.startedAt)}` : ""),
  ];
  if (op.plan.length) parts.push(el("pre", { id: "live-plan", text: op.plan.join("\n") }));
  if (op.step) {
    const s = op.step;
    parts.push(el("p", { id: "live-step" },
      el("progress", { max: s.total, value: op.ended ? s.total : s.index - 1 }),
      ` [${s.index}/${s.total}] ${s.step}`, s.phase !== "rollout" ? ` (${s.phase})` : ""));
  }
  if (op.waits.size && !op.ended) {
    parts.push(table([...op.waits.values()], [
      ["process", "process"],
      [(w) => countsText(w.counts), "counts"],
      ["note", "last probe", "wrap"],
      [(w) => age(w.at), "reported"],
    ], (w) => ({ "data-process": w.process })));
  }
  if (op.canary.length) parts.push(canaryChart(op.canary));
  if (op.said.length) parts.push(el("pre", { id: "live-said", text: op.said.join("\n") }));
  if (op.ended) {
    parts.push(el("p", { id: "live-outcome", class: "state " + outcomeClass(op),
                         text: op.ended.line }));
    for (const detail of op.ended.details || []) parts.push(el("p", { class: "note", text: detail }));
  }
  if (op.gone) {
    parts.push(el("p", { id: "live-outcome", class: "state failed",
      text: "the process running it is gone without an outcome (killed?); the next " +
            "operation on the slot resolves what it left" }));
  }
  box.replaceChildren(...parts);
}

// a wait's counts as the terminal says them: "ready 1 of 2" (the total last; the stream's
// JSON has its keys sorted)
function countsText(counts) {
  const total = (k) => (k === "of" || k === "desired" ? 1 : 0);
  return Object.entries(counts).sort(([a], [b]) => total(a) - total(b))
    .map(([k, v]) => `${k} ${v}`).join(" ");
}

// -- a canary's share and counts, as inline SVG ------------------------------------------

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function canaryChart(figures) {
  const [W, H, L, R, T, B] = [640, 200, 44, 40, 10, 22]; // size and margins
  // x: seconds since the canary's first analysis — each figure's time into its step, after
  // the steps before it (the events' "at" has whole seconds only)
  let before = 0;
  const xs = figures.map((f, i) => {
    const prev = figures[i - 1];
    if (prev && (prev.percent !== f.percent || prev.final)) before += prev.elapsed;
    return before + f.elapsed;
  });
  const span = Math.max(1, xs[xs.length - 1]);
  const top = Math.max(1, ...figures.map((f) => Math.max(f.canary.requests, f.stable.requests)));
  const x = (s) => L + (s / span) * (W - L - R);
  const y = (n) => T + (1 - n / top) * (H - T - B);
  const yShare = (p) => T + (1 - p / 100) * (H - T - B);
  const line = (pick, cls) => svg("polyline", { class: cls, fill: "none",
    points: figures.map((f, i) => `${x(xs[i]).toFixed(1)},${y(pick(f)).toFixed(1)}`).join(" ") });
  // the share: a step area on its own scale (0-100 %, right)
  let share = `M${x(0)},${yShare(0)} L${x(0)},${yShare(figures[0].percent)}`;
  figures.forEach((f, i) => {
    share += ` L${x(xs[i]).toFixed(1)},${yShare(f.percent).toFixed(1)}`;
    if (i + 1 < figures.length) share += ` L${x(xs[i + 1]).toFixed(1)},${yShare(f.percent).toFixed(1)}`;
  });
  share += ` L${x(xs[xs.length - 1]).toFixed(1)},${yShare(0)} Z`;
  const steps = figures.filter((f, i) => i === 0 || f.percent !== figures[i - 1].percent);
  const last = figures[figures.length - 1];
  const chart = svg("svg", { id: "canary-chart", viewBox: `0 0 ${W} ${H}`, role: "img",
                             "aria-label": "the canary's share and counts over time" },
    svg("title", {}, "the canary's share (shaded, right scale) and each side's requests and bad responses over the step's window"),
    svg("path", { class: "share", d: share }),
    ...steps.map((f) => {
      const at = x(Math.max(0, xs[figures.indexOf(f)] - f.elapsed)); // where its step began
      return svg("g", {}, svg("line", { class: "step", x1: at, x2: at, y1: T, y2: H - B }),
        svg("text", { class: "axis", x: at + 3, y: T + 10 }, `${f.percent}%`));
    }),
    svg("line", { class: "axis-line", x1: L, x2: W - R, y1: H - B, y2: H - B }),
    svg("text", { class: "axis", x: L - 4, y: T + 8, "text-anchor": "end" }, top),
    svg("text", { class: "axis", x: L - 4, y: H - B, "text-anchor": "end" }, 0),
    svg("text", { class: "axis", x: W - R + 4, y: T + 8 }, "100%"),
    svg("text", { class: "axis", x: L, y: H - 6 }, "0s"),
    svg("text", { class: "axis", x: W - R, y: H - 6, "text-anchor": "end" }, `${span.toFixed(0)}s`),
    line((f) => f.stable.requests, "stable"),
    line((f) => f.canary.requests, "canary"),
    line((f) => f.stable.bad, "stable-bad"),
    line((f) => f.canary.bad, "canary-bad"),
    // the last figures as dots: a step's first figure shows before it has a line
    ...[["stable", last.stable.requests], ["canary", last.canary.requests]].map(([cls, n]) =>
      svg("circle", { class: "dot " + cls, r: 3, cx: x(xs[xs.length - 1]).toFixed(1),
                      cy: y(n).toFixed(1) })));
  const p99 = (side) => (side.p99_ms === null || side.p99_ms === undefined ? "" : `, p99 ${side.p99_ms} ms`);
  const stepOf = last.step ? ` (step ${last.step} of ${last.steps.length})` : "";
  return el("div", { class: "canary" },
    el("h3", { text: `canary r${last.revision}: ${last.percent}% of requests${stepOf}` }),
    chart,
    el("p", { class: "legend" },
      el("span", { class: "key canary", text: "canary" }), " ",
      el("span", { class: "key stable", text: "stable" }), " ",
      el("span", { class: "key canary-bad", text: "canary bad" }), " ",
      el("span", { class: "key stable-bad", text: "stable bad" }), " ",
      el("span", { class: "key share", text: "share" })),
    el("p", { id: "canary-figures" },
      `canary: ${last.canary.requests} requests, ${last.canary.bad} bad${p99(last.canary)} · ` +
      `stable: ${last.stable.requests} requests, ${last.stable.bad} bad${p99(last.stable)} · ` +
      `${last.verdict} (${last.why}), ${last.elapsed.toFixed(1)}s into the step`));
}
