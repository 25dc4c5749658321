// ordo's admin page: reads /admin/api/overview every few seconds and renders
// it. Data only ever reaches the page through textContent, never as HTML.
"use strict";

(function () {
  const REFRESH_MS = 3000;
  const PAGE = 25; // rows per "load more"
  // URLs are built on location.origin: a page opened as http://user:pw@host/
  // has a base URL with credentials, and fetch refuses those.
  const api = (path) => location.origin + "/admin/api/" + path;
  const STATUSES = ["queued", "running", "waiting", "done", "dead", "skipped", "active", "halted", "paused", "open", "replayed"];

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
        t.weight, t.max_concurrency ? t.max_concurrency : "none", (t.credentials || []).join(", ") || "none", t.open_dead_letters,
        td(button("Manage", "manage", () => openTenant(t.slug)))],
      id: t.slug,
    })), "No tenants.");
    // The tenant pickers of the filters follow the list, keeping their choice.
    for (const sel of document.querySelectorAll("select.tenant-select")) {
      const keep = sel.value;
      const opts = [el("option", "any")];
      opts[0].value = "";
      for (const t of list) opts.push(el("option", t.slug));
      sel.replaceChildren(...opts);
      sel.value = keep;
    }
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
        await refreshTiles();
        if (!auditPaged) await loadAudit(false);
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

  // ---- the console: reads on demand, writes through post() ----

  function button(label, cls, onClick) {
    const b = el("button", label, cls);
    b.type = "button";
    b.addEventListener("click", onClick);
    return b;
  }

  async function getJSON(path) {
    const resp = await fetch(api(path), { cache: "no-store" });
    if (!resp.ok) throw new Error(await errorOf(resp));
    return resp.json();
  }

  // post sends a write with the anti-CSRF header; a failure is shown and
  // returns null.
  async function post(path, body, what) {
    busy = true;
    try {
      const resp = await fetch(api(path), {
        method: "POST",
        headers: { "X-Ordo-Admin": "1", "Content-Type": "application/json" },
        body: JSON.stringify(body || {}),
      });
      if (!resp.ok) throw new Error(await errorOf(resp));
      showError("", "action");
      return await resp.json();
    } catch (err) {
      showError(what + " failed: " + err.message, "action");
      return null;
    } finally {
      busy = false;
      auditPaged = false;
      refresh();
    }
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== "" && v !== undefined && v !== null && v !== 0) q.set(k, v);
    return q.toString();
  }

  function formValues(form) {
    const out = {};
    for (const [k, v] of new FormData(form).entries()) out[k] = typeof v === "string" ? v.trim() : v;
    return out;
  }

  function ms(v) {
    if (v === null || v === undefined) return "–";
    return v < 1000 ? Math.round(v) + " ms" : (v / 1000).toFixed(1) + " s";
  }

  function rate(v) { return v ? v.toFixed(1) : "0"; }

  async function refreshTiles() {
    try {
      const t = await getJSON("tiles");
      const overallChanged = changed("tiles", t.overall);
      if (!changed("tiles-list", t.tenants) && !overallChanged) return;
      document.getElementById("tiles-window").textContent = "last " + t.window_s / 60 + " min" + (t.capped ? " (rates are lower bounds)" : "");
      const o = t.overall;
      const tiles = [["accepted/min", rate(o.accepted_per_minute)], ["sent/min", rate(o.sent_per_minute)],
        ["accept→send p50", ms(o.accept_to_send_p50_ms)], ["p99", ms(o.accept_to_send_p99_ms)],
        ["backlog", o.backlog], ["oldest unfinished", o.oldest_unfinished ? ago(o.oldest_unfinished) : "none"],
        ["open dead letters", o.open_dead_letters]];
      document.getElementById("tile-overall").replaceChildren(...tiles.map(([label, value]) => {
        const d = el("div", undefined, "tile");
        d.dataset.tile = label;
        d.append(el("b", value), el("span", label));
        return d;
      }));
      fill("tiles", t.tenants.map((x) => ({
        id: x.tenant,
        cells: [el("td", x.tenant, "mono"), rate(x.accepted_per_minute), rate(x.sent_per_minute), ms(x.accept_to_send_p50_ms), ms(x.accept_to_send_p99_ms),
          x.backlog, x.oldest_unfinished ? timeCell(x.oldest_unfinished) : "none", x.open_dead_letters],
      })), "No tenants.");
    } catch (err) {
      showError("Tiles failed: " + err.message, "refresh");
    }
  }

  // Search, with keyset "load more".
  let searchNext = 0;
  let searchParams = {};
  function isoOf(local) { return local ? new Date(local).toISOString().replace(/\.\d{3}Z$/, "Z") : ""; }
  async function search(more) {
    if (!more) {
      const f = formValues(document.getElementById("search-form"));
      searchParams = { q: f.q, tenant: f.tenant, status: f.status, since: isoOf(f.since), until: isoOf(f.until) };
      searchNext = 0;
    }
    try {
      const p = await getJSON("messages?" + query({ ...searchParams, before: more ? searchNext : 0, limit: PAGE }));
      const tbody = document.querySelector("#search tbody");
      const rows = p.items.map((m) => {
        const tr = el("tr");
        tr.dataset.id = m.message_id;
        const conv = el("a", m.conversation_id, "conv mono");
        conv.addEventListener("click", () => openTimeline(m.tenant, m.conversation_id));
        tr.append(el("td", m.tenant), td(conv), el("td", m.message_id, "mono"), el("td", m.seq), el("td", m.direction), td(pill(m.status)),
          timeCell(m.created_at), el("td", (m.wamids || []).join(" "), "mono muted"), el("td", m.last_error, "reason"));
        return tr;
      });
      if (more) tbody.append(...rows);
      else if (rows.length) tbody.replaceChildren(...rows);
      else fill("search", [], "Nothing found.");
      searchNext = p.next || 0;
      document.getElementById("search-more").hidden = !searchNext;
      showError("", "action");
    } catch (err) {
      showError("Search failed: " + err.message, "action");
    }
  }

  // A conversation's timeline.
  let timelineOf = null;
  function stepLine(s) {
    const li = el("li");
    li.append(el("strong", s.kind === "handle" ? "handler call" : "send " + s.idx), " ", pill(s.status),
      el("span", " · " + s.attempts + " attempt" + (s.attempts === 1 ? "" : "s"), "muted"));
    if (s.started_at) li.append(el("span", " · started " + s.started_at, "muted"));
    if (s.finished_at) li.append(el("span", " · finished " + s.finished_at, "muted"));
    if (s.provider_message_id) li.append(el("span", " · " + s.provider_message_id, "mono muted"));
    if (s.sandbox) li.append(" ", pill("sandbox"), el("span", " (ordo dev's stand-in: nothing reached WhatsApp)", "muted"));
    if (s.provider_status) li.append(" ", pill(s.provider_status), el("span", s.provider_status_at ? " at " + s.provider_status_at : "", "muted"));
    if (s.ambiguous_count) li.append(el("span", " · " + s.ambiguous_count + " ambiguous", "muted"));
    if (s.status === "waiting" && s.replies_due_at) li.append(el("span", " · replies due by " + s.replies_due_at, "muted"));
    for (const a of s.errors || []) {
      li.append(el("div", "attempt " + (a.attempt ?? "?") + " · " + (a.at || "") + " · " + (a.error || ""), "attempt"));
    }
    return li;
  }
  function messageItem(m) {
    const li = el("li", undefined, "msg");
    li.dataset.seq = m.seq;
    li.dataset.id = m.message_id;
    li.append(el("strong", "#" + m.seq + " "), el("span", m.message_id, "mono"), " ", el("span", m.direction, "muted"), " ", pill(m.status),
      el("span", " · accepted " + m.created_at + (m.finished_at ? " · finished " + m.finished_at : "") + (m.pruned ? " · content pruned" : ""), "muted"));
    const steps = el("ul", undefined, "steps");
    for (const s of m.steps) steps.append(stepLine(s));
    li.append(steps);
    for (const d of m.dead_letters) {
      li.append(el("div", "dead letter #" + d.id + " · " + d.created_at + " · " + d.reason + (d.resolved_at ? " · " + d.resolution + " " + d.resolved_at : " · open"), "dl"));
    }
    return li;
  }
  // openTimeline opens around the head (where a stuck conversation is
  // stuck); from = "start" opens at seq 1, more appends the next page.
  async function openTimeline(tenant, conv, more, from) {
    try {
      let path = "timeline?" + query({ tenant: tenant, conversation_id: conv });
      if (more) path += "&after_seq=" + timelineOf.next;
      else if (from === "start") path += "&after_seq=0";
      const tl = await getJSON(path);
      timelineOf = { tenant: tenant, conv: conv, next: tl.next || 0 };
      const sec = document.getElementById("timeline");
      sec.hidden = false;
      document.getElementById("timeline-title").textContent = tenant + " / " + conv;
      const drain = tl.drain ? "drain due " + tl.drain.due_at + (tl.drain.running ? ", running" : ", waiting") + (tl.drain.woken ? ", woken" : "") : "no drain (nothing to run)";
      document.getElementById("timeline-head").textContent = "head seq " + tl.head_seq + " · last seq " + tl.last_seq + " · fence " + tl.fence +
        (tl.halted_at ? " · HALTED since " + tl.halted_at : " · active") + (tl.paused_wait ? " · waiting for the tenant's sending to resume" : "") + " · " + drain +
        (tl.after_seq ? " · showing after seq " + tl.after_seq : "");
      const list = document.getElementById("timeline-messages");
      const items = tl.messages.map(messageItem);
      if (more) list.append(...items);
      else list.replaceChildren(...items);
      document.getElementById("timeline-more").hidden = !timelineOf.next;
      if (!more) document.getElementById("timeline-start").hidden = tl.after_seq === 0;
      if (!more) sec.scrollIntoView();
      showError("", "action");
    } catch (err) {
      showError("Timeline failed: " + err.message, "action");
    }
  }

  // Dead letters by filter: a count preview, keyset pages, bulk actions.
  let dlFilter = null;
  let dlNext = 0;
  async function dlLoad(more) {
    if (!more) {
      const f = formValues(document.getElementById("dl-form"));
      dlFilter = { tenant: f.tenant, reason: f.reason, min_age: f.min_age, state: f.state };
      dlNext = 0;
    }
    try {
      const p = await getJSON("dead-letters?" + query({ ...dlFilter, after: more ? dlNext : 0, limit: PAGE }));
      const tbody = document.querySelector("#dl-console tbody");
      const rows = p.items.map((d) => {
        const tr = el("tr", undefined, d.resolved_at ? "resolved" : "open");
        tr.dataset.id = d.id;
        const conv = el("a", d.conversation_id, "conv mono");
        conv.addEventListener("click", () => openTimeline(d.tenant, d.conversation_id));
        const state = td(pill(d.resolved_at ? d.resolution : "open"));
        tr.append(el("td", d.id), el("td", d.tenant), td(conv), el("td", d.message_id, "mono"), el("td", d.seq), el("td", d.reason, "reason"),
          el("td", d.attempts), timeCell(d.created_at), state);
        return tr;
      });
      if (more) tbody.append(...rows);
      else if (rows.length) tbody.replaceChildren(...rows);
      else fill("dl-console", [], "No dead letters match.");
      dlNext = p.next || 0;
      document.getElementById("dl-more").hidden = !dlNext;
      if (!more) {
        const open = dlFilter.state === "open";
        document.getElementById("dl-preview").textContent = (p.capped ? p.total + "+" : p.total) + " match" + (open ? "" : " (bulk actions take open ones only)");
        document.getElementById("dl-preview").dataset.total = p.total;
        document.getElementById("dl-replay-all").disabled = !open || !p.total;
        document.getElementById("dl-skip-all").disabled = !open || !p.total;
      }
      showError("", "action");
    } catch (err) {
      showError("Dead letters failed: " + err.message, "action");
    }
  }
  async function dlBulk(action) {
    if (!dlFilter) return;
    const n = document.getElementById("dl-preview").dataset.total;
    const what = action === "replay" ? "Replay" : "Skip";
    if (!confirm(what + " all " + n + " open dead letters matching this filter?" + (action === "skip" ? " Their messages will not be sent." : ""))) return;
    const body = { action: action, tenant: dlFilter.tenant, reason: dlFilter.reason, min_age: dlFilter.min_age };
    let total = 0;
    for (;;) {
      const r = await post("dead-letters/bulk", body, what + " all");
      if (!r) break;
      total += r.resolved;
      document.getElementById("dl-preview").textContent = total + " " + (action === "replay" ? "replayed" : "skipped") + (r.more ? ", going on…" : "");
      if (!r.more) break;
    }
    document.getElementById("dl-console").dataset.lastBulk = action + ":" + total;
    await dlLoad(false);
  }

  // Tenants: onboarding and the detail panel.
  async function createTenant(ev) {
    ev.preventDefault();
    const form = ev.target;
    const f = formValues(form);
    const r = await post("tenants", { slug: f.slug, name: f.name, handler_url: f.handler_url }, "Create tenant");
    if (!r) return;
    form.reset();
    showOnce(r.tenant.slug, r.api_key, r.handler_secret);
    openTenant(r.tenant.slug);
  }
  function showOnce(slug, key, secret) {
    document.getElementById("once-tenant").textContent = slug;
    document.getElementById("once-key").textContent = key;
    document.getElementById("once-secret").textContent = secret || "";
    document.getElementById("once-secret").hidden = !secret;
    document.getElementById("once-secret-label").hidden = !secret;
    document.getElementById("secret-once").hidden = false;
    document.getElementById("secret-once").scrollIntoView();
  }
  function hideOnce() {
    for (const id of ["once-tenant", "once-key", "once-secret"]) document.getElementById(id).textContent = "";
    document.getElementById("secret-once").hidden = true;
  }

  let detailSlug = null;
  async function openTenant(slug) {
    try {
      const t = await getJSON("tenants/" + encodeURIComponent(slug));
      detailSlug = slug;
      const sec = document.getElementById("tenant-detail");
      sec.hidden = false;
      sec.dataset.slug = slug;
      document.getElementById("detail-slug").textContent = slug;
      document.getElementById("detail-sending").replaceChildren(pill(t.sending_paused ? "paused" : "active"),
        el("span", t.sending_paused ? " " + t.sending_paused_reason : "", "muted"));
      const form = document.getElementById("settings-form");
      for (const k of ["name", "on_dead_letter", "ambiguous", "max_attempts", "send_rate", "pair_gap_ms", "weight", "max_concurrency", "retention", "handler_mode", "handler_timeout_ms", "reply_deadline_ms"]) {
        form.elements[k].value = t[k];
      }
      form.elements.handler_url.value = "";
      form.elements.handler_url.placeholder = t.handler_url_set ? "set (not shown) — type to replace" : "none";
      form.elements.handler_url_remove.checked = false;
      form.elements.events_url.value = "";
      form.elements.events_url.placeholder = t.events_url_set ? "set (not shown) — type to replace" : "none";
      document.getElementById("cred-state").textContent = t.whatsapp;
      const missing = Object.entries(t.whatsapp_fields || {}).filter(([, v]) => !v).map(([k]) => k);
      document.getElementById("cred-fields").textContent = missing.length ? "missing: " + missing.join(", ") : "";
      document.getElementById("webhook-url").textContent = t.webhook_url;
      document.getElementById("verify-state").textContent = t.verify_token_set ? "set" : "not set";
      document.getElementById("pause").hidden = t.sending_paused;
      document.getElementById("resume").hidden = !t.sending_paused;
      const rows = t.api_keys.map((k) => {
        const tr = el("tr");
        tr.dataset.id = k.prefix;
        const act = el("td");
        if (!k.revoked_at) act.append(button("Revoke", "skip revoke", () => revokeKey(k.prefix)));
        tr.append(el("td", k.prefix, "mono"), timeCell(k.created_at), td(pill(k.revoked_at ? "revoked" : "active")), act);
        return tr;
      });
      document.querySelector("#keys tbody").replaceChildren(...rows);
      tickTimes();
    } catch (err) {
      showError("Tenant " + slug + ": " + err.message, "action");
    }
  }
  async function saveSettings(ev) {
    ev.preventDefault();
    const f = formValues(ev.target);
    const body = {};
    for (const k of ["name", "on_dead_letter", "ambiguous", "retention", "handler_mode"]) body[k] = f[k];
    for (const k of ["max_attempts", "send_rate", "pair_gap_ms", "weight", "max_concurrency", "handler_timeout_ms", "reply_deadline_ms"]) {
      if (f[k] !== "") body[k] = Number(f[k]);
    }
    if (f.handler_url_remove) body.handler_url = "";
    else if (f.handler_url) body.handler_url = f.handler_url;
    if (f.events_url) body.events_url = f.events_url;
    if (await post("tenants/" + encodeURIComponent(detailSlug) + "/settings", body, "Save settings")) openTenant(detailSlug);
  }
  async function setCredential(ev) {
    ev.preventDefault();
    const form = ev.target;
    const r = await post("tenants/" + encodeURIComponent(detailSlug) + "/credentials/whatsapp", formValues(form), "Set credential");
    // Write-only: the values leave the page whether or not they were stored.
    form.reset();
    if (r) openTenant(detailSlug);
  }
  async function newKey() {
    const r = await post("tenants/" + encodeURIComponent(detailSlug) + "/api-keys", {}, "New API key");
    if (!r) return;
    showOnce(detailSlug, r.api_key, "");
    openTenant(detailSlug);
  }
  async function revokeKey(prefix) {
    if (!confirm("Revoke API key " + prefix + "? Calls with it fail at once.")) return;
    if (await post("tenants/" + encodeURIComponent(detailSlug) + "/api-keys/" + encodeURIComponent(prefix) + "/revoke", {}, "Revoke key")) openTenant(detailSlug);
  }
  async function pauseResume(action) {
    let body = {};
    if (action === "pause") {
      const reason = prompt("Why pause this tenant's sending? (shown beside it)", "paused by an operator");
      if (reason === null) return;
      body = { reason: reason };
    }
    if (await post("tenants/" + encodeURIComponent(detailSlug) + "/" + action, body, action)) openTenant(detailSlug);
  }

  // The audit log: the first page follows the refresh until "load more".
  let auditPaged = false;
  let auditNext = 0;
  async function loadAudit(more) {
    try {
      const tenant = document.querySelector("#audit-form select[name=tenant]").value;
      const p = await getJSON("audit?" + query({ tenant: tenant, before: more ? auditNext : 0, limit: PAGE }));
      if (!more && !changed("audit", p.items)) return;
      const rows = p.items.map((a) => {
        const tr = el("tr");
        tr.dataset.id = a.id;
        tr.dataset.action = a.action;
        const det = a.details && Object.keys(a.details).length ? JSON.stringify(a.details) : "";
        tr.append(el("td", a.id), timeCell(a.at), el("td", a.actor, "mono"), el("td", a.action), el("td", a.tenant || ""),
          el("td", a.conversation_id || "", "mono"), el("td", a.message_id || "", "mono"), el("td", a.dead_letter_id || ""), el("td", det, "text mono muted"));
        return tr;
      });
      const tbody = document.querySelector("#audit tbody");
      if (more) tbody.append(...rows);
      else if (rows.length) tbody.replaceChildren(...rows);
      else fill("audit", [], "No operator actions yet.");
      auditNext = p.next || 0;
      auditPaged = more || auditPaged;
      document.getElementById("audit-more").hidden = !auditNext;
    } catch (err) {
      showError("Audit log failed: " + err.message, "refresh");
    }
  }

  function on(id, ev, f) { document.getElementById(id).addEventListener(ev, f); }
  on("search-form", "submit", (ev) => { ev.preventDefault(); search(false); });
  on("search-more", "click", () => search(true));
  on("timeline-more", "click", () => openTimeline(timelineOf.tenant, timelineOf.conv, true));
  on("timeline-start", "click", () => openTimeline(timelineOf.tenant, timelineOf.conv, false, "start"));
  on("timeline-close", "click", () => { document.getElementById("timeline").hidden = true; });
  on("dl-form", "submit", (ev) => { ev.preventDefault(); dlLoad(false); });
  on("dl-more", "click", () => dlLoad(true));
  on("dl-replay-all", "click", () => dlBulk("replay"));
  on("dl-skip-all", "click", () => dlBulk("skip"));
  on("tenant-form", "submit", createTenant);
  on("once-done", "click", hideOnce);
  on("settings-form", "submit", saveSettings);
  on("cred-form", "submit", setCredential);
  on("key-new", "click", newKey);
  on("pause", "click", () => pauseResume("pause"));
  on("resume", "click", () => pauseResume("resume"));
  on("detail-close", "click", () => { document.getElementById("tenant-detail").hidden = true; });
  on("audit-more", "click", () => loadAudit(true));
  on("audit-form", "change", () => { auditPaged = false; loadAudit(false); });
  on("audit-form", "submit", (ev) => ev.preventDefault());

  refresh();
})();
