// The operators' page of spark-adaptive: polls the REST API of the driver and shows the
// queries, the selected query's bounds form, autoscaler, live chart and rescale history.
// Plain script, no framework and no network beyond this server. The server sends
// Content-Security-Policy: default-src 'self', so nothing here may set inline styles or
// build code from strings; colours and layout live in style.css (classes only).
"use strict";

const POLL_MS = 2000;
const WINDOW_S = 600;                      // the chart shows up to the last 10 minutes
const TOKEN_KEY = "spark-adaptive-token";  // sessionStorage only: gone with the tab
const SVG_NS = "http://www.w3.org/2000/svg";

const $ = (sel) => document.querySelector(sel);

let queries = [];        // last GET /queries
let selected = null;     // id of the selected query
let lastSamples = null;  // last GET .../samples of the selected query, redrawn on resize
let edited = false;      // the user has typed in the bounds form: do not overwrite it

// ---------------------------------------------------------------------------------------
// Requests and the token

// An error of the API or of the network, shown as it is in the #status line
class ApiError extends Error {}

function storedToken() {
  try { return sessionStorage.getItem(TOKEN_KEY); } catch (e) { return null; }
}

// Resolved when the user submits a token; every request that got 401 waits on it, then
// retries. So polling pauses (instead of piling up 401s) until a token is given.
let tokenGiven = null;
let giveToken = null;

function waitForToken(message) {
  const form = $("#token-form");
  const wasHidden = form.hidden;
  form.hidden = false;
  showMessages($("#token-message"), message ? [message] : [], "error");
  if (wasHidden) $("#token").focus();
  if (!tokenGiven) tokenGiven = new Promise((resolve) => { giveToken = resolve; });
  return tokenGiven;
}

$("#token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  try { sessionStorage.setItem(TOKEN_KEY, $("#token").value); } catch (e) { /* no storage */ }
  $("#token").value = "";
  const resolve = giveToken;
  tokenGiven = giveToken = null;
  if (resolve) resolve();
});

// One API request. Returns {status, data} for any answer but 401 (data: the parsed JSON,
// or null). A 401 shows the token form and the request is retried once a token is given;
// if the request carried a token, the API's own message is shown in #token-message.
async function api(method, path, body) {
  for (;;) {
    const headers = { "Accept": "application/json" };
    const token = storedToken();
    if (token) headers["Authorization"] = "Bearer " + token;
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {  // fetch() rejects only when no answer came at all
      throw new ApiError("Cannot reach the API (" + e.message + ")");
    }
    let data = null;
    try { data = await res.json(); } catch (e) { /* empty or not JSON */ }
    if (res.status !== 401) {
      if (!tokenGiven) $("#token-form").hidden = true;
      return { status: res.status, data };
    }
    await waitForToken(token ? errorsOf(data, res).join(" ") : "");
  }
}

// The `errors` array of an error answer, or a line made of the status.
function errorsOf(data, res) {
  if (data && Array.isArray(data.errors) && data.errors.length) return data.errors.map(String);
  return ["HTTP " + res.status + (res.statusText ? " " + res.statusText : "")];
}

// GET that must succeed: throws an Error whose message is one line for #status.
async function getJson(path) {
  const r = await api("GET", path);
  if (r.status >= 200 && r.status < 300) return r.data;
  throw new ApiError("GET " + path + ": " + r.status + " " + errorsOf(r.data, r).join(" "));
}

function queryPath(id) { return "/queries/" + encodeURIComponent(id); }

// ---------------------------------------------------------------------------------------
// Small DOM and formatting helpers (textContent only: names and reasons are not HTML)

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function showMessages(box, lines, cls) {
  box.replaceChildren(...lines.map((line) => el("div", line, cls)));
}

const pad = (n) => String(n).padStart(2, "0");
function clock(epochS, seconds = true) {
  const d = new Date(epochS * 1000);
  return pad(d.getHours()) + ":" + pad(d.getMinutes()) + (seconds ? ":" + pad(d.getSeconds()) : "");
}

const plural = (n, word) => n + " " + word + (n === 1 ? "" : "s");
const isNum = (v) => typeof v === "number" && Number.isFinite(v);
const dash = (v) => (v === null || v === undefined ? "–" : v);

// 1234 -> "1.2k", 2500000 -> "2.5M": short enough for axis ticks and the panel
function compact(v) {
  if (!isNum(v)) return "–";
  const a = Math.abs(v);
  const trim = (x) => String(Number(x.toFixed(1)));
  if (a >= 1e9) return trim(v / 1e9) + "G";
  if (a >= 1e6) return trim(v / 1e6) + "M";
  if (a >= 1e4) return trim(v / 1e3) + "k";
  return a >= 100 || Number.isInteger(v) ? String(Math.round(v)) : trim(v);
}

function setStatus(text) {
  $("#status").textContent = text;
  if (!text) $("#updated").textContent = "Updated " + clock(Date.now() / 1000);
}

// ---------------------------------------------------------------------------------------
// Queries table

function bounds(q) {
  const p = (q.requirements && q.requirements.parallelism) || {};
  return [p.lowerBound, p.upperBound];
}

// What the page shows first: a live query (the first listed), else the newest finished one
function defaultQuery() {
  const live = queries.find((q) => q.state !== "Finished");
  const q = live || queries[queries.length - 1];
  return q ? q.id : null;
}

function renderQueries() {
  const tbody = $("#queries tbody");
  const old = new Map([...tbody.rows].map((tr) => [tr.dataset.query, tr]));
  if (!queries.some((q) => q.id === selected)) select(defaultQuery());
  queries.forEach((q, i) => {
    // Rows are kept (not rebuilt) so that keyboard focus survives the polling
    let tr = old.get(q.id);
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.query = q.id;
      tr.tabIndex = 0;
      for (let c = 0; c < 8; c++) tr.appendChild(el("td", "", c >= 2 ? "num" : ""));
    }
    old.delete(q.id);
    const [lo, up] = bounds(q);
    const c = q.counters || {};
    const cells = [q.name || q.id, q.state, q.parallelism, q.slots, q.executors,
      dash(lo) + "–" + dash(up), dash(c.rescales), dash(c.restarts)];
    cells.forEach((v, j) => { tr.cells[j].textContent = v === null || v === undefined ? "–" : v; });
    tr.cells[0].title = q.name ? q.id : "";
    tr.cells[1].className = "state state-" + String(q.state).replace(/\W/g, "");
    tr.classList.toggle("selected", q.id === selected);
    if (q.id === selected) tr.setAttribute("aria-current", "true");
    else tr.removeAttribute("aria-current");
    if (tbody.rows[i] !== tr) tbody.insertBefore(tr, tbody.rows[i] || null);
  });
  old.forEach((tr) => tr.remove());
  $("#no-queries").hidden = queries.length > 0;
}

function rowOf(target) {
  const tr = target.closest("tr[data-query]");
  return tr && $("#queries tbody").contains(tr) ? tr : null;
}
$("#queries").addEventListener("click", (ev) => {
  const tr = rowOf(ev.target);
  if (tr) select(tr.dataset.query, true);
});
$("#queries").addEventListener("keydown", (ev) => {
  const tr = rowOf(ev.target);
  if (tr && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); select(tr.dataset.query, true); }
});

function select(id, byUser) {
  if (id === selected) return;
  selected = id;
  edited = false;
  lastSamples = null;
  $("#detail").hidden = id === null;
  $("#form-message").replaceChildren();
  $("#history tbody").replaceChildren();
  $("#autoscaler").replaceChildren(el("h3", "Autoscaler"), el("p", "Loading…", "muted"));
  drawChart(null);
  if (byUser) { renderQueries(); renderHeader(); refreshNow(); }
}

// ---------------------------------------------------------------------------------------
// Selected query: heading, bounds form, history, autoscaler

function renderHeader() {
  const q = queries.find((x) => x.id === selected);
  if (!q) return;
  $("#detail-title").textContent = q.name ? q.name + " (" + q.id + ")" : "Query " + q.id;
  const err = q.error ? (q.errorClass ? q.errorClass + ": " : "") + q.error : "";
  $("#query-error").textContent = err;
  $("#query-error").hidden = !err;
  // Prefill the bounds, but never under the user's fingers
  if (!edited) {
    const [lo, up] = bounds(q);
    $("#lower").value = isNum(lo) ? lo : "";
    $("#upper").value = isNum(up) ? up : "";
  }
}

for (const id of ["#lower", "#upper"]) $(id).addEventListener("input", () => { edited = true; });

// A field as typed: a JSON number when it reads as one, else the text itself, so that the
// API (not this page) says what is wrong with it.
function typed(input) {
  const text = input.value.trim();
  const n = Number(text);
  return text !== "" && Number.isFinite(n) ? n : text;
}

$("#bounds-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const id = selected;
  if (id === null) return;
  const box = $("#form-message");
  const button = $("#apply");
  const body = { parallelism: { lowerBound: typed($("#lower")), upperBound: typed($("#upper")) } };
  button.disabled = true;
  showMessages(box, ["Sending…"], "muted");
  try {
    const r = await api("PUT", queryPath(id) + "/resource-requirements", body);
    if (id !== selected) return;
    if (r.status >= 200 && r.status < 300) {
      showMessages(box, ["Accepted"], "ok");
      edited = false;  // the next poll shows the bounds the driver now holds
      refreshNow();
    } else {
      showMessages(box, errorsOf(r.data, r), "error");
    }
  } catch (e) {
    showMessages(box, [e.message], "error");
  } finally {
    button.disabled = false;
  }
});

function renderHistory(h) {
  const tbody = $("#history tbody");
  const recs = (h && Array.isArray(h.rescales) ? h.rescales : []).slice().reverse();
  tbody.replaceChildren(...recs.map((r) => {
    const tr = document.createElement("tr");
    const cells = [
      [isNum(r.time) ? clock(r.time) : "–"], [r.trigger], [r.kind],
      [dash(r.fromParallelism) + "→" + dash(r.toParallelism), "num"],
      [dash(r.fromSlots) + "→" + dash(r.toSlots), "num"],
      [isNum(r.duration) ? r.duration.toFixed(1) : r.outcome === "pending" ? "…" : "–", "num"],
      [r.outcome, "outcome-" + String(r.outcome).replace(/\W/g, "")], [r.reason, "reason"]];
    for (const [text, cls] of cells) tr.appendChild(el("td", dash(text), cls));
    return tr;
  }));
  $("#no-history").hidden = recs.length > 0;
}

function renderAutoscaler(r) {
  const box = $("#autoscaler");
  const rows = [];
  const add = (label, value) => rows.push(el("dt", label), el("dd", value));
  if (r.status === 404) {
    box.replaceChildren(el("h3", "Autoscaler"), el("p", "Autoscaler off", "muted"));
    return;
  }
  const a = r.data || {};
  const d = a.lastDecision;
  const rec = a.recommendation;
  const rate = (v) => (isNum(v) ? compact(v) + " rows/s" : "–");
  add("Mode", a.scalingEnabled ? "scaling" : "recommending only");
  add("Last decision", d ? d.outcome + (d.reason ? ": " + d.reason : "") : "none yet");
  add("Target rate", rate(a.targetRate));
  add("True rate per slot", rate(a.trueRatePerSlot));
  add("Utilization", isNum(a.utilization) ? Math.round(a.utilization * 100) + " %" : "–");
  add("Recommendation", rec ? plural(rec.slots, "slot") + " / " + plural(rec.partitions, "partition") + " / " +
    rec.kind + (rec.applied || !["scale-up", "scale-down"].includes(rec.outcome) ? "" : " (not applied)") : "–");
  add("Next evaluation", isNum(a.nextEvaluation) ? "in " + a.nextEvaluation.toFixed(0) + " s" : "–");
  add("Waiting for resources", a.waitingForResources ? "yes" : "no");
  const f = a.forecast;  // null with forecast.enabled=false
  if (f) {
    add("Forecast", rate(f.rate) + " within " + Math.round(f.horizon) + " s, " +
      (f.inUse ? "in use" : "not in use") +
      (isNum(f.confidence) ? ", confidence " + Math.round(f.confidence * 100) + " %" : "") +
      "; " + plural(f.aheadScaleUps, "scale-up") + " ahead (" + f.reason + ")");
  }
  const dl = el("dl");
  dl.append(...rows);
  box.replaceChildren(el("h3", "Autoscaler"), dl);
}

// ---------------------------------------------------------------------------------------
// Chart: two panels sharing the time axis, drawn by hand in SVG.
// (a) parallelism, slots, executors as step lines; (b) input and processed rate (rows/s,
// left axis) and backlog (rows, right axis). Nulls and holes in time break the lines; a
// point with no neighbour is drawn as a dot.

const PANEL_A = [
  { key: "parallelism", label: "Parallelism", cls: "s-par", step: true },
  { key: "slots", label: "Slots", cls: "s-slots", step: true },
  { key: "executors", label: "Executors", cls: "s-exec", step: true },
];
const PANEL_B = [
  { key: "inputRate", label: "Input rate", cls: "s-in" },
  // The autoscaler's forecast of the query's recurring load (forecast.enabled): the highest
  // rate it expects within its horizon; in the legend only when there is one
  { key: "forecastRate", label: "Forecast", cls: "s-fc", optional: true },
  { key: "processedRate", label: "Processed rate", cls: "s-proc" },
  { key: "backlog", label: "Backlog (right axis)", cls: "s-backlog", right: true,
    none: "Backlog (not reported)" },
];

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

// Ticks for [0, max]: about `count` steps of 1, 2 or 5 times a power of ten
function ticks(max, count, integer) {
  if (!(max > 0)) max = 1;
  let step = Math.pow(10, Math.floor(Math.log10(max / count)));
  for (const m of [1, 2, 5, 10]) if (max / (step * m) <= count) { step *= m; break; }
  if (integer) step = Math.max(1, Math.round(step));
  const top = Math.ceil(max / step) * step;
  const out = [];
  for (let v = 0; v <= top + step / 2; v += step) out.push(v);
  return out;
}

function drawChart(data) {
  const chart = $("#chart");
  const W = Math.max(360, Math.round(chart.clientWidth || 800));
  const H = Math.max(300, Math.round(chart.clientHeight || 440));
  chart.setAttribute("viewBox", "0 0 " + W + " " + H);
  chart.replaceChildren();
  const samples = data && Array.isArray(data.samples) ? data.samples : [];
  const interval = data && isNum(data.interval) ? data.interval : 2;
  const L = 56, R = W - 64;                      // plot area between the two y axes
  // Room: 34 px above each panel for its title and legend, 40 px below for the time axis
  const room = H - 34 - 46 - 40;
  const panels = [{ top: 34, h: room * 0.45 }];
  panels.push({ top: panels[0].top + panels[0].h + 46, h: room * 0.55 });
  const bottom = panels[1].top + panels[1].h;

  const t1 = samples.length ? samples[samples.length - 1].time : Date.now() / 1000;
  // The last 10 minutes, or less while the samples span less (at least one minute), so that
  // a query that just started fills the chart instead of its right edge.
  const first = samples.length ? samples[0].time : t1;
  const span = Math.min(WINDOW_S, Math.max(60, t1 - first));
  const t0 = t1 - span;
  const x = (t) => L + ((t - t0) / span) * (R - L);
  const shown = samples.filter((s) => isNum(s.time) && s.time >= t0);

  // Time grid and labels: the smallest step that leaves each label 50 px or more
  const stepT = [10, 15, 30, 60, 120, 300].find((st) => (R - L) / (span / st) >= 50) || 600;
  const seconds = stepT < 60;
  for (let t = Math.ceil(t0 / stepT) * stepT; t <= t1; t += stepT) {
    chart.append(svg("line", { x1: x(t), x2: x(t), y1: panels[0].top, y2: bottom, class: "grid" }));
    chart.append(svg("text", { x: x(t), y: bottom + 16, class: "tick", "text-anchor": "middle" }, clock(t, seconds)));
  }
  chart.append(svg("text", { x: (L + R) / 2, y: bottom + 34, class: "axis-title", "text-anchor": "middle" },
    seconds ? "local time (HH:MM:SS)" : "local time (HH:MM)"));

  drawPanel(chart, panels[0], PANEL_A, shown, { L, R, x, interval, left: "count", integer: true },
    "Parallelism, slots, executors");
  drawPanel(chart, panels[1], PANEL_B, shown, { L, R, x, interval, left: "rows/s", right: "rows" },
    "Rates and backlog");

  if (!shown.length) {
    chart.append(svg("text", { x: (L + R) / 2, y: panels[0].top + panels[0].h / 2, class: "empty",
      "text-anchor": "middle" }, data ? "No samples yet" : "Loading…"));
  }
}

function drawPanel(chart, p, series, samples, o, title) {
  const bottom = p.top + p.h;
  const maxOf = (list) => Math.max(0, ...list.flatMap((s) =>
    samples.map((d) => d[s.key]).filter(isNum)));
  // 5 % headroom so that a line at its maximum does not run on the frame
  const leftTicks = ticks(maxOf(series.filter((s) => !s.right)) * 1.05, 4, o.integer);
  const rightSeries = series.filter((s) => s.right);
  // No right axis when nothing is plotted on it (e.g. the source reports no backlog)
  const hasRight = samples.some((d) => rightSeries.some((s) => isNum(d[s.key])));
  const rightTicks = hasRight ? ticks(maxOf(rightSeries) * 1.05, 4, true) : [];
  const scale = (tk) => (v) => bottom - (v / tk[tk.length - 1]) * p.h;
  const yl = scale(leftTicks), yr = scale(rightTicks.length ? rightTicks : [0, 1]);

  // Title and legend on one line above the panel
  const head = svg("text", { x: o.L, y: p.top - 12, class: "panel-title" }, title);
  chart.append(head);
  let lx = o.L + (head.getComputedTextLength() || title.length * 7.5) + 24;
  for (const s of series) {
    if (s.optional && !samples.some((d) => isNum(d[s.key]))) continue;
    chart.append(svg("line", { x1: lx, x2: lx + 22, y1: p.top - 16, y2: p.top - 16, class: "line " + s.cls }));
    const label = s.none && samples.length && !hasRight ? s.none : s.label;
    const text = svg("text", { x: lx + 27, y: p.top - 12, class: "legend" }, label);
    chart.append(text);
    lx += 27 + (text.getComputedTextLength() || label.length * 6.6) + 18;
  }

  // Axes, horizontal grid and the ticks with their units
  for (const v of leftTicks) {
    chart.append(svg("line", { x1: o.L, x2: o.R, y1: yl(v), y2: yl(v), class: "grid" }));
    chart.append(svg("text", { x: o.L - 6, y: yl(v) + 4, class: "tick", "text-anchor": "end" }, compact(v)));
  }
  for (const v of rightTicks) {
    chart.append(svg("text", { x: o.R + 6, y: yr(v) + 4, class: "tick tick-right" }, compact(v)));
  }
  // Units run along the axes (rotated), leaving the line above the panel to the legend
  const unit = (x, angle, text) => chart.append(svg("text", { x, y: p.top + p.h / 2, class: "unit",
    "text-anchor": "middle", transform: "rotate(" + angle + " " + x + " " + (p.top + p.h / 2) + ")" }, text));
  unit(o.L - 42, -90, o.left);
  if (o.right && rightTicks.length) unit(o.R + 50, 90, o.right);
  chart.append(svg("rect", { x: o.L, y: p.top, width: o.R - o.L, height: p.h, class: "frame" }));

  for (const s of series) {
    const y = s.right ? yr : yl;
    for (const run of runs(samples, s.key, o.interval)) {
      if (run.length === 1) {
        chart.append(svg("circle", { cx: o.x(run[0].time), cy: y(run[0][s.key]), r: 3, class: "dot " + s.cls }));
        continue;
      }
      let d = "M" + o.x(run[0].time).toFixed(1) + " " + y(run[0][s.key]).toFixed(1);
      for (const pt of run.slice(1)) {
        const px = o.x(pt.time).toFixed(1), py = y(pt[s.key]).toFixed(1);
        d += s.step ? " H" + px + " V" + py : " L" + px + " " + py;
      }
      chart.append(svg("path", { d, class: "line " + s.cls }));
    }
  }
}

// Consecutive samples with a value for `key`, split at nulls and at holes in time
// (more than 2.5 sampling intervals: the driver was busy or the page missed samples).
function runs(samples, key, interval) {
  const out = [];
  let cur = [];
  let prev = null;
  for (const s of samples) {
    const ok = isNum(s[key]);
    if (!ok || (prev && s.time - prev.time > interval * 2.5)) {
      if (cur.length) out.push(cur);
      cur = [];
    }
    if (ok) cur.push(s);
    prev = s;
  }
  if (cur.length) out.push(cur);
  return out;
}

let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => drawChart(lastSamples), 100);
});

// ---------------------------------------------------------------------------------------
// Polling: one round every 2 s, never two at once; a click asks for one right away.

async function refresh() {
  queries = await getJson("/queries");
  if (!Array.isArray(queries)) queries = [];
  renderQueries();
  const id = selected;
  if (id === null) return;
  renderHeader();
  const base = queryPath(id);
  // Each pane on its own: one failing route does not blank the others
  const [hist, auto, samples] = await Promise.allSettled([
    getJson(base + "/rescales"), api("GET", base + "/autoscaler"), getJson(base + "/samples")]);
  if (id !== selected) return;
  if (hist.status === "fulfilled") renderHistory(hist.value);
  if (samples.status === "fulfilled") { lastSamples = samples.value; drawChart(lastSamples); }
  if (auto.status === "fulfilled") {
    const r = auto.value;
    if (r.status === 404 || (r.status >= 200 && r.status < 300)) renderAutoscaler(r);
    else throw new ApiError("GET " + base + "/autoscaler: " + r.status + " " + errorsOf(r.data, r).join(" "));
  }
  const failed = [hist, auto, samples].find((x) => x.status === "rejected");
  if (failed) throw failed.reason;
}

let wake = () => {};
let again = false;
function refreshNow() { again = true; wake(); }

async function pollForever() {
  for (;;) {
    again = false;
    try {
      await refresh();
      setStatus("");
    } catch (e) {
      if (!(e instanceof ApiError)) console.error(e);  // a bug of this page, not of the API
      setStatus((e instanceof ApiError ? "" : "Page error: ") + e.message +
        " · retrying every " + POLL_MS / 1000 + " s");
    }
    if (!again) await new Promise((resolve) => {
      const t = setTimeout(resolve, POLL_MS);
      wake = () => { clearTimeout(t); resolve(); };
    });
    wake = () => {};
  }
}

drawChart(null);
pollForever();
