// pyllm web UI: chat over /v1/chat/completions (SSE), conversations in localStorage, MTP statistics per message,
// and the n-max page. Plain browser JavaScript, no build step, nothing fetched from outside this server.
"use strict";

// Every request goes to the folder the page was loaded from, so --api-prefix needs nothing here.
const BASE = location.pathname.replace(/[^/]*$/, "");
const $ = (id) => document.getElementById(id);
const store = {
  get(k, d) { try { const v = localStorage.getItem("pyllm." + k); return v === null ? d : JSON.parse(v); } catch (e) { return d; } },
  set(k, v) { localStorage.setItem("pyllm." + k, JSON.stringify(v)); },
};

// ------------------------------------------------------------------ HTTP, API key
let keyWaiters = null;

function authHeaders() {
  const k = store.get("apiKey", "");
  return k ? { "Authorization": "Bearer " + k } : {};
}

function askKey(message) {
  // one form for every request that got a 401; all of them retry once the key is given
  $("key-error").textContent = message || "";
  $("key-form").hidden = false;
  $("key-input").focus();
  if (!keyWaiters) keyWaiters = [];
  return new Promise((resolve) => keyWaiters.push(resolve));
}

$("key-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  store.set("apiKey", $("key-input").value.trim());
  $("key-form").hidden = true;
  const w = keyWaiters || [];
  keyWaiters = null;
  w.forEach((r) => r());
});

async function api(path, opts = {}) {
  for (;;) {
    const headers = Object.assign({}, opts.body ? { "Content-Type": "application/json" } : {}, authHeaders());
    const r = await fetch(BASE + path, Object.assign({}, opts, { headers }));
    if (r.status === 401) {
      await askKey(store.get("apiKey", "") ? "The server did not accept this key." : "");
      continue;
    }
    if (r.status === 503 && !opts.body) {  // loading the model: wait for it
      $("model-info").textContent = "loading model…";
      await new Promise((res) => setTimeout(res, 1000));
      continue;
    }
    return r;
  }
}

async function errorText(r) {
  try { const j = await r.json(); return (j.error && j.error.message) || JSON.stringify(j); } catch (e) { return "HTTP " + r.status; }
}

// ------------------------------------------------------------------ Markdown (escape first, then a few safe rules)
function esc(s) {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function inline(s) {  // s is already escaped
  const codes = [];
  s = s.replace(/`([^`\n]+)`/g, (m, c) => { codes.push(c); return "\u0000" + (codes.length - 1) + "\u0000"; });
  s = s.replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>")
       .replace(/(^|[^*])\*([^*\n]+)\*/g, "$1<em>$2</em>")
       .replace(/\[([^\]\n]+)\]\((https?:\/\/[^)\s]+)\)/g, '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>');
  return s.replace(/\u0000(\d+)\u0000/g, (m, i) => "<code>" + codes[+i] + "</code>");
}

function blocks(text) {  // non-code Markdown: headings, lists, quotes, paragraphs
  const out = [];
  let para = [], list = null;
  const flush = () => {
    if (para.length) out.push("<p>" + para.map(inline).join("<br>") + "</p>");
    para = [];
    if (list) out.push("<" + list.tag + ">" + list.items.map((i) => "<li>" + inline(i) + "</li>").join("") + "</" + list.tag + ">");
    list = null;
  };
  for (const line of esc(text).split("\n")) {
    let m;
    if (!line.trim()) { flush(); continue; }
    if ((m = line.match(/^(#{1,6})\s+(.*)$/))) { flush(); out.push("<h" + m[1].length + ">" + inline(m[2]) + "</h" + m[1].length + ">"); continue; }
    if ((m = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/))) {
      const tag = /\d/.test(m[1]) ? "ol" : "ul";
      if (para.length || (list && list.tag !== tag)) flush();
      if (!list) list = { tag, items: [] };
      list.items.push(m[2]);
      continue;
    }
    if ((m = line.match(/^&gt;\s?(.*)$/))) { flush(); out.push("<blockquote>" + inline(m[1]) + "</blockquote>"); continue; }
    if (list) flush();
    para.push(line);
  }
  flush();
  return out.join("");
}

function markdown(text) {
  // fenced code first; an unclosed fence (still streaming) is a code block to the end
  const out = [];
  const re = /```([\w+-]*)[^\n]*\n([\s\S]*?)(```|$)/g;
  let last = 0, m;
  while ((m = re.exec(text)) !== null) {
    out.push(blocks(text.slice(last, m.index)));
    const cls = m[1] ? ' class="lang-' + esc(m[1]) + '"' : "";
    out.push("<pre><code" + cls + ">" + esc(m[2].replace(/\n$/, "")) + "</code></pre>");
    last = re.lastIndex;
    if (m[0].length === 0) break;
  }
  out.push(blocks(text.slice(last)));
  return out.join("");
}

// ------------------------------------------------------------------ server properties, settings
const SETTINGS = ["temperature", "top_k", "top_p", "min_p", "max_tokens", "seed"];
let props = null;

async function loadProps() {
  const r = await api("props");
  if (!r.ok) { $("model-info").textContent = "/props: " + (await errorText(r)); return; }
  props = await r.json();
  const sp = props.speculative || { type: "none", n_max: 0 };
  const nctx = props.default_generation_settings ? props.default_generation_settings.n_ctx : "?";
  $("model-info").title = props.model_path || props.model_alias;
  $("model-info").textContent = props.model_alias.split("/").pop() + " · n_ctx " + nctx + " · " +
    (sp.type !== "none" ? sp.type + " n_max " + sp.n_max : "no speculative decoding");
  $("pos-note").textContent = props.endpoint_metrics
    ? "Per-position acceptance: the change of /metrics' per-position counters over the message (exact when no other request ran at the same time)."
    : "Per-position acceptance bars need the server started with --metrics (the per-message timings carry only the drafted / accepted totals).";
  if (!store.get("settings", null)) resetSettings();
  loadSettings();
  renderBenchInfo();
}

function defaultsFromProps() {
  const p = (props && props.default_generation_settings && props.default_generation_settings.params) || {};
  return { temperature: p.temperature ?? 0.8, top_k: p.top_k ?? 40, top_p: p.top_p ?? 0.95, min_p: p.min_p ?? 0.05,
           max_tokens: p.n_predict ?? -1, seed: p.seed ?? -1, system: "", tools: "" };
}

function resetSettings() { store.set("settings", defaultsFromProps()); loadSettings(); }

function loadSettings() {
  const s = store.get("settings", defaultsFromProps());
  for (const k of SETTINGS) $("s-" + k).value = s[k];
  $("s-system").value = s.system || "";
  $("s-tools").value = s.tools || "";
}

function saveSettings() {
  const s = {};
  for (const k of SETTINGS) s[k] = $("s-" + k).value === "" ? null : Number($("s-" + k).value);
  s.system = $("s-system").value;
  s.tools = $("s-tools").value;
  store.set("settings", s);
}

document.querySelectorAll("#settings input, #settings textarea").forEach((el) => el.addEventListener("change", saveSettings));
$("s-reset").addEventListener("click", resetSettings);

// ------------------------------------------------------------------ conversations
let convs = store.get("convs", []);
let current = store.get("current", null);

function saveConvs() { store.set("convs", convs); store.set("current", current); }
function conv() { return convs.find((c) => c.id === current); }

function newConv() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat", messages: [] };
  convs.unshift(c);
  current = c.id;
  saveConvs();
  renderAll();
}

function renderConvList() {
  const ul = $("conv-list");
  ul.textContent = "";
  for (const c of convs) {
    const li = document.createElement("li");
    if (c.id === current) li.className = "active";
    const t = document.createElement("span");
    t.textContent = c.title;
    li.appendChild(t);
    const del = document.createElement("button");
    del.textContent = "×";
    del.title = "Delete";
    del.addEventListener("click", (ev) => {
      ev.stopPropagation();
      convs = convs.filter((x) => x.id !== c.id);
      if (current === c.id) current = convs.length ? convs[0].id : null;
      saveConvs();
      renderAll();
    });
    li.appendChild(del);
    li.addEventListener("click", () => { if (!busy) { current = c.id; saveConvs(); renderAll(); } });
    ul.appendChild(li);
  }
}

// ------------------------------------------------------------------ messages
function msgElement(m) {
  const div = document.createElement("div");
  div.className = "msg " + m.role;
  div.innerHTML = '<div class="role"></div><details class="reasoning" hidden><summary>Reasoning</summary>' +
    '<div class="rbody"></div></details><div class="content"></div><div class="tools"></div><div class="stats"></div>';
  div.querySelector(".role").textContent = m.role;
  updateMsg(div, m);
  return div;
}

function updateMsg(div, m) {
  const rs = div.querySelector(".reasoning");
  rs.hidden = !m.reasoning;
  if (m.reasoning) div.querySelector(".rbody").innerHTML = markdown(m.reasoning);
  div.querySelector(".content").innerHTML = m.role === "user" ? blocks(m.content || "") : markdown(m.content || "");
  const tools = div.querySelector(".tools");
  tools.textContent = "";
  for (const tc of m.tool_calls || []) {
    const t = document.createElement("div");
    t.className = "tool";
    t.textContent = "tool call: " + (tc.function.name || "?") + "(" + (tc.function.arguments || "") + ")";
    tools.appendChild(t);
  }
  renderStats(div.querySelector(".stats"), m);
}

function renderStats(el, m) {
  el.textContent = "";
  const add = (text, cls) => { const s = document.createElement("span"); s.textContent = text; if (cls) s.className = cls; el.appendChild(s); return s; };
  if (m.stopped) add("stopped", "stopped");
  if (m.error) add("error: " + m.error, "stopped");
  const t = m.timings;
  if (!t) return;
  add((t.predicted_per_second || 0).toFixed(1) + " tok/s");
  add(t.predicted_n + " tokens");
  if (t.draft_n !== undefined) {
    const rate = t.draft_n > 0 ? (100 * t.draft_n_accepted / t.draft_n).toFixed(1) + "%" : "-";
    const s = add("MTP: drafted " + t.draft_n + ", accepted " + t.draft_n_accepted + " (" + rate + ")");
    s.className = "mtp";
  }
  if (m.per_pos && m.per_pos.length) {
    const bar = document.createElement("span");
    bar.className = "posbar";
    bar.title = "acceptance per draft position (from /metrics): " + m.per_pos.map((p, i) => (i + 1) + ": " + (100 * p).toFixed(0) + "%").join(", ");
    for (const p of m.per_pos) {
      const track = document.createElement("b"), i = document.createElement("i");
      i.style.height = Math.max(2, Math.round(100 * p)) + "%";
      track.appendChild(i);
      bar.appendChild(track);
    }
    el.appendChild(bar);
    add("per position " + m.per_pos.map((p) => (100 * p).toFixed(0) + "%").join(" / "));
  }
}

function renderMessages() {
  const box = $("messages");
  box.textContent = "";
  const c = conv();
  for (const m of c ? c.messages : []) box.appendChild(msgElement(m));
  box.scrollTop = box.scrollHeight;
}

function renderAll() { renderConvList(); renderMessages(); }

// ------------------------------------------------------------------ /metrics per-position counters
async function specCounters() {
  if (!props || !props.endpoint_metrics) return null;
  try {
    const r = await api("metrics");
    if (!r.ok) return null;
    const text = await r.text();
    const pos = [];
    let drafts = 0;
    for (const line of text.split("\n")) {
      let m;
      if ((m = line.match(/^llamacpp:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\}\s+(\S+)/))) pos[+m[1]] = Number(m[2]);
      else if ((m = line.match(/^llamacpp:spec_decode_num_drafts_total\s+(\S+)/))) drafts = Number(m[1]);
    }
    return { pos, drafts };
  } catch (e) { return null; }
}

function perPosition(a, b) {
  if (!a || !b || b.drafts <= a.drafts) return null;
  const steps = b.drafts - a.drafts;
  return b.pos.map((v, i) => ((v || 0) - (a.pos[i] || 0)) / steps);
}

// ------------------------------------------------------------------ chat
let busy = false;
let controller = null;

function setBusy(b) {
  busy = b;
  $("send").hidden = b;
  $("stop").hidden = !b;
  $("regen").disabled = b;
}

function requestBody(c) {
  const s = store.get("settings", defaultsFromProps());
  const msgs = [];
  if (s.system) msgs.push({ role: "system", content: s.system });
  for (const m of c.messages) {
    if (m.role === "assistant" && m.error && !m.content) continue;
    const o = { role: m.role, content: m.content || "" };
    if (m.tool_calls && m.tool_calls.length) o.tool_calls = m.tool_calls;
    msgs.push(o);
  }
  const body = { messages: msgs, stream: true, timings_per_token: true };
  for (const k of SETTINGS) if (s[k] !== null && s[k] !== undefined && !Number.isNaN(s[k])) body[k] = s[k];
  if (s.tools && s.tools.trim()) body.tools = JSON.parse(s.tools);  // a bad array throws: shown, nothing sent
  return body;
}

async function generate() {
  const c = conv();
  $("chat-error").textContent = "";
  let body;
  try { body = requestBody(c); } catch (e) { $("chat-error").textContent = "tools: not valid JSON (" + e.message + ")"; return; }
  const m = { role: "assistant", content: "", reasoning: "", tool_calls: [] };
  c.messages.push(m);
  const div = msgElement(m);
  $("messages").appendChild(div);
  setBusy(true);
  controller = new AbortController();
  const before = await specCounters();
  let pending = false;
  const redraw = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; updateMsg(div, m); const box = $("messages"); box.scrollTop = box.scrollHeight; });
  };
  try {
    const r = await api("v1/chat/completions", { method: "POST", body: JSON.stringify(body), signal: controller.signal });
    if (!r.ok) throw new Error(await errorText(r));
    await readSSE(r, (ev) => {
      if (ev.error) throw new Error(ev.error.message || JSON.stringify(ev.error));
      if (ev.timings) m.timings = ev.timings;
      for (const ch of ev.choices || []) {
        const d = ch.delta || {};
        if (d.content) m.content += d.content;
        if (d.reasoning_content) m.reasoning += d.reasoning_content;
        for (const tc of d.tool_calls || []) {
          const i = tc.index ?? m.tool_calls.length;
          const cur = m.tool_calls[i] || (m.tool_calls[i] = { id: "", type: "function", function: { name: "", arguments: "" } });
          if (tc.id) cur.id = tc.id;
          if (tc.function && tc.function.name) cur.function.name += tc.function.name;
          if (tc.function && tc.function.arguments) cur.function.arguments += tc.function.arguments;
        }
      }
      redraw();
    });
  } catch (e) {
    if (e.name === "AbortError") m.stopped = true;
    else m.error = e.message;
  }
  controller = null;
  if (!m.stopped) m.per_pos = perPosition(before, await specCounters());
  if (!m.tool_calls.length) delete m.tool_calls;
  setBusy(false);
  saveConvs();
  updateMsg(div, m);
}

async function readSSE(resp, onEvent) {
  // SSE over fetch: events are "data: {json}" lines; "[DONE]" ends the stream; "error: {json}" is an error
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line.startsWith("data: ")) {
        const d = line.slice(6);
        if (d === "[DONE]") return;
        onEvent(JSON.parse(d));
      } else if (line.startsWith("error: ")) {
        onEvent({ error: JSON.parse(line.slice(7)) });
      }
    }
  }
}

async function send() {
  const text = $("input").value;
  if (busy || !text.trim()) return;
  if (!conv()) newConv();
  const c = conv();
  if (!c.messages.length) c.title = text.trim().slice(0, 40);
  c.messages.push({ role: "user", content: text });
  $("input").value = "";
  saveConvs();
  renderAll();
  await generate();
}

async function regenerate() {
  const c = conv();
  if (busy || !c || !c.messages.length) return;
  while (c.messages.length && c.messages[c.messages.length - 1].role === "assistant") c.messages.pop();
  if (!c.messages.length) return;
  saveConvs();
  renderMessages();
  await generate();
}

$("composer").addEventListener("submit", (ev) => { ev.preventDefault(); send(); });
$("input").addEventListener("keydown", (ev) => { if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); send(); } });
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("regen").addEventListener("click", regenerate);
$("new-chat").addEventListener("click", () => { if (!busy) newConv(); });

// ------------------------------------------------------------------ tabs
function showTab(name) {
  $("page-chat").hidden = name !== "chat";
  $("page-bench").hidden = name !== "bench";
  $("tab-chat").classList.toggle("active", name === "chat");
  $("tab-bench").classList.toggle("active", name === "bench");
  if (name === "bench") { renderBenchTasks(); drawBench(); }
}
$("tab-chat").addEventListener("click", () => showTab("chat"));
$("tab-bench").addEventListener("click", () => showTab("bench"));

// ------------------------------------------------------------------ n-max page (bench.js-free: it lives here)
let benchTasks = null;

async function renderBenchTasks() {
  if (benchTasks) return;
  const r = await api("bench-tasks.json");
  benchTasks = r.ok ? await r.json() : {};
  const box = $("bench-tasks");
  box.textContent = "";
  Object.keys(benchTasks).forEach((name, i) => {
    const l = document.createElement("label");
    const cb = document.createElement("input");
    cb.type = "checkbox"; cb.value = name; cb.checked = i === 0;
    l.appendChild(cb);
    l.appendChild(document.createTextNode(" " + name + " "));
    box.appendChild(l);
  });
}

function renderBenchInfo() {
  const sp = (props && props.speculative) || { type: "none", n_max: 0 };
  $("bench-server").textContent = "This server: " + (props ? props.model_alias : "?") + ", " +
    (sp.type === "none" ? "no speculative decoding (a run here is the baseline, n_max 0)" :
      "--spec-type " + sp.type + " --spec-draft-n-max " + sp.n_max + " (a run here measures n_max " + sp.n_max + ")") + ".";
}

const median = (a) => { const s = [...a].sort((x, y) => x - y); const n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };

async function runBench(ev) {
  ev.preventDefault();
  if (!props) await loadProps();
  const tasks = [...document.querySelectorAll("#bench-tasks input:checked")].map((x) => x.value);
  const n = Number($("b-n").value), reps = Number($("b-reps").value);
  const nmax = props.speculative && props.speculative.type !== "none" ? props.speculative.n_max : 0;
  const status = $("bench-status");
  $("bench-run").disabled = true;
  try {
    for (const task of tasks) {
      let r = await api("apply-template", { method: "POST", body: JSON.stringify({ messages: [{ role: "user", content: benchTasks[task] }] }) });
      if (!r.ok) throw new Error("/apply-template: " + (await errorText(r)));
      const prompt = (await r.json()).prompt;
      const runs = [];
      const before = await specCounters();
      for (let i = 0; i < reps; i++) {
        status.textContent = "running " + task + " (n_max " + nmax + "), repetition " + (i + 1) + " of " + reps + "…";
        r = await api("completion", { method: "POST", body: JSON.stringify({ prompt, n_predict: n, temperature: 0, top_k: 1,
          cache_prompt: false, return_tokens: true, ignore_eos: true, stream: false }) });
        if (!r.ok) throw new Error("/completion: " + (await errorText(r)));
        const t = (await r.json()).timings;
        runs.push({ tps: t.predicted_per_second, n_gen: t.predicted_n, draft: t.draft_n || 0, acc: t.draft_n_accepted || 0 });
      }
      const pos = perPosition(before, await specCounters());
      const draft = runs.reduce((a, x) => a + x.draft, 0), acc = runs.reduce((a, x) => a + x.acc, 0);
      // pyllm-bench's server estimate: every step after the first token verifies a draft (draft-mtp, n_min 0)
      let steps = runs.reduce((a, x) => a + x.n_gen - 1 - x.acc, 0);
      if (steps <= 0 && nmax > 0) steps = draft / nmax;
      const res = store.get("bench", []).filter((x) => !(x.model === props.model_alias && x.task === task && x.n_max === nmax));
      res.push({ model: props.model_alias, task, n_max: nmax, reps, n_predict: n, tps: median(runs.map((x) => x.tps)),
                 draft, acc, rate: draft > 0 ? acc / draft : null, mean_len: nmax > 0 && steps > 0 ? 1 + acc / steps : null,
                 per_pos: pos });
      store.set("bench", res);
      drawBench();
    }
    status.textContent = "done.";
  } catch (e) {
    status.textContent = "error: " + e.message;
  }
  $("bench-run").disabled = false;
}

function drawBench() {
  const all = store.get("bench", []).filter((x) => !props || x.model === props.model_alias);
  const tbody = document.querySelector("#bench-table tbody");
  tbody.textContent = "";
  all.sort((a, b) => a.task.localeCompare(b.task) || a.n_max - b.n_max);
  const base = {};
  for (const x of all) if (x.n_max === 0) base[x.task] = x.tps;
  for (const x of all) {
    const tr = document.createElement("tr");
    const cells = [x.task, x.n_max === 0 ? "0 (baseline)" : x.n_max, x.reps, x.tps.toFixed(1),
      base[x.task] ? (x.tps / base[x.task]).toFixed(2) + "x" : "-", x.draft, x.acc,
      x.rate === null ? "-" : (100 * x.rate).toFixed(1) + "%", x.mean_len === null ? "-" : x.mean_len.toFixed(2) + " (est.)",
      x.per_pos ? x.per_pos.map((p) => (100 * p).toFixed(0) + "%").join(" / ") : "-"];
    for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
    tbody.appendChild(tr);
  }
  drawChart($("bench-chart"), all);
}

function drawChart(cv, rows) {
  // generation tokens/s against n_max, one line per task
  const g = cv.getContext("2d");
  const W = cv.width, H = cv.height, L = 56, R = 130, T = 20, B = 40;
  const css = getComputedStyle(document.body);
  g.clearRect(0, 0, W, H);
  g.fillStyle = css.color; g.strokeStyle = css.color; g.font = "12px system-ui, sans-serif";
  if (!rows.length) { g.fillText("No results yet: run the benchmark on this server.", L, H / 2); return; }
  const xmax = Math.max(1, ...rows.map((r) => r.n_max)), ymax = Math.max(...rows.map((r) => r.tps)) * 1.15 || 1;
  const X = (v) => L + (W - L - R) * v / xmax, Y = (v) => H - B - (H - T - B) * v / ymax;
  g.beginPath(); g.moveTo(L, T); g.lineTo(L, H - B); g.lineTo(W - R, H - B); g.stroke();
  for (let i = 0; i <= xmax; i++) g.fillText(String(i), X(i) - 3, H - B + 16);
  g.fillText("n_max (0 = no speculation)", (W - R) / 2 - 40, H - 6);
  for (let k = 0; k <= 4; k++) { const v = ymax * k / 4; g.fillText(v.toFixed(0), 8, Y(v) + 4); }
  g.fillText("generation tok/s", L + 6, T + 4);
  const colors = ["#2d6cdf", "#e8710a", "#1e8e3e", "#d93025", "#9334e6"];
  const tasks = [...new Set(rows.map((r) => r.task))];
  tasks.forEach((t, i) => {
    const pts = rows.filter((r) => r.task === t).sort((a, b) => a.n_max - b.n_max);
    g.strokeStyle = g.fillStyle = colors[i % colors.length];
    g.beginPath();
    pts.forEach((p, j) => (j ? g.lineTo(X(p.n_max), Y(p.tps)) : g.moveTo(X(p.n_max), Y(p.tps))));
    g.stroke();
    for (const p of pts) { g.beginPath(); g.arc(X(p.n_max), Y(p.tps), 3.5, 0, 2 * Math.PI); g.fill(); }
    g.fillText(t, W - R + 12, T + 16 * (i + 1));
  });
}

$("bench-form").addEventListener("submit", runBench);
$("bench-clear").addEventListener("click", () => { store.set("bench", store.get("bench", []).filter((x) => props && x.model !== props.model_alias)); drawBench(); });

// ------------------------------------------------------------------ start
if (!conv()) { current = convs.length ? convs[0].id : null; }
renderAll();
loadProps();
