// What the inbox and the session timeline pages both need: building elements, calling
// the JSON API with the sign-in cookie, and a message's parts as links. Loaded before
// each page's own script (a file: the pages' CSP allows no inline script).
"use strict";
window.helixPage = (() => {
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // An API caller; `signIn` says, on a 401, where to sign in again.
  function apiCaller(signIn) {
    return async function api(path, body) {
      const options = { headers: {}, credentials: "same-origin" };  // the HttpOnly cookie
      if (body !== undefined) {
        options.method = "POST";
        options.headers["Content-Type"] = "application/json";
        options.body = JSON.stringify(body);
      }
      const response = await fetch(path, options);
      if (response.status === 401) throw new Error("not signed in: " + signIn + " to sign in");
      const data = await response.json().catch(() => ({}));
      if (!response.ok) throw new Error(data.detail || response.status + " " + response.statusText);
      return data;
    };
  }

  // A message's images and documents as named links, never shown inline: a stored part
  // downloads from its session (served as an attachment), a URL opens as a plain link.
  function partLinks(sessionId, m, label) {
    return (m.parts || []).map((p) => {
      const size = p.kind === "blob" ? ", " + p.size + " bytes" : "";
      const name = label((p.identifier || (p.kind === "blob" ? p.sha256.slice(0, 12) : p.url)) + " (" + (p.media_type || p.kind) + size + ")");
      if (p.kind === "blob") {
        const href = "sessions/" + encodeURIComponent(sessionId) + "/parts/" + encodeURIComponent(p.sha256);
        return el("a", { class: "part", href: href, download: p.identifier || p.sha256.slice(0, 12), rel: "noopener" }, name);
      }
      const safe = /^https?:\/\//i.test(p.url || "");
      return safe ? el("a", { class: "part", href: p.url, rel: "noopener noreferrer", target: "_blank" }, name) : el("span", { class: "part" }, name);
    });
  }

  return { el, apiCaller, partLinks };
})();
