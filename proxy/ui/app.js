// Gristmill dashboard: polls the proxy's cluster overview and job list and draws them.
// Plain DOM and <canvas>, no libraries. Every piece of cluster data reaches the page through
// textContent or setAttribute, never as HTML, so names in the cluster cannot inject markup.
"use strict";

const POLL_MS = 2000;
const WINDOW_S = 300; // the charts show the last five minutes
const FINISHED_JOBS_SHOWN = 8;
const TOKEN_KEY = "gristmill.token";
const USER_KEY = "gristmill.user";

const $ = (id) => document.getElementById(id);

// --- small helpers ---------------------------------------------------------------------------

// el("div", {class: "x", "data-node-id": id}, "text", childNode): attributes go through
// setAttribute and string children become text nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined && v !== false) node.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function fmtRate(v) {
  if (v === null || v === undefined) return "—";
  if (v === 0) return "0";
  if (v < 1) return v.toFixed(2);
  return v < 10 ? v.toFixed(1) : Math.round(v).toString();
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? Math.round(n) : n.toFixed(n < 10 ? 1 : 0)) + " " + units[i];
}

function fmtSeconds(s) {
  if (s === null || s === undefined) return "—";
  if (s === 0) return "0";
  if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 1 : 0) + " ms";
  return s.toFixed(2) + " s";
}

function fmtAge(seconds) {
  if (seconds < 60) return Math.round(seconds) + " s ago";
  if (seconds < 3600) return Math.round(seconds / 60) + " min ago";
  return (seconds / 3600).toFixed(1) + " h ago";
}

// A bucket as the wire names it ({name, provider, namespace: {uuid, name}}) → "ais://name".
function fmtBucket(b) {
  if (!b) return "";
  if (typeof b === "string") return b;
  const ns = b.namespace || {};
  const nsPart = ns.uuid || ns.name ? `@${ns.uuid || ""}#${ns.name || ""}/` : "";
  return `${b.provider || "ais"}://${nsPart}${b.name}`;
}

// A bar of used/total; the fill's width is the fraction used. `warn`: a disk-like bar turns
// red above 90% (a job's progress bar does not).
function bar(used, total, warn) {
  const frac = total > 0 ? Math.min(1, Math.max(0, used / total)) : 0;
  const fill = el("div", { class: "bar-fill" + (warn && frac > 0.9 ? " full" : "") });
  fill.style.width = (frac * 100).toFixed(1) + "%";
  return el("div", { class: "bar", title: `${(frac * 100).toFixed(1)}% used` }, fill);
}

// --- API -------------------------------------------------------------------------------------

class Unauthorized extends Error {}

// A JSON error body's message ({"message": ...}), else the status line.
async function errorText(resp) {
  try {
    const body = await resp.json();
    if (body && body.message) return body.message;
  } catch (_) {
    // not JSON: fall through
  }
  return `${resp.status} ${resp.statusText}`;
}

async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const resp = await fetch(path, { headers, cache: "no-store" });
  if (resp.status === 401) throw new Unauthorized(await errorText(resp));
  if (!resp.ok) throw new Error(`${path}: ${await errorText(resp)}`);
  return resp.json();
}

// --- login -----------------------------------------------------------------------------------

function showLogin(message) {
  stopPolling();
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(USER_KEY);
  clearDashboard();
  $("dashboard").hidden = true;
  $("logout").hidden = true;
  $("whoami").textContent = "";
  $("login").hidden = false;
  const err = $("login-error");
  err.textContent = message || "";
  err.hidden = !message;
  $("login-name").focus();
}

async function onLogin(event) {
  event.preventDefault();
  const err = $("login-error");
  err.hidden = true;
  const name = $("login-name").value;
  const password = $("login-password").value;
  let resp;
  try {
    resp = await fetch("/v1/auth/login", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ name, password }),
    });
  } catch (e) {
    showLogin(`cannot reach the proxy: ${e.message}`);
    return;
  }
  if (resp.ok) {
    const body = await resp.json();
    sessionStorage.setItem(TOKEN_KEY, body.token);
    sessionStorage.setItem(USER_KEY, body.user || name);
  } else {
    const message = await errorText(resp);
    // A cluster without auth has no users: carry on without a token.
    if (!(resp.status === 400 && message.includes("auth is off"))) {
      showLogin(resp.status === 401 ? "Wrong name or password." : message);
      return;
    }
  }
  $("login-password").value = "";
  startDashboard();
}

function onLogout() {
  showLogin("");
}

// --- polling ---------------------------------------------------------------------------------

let pollTimer = null;
let pollGeneration = 0; // a login or logout starts a new generation; older polls drop their result

function stopPolling() {
  pollGeneration++;
  clearTimeout(pollTimer);
  pollTimer = null;
}

function startDashboard() {
  stopPolling();
  $("login").hidden = true;
  const user = sessionStorage.getItem(USER_KEY);
  $("whoami").textContent = user ? `as ${user}` : "";
  $("logout").hidden = !sessionStorage.getItem(TOKEN_KEY);
  poll(pollGeneration);
}

// One round: overview and jobs together, then the next round POLL_MS later (not on a fixed
// interval, so a slow proxy never has two rounds in flight).
async function poll(generation) {
  const [overview, jobs] = await Promise.allSettled([
    api("/v1/cluster?what=overview"),
    api("/v1/jobs"),
  ]);
  if (generation !== pollGeneration) return;
  const failed = [overview, jobs].filter((r) => r.status === "rejected").map((r) => r.reason);
  if (failed.some((e) => e instanceof Unauthorized)) {
    // No token, or an expired or revoked one. Without a token this is also how we learn
    // that the cluster has auth on.
    showLogin(sessionStorage.getItem(TOKEN_KEY) ? "Session expired: log in again." : "");
    return;
  }
  // Shown only now: until the first answer we do not know whether a login is needed.
  $("dashboard").hidden = false;
  if (overview.status === "fulfilled") renderOverview(overview.value);
  if (jobs.status === "fulfilled") renderJobs(jobs.value);
  const error = $("error");
  error.textContent = failed.map((e) => e.message).join("; ");
  error.hidden = failed.length === 0;
  $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
  pollTimer = setTimeout(() => poll(generation), POLL_MS);
}

function clearDashboard() {
  for (const id of ["nodes", "capacity"]) $(id).replaceChildren();
  for (const id of ["jobs", "buckets"]) $(id).tBodies[0].replaceChildren();
  $("summary").textContent = "";
  $("buckets-note").textContent = "";
  $("status").textContent = "";
  samples.length = 0;
  drawCharts();
}

// --- overview: nodes, capacity, buckets, chart samples ----------------------------------------

function renderOverview(o) {
  const nodes = [...(o.nodes || [])].sort((a, b) => {
    // proxies first, the primary first among them; then by id
    const rank = (n) => (n.role === "proxy" ? (n.id === o.primary ? 0 : 1) : 2);
    return rank(a) - rank(b) || a.id.localeCompare(b.id);
  });
  const targets = nodes.filter((n) => n.role === "target");
  const count = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  const proxies = count(nodes.length - targets.length, "proxy", "proxies");
  $("summary").textContent = `map v${o.smap_version} · ${proxies}, ${count(targets.length, "target", "targets")}`;
  $("nodes").replaceChildren(...nodes.map((n) => nodeCard(n, n.id === o.primary)));
  $("capacity").replaceChildren(...targets.map(capacityRow));
  fillTable($("buckets"), (o.buckets || []).map(bucketRow));
  // Bucket sizes are sums over the targets that answered.
  const silent = targets.filter((t) => !t.up).length;
  $("buckets-note").textContent = silent ? `partial: ${count(silent, "target", "targets")} not answering` : "";
  addSample(targets);
}

function nodeCard(n, isPrimary) {
  const flags = n.flags || [];
  const state = !n.up ? "down" : flags.length ? flags.join(" ") : "up";
  const badges = el("div", { class: "badges" },
    el("span", { class: "badge role" }, n.role),
    isPrimary ? el("span", { class: "badge primary", "data-testid": "primary" }, "primary") : null,
    el("span", { class: `badge ${n.up ? "up" : "down"}`, "data-testid": "node-up" }, n.up ? "up" : "down"),
    ...flags.map((f) => el("span", { class: "badge flag" }, f)));
  const p = n.perf;
  // data-metric names the perf field, so a test can find a number without knowing the layout.
  const metric = (field, label, value) => el("div", { class: "metric" },
    el("span", {}, label), el("b", { "data-metric": field }, value));
  const metrics = p
    ? el("div", { class: "metrics" },
      metric("get_ops", "GET/s", fmtRate(p.get_ops)),
      metric("put_ops", "PUT/s", fmtRate(p.put_ops)),
      metric("out_bytes_per_s", "out", fmtBytes(p.out_bytes_per_s) + "/s"),
      metric("in_bytes_per_s", "in", fmtBytes(p.in_bytes_per_s) + "/s"),
      metric("get_p50_s", "GET p50", fmtSeconds(p.get_p50_s)),
      metric("get_p99_s", "GET p99", fmtSeconds(p.get_p99_s)),
      metric("running_jobs", "jobs", String(p.running_jobs ?? 0)),
      n.role === "target"
        ? metric("disk_util", "disk", p.disk_util == null ? "—" : `${Math.round(p.disk_util * 100)}%`)
        : null)
    : el("div", { class: "metrics muted" }, n.up ? "rates after the next poll" : "");
  return el("article", {
    class: `node ${n.role}${n.up ? "" : " is-down"}`,
    "data-testid": "node",
    "data-node-id": n.id,
    "data-role": n.role,
    "data-state": state,
  },
  el("h3", {}, n.id),
  badges,
  el("div", { class: "url" }, n.url || ""),
  n.error ? el("div", { class: "error" }, n.error) : null,
  metrics);
}

function capacityRow(t) {
  const mps = t.mountpaths || [];
  // Mountpaths on one file system each report all of it: count each file system (`fs`) once.
  const perFs = new Map(mps.map((m) => [m.fs || m.path, m]));
  const total = [...perFs.values()].reduce((s, m) => s + m.total, 0);
  const used = [...perFs.values()].reduce((s, m) => s + m.used, 0);
  const line = (label, u, tot, attrs) => el("div", { class: "cap-line", ...attrs },
    el("span", { class: "cap-label", title: label }, tail(label, 26)),
    bar(u, tot, true),
    el("span", { class: "cap-value" }, `${fmtBytes(u)} / ${fmtBytes(tot)}`));
  if (mps.length === 0) {
    return el("div", { class: "cap-target", "data-testid": "capacity-target", "data-node-id": t.id },
      el("div", { class: "cap-line cap-total" }, el("span", { class: "cap-label" }, t.id),
        el("span", { class: "cap-note muted" }, t.up ? "no mountpaths" : "not reporting")));
  }
  return el("div", { class: "cap-target", "data-testid": "capacity-target", "data-node-id": t.id },
    line(t.id, used, total, { class: "cap-line cap-total" }),
    ...mps.map((m) => line(m.path, m.used, m.total, { "data-testid": "mountpath", "data-path": m.path })));
}

// The end of a long path is the part that tells mountpaths apart; the whole is in the tooltip.
function tail(path, max) {
  return path.length > max ? "…" + path.slice(-(max - 1)) : path;
}

// A table body's rows, or one "none" row so an empty table does not look broken.
function fillTable(table, rows) {
  const columns = table.tHead.rows[0].cells.length;
  const none = el("tr", {}, el("td", { class: "none", colspan: columns }, "none"));
  table.tBodies[0].replaceChildren(...(rows.length ? rows : [none]));
}

function bucketRow(b) {
  return el("tr", { "data-testid": "bucket", "data-bucket": b.bucket },
    el("td", {}, b.bucket),
    el("td", { class: "num" }, String(b.objects)),
    el("td", { class: "num" }, fmtBytes(b.bytes)));
}

// --- jobs ------------------------------------------------------------------------------------

function renderJobs(list) {
  // The list comes newest first: every running job, then the latest few that ended.
  const running = list.filter((j) => j.state === "running");
  const ended = list.filter((j) => j.state !== "running").slice(0, FINISHED_JOBS_SHOWN);
  fillTable($("jobs"), [...running, ...ended].map(jobRow));
}

function jobRow(j) {
  const progress = j.total_objects > 0
    ? el("div", { class: "progress" }, bar(j.objects, j.total_objects), `${j.objects} / ${j.total_objects}`)
    : el("div", { class: "progress" }, `${j.objects} objects`);
  // Node-wide jobs (rebalance, LRU, scrub of everything) name no bucket.
  const bucket = !j.bck ? "—" : j.to_bck ? `${fmtBucket(j.bck)} → ${fmtBucket(j.to_bck)}` : fmtBucket(j.bck);
  const started = j.start_ns ? fmtAge(Math.max(0, Date.now() / 1000 - j.start_ns / 1e9)) : "";
  return el("tr", {
    class: `job ${j.state}`,
    "data-testid": "job",
    "data-job-id": j.id,
    "data-kind": j.kind,
    "data-state": j.state,
  },
  el("td", {}, j.id),
  el("td", {}, j.kind),
  el("td", {}, bucket),
  el("td", {}, el("span", { class: `badge state-${j.state}` }, j.state)),
  el("td", {}, progress),
  el("td", { class: "num" }, fmtBytes(j.bytes)),
  el("td", { class: "num" }, String(j.errors || 0)),
  el("td", {}, started));
}

// --- charts ----------------------------------------------------------------------------------

// Samples for the charts: {t (seconds), values by chart}. The proxy computes the rates from its
// own scrapes; we only sum over targets (every object GET or PUT lands on a target; a proxy only
// redirects or relays it, so adding proxies would count it twice).
const samples = [];

// A chart's first series is the one its canvas reports in data-last.
const CHARTS = [
  { id: "chart-ops", series: ["GET", "PUT"], fmt: fmtRate, unit: "/s" },
  { id: "chart-throughput", series: ["out", "in"], fmt: (v) => fmtBytes(v) + "/s", unit: "", axisUnit: 1024 },
  { id: "chart-latency", series: ["p99", "p50"], fmt: fmtSeconds, unit: "" },
];
const COLORS = ["#2166ac", "#d6604d"];

function addSample(targets) {
  const perfs = targets.map((t) => t.perf).filter((p) => p);
  if (perfs.length === 0) return; // the proxy's first scrape has no rates yet
  const sum = (f) => perfs.reduce((s, p) => s + (p[f] || 0), 0);
  // The slowest target's percentile: a cluster-wide p99 cannot be rebuilt from per-node ones.
  const max = (f) => {
    const vs = perfs.map((p) => p[f]).filter((v) => v !== null && v !== undefined);
    return vs.length ? Math.max(...vs) : null;
  };
  const now = Date.now() / 1000;
  samples.push({
    t: now,
    "chart-ops": [sum("get_ops"), sum("put_ops")],
    "chart-throughput": [sum("out_bytes_per_s"), sum("in_bytes_per_s")],
    "chart-latency": [max("get_p99_s"), max("get_p50_s")],
  });
  while (samples.length && samples[0].t < now - WINDOW_S) samples.shift();
  drawCharts();
}

function drawCharts() {
  for (const c of CHARTS) {
    const canvas = $(c.id);
    const points = samples.map((s) => ({ t: s.t, v: s[c.id] }));
    const last = points.length ? points[points.length - 1].v : null;
    // What a test (or a curious operator) can read without decoding pixels.
    canvas.dataset.points = String(points.length);
    canvas.dataset.last = last && last[0] !== null ? String(last[0]) : "";
    // The readout doubles as the legend: each series in its line's colour.
    $(`${c.id}-readout`).replaceChildren(...(last
      ? c.series.map((name, i) => el("span", { style: `color: ${COLORS[i]}` }, `${name} ${c.fmt(last[i])}${c.unit}`))
      : []));
    drawChart(canvas, points, c.fmt, c.axisUnit);
  }
}

// The y axis: a 1-2-5 top above the largest value, cut into steps that stay round
// (1 → 5 × 0.2, 2 → 4 × 0.5, 5 → 5 × 1). Byte rates are rounded in KiB, MiB, ... (unit 1024)
// so that their labels come out round too.
function yAxis(v, unit) {
  if (!(v > 0)) return { top: 1, steps: 5 };
  const scale = unit > 1 ? Math.pow(unit, Math.max(0, Math.floor(Math.log(v) / Math.log(unit)))) : 1;
  const p = Math.pow(10, Math.floor(Math.log10(v / scale)));
  const m = [1, 2, 5, 10].find((m) => v / scale <= m * p) || 10;
  return { top: m * p * scale, steps: m === 2 ? 4 : 5 };
}

function drawChart(canvas, points, fmt, axisUnit) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth;
  const h = canvas.clientHeight;
  if (w === 0 || h === 0) return; // hidden
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(h * dpr);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);

  const pad = { left: 70, right: 8, top: 8, bottom: 18 };
  const plotW = w - pad.left - pad.right;
  const plotH = h - pad.top - pad.bottom;
  const values = points.flatMap((p) => p.v).filter((v) => v !== null);
  const { top, steps } = yAxis(Math.max(0, ...values), axisUnit);
  const now = Date.now() / 1000;
  const x = (t) => pad.left + ((t - (now - WINDOW_S)) / WINDOW_S) * plotW;
  const y = (v) => pad.top + plotH - (v / top) * plotH;

  // grid and labels
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#666";
  ctx.strokeStyle = "#e3e3e3";
  ctx.lineWidth = 1;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  for (let i = 0; i <= steps; i++) {
    const v = (top * i) / steps;
    const yy = Math.round(y(v)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(pad.left, yy);
    ctx.lineTo(pad.left + plotW, yy);
    ctx.stroke();
    ctx.fillText(fmt(v), pad.left - 6, yy);
  }
  ctx.textBaseline = "bottom";
  ctx.fillText("now", pad.left + plotW, h);
  ctx.textAlign = "left";
  ctx.fillText(`-${WINDOW_S / 60} min`, pad.left, h);

  // one line per series; a null (no GETs, so no latency) breaks the line
  const nSeries = points.length ? points[0].v.length : 0;
  ctx.lineWidth = 2;
  ctx.lineJoin = "round";
  for (let s = nSeries - 1; s >= 0; s--) {
    ctx.strokeStyle = COLORS[s % COLORS.length];
    ctx.fillStyle = ctx.strokeStyle;
    ctx.beginPath();
    let drawing = false;
    for (const p of points) {
      const v = p.v[s];
      if (v === null) {
        drawing = false;
        continue;
      }
      if (drawing) ctx.lineTo(x(p.t), y(v));
      else ctx.moveTo(x(p.t), y(v));
      drawing = true;
    }
    ctx.stroke();
    // a dot on the newest value, so a single sample is visible too
    const lastP = points[points.length - 1];
    if (lastP && lastP.v[s] !== null) {
      ctx.beginPath();
      ctx.arc(x(lastP.t), y(lastP.v[s]), 2.5, 0, 2 * Math.PI);
      ctx.fill();
    }
  }
}

// --- start -----------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", onLogin);
  $("logout").addEventListener("click", onLogout);
  window.addEventListener("resize", drawCharts);
  // Poll at once: with a token, or on a cluster without auth, that is the dashboard; otherwise
  // the 401 brings up the login form.
  startDashboard();
});
