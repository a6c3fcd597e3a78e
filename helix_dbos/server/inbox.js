// The approvals inbox (a file: the page's CSP allows no inline script).
"use strict";
(() => {
  const { el, apiCaller, partLinks } = window.helixPage;
  const api = apiCaller("reload the page");
  const POLL_MS = 3000;
  const MAX_STREAMS = 4;  // browsers allow ~6 HTTP/1.1 connections per host
  const TERMINAL = ["run_completed", "run_failed", "run_aborted", "run_interrupted"];
  const CHUNK_TYPES = ["text_delta", "thinking", "tool_start", "tool_end", "tool_approval_request",
    "client_tool_request", "human_input_request", "state_patch", "custom", "output", "error",
    "run_started", "run_resumed", "message_queued", "message_steered", ...TERMINAL];
  const me = localStorage.getItem("helix_inbox_name") || "inbox";
  const plural = (n, word) => n + " " + word + (n === 1 ? "" : "s");
  let loaded = false;
  const cards = new Map();    // run_id -> {el, run, resolved}
  const streams = new Map();  // run_id -> EventSource
  const json = (value) => JSON.stringify(value, null, 2);
  // A short input on one line ({ "path": "/tmp/x" }), a long one indented. JSON escapes
  // newlines inside strings, so every newline of the indented form is structure.
  const inputText = (value) => {
    const oneLine = (JSON.stringify(value, null, 1) ?? "null").replace(/\n\s*/g, " ");
    return oneLine.length <= 100 ? oneLine : (json(value) ?? "null");
  };

  // Times in the reader's locale, to the minute (the time alone today); the title has
  // the full date and time, seconds included.
  const CLOCK = { hour: "numeric", minute: "2-digit" };
  function time(iso) {
    const date = iso ? new Date(iso) : null;
    if (!date || Number.isNaN(date.getTime())) return "";
    const now = new Date();
    if (date.toDateString() === now.toDateString()) return date.toLocaleTimeString(undefined, CLOCK);
    const year = date.getFullYear() === now.getFullYear() ? {} : { year: "numeric" };
    return date.toLocaleString(undefined, { month: "short", day: "numeric", ...year, ...CLOCK });
  }
  const fullTime = (iso) => (iso ? new Date(iso).toLocaleString() : "");
  const stamp = (cls, prefix, iso) => el("span", { class: cls, title: fullTime(iso) || null }, iso ? prefix + time(iso) : "");

  // Bidi controls (U+202E...), zero-width and other invisible or blank-looking characters
  // are shown as escapes (\u202E) in a highlighted <mark>: what a human approves is what
  // they see. Newlines and tabs stay (JSON.stringify escapes them inside strings).
  const INVISIBLE = /[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}\u00A0\u1680\u2000-\u200A\u202F\u205F\u3000\u2800\u3164\uFFA0]/gu;
  const shown = (ch) => ch !== "\n" && ch !== "\t";
  const codeOf = (ch) => {
    const hex = ch.codePointAt(0).toString(16).toUpperCase();
    return hex.length > 4 ? "\\u{" + hex + "}" : "\\u" + hex.padStart(4, "0");
  };
  const hasInvisible = (text) => [...String(text).matchAll(INVISIBLE)].some((m) => shown(m[0]));
  function visible(text) {
    const value = String(text);
    const out = [];
    let last = 0;
    for (const match of value.matchAll(INVISIBLE)) {
      if (!shown(match[0])) continue;
      if (match.index > last) out.push(value.slice(last, match.index));
      const code = codeOf(match[0]);
      out.push(el("mark", { class: "invisible", title: "invisible character " + code.replace("\\u", "U+") }, code));
      last = match.index + match[0].length;
    }
    if (last < value.length) out.push(value.slice(last));
    return out;
  }

  // Ids are long (ses_ + 32 hex): a card shows a prefix (ses_45cc3353…), the title the
  // whole id, and a click shows it whole, selected, and copies it where the browser allows.
  function shortId(id) {
    const chars = Array.from(String(id || ""));
    const prefix = /^[A-Za-z]{1,8}_/.exec(chars.join(""));
    const keep = (prefix ? prefix[0].length : 0) + 8;
    return chars.length > keep + 2 ? chars.slice(0, keep).join("") + "…" : chars.join("");
  }
  function idChip(id, cls) {
    const full = String(id || "");
    const node = el("code", { class: "id " + (cls || ""), title: full + " (click to copy)", tabindex: "0" }, visible(shortId(full)));
    const toggle = () => {
      const open = !node.classList.contains("whole");
      node.classList.toggle("whole", open);
      node.replaceChildren(...visible(open ? full : shortId(full)));
      node.classList.remove("copied");
      if (!open) return;
      const range = document.createRange();
      range.selectNodeContents(node);
      window.getSelection().removeAllRanges();
      window.getSelection().addRange(range);
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(full).then(() => node.classList.add("copied"), () => {});
      }
    };
    node.addEventListener("click", toggle);
    node.addEventListener("keydown", (event) => { if (event.key === "Enter") toggle(); });
    return node;
  }

  function setConnection() {
    const conn = document.getElementById("conn");
    const live = [...streams.values()].some((s) => s.readyState === EventSource.OPEN);
    conn.textContent = live ? "live" : "polling every " + POLL_MS / 1000 + "s";
    conn.className = live ? "live" : "";
  }

  // --- cards ------------------------------------------------------------------

  // A run a control ended (a usage limit, a guardrail) says which: "failed (usage_limit)".
  function statusText(status, stopReason) {
    return stopReason && status === "failed" ? status + " (" + stopReason + ")" : status;
  }

  function renderCard(run) {
    const status = el("span", { class: "run-status " + run.status }, statusText(run.status, run.stop_reason));
    // A sub-agent's wait shows which root it is under, and how deep (search by the root finds it).
    const below = run.depth > 0
      ? [el("span", { class: "label" }, "sub-agent of"), idChip(run.root_session_id, "root"),
         el("span", { class: "label" }, "depth"), el("code", { class: "depth" }, run.depth)]
      : [];
    const card = el("div", { class: "card", "data-run-id": run.run_id, "data-session-id": run.session_id,
                             "data-root-session-id": run.root_session_id },
      el("div", { class: "card-head" },
        el("span", { class: "agent", title: run.agent_name }, run.agent_name),
        el("span", { class: "ids" },
          el("span", { class: "label" }, "session"), idChip(run.session_id),
          el("span", { class: "label" }, "run"), idChip(run.run_id), below),
        stamp("since", "waiting since ", run.waiting_since),
        runControls(run),
        status),
      el("div", { class: "calls" }),
      el("div", { class: "outcome" }),
      // Folded: the call is what needs an answer; the summary shows the user's last ask.
      el("div", { class: "card-foot" },
        el("details", { class: "conversation" },
          el("summary", {}, el("span", { class: "summary-count" }, "Conversation"), el("span", { class: "preview" })),
          el("ol", { class: "transcript" })),
        // Messages sent while this run is live (double texting), waiting for their turn.
        el("div", { class: "queued", hidden: "" }),
        el("div", { class: "last-event" }),
        el("a", { class: "timeline-link", href: "timeline?session_id=" + encodeURIComponent(run.session_id) }, "timeline")));
    card.dataset.agent = run.agent_name;
    const entry = { el: card, run, resolved: false };
    cards.set(run.run_id, entry);
    updateCalls(entry, run.tool_calls || []);
    loadTranscript(entry);
    loadQueue(entry);
    return entry;
  }

  async function loadQueue(entry) {
    try {
      const queued = (await api("queue?session_id=" + encodeURIComponent(entry.run.session_id)))
        .filter((m) => m.status === "queued");
      const box = entry.el.querySelector(".queued");
      box.hidden = queued.length === 0;
      box.replaceChildren(
        el("span", { class: "label" }, "Queued (" + plural(queued.length, "message") + ")"),
        el("ol", {}, ...queued.map((m) => el("li", { "data-message-id": m.message_id },
          el("span", { class: "role" }, "#" + m.position + " " + m.strategy),
          el("span", { class: "text" }, visible(m.content || ""))))));
    } catch (error) {
      entry.el.querySelector(".last-event").textContent = "queue: " + error.message;
    }
  }

  function runControls(run) {
    // Stop the run at its next step (at once while it waits), or cancel it now.
    const box = el("span", { class: "run-controls" });
    for (const [action, label] of [["interrupt", "Interrupt"], ["abort", "Abort"]]) {
      const button = el("button", { class: action === "abort" ? "danger" : "", "data-action": action }, label);
      button.addEventListener("click", async () => {
        box.querySelectorAll("button").forEach((b) => (b.disabled = true));
        try {
          await api(action, { session_id: run.session_id, reason: label.toLowerCase() + "ed from the inbox by " + me });
          const entry = cards.get(run.run_id);
          if (entry) { follow(entry); checkEnded(entry); }
        } catch (error) {
          box.querySelectorAll("button").forEach((b) => (b.disabled = false));
          const entry = cards.get(run.run_id);
          if (entry) entry.el.querySelector(".last-event").textContent = action + ": " + error.message;
        }
      });
      box.append(button);
    }
    return box;
  }

  function updateCalls(entry, calls) {
    const box = entry.el.querySelector(".calls");
    for (const call of calls) {
      let node = box.querySelector(`[data-tool-call-id="${CSS.escape(call.tool_call_id)}"]`);
      if (!node) {
        node = renderCall(entry, call);
        box.append(node);
      }
      if (call.answered) markAnswered(node);
    }
  }

  function renderCall(entry, call) {
    const errorLine = el("div", { class: "error" });
    const input = inputText(call.input);
    const hidden = hasInvisible(call.tool_name) || hasInvisible(input);
    const node = el("div", { class: "call", "data-tool-call-id": call.tool_call_id, "data-kind": call.kind },
      el("div", { class: "call-title" }, visible(call.tool_name), " ", el("span", { class: "kind" }, "(" + call.kind.replace("_", " ") + ")"),
        call.deadline_at ? stamp("since deadline", "deadline ", call.deadline_at) : null),
      hidden ? el("div", { class: "invisible-warning" }, "Contains invisible or direction-changing characters, shown highlighted as \\u escapes: read them before you answer.") : null,
      el("pre", { class: "input" }, visible(input)));
    const send = async (body, buttons) => {
      errorLine.textContent = "";
      buttons.forEach((b) => (b.disabled = true));
      try {
        await api("submit-tool-result", { session_id: entry.run.session_id, tool_call_id: call.tool_call_id, answered_by: me, ...body });
        markAnswered(node);
        follow(entry);
      } catch (error) {
        errorLine.textContent = error.message;
        buttons.forEach((b) => (b.disabled = false));
      }
    };
    const actions = el("div", { class: "actions" });
    if (call.kind === "approval") {
      const reason = el("input", { type: "text", name: "reason", placeholder: "reason (optional)" });
      const approve = el("button", { class: "primary", "data-action": "approve" }, "Approve");
      const deny = el("button", { class: "danger", "data-action": "deny" }, "Deny");
      const both = [approve, deny];
      const why = () => reason.value.trim() || undefined;
      approve.addEventListener("click", () => send({ kind: "approval-response", approved: true, reason: why() }, both));
      deny.addEventListener("click", () => send({ kind: "approval-response", approved: false, reason: why() }, both));
      actions.append(reason, approve, deny);
    } else if (call.kind === "client") {
      const area = el("textarea", { name: "result", placeholder: "the tool's result as JSON, e.g. {\"ok\": true}" });
      const submit = el("button", { class: "primary", "data-action": "submit-result" }, "Submit result");
      const fail = el("button", { class: "danger", "data-action": "submit-error" }, "Submit as error");
      const both = [submit, fail];
      submit.addEventListener("click", () => {
        let result;
        try { result = JSON.parse(area.value); } catch (error) { errorLine.textContent = "Not valid JSON: " + error.message; return; }
        send({ kind: "client-tool-result", result }, both);
      });
      fail.addEventListener("click", () => send({ kind: "client-tool-result", error: area.value.trim() || "failed" }, both));
      actions.append(area, submit, fail);
    } else {
      const answer = el("input", { type: "text", name: "human_input", placeholder: "your answer" });
      const submit = el("button", { class: "primary", "data-action": "answer" }, "Answer");
      submit.addEventListener("click", () => send({ kind: "human-input", human_input: answer.value }, [submit]));
      actions.append(answer, submit);
    }
    node.append(actions, errorLine);
    return node;
  }

  function markAnswered(node) {
    if (node.querySelector(".answered-note")) return;
    // The run may have ended (its stream said so) before this answer's response came back.
    const ended = node.classList.contains("answered");
    node.classList.add("answered");
    node.querySelectorAll("button, input, textarea").forEach((c) => (c.disabled = true));
    node.append(el("div", { class: "answered-note" }, ended ? "Answered." : "Answered; the run continues…"));
  }

  function resolve(entry, status, detail, stopReason) {
    if (entry.resolved) return;
    entry.resolved = true;
    const badge = entry.el.querySelector(".run-status");
    badge.textContent = statusText(status, stopReason);
    badge.className = "run-status " + status;
    entry.el.querySelectorAll(".call .actions, .run-controls").forEach((c) => c.remove());
    entry.el.querySelectorAll(".call").forEach((c) => c.classList.add("answered"));
    entry.el.querySelectorAll(".answered-note").forEach((n) => (n.textContent = "Answered."));
    entry.el.querySelector(".since").replaceWith(stamp("since", "finished ", new Date().toISOString()));
    if (detail !== undefined && detail !== null) {
      entry.el.querySelector(".outcome").replaceChildren(el("pre", { class: "output" }, visible(typeof detail === "string" ? detail : json(detail))));
    }
    // Out of "Waiting for a human", into its own list (no reload needed).
    document.getElementById("resolved").prepend(entry.el);
    document.getElementById("resolved-heading").hidden = false;
    loadTranscript(entry);
    refreshCounts();
    loadAnswered();
  }

  function refreshCounts() {
    const waiting = [...cards.values()].filter((c) => !c.resolved).length;
    document.getElementById("waiting-count").textContent = waiting;
    document.getElementById("waiting-count").title = plural(waiting, "run") + " waiting";
    document.getElementById("waiting-empty").hidden = !loaded || waiting > 0;
    document.getElementById("loading").hidden = loaded;
    refreshAgents();
    applyFilters();
  }

  // --- filters -----------------------------------------------------------------

  const agentFilter = document.getElementById("agent-filter");
  const sessionSearch = document.getElementById("session-search");
  const knownAgents = new Set();

  function refreshAgents() {
    const names = [...cards.values()].map((c) => c.run.agent_name)
      .concat([...document.querySelectorAll("#answered li")].map((li) => li.dataset.agent));
    for (const name of names) {
      if (!name || knownAgents.has(name)) continue;
      knownAgents.add(name);
      agentFilter.append(el("option", { value: name }, name));
    }
  }

  function applyFilters() {
    const agent = agentFilter.value;
    const needle = sessionSearch.value.trim().toLowerCase();
    const shown = (node) => (!agent || node.dataset.agent === agent)
      && (!needle || [node.dataset.sessionId, node.dataset.rootSessionId]
        .some((id) => (id || "").toLowerCase().includes(needle)));
    document.querySelectorAll(".card, #answered li").forEach((node) => (node.hidden = !shown(node)));
  }
  agentFilter.addEventListener("change", applyFilters);
  sessionSearch.addEventListener("input", applyFilters);

  // --- answered (from SQL: survives a reload) ------------------------------------

  const VERDICT = { approved: "approved", denied: "denied", completed: "result submitted",
    failed: "answered with an error", timed_out: "timed out", aborted: "aborted", interrupted: "interrupted" };

  async function loadAnswered() {
    try {
      const rows = await api("answered?limit=20");
      const list = document.getElementById("answered");
      list.replaceChildren(...rows.map((row) => {
        const verdict = row.answered_at || row.status !== "pending" ? (VERDICT[row.status] || (row.status === "pending" ? "answered" : row.status)) : "answered";
        // The server names a raw DBOS message "DBOS.send"; an API answer has answered_at.
        const who = row.answered_by || (row.answered_at ? "the Python API" : null);
        const when = row.answered_at || row.resolved_at;
        return el("li", { "data-tool-call-id": row.tool_call_id, "data-session-id": row.session_id, "data-agent": row.agent_name },
          el("span", { class: "call-title" }, visible(row.tool_name), " ", el("span", { class: "kind" }, "(" + row.kind.replace("_", " ") + ")")),
          el("span", { class: "verdict " + row.status }, verdict),
          el("span", { class: "who", title: fullTime(when) || null }, (who ? "by " + who + " · " : "") + time(when)),
          row.reason ? el("span", { class: "reason" }, "“", visible(row.reason), "”") : null,
          el("span", { class: "ids" }, el("span", { class: "label" }, "agent"), el("code", {}, row.agent_name), el("span", { class: "label" }, "session"), idChip(row.session_id)),
          el("span", { class: "run-status " + row.run_status }, row.run_status));
      }));
      document.getElementById("answered-empty").hidden = rows.length > 0;
      refreshAgents();
      applyFilters();
    } catch (error) {
      document.getElementById("answered-empty").hidden = false;
      document.getElementById("answered-empty").textContent = "Could not load: " + error.message;
    }
  }

  async function loadQueuedRuns() {
    // Runs waiting for a call slot of a limited model (docs/limits.md): queued, not failed.
    try {
      const rows = await api("runs?status=queued&limit=50");
      document.getElementById("queued-runs").replaceChildren(...rows.map((row) =>
        el("li", { "data-run-id": row.run_id, "data-session-id": row.session_id, "data-agent": row.agent_name },
          el("span", { class: "run-status queued" }, "queued"),
          el("span", { class: "call-title" }, "waiting for ", el("code", {}, row.queued_for)),
          row.tenant ? el("span", { class: "who" }, "tenant ", el("code", {}, row.tenant)) : null,
          el("span", { class: "ids" }, el("span", { class: "label" }, "agent"), el("code", {}, row.agent_name), el("span", { class: "label" }, "session"), idChip(row.session_id)))));
      document.getElementById("queued-heading").hidden = rows.length === 0;
      document.getElementById("queued-count").textContent = String(rows.length);
    } catch (error) {
      document.getElementById("queued-heading").hidden = true;
    }
  }

  async function loadTranscript(entry) {
    try {
      const messages = await api("sessions/" + encodeURIComponent(entry.run.session_id) + "/messages");
      const list = entry.el.querySelector(".transcript");
      list.replaceChildren(...messages.map((m) => renderMessage(m, entry.run.session_id)));
      entry.el.querySelector(".summary-count").textContent = "Conversation (" + plural(messages.length, "message") + ")";
      const ask = messages.filter((m) => m.role === "user" && m.content).pop();
      entry.el.querySelector(".preview").replaceChildren(...(ask ? visible(ask.content) : []));
      list.scrollTop = list.scrollHeight;
    } catch (error) {
      entry.el.querySelector(".last-event").textContent = "transcript: " + error.message;
    }
  }

  function renderMessage(m, sessionId) {
    const parts = [];
    if (m.content) parts.push(m.content);
    for (const call of m.tool_calls || []) parts.push("→ " + call.name + "(" + JSON.stringify(call.arguments) + ")");
    const role = m.role === "tool" ? "tool " + (m.tool_name || "") : m.role;
    return el("li", { class: m.is_error ? "is-error" : "", "data-role": m.role }, el("span", { class: "role" }, visible(role)), el("span", { class: "text" }, visible(parts.join("\n")), partLinks(sessionId, m, visible)));
  }

  // --- live updates -------------------------------------------------------------

  function follow(entry) {
    const runId = entry.run.run_id;
    if (streams.has(runId) || entry.resolved || typeof EventSource === "undefined") return;
    if (streams.size >= MAX_STREAMS) {
      const [oldest, source] = streams.entries().next().value;
      source.close();
      streams.delete(oldest);
    }
    // Same origin: the browser sends the HttpOnly cookie; no token in the URL (or the logs).
    const url = "sse?session_id=" + encodeURIComponent(entry.run.session_id) + "&run_id=" + encodeURIComponent(runId);
    const source = new EventSource(url);
    streams.set(runId, source);
    source.onopen = setConnection;
    source.onerror = setConnection;
    for (const type of CHUNK_TYPES) {
      // The browser also fires a plain "error" event, without data, when the connection
      // drops (it reconnects by itself): only a chunk carries data.
      source.addEventListener(type, (event) => {
        if (typeof event.data === "string") onChunk(entry, JSON.parse(event.data));
      });
    }
    source.addEventListener("end", () => {
      source.close();
      streams.delete(runId);
      setConnection();
    });
  }

  function onChunk(entry, chunk) {
    entry.el.querySelector(".last-event").textContent = "last event: " + chunk.type + " (#" + chunk.seq + ") at " + time(chunk.timestamp);
    if (TERMINAL.includes(chunk.type)) {
      const status = chunk.type.replace("run_", "");
      const p = chunk.payload;
      resolve(entry, status, p.output !== undefined ? p.output : p.error || p.reason, p.stop_reason);
    } else if (chunk.type.endsWith("_request")) {
      poll();
    } else if (chunk.type === "tool_end" || chunk.type === "output") {
      loadTranscript(entry);
    } else if (chunk.type === "message_queued" || chunk.type === "message_steered") {
      loadQueue(entry);
      loadTranscript(entry);
    }
  }

  async function poll() {
    try {
      const runs = await api("runs?status=waiting");
      const seen = new Set();
      for (const run of runs) {
        seen.add(run.run_id);
        const entry = cards.get(run.run_id);
        if (!entry) {
          document.getElementById("waiting").append(renderCard(run).el);
          follow(cards.get(run.run_id));
        } else if (!entry.resolved) {
          entry.run = run;
          updateCalls(entry, run.tool_calls || []);
        }
      }
      for (const entry of cards.values()) {
        if (!entry.resolved && !seen.has(entry.run.run_id)) checkEnded(entry);
      }
      loaded = true;
      refreshCounts();
      setConnection();
    } catch (error) {
      document.getElementById("conn").textContent = "offline: " + error.message;
    }
  }

  async function checkEnded(entry) {
    // Fallback when no stream told us: ask for the session's last run.
    const status = await api("status?session_id=" + encodeURIComponent(entry.run.session_id)).catch(() => null);
    const last = status && status.last_run;
    if (last && last.run_id === entry.run.run_id && !["running", "waiting", "paused"].includes(last.status)) {
      resolve(entry, last.status, last.output !== null ? last.output : last.error, last.stop_reason);
    }
  }

  poll();
  loadAnswered();
  loadQueuedRuns();
  setInterval(poll, POLL_MS);
  setInterval(loadQueuedRuns, POLL_MS);
  setInterval(loadAnswered, POLL_MS * 2);
})();
