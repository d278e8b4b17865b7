-- The origin of the demo (examples/demo/tessera.toml): the home page template and its
-- fragments, as an application server would send them. The ESI proxy at / reaches this
-- handler through the upstream `self`, whose path_prefix puts every path under /origin.
-- docs/lua.md describes the API used here (r:path, r:set_header, shared, tessera.sleep).
local M = {}

local function now_ms()
  return math.floor(tessera.now() * 1000)
end

local function clock(ms)
  return os.date("!%H:%M:%S", math.floor(ms / 1000)) .. " UTC"
end

-- A fragment as a card: its id, title, badge, body, how long the origin took, and the
-- docs page that explains it.
local function card(id, title, badge, body, took, how, doc)
  local made = now_ms()
  return table.concat{
    '<article class="card" id="', id, '">\n',
    '  <h2>', title, ' <span class="badge">', badge, '</span></h2>\n',
    '  ', body, '\n',
    '  <p class="meta">Origin took <b>', took, ' ms</b> &middot; made at ',
    '<time data-made="', made, '">', clock(made), '</time></p>\n',
    '  <p class="how">', how, ' &middot; <a href="/docs/', doc, '">docs/', doc, '</a></p>\n',
    '</article>\n',
  }
end

-- A fragment the origin takes `delay` seconds to make, cached by tessera for `ttl`
-- seconds (none: never cached).
local function slow(r, id, title, delay, ttl, body)
  local start = tessera.now()
  tessera.sleep(delay)
  local took = math.floor((tessera.now() - start) * 1000 + 0.5)
  local badge, how
  if ttl then
    r:set_header("Cache-Control", "max-age=" .. ttl)
    badge = "cached " .. ttl .. " s"
    how = "<code>Cache-Control: max-age=" .. ttl .. "</code>: reload and it comes from tessera's cache"
  else
    r:set_header("Cache-Control", "no-store")
    badge = "never cached"
    how = "<code>Cache-Control: no-store</code>: fetched for every page, in parallel with the others"
  end
  return card(id, title, badge, body, took, how, "cache.md")
end

local HOME = [==[<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Tessera demo: one page, many fragments</title>
<link rel="icon" href="/examples/demo/static/tessera.svg">
<link rel="stylesheet" href="/examples/demo/static/demo.css">
</head>
<body>
<header>
  <img src="/examples/demo/static/tessera.svg" alt="" width="48" height="48">
  <div>
    <h1>Tessera</h1>
    <p>This page was assembled by tessera from fragments. Reload it and watch what changes.</p>
  </div>
</header>
<section class="summary">
  <p>The three timed fragments below take 100, 200 and 300 ms at the origin: 600 ms one
  after another. Tessera fetches every include of the page at once
  (<a href="/docs/esi.md">docs/esi.md</a>), so the page waits for its slowest fragment
  only: <b id="took">about 300 ms</b>.</p>
</section>
<main class="grid">
<esi:include src="/fragments/news"/>
<esi:include src="/fragments/weather"/>
<esi:include src="/fragments/prices"/>
<esi:include src="/fragments/visits"/>
<esi:include src="/reviews/latest" alt="/fragments/reviews-fallback"/>
<article class="card" id="assets">
  <h2>Static files <span class="badge">cached a year</span></h2>
  <p>The stylesheet and the logo come from tessera's file server with
  <code id="asset-cache">Cache-Control: public, max-age=31536000, immutable</code>, set for
  their prefix in <code>examples/demo/tessera.toml</code>.</p>
  <p class="how"><code>[[cache_control]]</code> &middot; <a href="/docs/config.md">docs/config.md</a>
  &middot; <a href="/docs/http.md">docs/http.md</a></p>
</article>
</main>
<footer>
  <p>Start here: <a href="/docs/getting-started.md">getting started</a> &middot;
  <a href="/docs/migrating.md">migrating from nginx and Varnish</a>.
  How each part works: <a href="/docs/architecture.md">architecture</a> &middot;
  <a href="/docs/config.md">config</a> &middot; <a href="/docs/esi.md">ESI</a> &middot;
  <a href="/docs/cache.md">cache</a> &middot; <a href="/docs/lua.md">Lua</a> &middot;
  <a href="/docs/http.md">HTTP</a> &middot; <a href="/docs/security.md">security</a> &middot;
  <a href="/docs/bench.md">bench</a> &middot; <a href="/docs/logs.md">logs</a> &middot;
  <a href="/docs/benchmarks.md">benchmarks</a>.
  The origin is <code>examples/demo/origin.lua</code>, run by this same tessera.</p>
</footer>
<script>
// Ages are measured against the page's own assembly time (the visits fragment is never
// cached), so the browser's clock does not matter.
const page = Number(document.querySelector("[data-now]")?.dataset.now);
for (const t of document.querySelectorAll("time[data-made]")) {
  const age = Math.round((page - Number(t.dataset.made)) / 1000);
  const note = document.createElement("span");
  note.className = age >= 1 ? "age cached" : "age fresh";
  note.textContent = age >= 1 ? " from tessera's cache, " + age + " s old" : " fresh from the origin";
  t.after(note);
}
addEventListener("load", () => {
  const nav = performance.getEntriesByType("navigation")[0];
  if (nav && nav.responseEnd > 0) {
    document.getElementById("took").textContent =
      Math.round(nav.responseEnd - nav.requestStart) + " ms, as your browser measured it";
  }
});
fetch("/examples/demo/static/demo.css", { method: "HEAD" }).then((r) => {
  const v = r.headers.get("cache-control");
  if (v) document.getElementById("asset-cache").textContent = "Cache-Control: " + v;
});
</script>
</body>
</html>
]==]

local pages = {}

pages["/origin/"] = function(r)
  r:set_header("Content-Type", "text/html; charset=utf-8")
  -- For tessera: an ESI template, kept compiled for a minute. For browsers: ask again.
  r:set_header("Surrogate-Control", 'max-age=60, content="ESI/1.0"')
  r:set_header("Cache-Control", "no-cache")
  return HOME
end

pages["/origin/fragments/news"] = function(r)
  return slow(r, "news", "News", 0.1, 30,
    "<p>Tessera 0.1: static files, an ESI proxy with a cache, Lua handlers, a load generator and a log analyzer in one binary.</p>")
end

pages["/origin/fragments/weather"] = function(r)
  return slow(r, "weather", "Weather", 0.2, 10,
    "<p>Loopback, 0 ms of latency, clear skies.</p>")
end

pages["/origin/fragments/prices"] = function(r)
  return slow(r, "prices", "Prices", 0.3, nil,
    "<p>The slowest fragment, and never cached: every page waits for it, and for nothing else.</p>")
end

pages["/origin/fragments/visits"] = function(r)
  r:set_header("Cache-Control", "no-store")
  local visits = shared.demo:incr("visits", 1)
  local made = now_ms()
  return table.concat{
    '<article class="card lua" id="visits" data-now="', made, '">\n',
    '  <h2>Visits <span class="badge">Lua</span></h2>\n',
    '  <p class="big">', visits, '</p>\n',
    '  <p>pages since start, counted by Lua in a shared dictionary every worker sees ',
    '(<code>shared.demo:incr("visits", 1)</code>); worker ', tessera.worker_id,
    ' answered.</p>\n',
    '  <p class="how">Lua <code>content</code> phase &middot; <a href="/docs/lua.md">docs/lua.md</a></p>\n',
    '</article>\n',
  }
end

pages["/origin/fragments/reviews-fallback"] = function(r)
  r:set_header("Cache-Control", "max-age=60")
  return card("reviews", "Reviews", "fallback",
    "<p>The reviews service is down (nothing listens on 127.0.0.1:1), so tessera " ..
    "served the include's <code>alt</code> fragment and the page did not fail.</p>",
    0, '<code>&lt;esi:include src="/reviews/latest" alt="/fragments/reviews-fallback"/&gt;</code>',
    "esi.md")
end

function M.content(r)
  local page = pages[r:path()]
  if not page then
    r:exit(404, "not a page of the demo\n")
  end
  r:set_header("Content-Type", "text/html; charset=utf-8")
  return page(r)
end

return M
