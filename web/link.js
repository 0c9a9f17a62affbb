// The stats page of one link: its code is the last part of the address
// (/stats/CODE). It reads the link (/api/links/CODE) and its points
// (/api/links/CODE/stats) and draws them as bars in an SVG: people's
// clicks in blue, bots' in grey on top. No library: an SVG is a few rects.
"use strict";
const code = decodeURIComponent(location.pathname.split("/").pop());
const svgNS = "http://www.w3.org/2000/svg";
let by = "hour";

document.getElementById("code").textContent = code;
document.title = "Stats of " + code;

function showError(text) {
  const error = document.getElementById("error");
  error.textContent = text;
  error.hidden = false;
}

// getJSON fetches path and returns its JSON, or throws an Error that says
// why not, in words for a person (the server's own, when it sent one).
async function getJSON(path) {
  const resp = await fetch(path, { headers: { Accept: "application/json" } });
  let body = null;
  try {
    body = await resp.json();
  } catch {
    // not JSON: reported by the status below
  }
  if (!resp.ok) {
    let why = body && typeof body.error === "string" ? body.error : "the server answered " + resp.status;
    const wait = resp.headers.get("Retry-After");
    if (wait) why += " (try again in " + wait + " s)";
    throw new Error(why);
  }
  if (body === null || typeof body !== "object") throw new Error("the server's answer is not JSON");
  return body;
}

function fillTable(id, counts) {
  const tbody = document.getElementById(id);
  tbody.replaceChildren();
  const rows = Object.entries(counts).sort((a, b) => b[1] - a[1]);
  if (rows.length === 0) rows.push(["none yet", ""]);
  for (const [name, n] of rows) {
    const tr = tbody.insertRow();
    tr.insertCell().textContent = name;
    tr.insertCell().textContent = String(n);
  }
}

function label(time) {
  const d = new Date(time);
  return by === "hour"
    ? d.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" })
    : d.toLocaleDateString([], { month: "short", day: "numeric" });
}

// The referrer and client breakdowns, and unique visitors, are kept per
// day only (docs/17): the tables always sum the last 30 days.
function fillTables(days) {
  // Maps without a prototype: a referrer host may be "constructor" or
  // "__proto__", which a plain {} would take for its own.
  const referrers = Object.create(null), agents = Object.create(null);
  for (const p of days) {
    for (const [k, v] of Object.entries(p.referrers || {})) referrers[k] = (referrers[k] || 0) + v;
    for (const [k, v] of Object.entries(p.agents || {})) agents[k] = (agents[k] || 0) + v;
  }
  fillTable("referrers", referrers);
  fillTable("agents", agents);
}

function draw(points) {
  const svg = document.getElementById("chart");
  svg.replaceChildren();
  const width = 600, height = 200;
  const max = Math.max(1, ...points.map((p) => p.clicks + p.bots));
  const step = width / Math.max(1, points.length);
  let clicks = 0, bots = 0;
  points.forEach((p, i) => {
    clicks += p.clicks;
    bots += p.bots;
    const bar = (cls, value, below) => {
      if (value === 0) return;
      const r = document.createElementNS(svgNS, "rect");
      const h = (value / max) * (height - 10);
      r.setAttribute("class", cls);
      r.setAttribute("x", String(i * step + step * 0.1));
      r.setAttribute("width", String(step * 0.8));
      r.setAttribute("y", String(height - below - h));
      r.setAttribute("height", String(h));
      const title = document.createElementNS(svgNS, "title");
      title.textContent = label(p.time) + ": " + p.clicks + " clicks, " + p.bots + " by bots" +
        (p.uniques === null ? "" : ", about " + p.uniques + " people");
      r.append(title);
      svg.append(r);
    };
    bar("people", p.clicks, 0);
    bar("bots", p.bots, (p.clicks / max) * (height - 10));
  });
  const first = points.length ? label(points[0].time) : "";
  document.getElementById("caption").textContent =
    clicks + " clicks by people and " + bots + " by bots, " + (by === "hour" ? "per hour" : "per day") +
    (first ? " from " + first : "") + " (blue: people, grey: bots; the counts are written every few seconds).";
}

// load reads the link and its stats, all three at once, and changes the
// page only when all have come, and only if no later load has begun (a
// person pressing the buttons quickly). document.body.dataset.loads
// counts the loads finished, for whoever waits on the page (a test).
let loads = 0, finished = 0;
async function load() {
  const mine = ++loads;
  const base = "/api/links/" + encodeURIComponent(code);
  try {
    const [link, days, hours] = await Promise.all([
      getJSON(base),
      getJSON(base + "/stats?by=day"),
      by === "hour" ? getJSON(base + "/stats?by=hour") : null,
    ]);
    if (mine !== loads) return;
    const shown = hours || days;
    if (!Array.isArray(days.points) || !Array.isArray(shown.points)) throw new Error("the stats have no points");
    document.getElementById("error").hidden = true;
    const target = document.getElementById("target");
    target.textContent = link.url;
    // Only a web address becomes a link: the API checks it at create, and
    // this checks again what the page is given.
    if (/^https?:\/\//i.test(link.url)) target.href = link.url;
    else target.removeAttribute("href");
    document.getElementById("total").textContent = String(link.redirects);
    const created = document.getElementById("created");
    created.dateTime = link.created_at;
    created.textContent = new Date(link.created_at).toLocaleString();
    draw(shown.points);
    fillTables(days.points);
    document.getElementById("link").hidden = false;
  } catch (e) {
    if (mine === loads) showError("Could not read the stats: " + e.message);
  } finally {
    document.body.dataset.loads = String(++finished);
  }
}

for (const button of document.querySelectorAll("button[data-by]")) {
  button.addEventListener("click", () => {
    by = button.dataset.by;
    for (const b of document.querySelectorAll("button[data-by]")) b.setAttribute("aria-pressed", String(b === button));
    load();
  });
}
document.getElementById("refresh").addEventListener("click", load);
load();
