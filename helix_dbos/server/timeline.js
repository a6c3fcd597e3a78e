// The session timeline: a session's runs and steps, one checkpoint each, with the
// messages, state changes and usage of each step, and "fork from here" on each
// (a file: the page's CSP allows no inline script). It reads the same JSON API as any
// client: /sessions/{id}/messages, /sessions/{id}/checkpoints, POST /sessions/{id}/fork.
"use strict";
(() => {
  const { el, apiCaller, partLinks } = window.helixPage;
  const api = apiCaller("open the inbox");
  const params = new URLSearchParams(location.search);
  const sessionId = params.get("session_id") || "";

  const sessionPath = (id) => "sessions/" + encodeURIComponent(id);
  const timelineUrl = (id) => "timeline?session_id=" + encodeURIComponent(id);

  function renderMessage(m) {
    const parts = [];
    if (m.content) parts.push(m.content);
    for (const call of m.tool_calls || []) parts.push("→ " + call.name + "(" + JSON.stringify(call.arguments) + ")");
    const role = m.role === "tool" ? "tool " + (m.tool_name || "") : m.role;
    return el("li", { class: m.is_error ? "is-error" : "", "data-role": m.role, "data-seq": m.seq },
      el("span", { class: "role" }, role), el("span", { class: "text" }, parts.join("\n"), partLinks(sessionId, m, (text) => text)));
  }

  // What a step added: its calls and tokens, against the last full step before it (a
  // head's usage counts its step's model call; the step after it counts it again).
  function usageDelta(cp, base) {
    const u = cp.usage, b = base ? base.usage : {};
    const d = (k) => (u[k] || 0) - (b[k] || 0);
    return d("llm_calls") + " llm · " + d("tool_calls") + " tool · " + (d("input_tokens") + d("output_tokens")) + " tokens";
  }

  async function fork(cp, button) {
    button.disabled = true;
    try {
      const made = await api(sessionPath(sessionId) + "/fork", { at: cp.checkpoint_id });
      const note = document.getElementById("forked");
      note.hidden = false;
      note.replaceChildren("Forked at " + cp.checkpoint_id + ": ",
        el("a", { href: timelineUrl(made.session_id), class: "fork-link" }, made.session_id),
        " (continue it with resume or a new message)");
    } catch (error) {
      button.after(el("span", { class: "error" }, error.message));
    } finally {
      button.disabled = false;
    }
  }

  function render(messages, checkpoints) {
    const list = document.getElementById("timeline");
    list.replaceChildren();
    let seen = 0;
    let lastRun = undefined;
    let base = null;  // the last checkpoint that is not a head
    let state = undefined;
    for (const cp of checkpoints) {
      if (cp.run_id !== lastRun) {
        list.append(el("li", { class: "run-head" }, cp.run_id ? "run " + cp.run_id : "forked from " + cp.checkpoint_id));
        lastRun = cp.run_id;
      }
      const mine = messages.filter((m) => m.seq > seen && m.seq <= cp.message_seq);
      seen = Math.max(seen, cp.message_seq);
      const stateText = JSON.stringify(cp.state);
      const changed = state !== undefined && stateText !== state;
      state = stateText;
      const button = el("button", { class: "fork-here", type: "button" }, "Fork from here");
      button.addEventListener("click", () => fork(cp, button));
      list.append(el("li", { class: "checkpoint " + cp.kind, "data-checkpoint-id": cp.checkpoint_id },
        el("div", { class: "cp-head" },
          el("span", { class: "step" }, cp.kind === "fork" ? "fork" : "step " + cp.step + (cp.kind === "head" ? " (head: waiting on its calls)" : "")),
          el("span", { class: "usage" }, usageDelta(cp, base)),
          el("code", { class: "cp-id" }, cp.checkpoint_id),
          button),
        el("ol", { class: "cp-messages" }, mine.map(renderMessage)),
        changed ? el("div", { class: "state-change" }, "state → ", el("code", {}, stateText)) : null));
      if (cp.kind !== "head") base = cp;
    }
    const rest = messages.filter((m) => m.seq > seen);
    if (rest.length) {
      list.append(el("li", { class: "checkpoint pending" },
        el("div", { class: "cp-head" }, el("span", { class: "step" }, "not in a checkpoint yet")),
        el("ol", { class: "cp-messages" }, rest.map(renderMessage))));
    }
  }

  async function load() {
    const status = document.getElementById("status");
    document.getElementById("session-id").value = sessionId;
    if (!sessionId) {
      status.textContent = "Give a session id.";
      return;
    }
    document.getElementById("title").textContent = "Session " + sessionId;
    try {
      const [messages, checkpoints] = await Promise.all([
        api(sessionPath(sessionId) + "/messages"),
        api(sessionPath(sessionId) + "/checkpoints"),
      ]);
      render(messages, checkpoints);
      const first = checkpoints[0];
      if (first && first.kind === "fork") {
        const origin = document.getElementById("origin");
        origin.hidden = false;
        origin.textContent = "A fork (its history up to message " + first.message_seq + " was copied).";
      }
      status.textContent = checkpoints.length
        ? checkpoints.length + " checkpoint" + (checkpoints.length === 1 ? "" : "s") + ", " + messages.length + " messages"
        : "No checkpoints (a session from before checkpoints were recorded has none).";
      status.className = "";
    } catch (error) {
      status.textContent = "Could not load: " + error.message;
      status.className = "error";
    }
  }

  document.getElementById("open").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = document.getElementById("session-id").value.trim();
    if (id) location.href = timelineUrl(id);
  });
  load();
})();
