// ordo's console: a page per view, routed by the URL's fragment (#/messages?q=…)
// so every view can be pasted into a chat. Data only ever reaches the page
// through textContent, never as HTML.
"use strict";

(function () {
  const REFRESH_MS = 5000;
  const PAGE = 50;
  const api = (path) => location.origin + "/admin/api/" + path;
  const STATUSES = ["queued", "running", "waiting", "done", "dead", "skipped", "active", "halted", "paused", "open", "replayed",
    "pending", "failed", "unknown", "sent", "delivered", "read", "revoked", "set", "none"];
  let me = null; // {operator, role}
  let timer = null;
  let tenantSlugs = [];

  // ---- small DOM helpers ----
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function h(tag, cls, ...kids) {
    const e = el(tag, undefined, cls);
    for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
    return e;
  }
  function pill(status) {
    return el("span", status, "pill st-" + (STATUSES.includes(status) ? status : "other"));
  }
  function link(text, href, cls) {
    const a = el("a", text, cls);
    a.href = href;
    return a;
  }
  function button(label, cls, onClick) {
    const b = el("button", label, cls);
    b.type = "button";
    b.addEventListener("click", onClick);
    return b;
  }
  function ago(iso) {
    if (!iso) return "";
    const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
    if (s < 60) return s + "s ago";
    if (s < 3600) return Math.floor(s / 60) + "m ago";
    if (s < 86400) return Math.floor(s / 3600) + "h ago";
    return Math.floor(s / 86400) + "d ago";
  }
  function when(iso) {
    const s = el("span", ago(iso), "time");
    if (iso) s.title = new Date(iso).toLocaleString();
    return s;
  }
  function stamp(iso) { return iso ? new Date(iso).toLocaleString() : ""; }
  function ms(v) {
    if (v === null || v === undefined) return "–";
    return v < 1000 ? Math.round(v) + " ms" : (v / 1000).toFixed(1) + " s";
  }
  function rate(v) { return v ? v.toFixed(1) : "0"; }
  const enc = encodeURIComponent;
  function msgHref(tenant, id) { return "#/message/" + enc(tenant) + "/" + enc(id); }
  function convHref(tenant, id) { return "#/conversation/" + enc(tenant) + "/" + enc(id); }

  // table builds a table with a header and rows of cells (Node or text).
  function table(headers, rows, emptyText, cls) {
    const t = el("table", undefined, cls || "");
    const tr = el("tr");
    for (const hd of headers) tr.append(el("th", hd));
    t.append(h("thead", "", tr));
    const body = el("tbody");
    for (const r of rows) {
      const row = el("tr");
      if (r.id !== undefined) row.dataset.id = r.id;
      if (r.cls) row.className = r.cls;
      for (const c of r.cells) row.append(c instanceof HTMLTableCellElement ? c : h("td", "", c));
      body.append(row);
    }
    if (!rows.length) {
      const td = el("td", emptyText, "empty");
      td.colSpan = headers.length;
      body.append(h("tr", "", td));
    }
    t.append(body);
    return t;
  }
  function td(node, cls) { const c = el("td", undefined, cls); c.append(node); return c; }
  function card(title, ...kids) {
    const s = el("section", undefined, "card");
    if (title) s.append(title instanceof Node ? title : el("h2", title));
    for (const k of kids) if (k) s.append(k);
    return s;
  }
  function dl(pairs) {
    const d = el("dl", undefined, "facts");
    for (const [k, v] of pairs) {
      d.append(el("dt", k));
      d.append(h("dd", "", v === "" || v === null || v === undefined ? "–" : v));
    }
    return d;
  }
  function pre(json) {
    return el("pre", json === null || json === undefined ? "(not stored)" : JSON.stringify(json, null, 2), "json");
  }

  // ---- errors and notices ----
  function showError(msg) {
    const e = document.getElementById("error");
    e.textContent = msg || "";
    e.hidden = !msg;
  }
  function notice(msg) {
    const n = document.getElementById("notice");
    n.textContent = msg || "";
    n.hidden = !msg;
  }
  async function errorOf(resp) {
    try {
      const body = await resp.json();
      if (body && body.error && body.error.message) return resp.status + " " + (resp.status === 403 ? "Forbidden" : "") + ": " + body.error.message;
    } catch (_) { /* not JSON */ }
    return "HTTP " + resp.status;
  }
  class HTTPError extends Error { constructor(status, msg) { super(msg); this.status = status; } }

  async function getJSON(path) {
    const resp = await fetch(api(path), { cache: "no-store", credentials: "same-origin" });
    if (resp.status === 401) { loggedOut(); throw new HTTPError(401, "logged out"); }
    if (!resp.ok) throw new HTTPError(resp.status, await errorOf(resp));
    return resp.json();
  }
  // post sends a write with the anti-CSRF header; a failure is shown (a
  // refusal for the role names it) and returns null.
  async function post(path, body, what) {
    try {
      const resp = await fetch(path.startsWith("/") ? location.origin + path : api(path), {
        method: "POST", credentials: "same-origin",
        headers: { "X-Ordo-Admin": "1", "Content-Type": "application/json" },
        body: JSON.stringify(body || {}),
      });
      if (resp.status === 401) { loggedOut(); return null; }
      if (!resp.ok) throw new HTTPError(resp.status, await errorOf(resp));
      showError("");
      return await resp.json();
    } catch (err) {
      showError(what + " refused — " + err.message);
      document.body.dataset.lastRefusal = String(err.status || "");
      return null;
    }
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== "" && v !== undefined && v !== null) q.set(k, v);
    return q.toString();
  }
  function formValues(form) {
    const out = {};
    for (const [k, v] of new FormData(form).entries()) out[k] = typeof v === "string" ? v.trim() : v;
    return out;
  }
  function filterForm(id, fields, values, onSubmit, extra) {
    const f = el("form", undefined, "filters");
    f.id = id;
    f.autocomplete = "off";
    for (const fd of fields) {
      const lab = h("label", "", fd.label + " ");
      let input;
      if (fd.options) {
        input = el("select");
        for (const o of fd.options) {
          const opt = el("option", o === "" ? "any" : o);
          opt.value = o;
          input.append(opt);
        }
      } else {
        input = el("input");
        input.type = fd.type || "text";
        if (fd.placeholder) input.placeholder = fd.placeholder;
        if (fd.size) input.size = fd.size;
      }
      input.name = fd.name;
      input.value = values[fd.name] || "";
      lab.append(input);
      f.append(lab);
    }
    const go = el("button", "Apply", "primary");
    go.type = "submit";
    f.append(go);
    if (extra) for (const x of extra) f.append(x);
    f.addEventListener("submit", (ev) => { ev.preventDefault(); onSubmit(formValues(f)); });
    return f;
  }
  function tenantOptions() { return [""].concat(tenantSlugs); }

  // ---- routing ----
  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, "");
    const [path, qs] = raw.split("?");
    const parts = path.split("/").map((p) => { try { return decodeURIComponent(p); } catch (_) { return p; } });
    return { view: parts[0] || "overview", args: parts.slice(1), params: Object.fromEntries(new URLSearchParams(qs || "")) };
  }
  function go(hash) { if (location.hash === hash) route(); else location.hash = hash; }

  const views = {
    overview: viewOverview,
    messages: viewMessages,
    message: viewMessage,
    conversation: viewConversation,
    "dead-letters": viewDeadLetters,
    tenants: viewTenants,
    tenant: viewTenant,
    audit: viewAudit,
  };

  async function route() {
    clearTimeout(timer);
    if (!me) return;
    const r = parseHash();
    const view = views[r.view] ? r.view : "overview";
    document.body.dataset.view = view;
    document.body.dataset.loaded = "false";
    for (const a of document.querySelectorAll("#nav a")) {
      const v = a.dataset.view;
      a.classList.toggle("on", v === view || (v === "messages" && (view === "message" || view === "conversation")) || (v === "tenants" && view === "tenant"));
    }
    const main = document.getElementById("view");
    try {
      const node = await views[view](r);
      if (parseHash().view !== r.view) return; // the operator moved on
      main.replaceChildren(node);
      document.body.dataset.loaded = "true";
      showErrorIfRouted("");
    } catch (err) {
      if (err.status === 401) return;
      main.replaceChildren(card("Could not load this page", el("p", err.message, "error")));
      document.body.dataset.loaded = "true";
    }
  }
  function showErrorIfRouted(msg) { if (!msg) return; showError(msg); }

  // ---- overview ----
  async function viewOverview() {
    const o = await getJSON("overview");
    const wrap = el("div", undefined, "stack");
    wrap.id = "overview";
    const t = o.tiles;
    const x = t.overall;
    const tiles = el("div", undefined, "tiles");
    tiles.id = "tile-overall";
    for (const [label, value, warn] of [["accepted / min", rate(x.accepted_per_minute)], ["sent / min", rate(x.sent_per_minute)],
      ["accept → send p50", ms(x.accept_to_send_p50_ms)], ["p99", ms(x.accept_to_send_p99_ms)],
      ["backlog", x.backlog, x.backlog > 0], ["oldest unfinished", x.oldest_unfinished ? ago(x.oldest_unfinished) : "none", !!x.oldest_unfinished],
      ["open dead letters", x.open_dead_letters, x.open_dead_letters > 0]]) {
      const d = el("div", undefined, "tile" + (warn ? " warn" : ""));
      d.dataset.tile = label;
      d.append(el("b", value), el("span", label));
      tiles.append(d);
    }
    wrap.append(card(h("h2", "", "Live ", el("span", "last " + t.window_s / 60 + " min · refreshes every " + REFRESH_MS / 1000 + " s", "count")), tiles,
      table(["tenant", "sending", "accepted/min", "sent/min", "p50", "p99", "backlog", "oldest unfinished", "open dead letters"],
        t.tenants.map((y) => ({ id: y.tenant, cells: [link(y.tenant, "#/tenant/" + enc(y.tenant), "mono"), pill(y.sending_paused ? "paused" : "active"),
          rate(y.accepted_per_minute), rate(y.sent_per_minute), ms(y.accept_to_send_p50_ms), ms(y.accept_to_send_p99_ms), y.backlog,
          y.oldest_unfinished ? when(y.oldest_unfinished) : "none", y.open_dead_letters ? link(String(y.open_dead_letters), "#/dead-letters?" + query({ tenant: y.tenant })) : "0"] })),
        "No tenants yet.", "tiles-table")));
    const cols = el("div", undefined, "cols");
    cols.append(card(h("h2", "", "Needs attention ", el("span", o.attention.length ? String(o.attention.length) : "", "count")),
      table(["conversation", "tenant", "backlog", "state"], o.attention.map((c) => ({
        cls: c.halted_at ? "halted" : "",
        cells: [link(c.conversation_id, convHref(c.tenant, c.conversation_id), "mono"), c.tenant, c.backlog, pill(c.halted_at ? "halted" : "active")],
      })), "Every conversation is caught up.")));
    cols.append(card(h("h2", "", "Newest open dead letters ", link("all →", "#/dead-letters", "count")),
      table(["message", "tenant", "reason", "since"], o.dead_letters.map((d) => ({
        cells: [link(d.message_id, msgHref(d.tenant, d.message_id), "mono"), d.tenant, td(el("span", d.reason), "reason"), when(d.created_at)],
      })), "No open dead letters.")));
    wrap.append(cols);
    if (o.sandbox) {
      wrap.append(card("Sandbox sends", el("p", "What the built-in sandbox channel was asked to send: these would have reached WhatsApp.", "hint"),
        table(["sent", "from", "to", "type", "text"], o.sandbox_sends.slice(0, 15).map((s) => ({
          cells: [when(s.created_at), s.phone_number_id, td(el("span", s.to), "mono"), s.type, td(el("span", s.text), "text")],
        })), "Nothing sent yet.")));
    }
    timer = setTimeout(() => { if (parseHash().view === "overview") route(); }, REFRESH_MS);
    return wrap;
  }

  // ---- messages ----
  async function viewMessages(r) {
    const p = r.params;
    const page = await getJSON("messages?" + query({ q: p.q, tenant: p.tenant, status: p.status, direction: p.direction,
      since: p.since, until: p.until, cursor: p.cursor, limit: PAGE }));
    const form = filterForm("search-form", [
      { name: "q", label: "id", placeholder: "message id prefix, wamid or conversation id", size: 36 },
      { name: "tenant", label: "tenant", options: tenantOptions() },
      { name: "status", label: "status", options: ["", "queued", "running", "done", "dead", "skipped"] },
      { name: "direction", label: "direction", options: ["", "inbound", "outbound"] },
      { name: "since", label: "since", placeholder: "2026-11-27T10:00:00Z", size: 20 },
      { name: "until", label: "until", placeholder: "RFC 3339", size: 20 },
    ], p, (v) => go("#/messages?" + query(v)));
    const rows = page.items.map((m) => ({
      id: m.message_id,
      cls: m.status === "dead" ? "bad" : "",
      cells: [link(m.message_id, msgHref(m.tenant, m.message_id), "mono msg-link"), m.tenant,
        link(m.conversation_id, convHref(m.tenant, m.conversation_id), "mono"), m.seq, m.direction, pill(m.status), when(m.created_at),
        td(el("span", m.last_error), "reason")],
    }));
    const more = el("p", undefined, "pager");
    if (p.cursor) more.append(link("← first page", "#/messages?" + query({ ...p, cursor: "" })), " ");
    if (page.next) more.append(link("next page →", "#/messages?" + query({ ...p, cursor: page.next }), "next"));
    const title = p.q ? "Messages matching " + JSON.stringify(p.q) : "Messages, newest first";
    return card(title, form, table(["message", "tenant", "conversation", "seq", "direction", "status", "accepted", "last error"], rows,
      p.q ? "No message id starts with that, and no conversation or wamid is that." : "No messages.", "messages-table"), more);
  }

  // ---- one message ----
  function stepBlock(s) {
    const box = el("div", undefined, "step st-box-" + s.status);
    box.dataset.kind = s.kind;
    const name = s.kind === "handle" ? "Handler call" : "Send " + s.idx;
    box.append(h("div", "step-head", el("strong", name), " ", pill(s.status),
      el("span", " · " + s.attempts + " attempt" + (s.attempts === 1 ? "" : "s"), "muted"),
      s.finished_at ? el("span", " · finished " + stamp(s.finished_at), "muted") : null,
      s.provider_message_id ? el("span", " · " + s.provider_message_id, "mono muted") : null,
      s.sandbox ? h("span", "", " ", pill("sandbox"), el("span", " ordo dev's stand-in: nothing reached WhatsApp", "muted")) : null,
      s.provider_status ? h("span", "", " · provider ", pill(s.provider_status), el("span", s.provider_status_at ? " " + stamp(s.provider_status_at) : "", "muted")) : null));
    const errs = s.errors || [];
    if (errs.length) {
      const past = s.status === "done";
      box.append(el("div", past ? "Earlier failures, before it succeeded:" : "Failed attempts:", "muted small-label"));
      const list = el("ul", undefined, "attempts" + (past ? " past" : ""));
      for (const a of errs) list.append(el("li", "#" + (a.attempt ?? "?") + " · " + stamp(a.at) + " · " + (a.error || "")));
      box.append(list);
    }
    if (s.kind === "send" && s.request) {
      const det = el("details");
      det.append(el("summary", "what it sends"), pre(s.request));
      box.append(det);
    }
    return box;
  }
  async function viewMessage(r) {
    const [tenant, id] = r.args;
    const m = await getJSON("tenants/" + enc(tenant) + "/messages/" + enc(id));
    const wrap = el("div", undefined, "stack");
    wrap.id = "message";
    wrap.dataset.status = m.status;
    const share = button("Copy link", "", () => {
      navigator.clipboard?.writeText(location.href).then(() => notice("Link copied: " + location.href), () => notice(location.href));
    });
    const head = h("div", "page-head", el("h1", m.message_id, "mono"), pill(m.status), share);
    wrap.append(head);
    wrap.append(card(null, dl([
      ["tenant", link(m.tenant, "#/tenant/" + enc(m.tenant))],
      ["conversation", link(m.conversation_id, convHref(m.tenant, m.conversation_id), "mono")],
      ["seq", m.seq + " (head " + m.conversation.head_seq + " · last " + m.conversation.last_seq + (m.conversation.halted_at ? " · conversation HALTED" : "") + ")"],
      ["direction", m.direction],
      ["accepted", stamp(m.created_at)],
      ["finished", stamp(m.finished_at)],
      ["before / after", h("span", "", m.neighbours.previous ? link("← " + m.neighbours.previous, msgHref(m.tenant, m.neighbours.previous), "mono") : "(first of its conversation)",
        "   ", m.neighbours.next ? link(m.neighbours.next + " →", msgHref(m.tenant, m.neighbours.next), "mono") : "(last so far)")],
    ])));
    // Dead letters first: they are why an operator is here.
    for (const d of m.dead_letters) {
      const open = !d.resolved_at;
      const c = card(h("h2", "", "Dead letter #" + d.id + " ", pill(open ? "open" : d.resolution)));
      c.classList.add(open ? "dead-open" : "dead-resolved");
      c.dataset.deadLetter = d.id;
      c.append(el("p", d.reason, open ? "reason" : "reason resolved"));
      c.append(el("p", "since " + stamp(d.created_at) + (open ? "" : " · " + d.resolution + " " + stamp(d.resolved_at)), "muted"));
      if (open) {
        const acts = el("p", undefined, "actions");
        acts.append(button("Replay", "replay", () => resolve(d.id, "replay")), " ",
          button("Skip", "skip", () => resolve(d.id, "skip")),
          el("span", "  Replay runs it again, in order; Skip gives it up and lets the conversation go on.", "muted"));
        c.append(acts);
      }
      const errs = d.errors || [];
      if (errs.length) {
        const det = el("details");
        det.append(el("summary", errs.length + " error" + (errs.length === 1 ? "" : "s") + " that led here"));
        const ol = el("ol", undefined, "attempts");
        for (const a of errs) ol.append(el("li", stamp(a.at) + " · " + (a.error || JSON.stringify(a))));
        det.append(ol);
        c.append(det);
      }
      wrap.append(c);
    }
    const cols = el("div", undefined, "cols");
    const steps = card("Steps", ...(m.steps.length ? m.steps.map(stepBlock) : [el("p", "No step ran yet.", "muted")]));
    steps.id = "steps";
    cols.append(steps);
    const content = card("Content");
    content.append(el("h3", "as accepted"), pre(m.payload));
    if (m.handler_request) content.append(el("h3", "the handler's request"), pre(m.handler_request));
    const replies = m.steps.filter((s) => s.kind === "send" && s.request).map((s) => s.request);
    if (m.direction === "inbound") content.append(el("h3", "the handler's answer (its replies)"), replies.length ? pre(replies) : el("p", "no replies recorded", "muted"));
    cols.append(content);
    wrap.append(cols);
    return wrap;
  }
  async function resolve(id, action) {
    if (action === "skip" && !confirm("Skip dead letter #" + id + "? Its message will not be sent, and its conversation goes on.")) return;
    const r = await post("dead-letters/" + enc(id) + "/" + action, null, action === "replay" ? "Replay" : "Skip");
    if (r) { notice("Dead letter #" + id + " " + r.resolution + "."); route(); }
  }

  // ---- conversation ----
  async function viewConversation(r) {
    const [tenant, conv] = r.args;
    const after = r.params.after_seq;
    const tl = await getJSON("timeline?" + query({ tenant: tenant, conversation_id: conv, after_seq: after }));
    const wrap = el("div", undefined, "stack");
    wrap.id = "conversation";
    wrap.append(h("div", "page-head", el("h1", conv, "mono"), pill(tl.halted_at ? "halted" : "active"), el("span", tenant, "muted")));
    const drain = tl.drain ? "due " + stamp(tl.drain.due_at) + (tl.drain.running ? " · running" : " · waiting") + (tl.drain.urgent ? " · a user waits (goes first)" : "") : "nothing to run";
    wrap.append(card(null, dl([["tenant", link(tenant, "#/tenant/" + enc(tenant))], ["head seq", tl.head_seq], ["last seq", tl.last_seq],
      ["halted", tl.halted_at ? stamp(tl.halted_at) : "no"], ["drain", drain], ["fence", tl.fence],
      ["waiting for resume", tl.paused_wait ? "yes (the tenant's sending is paused)" : "no"]])));
    const rows = tl.messages.map((m) => {
      const open = m.dead_letters.filter((d) => !d.resolved_at).length;
      const lastErr = m.steps.flatMap((s) => s.errors || []).slice(-1)[0];
      return {
        id: m.message_id,
        cls: m.seq === tl.head_seq + 1 && tl.halted_at ? "halted" : "",
        cells: [m.seq, link(m.message_id, msgHref(tenant, m.message_id), "mono"), m.direction, pill(m.status),
          m.steps.map((s) => (s.kind === "handle" ? "handler " : "send ") + s.status).join(", ") || "–",
          open ? pill("open") : (m.dead_letters.length ? pill(m.dead_letters.slice(-1)[0].resolution) : ""),
          td(el("span", m.status === "done" || !lastErr ? "" : lastErr.error), "reason"), when(m.created_at)],
      };
    });
    const pager = el("p", undefined, "pager");
    if (tl.after_seq > 0) pager.append(link("from seq 1", convHref(tenant, conv) + "?after_seq=0"), " ");
    if (tl.next) pager.append(link("next page →", convHref(tenant, conv) + "?after_seq=" + tl.next, "next"));
    wrap.append(card(h("h2", "", "Messages ", el("span", tl.after_seq ? "after seq " + tl.after_seq : "from the start", "count")),
      table(["seq", "message", "direction", "status", "steps", "dead letter", "error", "accepted"], rows, "No messages."), pager));
    return wrap;
  }

  // ---- dead letters ----
  let lastBulk = null; // {code: "replay:6", text}: stays on the page until the next bulk
  async function viewDeadLetters(r) {
    const p = r.params;
    const state = p.state || "open";
    const page = await getJSON("dead-letters?" + query({ tenant: p.tenant, reason: p.reason, min_age: p.min_age, state: state, after: p.after, limit: PAGE }));
    const replayAll = button("Replay all", "replay", () => bulk("replay", p, page.total));
    const skipAll = button("Skip all", "skip", () => bulk("skip", p, page.total));
    replayAll.id = "dl-replay-all";
    skipAll.id = "dl-skip-all";
    replayAll.disabled = skipAll.disabled = state !== "open" || !page.total;
    const form = filterForm("dl-form", [
      { name: "tenant", label: "tenant", options: tenantOptions() },
      { name: "reason", label: "reason", placeholder: "text in the reason or error" },
      { name: "min_age", label: "older than", placeholder: "30m, 2h, 3d", size: 10 },
      { name: "state", label: "state", options: ["open", "resolved", "all"] },
    ], { ...p, state: state }, (v) => go("#/dead-letters?" + query(v)), [replayAll, skipAll]);
    const count = el("span", (page.capped ? page.total + "+" : page.total) + " match" + (state === "open" ? "" : " (bulk actions take open ones only)"), "count");
    count.id = "dl-preview";
    count.dataset.total = page.total;
    const result = el("p", lastBulk ? lastBulk.text : "", "bulk-result");
    result.id = "dl-result";
    result.hidden = !lastBulk;
    const rows = page.items.map((d) => ({
      id: d.id,
      cls: d.resolved_at ? "resolved" : "open",
      cells: [d.id, link(d.message_id, msgHref(d.tenant, d.message_id), "mono"), d.tenant, link(d.conversation_id, convHref(d.tenant, d.conversation_id), "mono"),
        td(el("span", d.reason), d.resolved_at ? "reason resolved" : "reason"), d.attempts, when(d.created_at),
        h("span", "", pill(d.resolved_at ? d.resolution : "open"), d.resolved_at ? el("span", " " + ago(d.resolved_at), "muted") : null)],
    }));
    const pager = el("p", undefined, "pager");
    if (p.after) pager.append(link("← first page", "#/dead-letters?" + query({ ...p, after: "" })), " ");
    if (page.next) pager.append(link("next page →", "#/dead-letters?" + query({ ...p, after: page.next }), "next"));
    const c = card(h("h2", "", "Dead letters ", count), el("p", "Replay all and Skip all take every open dead letter the filter matches, conversation by conversation, each one's in seq order, through the same path as one Replay.", "hint"),
      form, result, table(["#", "message", "tenant", "conversation", "reason", "attempts", "since", "state"], rows, "No dead letters match.", "dl-table"), pager);
    c.id = "dl-console";
    if (lastBulk) c.dataset.lastBulk = lastBulk.code;
    return c;
  }
  async function bulk(action, p, n) {
    const what = action === "replay" ? "Replay" : "Skip";
    if (!confirm(what + " all " + n + " open dead letters matching this filter?" + (action === "skip" ? " Their messages will not be sent." : ""))) return;
    const body = { action: action, tenant: p.tenant || "", reason: p.reason || "", min_age: p.min_age || "" };
    let total = 0, conflicts = 0;
    for (;;) {
      const r = await post("dead-letters/bulk", body, what + " all");
      if (!r) break;
      total += r.resolved;
      conflicts += r.conflicts;
      if (!r.more) break;
    }
    lastBulk = { code: action + ":" + total, text: (action === "replay" ? "Replay all: " : "Skip all: ") + total + " " + (action === "replay" ? "replayed" : "skipped") +
      (conflicts ? ", " + conflicts + " already resolved by someone else" : "") + " at " + new Date().toLocaleTimeString() +
      (p.tenant || p.reason || p.min_age ? " (filter: " + query({ tenant: p.tenant, reason: p.reason, min_age: p.min_age }).replaceAll("&", ", ") + ")" : "") + "." };
    route();
  }

  // ---- tenants ----
  async function viewTenants() {
    const list = (await getJSON("tenants")).items;
    tenantSlugs = list.map((t) => t.slug);
    const wrap = el("div", undefined, "stack");
    wrap.id = "tenants";
    wrap.append(card("Tenants", table(["tenant", "name", "sending", "handler", "on dead letter", "credentials", "open dead letters", "created"],
      list.map((t) => ({ id: t.slug, cls: t.sending_paused_at ? "halted" : "", cells: [link(t.slug, "#/tenant/" + enc(t.slug), "mono"), t.name,
        pill(t.sending_paused_at ? "paused" : t.number_down_since ? "number away" : "active"),
        t.handler_url_set ? (t.handler_down_since ? "away since " + when(t.handler_down_since) : "set") : "none", t.on_dead_letter, (t.credentials || []).join(", ") || "none",
        t.open_dead_letters, when(t.created_at)] })), "No tenants yet.")));
    if (me.role === "admin") {
      const f = el("form", undefined, "filters");
      f.id = "tenant-form";
      f.autocomplete = "off";
      for (const [name, label, ph] of [["slug", "slug", "acme"], ["name", "name", "Acme Ltd"], ["handler_url", "handler URL", "https://n8n.example.com/webhook/…"]]) {
        const i = el("input");
        i.name = name;
        i.placeholder = ph;
        f.append(h("label", "", label + " ", i));
      }
      const b = el("button", "Create tenant", "primary");
      b.type = "submit";
      f.append(b);
      f.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        const v = formValues(f);
        const r = await post("tenants", v, "Create tenant");
        if (!r) return;
        shownOnce = { slug: r.tenant.slug, key: r.api_key, secret: r.handler_secret };
        go("#/tenant/" + enc(r.tenant.slug));
      });
      wrap.append(card("Onboard a tenant", f));
    }
    return wrap;
  }
  let shownOnce = null;
  function onceBox() {
    if (!shownOnce) return null;
    const box = el("div", undefined, "once");
    box.id = "secret-once";
    box.append(h("p", "", el("strong", "Shown once. "), "Copy these now: ordo keeps only their hash or ciphertext and cannot show them again."));
    const pairs = [["tenant", el("span", shownOnce.slug, "mono")], ["API key", el("span", shownOnce.key, "mono once-key")]];
    if (shownOnce.secret) pairs.push(["handler secret", el("span", shownOnce.secret, "mono once-secret")]);
    box.append(dl(pairs), button("I have copied them", "", () => { shownOnce = null; box.remove(); }));
    return box;
  }
  function smallForm(id, fields, submitLabel, onSubmit) {
    const f = el("form", undefined, "grid");
    f.id = id;
    f.autocomplete = "off";
    for (const fd of fields) {
      let input;
      if (fd.options) {
        input = el("select");
        for (const o of fd.options) input.append(el("option", o));
      } else {
        input = el("input");
        input.type = fd.type || "text";
        if (fd.type === "password") input.autocomplete = "new-password";
        if (fd.placeholder) input.placeholder = fd.placeholder;
      }
      input.name = fd.name;
      if (fd.value !== undefined) input.value = fd.value;
      f.append(h("label", fd.type === "checkbox" ? "check" : "", fd.label + " ", input));
    }
    const b = el("button", submitLabel, "primary");
    b.type = "submit";
    f.append(b);
    f.addEventListener("submit", (ev) => { ev.preventDefault(); onSubmit(formValues(f), f); });
    return f;
  }
  async function viewTenant(r) {
    const slug = r.args[0];
    const t = await getJSON("tenants/" + enc(slug));
    const base = "tenants/" + enc(slug);
    const isAdmin = me.role === "admin";
    const wrap = el("div", undefined, "stack");
    wrap.id = "tenant-detail";
    wrap.dataset.slug = slug;
    const sendBtn = t.sending_paused
      ? button("Resume sending", "replay", async () => { if (await post(base + "/resume", {}, "Resume")) route(); })
      : button("Pause sending", "skip", async () => {
        const reason = prompt("Why pause this tenant's sending? (shown beside it)", "paused by an operator");
        if (reason !== null && await post(base + "/pause", { reason: reason }, "Pause")) route();
      });
    sendBtn.id = t.sending_paused ? "resume" : "pause";
    wrap.append(h("div", "page-head", el("h1", slug, "mono"), pill(t.sending_paused ? "paused" : "active"),
      el("span", t.sending_paused ? t.sending_paused_reason : t.name, "muted"),
      // A dependency away is a state its conversations wait out (no dead
      // letter, no halt): say so, and since when.
      t.handler_down_since ? el("span", "handler unreachable since " + when(t.handler_down_since) + (t.handler_down_reason ? ": " + t.handler_down_reason : ""), "pill st-dead") : null,
      t.number_down_since ? el("span", "WhatsApp number unreachable since " + when(t.number_down_since) + (t.number_down_reason ? ": " + t.number_down_reason : ""), "pill st-dead") : null,
      sendBtn,
      link("messages →", "#/messages?" + query({ tenant: slug })), link("dead letters →", "#/dead-letters?" + query({ tenant: slug }))));
    const once = onceBox();
    if (once) wrap.append(once);
    const cols = el("div", undefined, "cols");
    const ro = !isAdmin ? el("p", "Only an admin changes settings, credentials and keys; you are a " + me.role + ".", "hint") : null;
    const settings = smallForm("settings-form", [
      { name: "name", label: "name", value: t.name },
      { name: "handler_url", label: "handler URL", type: "url", placeholder: t.handler_url_set ? "set (not shown) — type to replace" : "none" },
      { name: "handler_mode", label: "handler mode", options: ["sync", "async", "notify"] },
      { name: "handler_timeout_ms", label: "handler timeout ms", type: "number", value: t.handler_timeout_ms },
      { name: "reply_deadline_ms", label: "reply deadline ms", type: "number", value: t.reply_deadline_ms },
      { name: "on_dead_letter", label: "on dead letter", options: ["halt", "skip"] },
      { name: "ambiguous", label: "ambiguous sends", options: ["reconcile", "resend"] },
      { name: "max_attempts", label: "max attempts", type: "number", value: t.max_attempts },
      { name: "send_rate", label: "send rate /s (0 unpaced)", type: "number", value: t.send_rate },
      { name: "pair_gap_ms", label: "pair gap ms", type: "number", value: t.pair_gap_ms },
      { name: "weight", label: "weight", type: "number", value: t.weight },
      { name: "max_concurrency", label: "max concurrency (0 none)", type: "number", value: t.max_concurrency },
      { name: "retention", label: "retention", value: t.retention },
      { name: "events_url", label: "events URL", type: "url", placeholder: t.events_url_set ? "set (not shown) — type to replace" : "none" },
      { name: "mark_read", label: "mark read + typing before replies", options: ["off", "on"] },
    ], "Save settings", async (v) => {
      const body = {};
      for (const k of ["name", "on_dead_letter", "ambiguous", "retention", "handler_mode"]) body[k] = v[k];
      for (const k of ["max_attempts", "send_rate", "pair_gap_ms", "weight", "max_concurrency", "handler_timeout_ms", "reply_deadline_ms"]) if (v[k] !== "") body[k] = Number(v[k]);
      if (v.handler_url) body.handler_url = v.handler_url;
      if (v.events_url) body.events_url = v.events_url;
      body.mark_read = v.mark_read === "on";
      if (await post(base + "/settings", body, "Save settings")) { notice("Settings of " + slug + " saved."); route(); }
    });
    settings.elements.handler_mode.value = t.handler_mode;
    settings.elements.on_dead_letter.value = t.on_dead_letter;
    settings.elements.ambiguous.value = t.ambiguous;
    settings.elements.mark_read.value = t.mark_read ? "on" : "off";
    const cats = Object.entries((t.usage && t.usage.categories) || {});
    const usage = el("p", "Usage this month: " + (cats.length
      ? cats.map(([c, n]) => c + " " + n.billable + " billable, " + n.non_billable + " free").join("; ")
      : "no priced statuses yet"), "muted");
    usage.id = "usage";
    cols.append(card("Settings", ro, settings, usage));

    const right = el("div", undefined, "stack");
    const cred = smallForm("cred-form", [
      { name: "phone_number_id", label: "phone number id" },
      { name: "access_token", label: "access token", type: "password" },
      { name: "app_secret", label: "app secret", type: "password" },
      { name: "verify_token", label: "verify token", type: "password" },
    ], t.whatsapp === "set" ? "Replace credential" : "Set credential", async (v, f) => {
      const ok = await post(base + "/credentials/whatsapp", v, "Set credential");
      f.reset(); // write-only: the values leave the page either way
      if (ok) route();
    });
    const credState = el("strong", t.whatsapp);
    credState.id = "cred-state";
    const wa = card("WhatsApp credential", dl([["credential", h("span", "", credState, t.whatsapp === "set" && isAdmin ? button("Delete", "skip small", async () => {
      if (confirm("Delete " + slug + "'s WhatsApp credential? Its sends stop until a new one is set.") && await post(base + "/credentials/whatsapp/delete", {}, "Delete credential")) route();
    }) : null)], ["callback URL for Meta", el("code", t.webhook_url, "webhook-url")], ["verify token", t.verify_token_set ? "set" : "not set"]]), isAdmin ? cred : null);
    right.append(wa);
    const authState = t.handler_auth === "header" ? "Header Auth (header " + t.handler_auth_header + ")" : t.handler_auth === "basic" ? "Basic Auth" : t.handler_auth;
    const auth = smallForm("auth-form", [
      { name: "kind", label: "n8n credential", options: ["Header Auth", "Basic Auth"] },
      { name: "first", label: "header name / user", placeholder: "X-N8N-Auth" },
      { name: "second", label: "value / password", type: "password" },
    ], t.handler_auth === "none" ? "Set handler auth" : "Replace handler auth", async (v, f) => {
      const body = v.kind === "Basic Auth" ? { basic_user: v.first, basic_password: v.second } : { header: v.first, value: v.second };
      const ok = await post(base + "/credentials/handler_auth", body, "Set handler auth");
      f.reset();
      if (ok) route();
    });
    const authStateEl = el("strong", authState);
    authStateEl.id = "auth-state";
    right.append(card("Handler auth", el("p", "How ordo authenticates to the tenant's handler (n8n's Header Auth or Basic Auth on the Webhook node). Stored encrypted, never shown.", "hint"),
      dl([["current", h("span", "", authStateEl, t.handler_auth !== "none" && isAdmin ? button("Delete", "skip small", async () => {
        if (confirm("Delete " + slug + "'s handler auth?") && await post(base + "/credentials/handler_auth/delete", {}, "Delete handler auth")) route();
      }) : null)]]), isAdmin ? auth : null));
    const keys = table(["prefix", "created", "state", ""], t.api_keys.map((k) => ({
      id: k.prefix,
      cells: [td(el("span", k.prefix), "mono"), when(k.created_at), pill(k.revoked_at ? "revoked" : "active"),
        !k.revoked_at && isAdmin ? button("Revoke", "skip small revoke", async () => {
          if (confirm("Revoke API key " + k.prefix + "? Calls with it fail at once.") && await post(base + "/api-keys/" + enc(k.prefix) + "/revoke", {}, "Revoke key")) route();
        }) : ""],
    })), "No keys.");
    keys.id = "keys";
    const newKey = isAdmin ? button("New API key", "", async () => {
      const r = await post(base + "/api-keys", {}, "New API key");
      if (r) { shownOnce = { slug: slug, key: r.api_key }; route(); }
    }) : null;
    right.append(card(h("h2", "", "API keys ", newKey), keys));
    cols.append(right);
    wrap.append(cols);
    if (!isAdmin) for (const f of wrap.querySelectorAll("form")) for (const x of f.elements) x.disabled = true;
    return wrap;
  }

  // ---- audit ----
  async function viewAudit(r) {
    const p = r.params;
    const page = await getJSON("audit?" + query({ tenant: p.tenant, actor: p.actor, action: p.action, before: p.before, limit: PAGE }));
    const form = filterForm("audit-form", [
      { name: "actor", label: "operator", placeholder: "admin:alice, cli, api:acme" },
      { name: "tenant", label: "tenant", options: tenantOptions() },
      { name: "action", label: "action", placeholder: "dead_letter.replay" },
    ], p, (v) => go("#/audit?" + query(v)));
    const rows = page.items.map((a) => {
      const det = a.details && Object.keys(a.details).length ? JSON.stringify(a.details) : "";
      const who = a.actor.startsWith("admin:") ? a.actor.slice(6) : a.actor;
      return {
        id: a.id,
        cells: [stamp(a.at), link(who, "#/audit?" + query({ actor: a.actor }), "actor"), el("span", a.action, "mono"), a.tenant || "",
          a.message_id && a.tenant ? link(a.message_id, msgHref(a.tenant, a.message_id), "mono") : (a.conversation_id || ""), td(el("span", det), "text mono muted")],
      };
    });
    const t = table(["when", "who", "what", "tenant", "subject", "details"], rows, "No operator actions match.", "audit-table");
    t.querySelectorAll("tbody tr").forEach((tr, i) => { if (page.items[i]) { tr.dataset.action = page.items[i].action; tr.dataset.actor = page.items[i].actor; } });
    const pager = el("p", undefined, "pager");
    if (p.before) pager.append(link("← newest", "#/audit?" + query({ ...p, before: "" })), " ");
    if (page.next) pager.append(link("older →", "#/audit?" + query({ ...p, before: page.next }), "next"));
    const c = card("Audit log", el("p", "Every operator action, written in the action's own transaction, with who did it.", "hint"), form, t, pager);
    c.id = "audit";
    return c;
  }

  // ---- login ----
  function loggedOut() {
    me = null;
    clearTimeout(timer);
    document.getElementById("app").hidden = true;
    document.getElementById("login").hidden = false;
    document.body.dataset.view = "login";
    document.body.dataset.loaded = "true";
  }
  async function loggedIn(session) {
    me = session;
    document.getElementById("login").hidden = true;
    document.getElementById("app").hidden = false;
    document.getElementById("who").replaceChildren(el("strong", session.operator), " ", pill(session.role));
    try { tenantSlugs = (await getJSON("tenants")).items.map((t) => t.slug); } catch (_) { /* shown by the view */ }
    route();
  }
  async function start() {
    try {
      const resp = await fetch(location.origin + "/admin/session", { cache: "no-store", credentials: "same-origin" });
      const s = resp.ok ? await resp.json() : null;
      if (s && s.operator) return loggedIn(s);
    } catch (_) { /* shown as logged out */ }
    loggedOut();
  }
  document.getElementById("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const v = formValues(f);
    const err = document.getElementById("login-error");
    const resp = await fetch(location.origin + "/admin/login", {
      method: "POST", credentials: "same-origin",
      headers: { "X-Ordo-Admin": "1", "Content-Type": "application/json" },
      body: JSON.stringify({ name: v.name, password: f.elements.password.value }),
    });
    f.elements.password.value = "";
    if (!resp.ok) {
      err.textContent = await errorOf(resp);
      err.hidden = false;
      return;
    }
    err.hidden = true;
    showError("");
    loggedIn(await resp.json());
  });
  document.getElementById("logout").addEventListener("click", async () => {
    await post("/admin/logout", {}, "Log out");
    notice("");
    loggedOut();
  });
  document.getElementById("quick-search").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = ev.target.elements.q.value.trim();
    go("#/messages?" + query({ q: q }));
  });
  document.addEventListener("keydown", (ev) => {
    const t = ev.target;
    if (ev.key === "/" && !(t instanceof HTMLInputElement || t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement) && me) {
      ev.preventDefault();
      document.querySelector("#quick-search input").focus();
    }
  });
  window.addEventListener("hashchange", () => { showError(""); notice(""); route(); });
  start();
})();
