// GET /: a chat page served from the binary. Plain HTML, CSS and script in one
// response, nothing from other hosts (the Content-Security-Policy forbids it): a
// conversation streamed from /v1/chat/completions, reasoning folded under the reply,
// a stop button, the model and sampling settings, and the API key (kept in the
// browser's localStorage) for servers started with --api-key. The page itself needs
// no key: it holds no data, every call it makes does.
//
// A link can carry a first message and settings in its fragment, which the page sends
// on load: /#q=Who%20made%20the%20heavens%3F&temperature=0&max_tokens=20.
#include "serve/routes.h"

namespace loom::serve {

namespace {

const char kPage[] = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>loom chat</title>
<link rel="icon" href="data:,">
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; display: flex; flex-direction: column; height: 100vh; color: #222; }
  header { padding: 8px 12px; border-bottom: 1px solid #ddd; display: flex; gap: 10px; align-items: center; flex-wrap: wrap; }
  header label { font-size: 13px; color: #555; }
  header input { width: 70px; }
  header input#key { width: 140px; }
  #log { flex: 1; overflow-y: auto; padding: 12px; }
  .msg { margin: 0 0 12px; white-space: pre-wrap; }
  .user { color: #0b3d91; }
  .assistant .text { color: #222; }
  .error { color: #b00020; }
  details { color: #777; font-size: 13px; margin-bottom: 4px; }
  form { display: flex; gap: 8px; padding: 8px 12px; border-top: 1px solid #ddd; }
  textarea { flex: 1; height: 48px; font: inherit; }
  #system { width: 100%; box-sizing: border-box; }
</style>
</head>
<body>
<header>
  <strong id="model">loom</strong>
  <label>temperature <input id="temperature" type="number" step="0.1" min="0" max="2" value="0.7"></label>
  <label>top_p <input id="top_p" type="number" step="0.05" min="0.05" max="1" value="1"></label>
  <label>max tokens <input id="max_tokens" type="number" min="1" value="256"></label>
  <label>API key <input id="key" type="password" autocomplete="off"></label>
  <button id="clear" type="button">New chat</button>
  <input id="system" placeholder="System prompt (optional)">
</header>
<div id="log" aria-live="polite"></div>
<form id="form">
  <textarea id="input" placeholder="Message (Enter to send, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const turns = [];
let controller = null;
$("key").value = localStorage.getItem("loom-api-key") || "";
$("key").addEventListener("change", () => localStorage.setItem("loom-api-key", $("key").value));

function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("key").value) h["Authorization"] = "Bearer " + $("key").value;
  return h;
}

function add(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  if (role === "assistant") {
    const details = document.createElement("details");
    details.hidden = true;
    const summary = document.createElement("summary");
    summary.textContent = "Reasoning";
    const thought = document.createElement("div");
    thought.className = "reasoning";
    details.append(summary, thought);
    const body = document.createElement("div");
    body.className = "text";
    div.append(details, body);
  } else {
    div.textContent = text;
  }
  $("log").append(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    if (r.ok) $("model").textContent = (await r.json()).data[0].id;
  } catch (e) { /* shown on the first send */ }
}

async function send(text) {
  if (!text || controller) return;
  turns.push({ role: "user", content: text });
  add("user", text);
  const out = add("assistant");
  out.dataset.state = "streaming";
  const messages = $("system").value ? [{ role: "system", content: $("system").value }, ...turns] : [...turns];
  const body = { messages, stream: true, temperature: Number($("temperature").value),
                 top_p: Number($("top_p").value), max_tokens: Number($("max_tokens").value) };
  controller = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  let content = "", reasoning = "";
  try {
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal });
    if (!r.ok) throw new Error((await r.json()).error.message);
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
        const data = JSON.parse(event.slice(6));
        if (data.error) throw new Error(data.error.message);
        const delta = (data.choices[0] || {}).delta || {};
        if (delta.reasoning_content) {
          reasoning += delta.reasoning_content;
          out.querySelector("details").hidden = false;
          out.querySelector(".reasoning").textContent = reasoning;
        }
        if (delta.content) {
          content += delta.content;
          out.querySelector(".text").textContent = content;
        }
        $("log").scrollTop = $("log").scrollHeight;
      }
    }
    out.dataset.state = "done";
  } catch (e) {
    out.dataset.state = e.name === "AbortError" ? "stopped" : "error";
    if (e.name !== "AbortError") {
      out.classList.add("error");
      out.querySelector(".text").textContent = content + (content ? "\n" : "") + "Error: " + e.message;
    }
  }
  turns.push({ role: "assistant", content });
  controller = null;
  $("send").disabled = false;
  $("stop").disabled = true;
}

$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("clear").addEventListener("click", () => { if (!controller) { turns.length = 0; $("log").textContent = ""; } });

// A first message and settings from the link's fragment.
const params = new URLSearchParams(location.hash.slice(1));
for (const k of ["temperature", "top_p", "max_tokens"]) if (params.has(k)) $(k).value = params.get(k);
if (params.has("key")) $("key").value = params.get("key");
loadModel().then(() => { if (params.has("q")) send(params.get("q")); });
</script>
</body>
</html>
)PAGE";

}  // namespace

HttpResponse handle_chat_page(Engine&, const HttpRequest&) {
  HttpResponse r;
  r.content_type = "text/html; charset=utf-8";
  r.body = kPage;
  // Nothing but this server: no scripts, styles, images or connections elsewhere.
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                         "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

}  // namespace loom::serve
