// Usage: node --experimental-websocket scripts/cdp-screenshot.mjs DEBUG_PORT URL WAIT_SECONDS OUT.png
// Takes a screenshot of URL after WAIT_SECONDS of real time in a headless Chromium started
// with --remote-debugging-port (scripts/status-screenshot.sh). Chromium's own --screenshot
// with --virtual-time-budget runs timers faster than the clock, so a page that computes
// rates from once-a-second samples would show minutes squeezed into milliseconds.
import { writeFileSync } from "node:fs";
const [port, url, wait, out] = process.argv.slice(2);
const pages = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
const ws = new WebSocket(pages.find(p => p.type === "page").webSocketDebuggerUrl);
await new Promise(r => ws.addEventListener("open", r));
let id = 0;
const call = (method, params) => new Promise(r => {
  const me = ++id;
  ws.addEventListener("message", e => { const m = JSON.parse(e.data); if (m.id === me) r(m.result); });
  ws.send(JSON.stringify({ id: me, method, params }));
});
await call("Emulation.setDeviceMetricsOverride", { width: 1200, height: 1140, deviceScaleFactor: 1, mobile: false });
await call("Page.navigate", { url });
await new Promise(r => setTimeout(r, Number(wait) * 1000));
const shot = await call("Page.captureScreenshot", { format: "png" });
writeFileSync(out, Buffer.from(shot.data, "base64"));
ws.close();
