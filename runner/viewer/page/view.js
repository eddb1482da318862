// The rollout viewer's page. Plain JavaScript, no build step, no network beyond its own
// server. Every string from a rollout reaches the page through textContent (never as
// HTML): rollouts hold model output, and model output may hold markup.
"use strict";

(function () {
  // Columns of a list row, as the server and the embedded data send them.
  const ROW = 0, LINE = 1, REWARD = 2, AGENT = 3, TASK = 4, ROLLOUT = 5, TURNS = 6, TOOLS = 7, FAILURE = 8;
  // Top-level fields the page shows in their own places rather than among the verifier's fields.
  const SHOWN_ELSEWHERE = new Set(["responses_create_params", "response", "reward", "agent_ref", "_ng_task_index",
    "_ng_rollout_index", "_ng_failure_class", "_ng_failure_message", "_gymbus"]);
  const TOKEN_FIELDS = ["prompt_token_ids", "generation_token_ids", "generation_log_probs"];

  const state = { source: 0, offset: 0, limit: 100, query: {}, page: null, selected: null };

  // ---- DOM helpers: text only --------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  const $ = (id) => document.getElementById(id);
  const clear = (node) => { while (node.firstChild) node.removeChild(node.firstChild); return node; };
  const fmt = (x) => (x === null || x === undefined ? "" : Number.isInteger(x) ? String(x) : String(+x.toFixed(4)));
  const pretty = (value) => JSON.stringify(value, null, 2);
  function prettyJsonText(text) {
    try { return pretty(JSON.parse(text)); } catch (e) { return text; }
  }

  // ---- where the data comes from ------------------------------------------------------
  // The server answers one page of the list and one rollout at a time; a self-contained
  // page (`--html`) carries its rows and filters them here, with the server's rules.
  class ServerData {
    async list(source, query, offset, limit) {
      const params = new URLSearchParams({ offset: String(offset), limit: String(limit) });
      for (const [key, value] of Object.entries(query)) params.set(key, String(value));
      return getJson(`api/${source}/list?${params}`);
    }
    async rollout(source, row) { return getJson(`api/${source}/rollout/${row}`); }
  }
  async function getJson(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" } });
    const body = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
    if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
    return body;
  }

  class EmbeddedData {
    constructor(data) { this.data = data; }
    async list(source, query, offset, limit) {
      const src = this.data.sources[source];
      const matched = src.summaries.filter((row) => matches(row, query, src));
      return {
        sources: this.data.sources.map((s) => ({ name: s.name, rows: s.rows })),
        name: src.name, rows: src.rows, agents: src.agents, failures: src.failures,
        skipped: src.skipped, skipped_count: src.skipped_count, histogram: src.histogram,
        note: src.note, total: matched.length, offset, page: matched.slice(offset, offset + limit),
      };
    }
    async rollout(source, row) {
      const src = this.data.sources[source];
      const data = row < src.rollouts.length ? src.rollouts[row] : null;
      if (data === null || data === undefined) {
        throw new Error(`This rollout is not embedded in this page. ${src.note || ""}`);
      }
      return { row, summary: src.summaries[row], data };
    }
  }
  // The same rules as the server's `Query`: every given field must hold, reward bounds
  // are inclusive, and a row without a reward fails any reward bound.
  function matches(row, query, src) {
    if ("agent" in query && src.agents[row[AGENT]] !== query.agent) return false;
    if ("failure" in query && src.failures[row[FAILURE]] !== query.failure) return false;
    if ("outcome" in query && (src.failures[row[FAILURE]] === "") !== (query.outcome === "ok")) return false;
    const reward = row[REWARD];
    if ("reward_min" in query && !(reward !== null && reward >= +query.reward_min)) return false;
    if ("reward_max" in query && !(reward !== null && reward <= +query.reward_max)) return false;
    return true;
  }

  const embedded = $("gymbus-data");
  const data = embedded ? new EmbeddedData(JSON.parse(embedded.textContent)) : new ServerData();

  // ---- the list, its filters and histograms -----------------------------------------------
  // Only the latest request's answer is shown (an earlier one may arrive later); the body
  // is aria-busy until it is.
  let loads = 0;
  async function load() {
    const mine = ++loads;
    document.body.setAttribute("aria-busy", "true");
    let page;
    try {
      page = await data.list(state.source, state.query, state.offset, state.limit);
    } catch (error) {
      page = null;
      if (mine === loads) showError(`Could not load the list: ${error.message}`);
    }
    if (mine !== loads) return;
    document.body.removeAttribute("aria-busy");
    if (page) render(page);
  }

  function render(page) {
    state.page = page;
    renderSources(page);
    renderNotices(page);
    renderFilters(page);
    renderHistograms(page);
    renderList(page);
  }

  function renderSources(page) {
    const nav = clear($("sources"));
    page.sources.forEach((source, i) => {
      nav.append(el("button", {
        type: "button", "aria-pressed": i === state.source ? "true" : "false",
        onclick: () => { state.source = i; state.offset = 0; state.query = {}; state.selected = null; showHint(); load(); },
      }, `${source.name} (${source.rows})`), " ");
    });
    $("status").textContent = `${page.rows} rows` + (page.skipped_count ? `, ${page.skipped_count} lines skipped` : "");
  }

  function renderNotices(page) {
    const box = clear($("notices"));
    if (page.skipped_count) {
      const more = page.skipped_count - page.skipped.length;
      box.append(el("div", { class: "notice", id: "skipped" },
        el("strong", {}, `Skipped ${page.skipped_count} line${page.skipped_count === 1 ? "" : "s"} of ${page.name} that hold no row:`),
        el("ul", {}, page.skipped.map(([line, reason]) => el("li", {}, `line ${line}: ${reason}`))),
        more > 0 ? el("div", {}, `… and ${more} more`) : null));
    }
    if (page.note) box.append(el("div", { class: "notice" }, page.note));
  }

  function showError(message) {
    $("notices").append(el("div", { class: "notice error", role: "alert" }, message));
  }

  function renderFilters(page) {
    const agent = clear($("f-agent"));
    agent.append(el("option", { value: "" }, "all agents"));
    page.agents.forEach((name, i) => agent.append(el("option", { value: String(i + 1) }, name || "(no agent)")));
    agent.value = "agent" in state.query ? String(page.agents.indexOf(state.query.agent) + 1) : "";
    const failure = clear($("f-failure"));
    failure.append(el("option", { value: "" }, "all rows"),
      el("option", { value: "ok" }, "no failure"), el("option", { value: "failed" }, "any failure"));
    page.failures.forEach((name, i) => { if (name) failure.append(el("option", { value: `class:${i}` }, name)); });
    failure.value = state.query.outcome || ("failure" in state.query ? `class:${page.failures.indexOf(state.query.failure)}` : "");
    $("f-reward-min").value = state.query.reward_min ?? "";
    $("f-reward-max").value = state.query.reward_max ?? "";
  }

  function readFilters() {
    const page = state.page, query = {};
    const agent = $("f-agent").value;
    if (agent) query.agent = page.agents[+agent - 1];
    const failure = $("f-failure").value;
    if (failure === "ok" || failure === "failed") query.outcome = failure;
    else if (failure.startsWith("class:")) query.failure = page.failures[+failure.slice(6)];
    const low = $("f-reward-min").value.trim(), high = $("f-reward-max").value.trim();
    if (low !== "") query.reward_min = low;
    if (high !== "") query.reward_max = high;
    return query;
  }

  function applyQuery(query) { state.query = query; state.offset = 0; load(); }

  function renderHistograms(page) {
    const box = clear($("histograms"));
    const { bins, agents } = page.histogram;
    for (const entry of agents) {
      const peak = Math.max(1, ...entry.counts);
      const bars = el("div", { class: "hist-bars" });
      entry.counts.forEach((count, i) => {
        const range = bins[i].lo === bins[i].hi ? fmt(bins[i].lo) : `${fmt(bins[i].lo)}–${fmt(bins[i].hi)}`;
        const bar = el("button", {
          type: "button", class: count ? "hist-bar" : "hist-bar empty",
          title: `reward ${range}: ${count} rollouts`, "aria-label": `${entry.agent || "(no agent)"} reward ${range}: ${count}`,
          onclick: () => applyQuery({ agent: entry.agent, reward_min: String(bins[i].lo), reward_max: String(bins[i].hi) }),
        });
        bar.style.height = `${Math.round((56 * count) / peak)}px`;
        bars.append(bar);
      });
      const total = entry.counts.reduce((a, b) => a + b, 0);
      box.append(el("div", { class: "hist" },
        el("div", { class: "hist-title", title: entry.agent }, `${entry.agent || "(no agent)"} · ${total}`),
        bars,
        bins.length ? el("div", { class: "hist-axis" }, el("span", {}, fmt(bins[0].lo)), el("span", {}, fmt(bins[bins.length - 1].hi))) : null,
        entry.no_reward ? el("div", { class: "hist-note" }, `${entry.no_reward} without a reward`) : null));
    }
  }

  function renderList(page) {
    const body = clear(document.querySelector("#list tbody"));
    for (const row of page.page) {
      const failure = page.failures[row[FAILURE]];
      const tr = el("tr", { "data-row": row[ROW], "aria-selected": row[ROW] === state.selected ? "true" : "false",
        onclick: () => openRollout(row[ROW]) },
        el("td", { class: "num" }, row[LINE]),
        el("td", { class: "num reward" }, fmt(row[REWARD])),
        el("td", { class: "agent", title: page.agents[row[AGENT]] }, page.agents[row[AGENT]] || "(no agent)"),
        el("td", { class: "num" }, fmt(row[TASK])),
        el("td", { class: "num" }, fmt(row[ROLLOUT])),
        el("td", { class: "num" }, row[TURNS]),
        el("td", { class: "num" }, row[TOOLS]),
        el("td", { class: failure ? "fail" : "" }, failure));
      body.append(tr);
    }
    const last = Math.min(page.offset + page.page.length, page.total);
    $("range").textContent = page.total ? `rows ${page.offset + 1}–${last} of ${page.total}` : "no rows match";
    $("prev").disabled = page.offset === 0;
    $("next").disabled = last >= page.total;
  }

  // ---- one rollout ----------------------------------------------------------------------
  async function openRollout(row) {
    state.selected = row;
    for (const tr of document.querySelectorAll("#list tbody tr")) {
      tr.setAttribute("aria-selected", +tr.dataset.row === row ? "true" : "false");
    }
    const box = clear($("rollout"));
    box.append(el("p", { class: "hint" }, "loading…"));
    let answer;
    try {
      answer = await data.rollout(state.source, row);
    } catch (error) {
      clear(box).append(el("div", { class: "notice error", role: "alert" }, error.message));
      return;
    }
    if (state.selected === row) renderRollout(clear(box), answer.summary, answer.data);
  }

  function showHint() { clear($("rollout")).append(el("p", { class: "hint" }, "Choose a rollout from the list.")); }

  function renderRollout(box, summary, row) {
    const failure = typeof row._ng_failure_class === "string" ? row._ng_failure_class : "";
    const agent = row.agent_ref && typeof row.agent_ref === "object" ? row.agent_ref.name : undefined;
    box.append(el("div", {}, el("h2", {}, `line ${summary[LINE]}`),
      el("p", { class: "meta" },
        el("span", { class: "reward" }, `reward ${row.reward === undefined ? "—" : fmt(row.reward)}`),
        ` · ${agent || "(no agent)"} · task ${fmt(row._ng_task_index)} · rollout ${fmt(row._ng_rollout_index)}`,
        ` · ${summary[TURNS]} turns · ${summary[TOOLS]} tool calls`),
      failure ? el("p", {}, el("span", { class: "badge fail" }, failure), " ", String(row._ng_failure_message ?? "")) : null));
    const params = row.responses_create_params && typeof row.responses_create_params === "object" ? row.responses_create_params : {};
    const response = row.response && typeof row.response === "object" ? row.response : {};
    box.append(el("h3", {}, "Conversation"), renderConversation(params, response));
    const fields = Object.keys(row).filter((key) => !SHOWN_ELSEWHERE.has(key));
    if (fields.length) box.append(el("h3", {}, "Verifier and task fields"), fieldsTable(fields.map((key) => [key, row[key]])));
    if (response.usage) box.append(el("h3", {}, "Token usage"), fieldsTable(flatten(response.usage)));
    if (Array.isArray(params.tools) && params.tools.length) box.append(renderTools(params.tools));
    if (row._gymbus) box.append(el("h3", {}, "How it ran"), fieldsTable(flatten(row._gymbus)));
    box.append(lazyDetails("Whole row (JSON)", () => el("pre", {}, pretty(row))));
  }

  function renderConversation(params, response) {
    const box = el("div", { class: "conversation" });
    const names = callNames(params.input, response.output);
    if (typeof params.instructions === "string" && params.instructions) {
      box.append(messageBlock("instructions", params.instructions, "prompt"));
    }
    const input = typeof params.input === "string" ? [{ role: "user", content: params.input }] : params.input;
    if (Array.isArray(input)) for (const item of input) box.append(renderItem(item, names, "prompt"));
    box.append(el("div", { class: "divider" }, "generated"));
    const output = Array.isArray(response.output) ? response.output : [];
    if (!output.length) box.append(el("p", { class: "hint" }, "nothing was generated"));
    for (const item of output) box.append(renderItem(item, names, "output"));
    return box;
  }

  // Tool names by call id, so a tool output says which tool answered.
  function callNames(...lists) {
    const names = new Map();
    for (const list of lists) {
      if (!Array.isArray(list)) continue;
      for (const item of list) if (item && item.type === "function_call") names.set(item.call_id, item.name);
    }
    return names;
  }

  function renderItem(item, names, where) {
    if (!item || typeof item !== "object") return el("div", { class: "item" }, el("pre", {}, pretty(item)));
    const type = item.type || "message";
    let block;
    if (type === "message") {
      const role = String(item.role || "user");
      const label = where === "output" && role === "user" ? "user (simulated)" : role;
      block = messageBlock(label, contentText(item.content), where, role);
    } else if (type === "reasoning") {
      const texts = [...(item.summary || []), ...(Array.isArray(item.content) ? item.content : [])]
        .map((part) => (part && typeof part.text === "string" ? part.text : "")).filter(Boolean);
      if (!texts.length && item.encrypted_content) texts.push("(encrypted)");
      block = el("div", { class: `item reasoning ${where}` }, el("div", { class: "item-head" }, "reasoning"),
        texts.map((text) => el("pre", { class: "text" }, text)));
    } else if (type === "function_call") {
      block = el("div", { class: `item function_call ${where}` },
        el("div", { class: "item-head" }, "tool call ", el("span", { class: "name" }, String(item.name)),
          el("span", { class: "call-id" }, ` (${item.call_id ?? ""})`)),
        el("pre", { class: "arguments" }, prettyJsonText(String(item.arguments ?? ""))));
    } else if (type === "function_call_output") {
      const output = typeof item.output === "string" ? prettyJsonText(item.output) : contentText(item.output);
      block = el("div", { class: `item function_call_output ${where}` },
        el("div", { class: "item-head" }, "tool output ", el("span", { class: "name" }, String(names.get(item.call_id) ?? "")),
          el("span", { class: "call-id" }, ` (${item.call_id ?? ""})`)),
        el("pre", { class: "output" }, output));
    } else {
      block = el("div", { class: `item ${where}` }, el("div", { class: "item-head" }, type), el("pre", {}, pretty(item)));
    }
    const tokens = tokenDetails(item);
    if (tokens) block.append(tokens);
    return block;
  }

  function messageBlock(label, text, where, role) {
    return el("div", { class: `item message role-${role || label} ${where}` },
      el("div", { class: "item-head" }, label), el("pre", { class: "text" }, text));
  }

  function contentText(content) {
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) return content === undefined || content === null ? "" : pretty(content);
    return content.map((part) => {
      if (part && typeof part.text === "string") return part.text;
      if (part && typeof part.refusal === "string") return `[refusal] ${part.refusal}`;
      return `[${part && part.type ? part.type : "part"}] ${pretty(part)}`;
    }).join("\n");
  }

  // Token ids and log probs (training captures), folded: they are long and rarely read.
  function tokenDetails(item) {
    const present = TOKEN_FIELDS.filter((key) => Array.isArray(item[key]));
    if (!present.length) return null;
    const counts = present.map((key) => `${key.replace(/_/g, " ")}: ${item[key].length}`).join(", ");
    return lazyDetails(`token ids (${counts})`, () => el("div", {},
      present.map((key) => [el("div", { class: "item-head" }, key), el("pre", {}, item[key].join(" "))])), "tokens");
  }

  function lazyDetails(title, build, cls) {
    const details = el("details", { class: cls }, el("summary", {}, title));
    details.addEventListener("toggle", () => {
      if (details.open && details.children.length === 1) details.append(build());
    });
    return details;
  }

  function renderTools(tools) {
    return lazyDetails(`Tools offered (${tools.length}): ${tools.map((t) => (t && t.name) || (t && t.type)).join(", ")}`,
      () => el("pre", {}, pretty(tools)));
  }

  function fieldsTable(pairs) {
    return el("table", { class: "fields" }, el("tbody", {}, pairs.map(([key, value]) =>
      el("tr", {}, el("th", {}, key), el("td", {}, el("pre", {}, typeof value === "string" ? value : pretty(value)))))));
  }

  function flatten(object, prefix = "") {
    const pairs = [];
    for (const [key, value] of Object.entries(object || {})) {
      if (value && typeof value === "object" && !Array.isArray(value)) pairs.push(...flatten(value, `${prefix}${key}.`));
      else pairs.push([`${prefix}${key}`, value]);
    }
    return pairs;
  }

  // ---- wiring -----------------------------------------------------------------------------
  $("filters").addEventListener("submit", (event) => { event.preventDefault(); applyQuery(readFilters()); });
  for (const id of ["f-agent", "f-failure"]) $(id).addEventListener("change", () => applyQuery(readFilters()));
  $("f-clear").addEventListener("click", () => applyQuery({}));
  $("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.limit); load(); });
  $("next").addEventListener("click", () => { state.offset += state.limit; load(); });
  load();
})();
