// ordo's admin page: reads /admin/api/overview every few seconds and renders
// it. Data only ever reaches the page through textContent, never as HTML.
"use strict";

(function () {
  const REFRESH_MS = 3000;
  // URLs are built on location.origin: a page opened as http://user:pw@host/
  // has a base URL with credentials, and fetch refuses those.
  const api = (path) => location.origin + "/admin/api/" + path;
  const STATUSES = ["queued", "running", "done", "dead", "skipped", "active", "halted", "paused", "open", "replayed"];

  let busy = false; // an action is in flight: hold the refresh
  let timer = null;

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function pill(status) {
    const known = STATUSES.includes(status) ? status : "other";
    return el("span", status, "pill st-" + known);
  }

  function ago(iso) {
    if (!iso) return "";
    const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
    if (s < 60) return s + "s ago";
    if (s < 3600) return Math.floor(s / 60) + "m ago";
    if (s < 86400) return Math.floor(s / 3600) + "h ago";
    return Math.floor(s / 86400) + "d ago";
  }

  function timeCell(iso) {
    const td = el("td", ago(iso), "time");
    if (iso) {
      td.title = iso;
      td.dataset.at = iso;
    }
    return td;
  }

  // changed remembers each section's last data: a section is rebuilt only
  // when its data changed, so rows (and the button under the operator's
  // pointer) stay put between refreshes; relative times are updated in place.
  const last = {};
  function changed(section, data) {
    const json = JSON.stringify(data);
    if (last[section] === json) return false;
    last[section] = json;
    return true;
  }

  function tickTimes() {
    for (const td of document.querySelectorAll("td.time[data-at]")) td.textContent = ago(td.dataset.at);
  }

  // fill replaces a table body's rows; each row is a list of cells (a Node,
  // or a value shown as text).
  function fill(section, rows, emptyText) {
    const tbody = document.querySelector("#" + section + " tbody");
    const cols = document.querySelectorAll("#" + section + " thead th").length;
    const out = [];
    for (const r of rows) {
      const tr = el("tr");
      if (r.id) tr.dataset.id = r.id;
      if (r.cls) tr.className = r.cls;
      for (const c of r.cells) tr.append(c instanceof Node ? c : el("td", c));
      out.push(tr);
    }
    if (out.length === 0) {
      const td = el("td", emptyText, "empty");
      td.colSpan = cols;
      const tr = el("tr");
      tr.append(td);
      out.push(tr);
    }
    tbody.replaceChildren(...out);
  }

  function td(node, cls) {
    const c = el("td", undefined, cls);
    c.append(node);
    return c;
  }

  function actionButton(label, cls, id, action) {
    const b = el("button", label, cls);
    b.type = "button";
    b.dataset.action = action;
    b.addEventListener("click", () => resolve(id, action, b));
    return b;
  }

  function renderDeadLetters(list) {
    if (!changed("dead-letters", list)) return;
    const open = list.filter((d) => !d.resolved_at).length;
    document.getElementById("dead-letters-count").textContent = open ? open + " open" : "none open";
    fill("dead-letters", list.map((d) => {
      const state = el("td");
      const actions = el("td", undefined, "actions");
      if (d.resolved_at) {
        state.append(pill(d.resolution), el("span", " · message " + d.message_status, "muted"));
      } else {
        state.append(pill("open"));
        actions.append(actionButton("Replay", "replay", d.id, "replay"), actionButton("Skip", "skip", d.id, "skip"));
      }
      const reason = el("td", d.reason, "reason");
      if (d.last_error && d.last_error !== d.reason) reason.title = d.last_error;
      return {
        id: d.id,
        cls: d.resolved_at ? "resolved" : "open",
        cells: [d.id, d.tenant, el("td", d.conversation_id, "mono"), el("td", d.message_id, "mono"), d.seq, reason, d.attempts, timeCell(d.created_at), state, actions],
      };
    }), "No dead letters.");
  }

  function renderAttention(list) {
    if (!changed("attention", list)) return;
    document.getElementById("attention-count").textContent = list.length ? String(list.length) : "";
    fill("attention", list.map((c) => ({
      cls: c.halted_at ? "halted" : "",
      cells: [c.tenant, el("td", c.conversation_id, "mono"), c.head_seq, c.last_seq, el("td", c.backlog, "num"), td(pill(c.halted_at ? "halted" : "active"))],
    })), "Every conversation is caught up.");
  }

  function renderMessages(list) {
    if (!changed("messages", list)) return;
    fill("messages", list.map((m) => ({
      cells: [m.tenant, el("td", m.conversation_id, "mono"), el("td", m.message_id, "mono"), m.seq, m.direction, td(pill(m.status)), m.sends_done, timeCell(m.created_at), el("td", m.last_error, m.status === "dead" ? "reason" : "reason muted")],
    })), "No messages yet.");
  }

  function renderSandbox(on, list) {
    const section = document.getElementById("sandbox");
    section.hidden = !on;
    if (!on || !changed("sandbox", list)) return;
    document.getElementById("sandbox-count").textContent = list.length ? String(list.length) : "";
    fill("sandbox", list.map((s) => ({
      cells: [timeCell(s.created_at), s.phone_number_id, el("td", s.to, "mono"), s.type, el("td", s.text, "text"), el("td", s.wamid, "mono muted")],
    })), "Nothing sent yet.");
  }

  // sendingCell says whether the tenant's messages go out; a paused one
  // waits for `ordo tenant resume`.
  function sendingCell(t) {
    if (!t.sending_paused_at) return td(pill("active"));
    const c = td(pill("paused"));
    c.title = t.sending_paused_reason || "";
    c.append(el("span", " since " + ago(t.sending_paused_at), "muted"));
    return c;
  }

  function renderTenants(list) {
    if (!changed("tenants", list)) return;
    fill("tenants", list.map((t) => ({
      cls: t.sending_paused_at ? "halted" : "",
      cells: [el("td", t.slug, "mono"), t.name, sendingCell(t), t.handler_url_set ? "set" : "none", t.on_dead_letter, t.ambiguous, t.max_attempts,
        t.send_rate ? t.send_rate + "/s" : "unpaced", t.pair_gap_ms ? t.pair_gap_ms + " ms" : "off",
        t.weight, t.max_concurrency ? t.max_concurrency : "none", (t.credentials || []).join(", ") || "none", t.open_dead_letters],
    })), "No tenants.");
  }

  // showError shows msg, or with an empty msg clears the error of kind
  // (a refresh that works again does not hide a failed action's message).
  function showError(msg, kind) {
    const e = document.getElementById("error");
    if (!msg && e.dataset.kind !== kind) return;
    e.textContent = msg || "";
    e.dataset.kind = kind;
    e.hidden = !msg;
  }

  async function errorOf(resp) {
    try {
      const body = await resp.json();
      if (body && body.error && body.error.message) return resp.status + ": " + body.error.message;
    } catch (_) { /* not JSON */ }
    return "HTTP " + resp.status;
  }

  async function refresh() {
    clearTimeout(timer);
    if (!busy) {
      try {
        const resp = await fetch(api("overview"), { cache: "no-store" });
        if (!resp.ok) throw new Error(await errorOf(resp));
        const o = await resp.json();
        renderDeadLetters(o.dead_letters || []);
        renderAttention(o.attention || []);
        renderMessages(o.messages || []);
        renderSandbox(o.sandbox, o.sandbox_sends || []);
        renderTenants(o.tenants || []);
        tickTimes();
        document.getElementById("status").textContent = "updated " + new Date().toLocaleTimeString() + " · refreshes every " + REFRESH_MS / 1000 + "s";
        document.body.dataset.loaded = "true";
        showError("", "refresh");
      } catch (err) {
        showError("Refresh failed: " + err.message, "refresh");
      }
    }
    timer = setTimeout(refresh, REFRESH_MS);
  }

  async function resolve(id, action, button) {
    if (action === "skip" && !confirm("Skip dead letter #" + id + "? Its message will not be sent, and its conversation goes on.")) return;
    busy = true;
    for (const b of button.parentElement.querySelectorAll("button")) b.disabled = true;
    try {
      const resp = await fetch(api("dead-letters/" + encodeURIComponent(id) + "/" + action), {
        method: "POST",
        headers: { "X-Ordo-Admin": "1" },
      });
      if (!resp.ok) throw new Error(await errorOf(resp));
      showError("", "action");
    } catch (err) {
      showError(action + " #" + id + " failed: " + err.message, "action");
    } finally {
      busy = false;
      refresh();
    }
  }

  refresh();
})();
