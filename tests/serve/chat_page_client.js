// Drives the server's chat page in headless Chromium (Debian's `chromium`) over the
// DevTools protocol: opens http://127.0.0.1:PORT/#q=…, waits until the streamed reply is
// done, and prints {state, content, reasoning, urls} as JSON (urls: every request the
// page made). Saves a screenshot to SCREENSHOT.
// Usage: node --experimental-websocket chat_page_client.js PORT KEY PROMPT MAX_TOKENS SCREENSHOT
const { spawn } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const [port, key, prompt, maxTokens, screenshot] = process.argv.slice(2);

function launch() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "loom-chromium-"));
  const proc = spawn("chromium", ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-extensions", "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-port=0", `--user-data-dir=${profile}`, "about:blank"], { stdio: ["ignore", "ignore", "pipe"] });
  return new Promise((resolve, reject) => {
    let err = "";
    const timer = setTimeout(() => reject(new Error("chromium did not start: " + err)), 30000);
    proc.stderr.on("data", (d) => {
      err += d;
      const m = err.match(/DevTools listening on (ws:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, ws: m[1], profile });
      }
    });
    proc.on("exit", (code) => reject(new Error(`chromium exited (${code}): ${err}`)));
  });
}

function connect(url) {
  const ws = new WebSocket(url);
  let next = 0;
  const pending = new Map();
  const listeners = [];
  ws.onmessage = (m) => {
    const msg = JSON.parse(m.data);
    if (msg.id !== undefined && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) reject(new Error(JSON.stringify(msg.error)));
      else resolve(msg.result);
    } else {
      for (const l of listeners) l(msg);
    }
  };
  const send = (method, params = {}, sessionId) => new Promise((resolve, reject) => {
    const id = ++next;
    pending.set(id, { resolve, reject });
    ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
  });
  return new Promise((resolve, reject) => {
    ws.onopen = () => resolve({ send, on: (f) => listeners.push(f), close: () => ws.close() });
    ws.onerror = (e) => reject(new Error("devtools connection failed"));
  });
}

async function main() {
  const browser = await launch();
  try {
    const cdp = await connect(browser.ws);
    const { targetId } = await cdp.send("Target.createTarget", { url: "about:blank" });
    const { sessionId } = await cdp.send("Target.attachToTarget", { targetId, flatten: true });
    const urls = [];
    cdp.on((msg) => {
      if (msg.method === "Network.requestWillBeSent" && msg.sessionId === sessionId) urls.push(msg.params.request.url);
    });
    await cdp.send("Network.enable", {}, sessionId);
    await cdp.send("Page.enable", {}, sessionId);
    await cdp.send("Emulation.setDeviceMetricsOverride", { width: 900, height: 600, deviceScaleFactor: 1, mobile: false }, sessionId);
    const fragment = new URLSearchParams({ q: prompt, temperature: "0", top_p: "1", max_tokens: maxTokens, key });
    await cdp.send("Page.navigate", { url: `http://127.0.0.1:${port}/#${fragment}` }, sessionId);
    const evaluate = async (expression) =>
      (await cdp.send("Runtime.evaluate", { expression, returnByValue: true }, sessionId)).result.value;
    const deadline = Date.now() + 90000;
    let state;
    for (;;) {
      state = await evaluate("document.querySelector('.assistant') ? document.querySelector('.assistant').dataset.state : null");
      if (state && state !== "streaming") break;
      if (Date.now() > deadline) throw new Error("the reply did not finish; state " + state);
      await new Promise((r) => setTimeout(r, 100));
    }
    const content = await evaluate("document.querySelector('.assistant .text').textContent");
    const reasoning = await evaluate("document.querySelector('.assistant .reasoning').textContent");
    const folded = await evaluate("!document.querySelector('.assistant details').open");
    const model = await evaluate("document.getElementById('model').textContent");
    // A second, long turn stopped as soon as its first text arrives.
    let stopped = null;
    if (process.env.PAGE_CLIENT_STOP_AFTER) {
      await evaluate(`document.getElementById('max_tokens').value = '${process.env.PAGE_CLIENT_STOP_AFTER}';
        document.getElementById('input').value = 'Tell me more.'; document.getElementById('form').requestSubmit(); true`);
      const second = "document.querySelectorAll('.assistant')[1]";
      for (;;) {
        const shown = await evaluate(`${second} ? ${second}.textContent.length : 0`);
        if (shown > "Reasoning".length) break;
        if (Date.now() > deadline) throw new Error("the second reply never started");
        await new Promise((r) => setTimeout(r, 5));
      }
      await evaluate("document.getElementById('stop').click(); true");
      for (;;) {
        const s = await evaluate(`${second}.dataset.state`);
        if (s !== "streaming") { stopped = { state: s, sendEnabled: await evaluate("!document.getElementById('send').disabled") }; break; }
        if (Date.now() > deadline) throw new Error("the stop button did not end the stream");
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    const shot = await cdp.send("Page.captureScreenshot", { format: "png" }, sessionId);
    fs.writeFileSync(screenshot, Buffer.from(shot.data, "base64"));
    console.log(JSON.stringify({ state, content, reasoning, folded, model, urls, stopped }));
    await cdp.send("Browser.close").catch(() => {});
    cdp.close();
  } finally {
    if (browser.proc.exitCode === null) {
      const exited = new Promise((r) => browser.proc.once("exit", r));
      browser.proc.kill();
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10000))]);
    }
    // Chromium's helpers may still write into the profile for a moment: retry, then leave it to /tmp.
    for (let i = 0; i < 10; ++i) {
      try {
        fs.rmSync(browser.profile, { recursive: true, force: true });
        break;
      } catch (e) {
        await new Promise((r) => setTimeout(r, 300));
      }
    }
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
