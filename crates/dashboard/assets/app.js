// cairn's dashboard: polls /-/api/overview and draws it; plots are plain SVG.
"use strict";

const KEY = "cairn-key";
const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

function human(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let v = bytes, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : 1)) + " " + units[i];
}
const ratio = (r) => (r && isFinite(r) ? r.toFixed(2) + "×" : "–");
const when = (secs) => new Date(secs * 1000).toLocaleString();

function headers() {
  const key = sessionStorage.getItem(KEY);
  return key ? { Authorization: "Cairn " + key } : {};
}

function showError(text) {
  const e = $("error");
  e.textContent = text || "";
  e.hidden = !text;
}

function el(tag, attrs, text) {
  const n = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
  if (text !== undefined) n.textContent = text;
  return n;
}

function setFigure(id, text, raw) {
  const n = $(id);
  n.textContent = text;
  if (raw !== undefined) n.dataset.value = String(raw);
}

function fillTable(id, rows) {
  const body = $(id).querySelector("tbody");
  body.replaceChildren(...rows.map((cells) => {
    const tr = el("tr");
    for (const c of cells) {
      const td = el("td");
      if (c instanceof Node) td.append(c); else td.textContent = c;
      tr.append(td);
    }
    return tr;
  }));
}

// A line plot of `series` ([{name, color, values: [[t, v]...]}]) into `svg`.
function linePlot(svg, series, format) {
  const W = 600, H = 220, L = 70, R = 10, T = 10, B = 40;
  svg.replaceChildren();
  const all = series.flatMap((s) => s.values);
  if (all.length === 0) {
    svg.append(el("svg:text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no samples yet"));
    return;
  }
  const ts = all.map((p) => p[0]), vs = all.map((p) => p[1]);
  let t0 = Math.min(...ts), t1 = Math.max(...ts);
  if (t0 === t1) { t0 -= 60; t1 += 60; }
  const v1 = Math.max(...vs) * 1.1 || 1;
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / v1) * (H - T - B);
  svg.append(el("svg:line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#aab" }));
  svg.append(el("svg:line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#aab" }));
  for (const f of [0, 0.5, 1]) {
    svg.append(el("svg:text", { x: L - 4, y: y(v1 * f) + 4, "text-anchor": "end" }, format(v1 * f)));
  }
  svg.append(el("svg:text", { x: L, y: H - B + 16 }, new Date(t0 * 1000).toLocaleTimeString()));
  svg.append(el("svg:text", { x: W - R, y: H - B + 16, "text-anchor": "end" }, new Date(t1 * 1000).toLocaleTimeString()));
  series.forEach((s, i) => {
    const pts = s.values.map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
    svg.append(el("svg:polyline", { points: pts, fill: "none", stroke: s.color, "stroke-width": 2, "data-series": s.name }));
    for (const p of s.values) svg.append(el("svg:circle", { cx: x(p[0]), cy: y(p[1]), r: 2.5, fill: s.color }));
    const lx = L + 10 + i * 130;
    svg.append(el("svg:rect", { x: lx, y: H - 14, width: 10, height: 10, fill: s.color }));
    svg.append(el("svg:text", { x: lx + 14, y: H - 5 }, s.name));
  });
}

function policyBar(svg, policies) {
  svg.replaceChildren();
  const total = policies.reduce((a, p) => a + p.bytes, 0) || 1;
  const colors = ["#3b6ea5", "#2f8f4e", "#c98a1b", "#8e44ad", "#c23b31", "#16a085"];
  let x = 0;
  policies.forEach((p, i) => {
    const w = (p.bytes / total) * 300;
    svg.append(el("svg:rect", { x, y: 10, width: Math.max(w, 1), height: 40, fill: colors[i % colors.length], "data-policy": p.policy }));
    svg.append(el("svg:text", { x: 4 + (i % 2) * 150, y: 70 + Math.floor(i / 2) * 16 }, p.policy + " " + ((p.bytes / total) * 100).toFixed(0) + "%"));
    x += w;
  });
}

function progressCell(job) {
  if (job.state !== "running") return job.state === "done" ? "100%" : "–";
  const s = job.step;
  if (!s) return "starting";
  if (!s.total) return s.what + " " + s.done;
  const bar = el("progress", { max: s.total, value: s.done });
  const span = el("span");
  span.append(bar, " " + s.what + " " + s.done + "/" + s.total);
  return span;
}

// Result panels the user opened, by job id: the table is redrawn every two
// seconds, and an opened panel stays open.
const opened = new Set();

// A result as one line of key figures, the whole answer folded below it.
function summary(job, line, whole) {
  const d = el("details", { class: "result" });
  d.open = opened.has(job.id);
  d.addEventListener("toggle", () => (d.open ? opened.add(job.id) : opened.delete(job.id)));
  d.append(el("summary", {}, line), el("pre", {}, JSON.stringify(whole, null, 2)));
  return d;
}

const count = (n, one, many) => n + " " + (n === 1 ? one : many);

function gcLine(v) {
  let line = human(v.freed_bytes) + " freed: " + count(v.reclaimed_containers, "container", "containers") + " reclaimed, " +
    count(v.copied_chunks, "chunk", "chunks") + " copied forward, " + count(v.marked_chunks, "chunk", "chunks") + " live";
  const damaged = v.damaged_files.length + v.damaged_roots.length;
  if (v.skipped.length) line += ", " + count(v.skipped.length, "damaged container", "damaged containers") + " skipped";
  if (damaged) line += ", " + count(damaged, "damaged file or root", "damaged files or roots");
  return line;
}

function checkLine(v) {
  const c = v.repaired ? v.repaired.after : v.check;
  const problems = c.problems.length + v.damaged_files.length + v.damaged_roots.length;
  const verdict = problems ? count(problems, "problem", "problems") : "clean";
  return verdict + ": " + c.containers_ok + " of " + count(c.containers, "container", "containers") + " sound, " +
    count(c.chunks_verified, "chunk", "chunks") + " (" + human(c.bytes_verified) + ") verified";
}

function jobResult(job) {
  if (job.error) return el("span", { class: job.state === "refused" ? "muted" : "bad" }, job.error);
  const r = job.reply;
  if (!r) return "";
  const v = r.reply;
  switch (r.op) {
    case "scrub":
      if (v.plain) return "nothing to scrub: one plain branch, no other copy to heal from (a check verifies every chunk)";
      return summary(job, v.healthy + " of " + v.containers + " containers healthy, " + v.repaired.length + " repaired, " + v.lost.length + " lost", v);
    case "gc": return summary(job, gcLine(v), v);
    case "check": return summary(job, checkLine(v), v);
    case "snapshot_create": return "snapshot " + v.name;
    default: return summary(job, r.op.replace(/_/g, " ") + " done", v);
  }
}

// A job's state; a request refused as asked (a typo) is no failure.
const STATE_CLASS = { done: "ok", failed: "bad", refused: "muted" };
const stateCell = (job) => el("span", { class: STATE_CLASS[job.state] || "" }, job.state);

function render(o) {
  const s = o.stats;
  $("updated").textContent = "figures of " + when(o.computed);
  const role = $("role");
  role.textContent = o.operator ? "operator" : "read only";
  role.className = "badge" + (o.operator ? " operator" : "");
  for (const b of document.querySelectorAll("[data-kind]")) b.disabled = !o.operator;
  $("actions-note").hidden = o.operator;
  setFigure("logical", human(s.logical_bytes), s.logical_bytes);
  setFigure("stored", human(s.stored_bytes), s.stored_bytes);
  setFigure("dedup", ratio(s.dedup_ratio), s.dedup_ratio);
  setFigure("compression", ratio(s.compression_ratio), s.compression_ratio);
  setFigure("files", String(s.fs_files ?? "–"), s.fs_files);
  $("dirs").textContent = (s.fs_dirs ?? 0) + " directories";
  setFigure("chunks", String(s.chunks), s.chunks);
  $("containers").textContent = s.containers + " containers";
  const pts = o.trend;
  linePlot($("plot-capacity"), [
    { name: "logical", color: "#3b6ea5", values: pts.map((p) => [p.t, p.logical]) },
    { name: "unique", color: "#c98a1b", values: pts.map((p) => [p.t, p.unique]) },
    { name: "stored", color: "#2f8f4e", values: pts.map((p) => [p.t, p.stored]) },
  ], human);
  linePlot($("plot-ratios"), [
    { name: "dedup", color: "#8e44ad", values: pts.filter((p) => p.unique).map((p) => [p.t, p.logical / p.unique]) },
    { name: "compression", color: "#16a085", values: pts.filter((p) => p.stored).map((p) => [p.t, p.unique / p.stored]) },
  ], (v) => v.toFixed(1) + "×");
  fillTable("branches", o.branches.map((b) => [
    b.name,
    el("span", { class: b.degraded ? "bad" : "ok" }, b.degraded ? "degraded" : (b.retired ? "retiring" : "healthy")),
    b.delay_ms == null ? "–" : b.delay_ms.toFixed(2) + " ms",
    String(b.shards), human(b.bytes), String(b.reads), String(b.faults),
  ]));
  policyBar($("plot-policies"), o.policies);
  fillTable("policies", o.policies.map((p) => [p.policy, String(p.containers), human(p.bytes)]));
  const h = s.held;
  setFigure("space-live", human(h.live_bytes), h.live_bytes);
  setFigure("space-versions", human(h.versions_only_bytes), h.versions_only_bytes);
  setFigure("space-snapshots", human(h.snapshots_only_bytes), h.snapshots_only_bytes);
  setFigure("space-both", human(h.snapshots_and_versions_bytes), h.snapshots_and_versions_bytes);
  setFigure("space-streams", human(h.stored_streams_bytes), h.stored_streams_bytes);
  setFigure("space-other", human(h.other_bytes), h.other_bytes);
  if (o.available_bytes == null) setFigure("space-available", "–");
  else setFigure("space-available", human(o.available_bytes), o.available_bytes);
  // The oldest version is the last to let go of what it holds.
  const ages = o.versions.filter((v) => v.kept_until != null).map((v) => v.kept_until);
  $("space-versions-until").textContent = o.versions.length === 0 ? "" :
    o.versions.length + " versions; " + (ages.length ? "the oldest kept until " + when(Math.min(...ages)) : "all among the newest");
  $("roots").textContent = s.versions + " versions, " + s.snapshots + " snapshots, " + human(s.held.versions_only_bytes) + " held only by versions, " + human(s.held.snapshots_only_bytes) + " only by snapshots";
  fillTable("snapshots", o.snapshots.map((x) => [x.name, when(x.created), String(x.files), human(x.logical_bytes)]));
  fillTable("jobs", o.jobs.map((j) => [String(j.id), j.kind, stateCell(j), progressCell(j), when(j.started), jobResult(j)]));
  document.body.dataset.loaded = "1";
}

async function refresh() {
  try {
    const r = await fetch("/-/api/overview", { headers: headers() });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    render(body);
    showError("");
  } catch (e) {
    showError("cannot load the figures: " + e.message);
  }
}

async function startJob(kind) {
  const name = $("snapshot-name").value.trim();
  const r = await fetch("/-/api/jobs", {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers() },
    body: JSON.stringify(kind === "snapshot" && name ? { kind, name } : { kind }),
  });
  const body = await r.json();
  showError(r.ok ? "" : body.error);
  refresh();
}

$("key-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const id = $("key-id").value.trim(), secret = $("key-secret").value;
  if (id && secret) sessionStorage.setItem(KEY, id + ":" + secret); else sessionStorage.removeItem(KEY);
  $("key-secret").value = "";
  refresh();
});
for (const b of document.querySelectorAll("[data-kind]")) b.addEventListener("click", () => startJob(b.dataset.kind));
refresh();
setInterval(refresh, 2000);
