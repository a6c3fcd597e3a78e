// The sign-in form posts the token to the server, which sets the HttpOnly cookie; this
// script only remembers the name shown with your answers (a file: no inline script).
"use strict";
document.getElementById("name").value = localStorage.getItem("helix_inbox_name") || "";
document.getElementById("sign-in").addEventListener("submit", () => {
  const name = document.getElementById("name").value.trim();
  if (name) localStorage.setItem("helix_inbox_name", name);
});
