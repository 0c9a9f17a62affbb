// The form is sent with fetch as JSON, never as a form post: the server
// refuses a write from another site's page (Sec-Fetch-Site or Origin), and
// a page of this site has nothing to hide from it. Every value from the
// server is put in the page as text (textContent, href), never as HTML.
"use strict";
const form = document.getElementById("shorten");
const error = document.getElementById("error");
const result = document.getElementById("result");

function showError(text) {
  error.textContent = text;
  error.hidden = false;
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  error.hidden = true;
  result.hidden = true;
  const body = { url: form.url.value.trim() };
  const alias = form.alias.value.trim();
  if (alias !== "") body.alias = alias;
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const resp = await fetch("/shorten", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    let answer = null;
    try {
      answer = await resp.json();
    } catch {
      // a proxy's HTML error page, say: answered below by the status
    }
    if (resp.status !== 201 || answer === null || typeof answer.code !== "string") {
      const why = answer && typeof answer.error === "string" ? answer.error : "the server answered " + resp.status;
      const wait = resp.headers.get("Retry-After");
      showError("Not shortened: " + why + (wait ? " (try again in " + wait + " s)" : ""));
      return;
    }
    const short = document.getElementById("short");
    short.textContent = answer.short_url;
    short.href = answer.short_url;
    document.getElementById("stats").href = "/stats/" + encodeURIComponent(answer.code);
    document.getElementById("token").textContent = answer.token;
    document.getElementById("copy").textContent = "Copy";
    result.hidden = false;
  } catch (e) {
    showError("Not shortened: the server could not be reached (" + e.message + ")");
  } finally {
    button.disabled = false;
  }
});

document.getElementById("copy").addEventListener("click", async () => {
  const text = document.getElementById("short").textContent;
  const button = document.getElementById("copy");
  try {
    // The clipboard is open to pages served over https (or localhost).
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  } catch {
    showError("Could not copy: select the link and copy it yourself");
  }
});
