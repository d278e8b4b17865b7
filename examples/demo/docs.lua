-- The demo's documentation pages (examples/demo/tessera.toml mounts this at /docs): the
-- Markdown files of the repository's docs/ rendered as HTML when they are asked for, so
-- a browser gets pages with working links, and an edited page shows on the next reload.
--
--   /docs/          an index: every page's title and first paragraph
--   /docs/NAME.md   docs/NAME.md as an HTML page (the links between pages stay NAME.md)
--   /docs/OTHER     any other file of docs/ (img/*.png, grafana-dashboard.json) as it is
--
-- Scripts cannot read files (docs/lua.md, "What scripts can use"), so the Markdown comes
-- over HTTP: the upstream `docs` is this same server, asked with `Host: docs.internal`,
-- a [[host]] that serves docs/ as plain files. The renderer below covers the Markdown
-- these pages use (CommonMark's headings, paragraphs, lists, fenced and indented code,
-- emphasis, links and images, and GitHub's tables and heading anchors), not all of it; it
-- escapes any HTML in the text and leaves out HTML comments. Paragraphs and table rows
-- are scanned with plain finds and anchored patterns, which the pattern guard
-- (docs/lua.md) never refuses, whatever their length.
local M = {}

local DOCS_HOST = "docs.internal"

local function fetch(path, headers)
  headers = headers or {}
  headers.Host = DOCS_HOST
  return tessera.http.request{ upstream = "docs", path = path, headers = headers }
end

local ESCAPES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }

local function escape(s)
  return (s:gsub('[&<>"]', ESCAPES))
end

-- Inline Markdown -------------------------------------------------------------------

local PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

-- A code span opening at `i` (a run of backticks): the position after its closing run
-- and its text, or nil when no run of the same length closes it.
local function code_span(s, i)
  local j = i
  while s:sub(j, j) == "`" do j = j + 1 end
  local run = j - i
  local fence = string.rep("`", run)
  local k = j
  while true do
    local a = s:find(fence, k, true)
    if not a then return nil end
    local b = a + run
    if s:sub(b, b) ~= "`" then
      local text = s:sub(j, a - 1):gsub("\n", " ")
      if #text > 2 and text:sub(1, 1) == " " and text:sub(-1) == " " then
        text = text:sub(2, -2)
      end
      return b, text
    end
    k = b
    while s:sub(k, k) == "`" do k = k + 1 end
  end
end

-- The position of the character that closes the bracket or parenthesis opening at `i`
-- (code spans and escapes skipped), or nil.
local function closing(s, i, open, close)
  local depth, j = 0, i
  while j <= #s do
    local c = s:sub(j, j)
    if c == "\\" then
      j = j + 2
    elseif c == "`" then
      j = code_span(s, j) or (j + 1)
    else
      if c == open then
        depth = depth + 1
      elseif c == close then
        depth = depth - 1
        if depth == 0 then return j end
      end
      j = j + 1
    end
  end
end

-- The position of the delimiter `d` (`*` or `**`) that closes emphasis opened at `i`
-- (right after the opening one), or nil: not after a space, and a `*` alone, not half
-- of a `**`.
local function closing_emphasis(s, i, d)
  local j = i
  while j <= #s do
    local c = s:sub(j, j)
    if c == "\\" then
      j = j + 2
    elseif c == "`" then
      j = code_span(s, j) or (j + 1)
    elseif c == "*" then
      local run = 1
      while s:sub(j + run, j + run) == "*" do run = run + 1 end
      if s:sub(j - 1, j - 1) ~= " " and j > i and (run == #d or run == 3) then
        return j
      end
      j = j + run
    else
      j = j + 1
    end
  end
end

-- Where a link goes in the demo: pages and files of docs/ as they are (relative), and
-- the web; nil for a file of the repository outside docs/, which the demo does not serve.
local function target(url)
  if url:sub(1, 3) == "../" then return nil end
  return url
end

local inline

local function link(s, i, image)
  local open = image and i + 1 or i
  local close = closing(s, open, "[", "]")
  if not close or s:sub(close + 1, close + 1) ~= "(" then return nil end
  local paren = closing(s, close + 1, "(", ")")
  if not paren then return nil end
  local text = s:sub(open + 1, close - 1)
  local url = s:sub(close + 2, paren - 1)
  if image then
    return paren + 1, '<img src="' .. escape(url) .. '" alt="' .. escape(text) .. '">'
  end
  local to = target(url)
  if not to then
    return paren + 1, '<span class="repo" title="' .. escape(url:sub(4)) ..
      ' in the repository (the demo serves docs/ only)">' .. inline(text) .. '</span>'
  end
  return paren + 1, '<a href="' .. escape(to) .. '">' .. inline(text) .. '</a>'
end

function inline(s)
  local out = {}
  local i, n = 1, #s
  local start = 1
  local function flush(upto)
    if upto >= start then out[#out + 1] = escape(s:sub(start, upto)) end
  end
  while i <= n do
    local c = s:sub(i, i)
    local after, html
    if c == "\\" and PUNCTUATION:find(s:sub(i + 1, i + 1), 1, true) and i < n then
      after, html = i + 2, escape(s:sub(i + 1, i + 1))
    elseif c == "`" then
      local e, text = code_span(s, i)
      if e then
        after, html = e, "<code>" .. escape(text) .. "</code>"
      else
        local j = i
        while s:sub(j, j) == "`" do j = j + 1 end
        after, html = j, s:sub(i, j - 1)
      end
    elseif c == "!" and s:sub(i + 1, i + 1) == "[" then
      after, html = link(s, i, true)
    elseif c == "[" then
      after, html = link(s, i, false)
    elseif c == "*" then
      local d = s:sub(i + 1, i + 1) == "*" and "**" or "*"
      local inner = i + #d
      local next = s:sub(inner, inner)
      if next ~= "" and next ~= " " and next ~= "\n" then
        local e = closing_emphasis(s, inner, d)
        if e then
          local tag = d == "**" and "strong" or "em"
          after = e + #d
          html = "<" .. tag .. ">" .. inline(s:sub(inner, e - 1)) .. "</" .. tag .. ">"
        end
      end
    end
    if after then
      flush(i - 1)
      out[#out + 1] = html
      i, start = after, after
    else
      i = i + 1
    end
  end
  flush(n)
  return table.concat(out)
end

-- Blocks ----------------------------------------------------------------------------

local function blank(line)
  return line:find("^%s*$") ~= nil
end

local function fence(line)
  return line:find("^ *```") ~= nil
end

-- The length of a list item's marker with its space (`- `, `12. `), or nil.
local function list_marker(line)
  local _, e = line:find("^[-*+] ")
  if not e then _, e = line:find("^%d+[.)] ") end
  return e
end

local function ordered(line)
  return line:find("^%d") ~= nil
end

local function delimiter_row(line)
  return line ~= nil and line:find("^ *|") ~= nil and line:find("^[ |:-]+$") ~= nil
    and line:find("-", 1, true) ~= nil
end

local function starts_block(lines, i)
  local line = lines[i]
  return blank(line) or fence(line) or line:find("^#+ ") or list_marker(line)
    or (line:sub(1, 1) == "|" and delimiter_row(lines[i + 1]))
end

-- The cells of a table row, split at the `|`s that are not escaped.
local function cells(line)
  line = line:gsub("^ *|", "", 1)
  local out, start, i = {}, 1, 1
  while i <= #line do
    local c = line:sub(i, i)
    if c == "\\" then
      i = i + 2
    elseif c == "|" then
      out[#out + 1] = line:sub(start, i - 1)
      start, i = i + 1, i + 1
    else
      i = i + 1
    end
  end
  local last = line:sub(start)
  if not blank(last) then out[#out + 1] = last end
  for k, cell in ipairs(out) do
    local first = cell:find("%S")
    cell = first and cell:sub(first) or ""
    while cell:sub(-1) == " " do cell = cell:sub(1, -2) end
    out[k] = cell:gsub("\\|", "|")
  end
  return out
end

-- GitHub's anchor for a heading: lower case, the text of its links and code, nothing
-- but letters, digits, spaces, `-` and `_`, spaces as `-`; `-1`, `-2` after repeats.
local function anchor(text, seen)
  local id = text:lower():gsub("[^%w _%-]", ""):gsub(" ", "-")
  local n = seen[id]
  seen[id] = (n or -1) + 1
  if n then id = id .. "-" .. (n + 1) end
  return id
end

-- The plain text of inline Markdown (for anchors and titles).
local function plain(s)
  return (inline(s):gsub("<[^>]*>", ""):gsub("&lt;", "<"):gsub("&gt;", ">")
    :gsub("&quot;", '"'):gsub("&amp;", "&"))
end

local blocks

local function list(lines, i, out, seen)
  local is_ordered = ordered(lines[i])
  out[#out + 1] = is_ordered and "<ol>" or "<ul>"
  while i <= #lines do
    local line = lines[i]
    local marker = list_marker(line)
    if not marker or ordered(line) ~= is_ordered then break end
    local item = { line:sub(marker + 1) }
    local pad = string.rep(" ", marker)
    local tight = true
    i = i + 1
    while i <= #lines do
      local l = lines[i]
      if blank(l) then
        -- The item goes on only if an indented line follows the blank ones.
        local j = i
        while j <= #lines and blank(lines[j]) do j = j + 1 end
        if j > #lines or lines[j]:sub(1, #pad) ~= pad then break end
        for _ = i, j - 1 do item[#item + 1] = "" end
        tight, i = false, j
      elseif l:sub(1, #pad) == pad then
        item[#item + 1] = l:sub(#pad + 1)
        i = i + 1
      elseif not starts_block(lines, i) and not blank(item[#item]) then
        item[#item + 1] = l -- a lazy continuation of the item's paragraph
        i = i + 1
      else
        break
      end
    end
    out[#out + 1] = "<li>" .. blocks(item, seen, tight) .. "</li>"
    -- A blank line between two items of the list.
    local j = i
    while j <= #lines and blank(lines[j]) do j = j + 1 end
    if j <= #lines and list_marker(lines[j]) and ordered(lines[j]) == is_ordered then
      i = j
    end
  end
  out[#out + 1] = is_ordered and "</ol>" or "</ul>"
  return i
end

-- The HTML of a list of lines. `seen` counts anchors (one table per page); `tight`
-- leaves paragraphs bare (a list item without blank lines).
function blocks(lines, seen, tight)
  local out = {}
  local i = 1
  while i <= #lines do
    local line = lines[i]
    if blank(line) then
      i = i + 1
    elseif fence(line) then
      local indent = line:find("`", 1, true) - 1
      local info = line:sub(indent + 4):match("^%s*(%S*)")
      local code = {}
      i = i + 1
      while i <= #lines and not fence(lines[i]) do
        local l = lines[i]
        local strip = 0
        while strip < indent and l:sub(strip + 1, strip + 1) == " " do strip = strip + 1 end
        code[#code + 1] = l:sub(strip + 1)
        i = i + 1
      end
      i = i + 1
      local class = info ~= "" and (' class="language-' .. escape(info) .. '"') or ""
      out[#out + 1] = "<pre><code" .. class .. ">" .. escape(table.concat(code, "\n"))
        .. "</code></pre>"
    elseif line:sub(1, 4) == "<!--" then
      -- An HTML comment: a note for the page's editors, not shown.
      while i <= #lines and not lines[i]:find("-->", 1, true) do i = i + 1 end
      i = i + 1
    elseif line:sub(1, 1) == "#" and line:find("^#+ ") then
      local level = line:find(" ", 1, true) - 1
      local text = line:sub(level + 2)
      out[#out + 1] = string.format('<h%d id="%s">%s</h%d>', level,
        anchor(plain(text), seen), inline(text), level)
      i = i + 1
    elseif line:sub(1, 1) == "|" and delimiter_row(lines[i + 1]) then
      local align = {}
      for k, d in ipairs(cells(lines[i + 1])) do
        local left, right = d:sub(1, 1) == ":", d:sub(-1) == ":"
        align[k] = right and (left and ' style="text-align:center"' or ' style="text-align:right"') or ""
      end
      local rows = { "<table><thead><tr>" }
      for k, cell in ipairs(cells(line)) do
        rows[#rows + 1] = "<th" .. (align[k] or "") .. ">" .. inline(cell) .. "</th>"
      end
      rows[#rows + 1] = "</tr></thead><tbody>"
      i = i + 2
      while i <= #lines and lines[i]:sub(1, 1) == "|" do
        rows[#rows + 1] = "<tr>"
        for k, cell in ipairs(cells(lines[i])) do
          rows[#rows + 1] = "<td" .. (align[k] or "") .. ">" .. inline(cell) .. "</td>"
        end
        rows[#rows + 1] = "</tr>"
        i = i + 1
      end
      rows[#rows + 1] = "</tbody></table>"
      out[#out + 1] = table.concat(rows)
    elseif list_marker(line) then
      i = list(lines, i, out, seen)
    elseif line:sub(1, 4) == "    " then
      -- Indented code: the lines indented by four, and the blank ones between them.
      local code = {}
      while i <= #lines and (lines[i]:sub(1, 4) == "    " or blank(lines[i])) do
        code[#code + 1] = lines[i]:sub(5)
        i = i + 1
      end
      while blank(code[#code]) do code[#code] = nil end
      out[#out + 1] = "<pre><code>" .. escape(table.concat(code, "\n")) .. "</code></pre>"
    else
      local para = { line }
      i = i + 1
      while i <= #lines and not starts_block(lines, i) do
        para[#para + 1] = lines[i]
        i = i + 1
      end
      local html = inline(table.concat(para, "\n"))
      out[#out + 1] = tight and html or ("<p>" .. html .. "</p>")
    end
  end
  return table.concat(out, "\n")
end

local function split_lines(text)
  local lines, start = {}, 1
  while true do
    local nl = text:find("\n", start, true)
    if not nl then
      if start <= #text then lines[#lines + 1] = text:sub(start) end
      return lines
    end
    lines[#lines + 1] = text:sub(start, nl - 1)
    start = nl + 1
  end
end

-- Pages -----------------------------------------------------------------------------

local function page(title, body)
  return table.concat{
    '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
    '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
    '<title>', escape(title), ' - Tessera docs</title>\n',
    '<link rel="icon" href="/examples/demo/static/tessera.svg">\n',
    '<link rel="stylesheet" href="/examples/demo/static/demo.css">\n',
    '</head>\n<body>\n<header>\n',
    '  <img src="/examples/demo/static/tessera.svg" alt="" width="48" height="48">\n',
    '  <div>\n    <h1><a href="/docs/">Tessera documentation</a></h1>\n',
    '    <p>docs/*.md rendered by a Lua handler of this server ',
    '(<code>examples/demo/docs.lua</code>) &middot; <a href="/">back to the demo</a></p>\n',
    '  </div>\n</header>\n<main class="doc">\n', body, '\n</main>\n</body>\n</html>\n',
  }
end

local function title_of(lines, name)
  for _, line in ipairs(lines) do
    if line:sub(1, 2) == "# " then return plain(line:sub(3)) end
  end
  return name
end

-- The first paragraph of a page (after its title), as HTML.
local function summary(lines)
  local para, i = {}, 1
  while i <= #lines and (blank(lines[i]) or lines[i]:sub(1, 1) == "#") do i = i + 1 end
  while i <= #lines and not starts_block(lines, i) do
    para[#para + 1] = lines[i]
    i = i + 1
  end
  return inline(table.concat(para, "\n"))
end

local function index(r)
  local listing, err = fetch("/")
  if not listing or listing.status ~= 200 then
    r:exit(502, "cannot list docs/: " .. (err or listing.status) .. "\n")
  end
  local names = {}
  for name in listing.body:gmatch('href="([%w_%-]+)%.md"') do names[#names + 1] = name end
  -- Where to start first, then the rest by name.
  table.sort(names, function(a, b)
    if a == "getting-started" or b == "getting-started" then return a == "getting-started" end
    return a < b
  end)
  local items = {}
  for _, name in ipairs(names) do
    -- The head of each page is enough for its title and first paragraph.
    local res = fetch("/" .. name .. ".md", { Range = "bytes=0-8191" })
    local lines = res and split_lines(res.body) or {}
    -- A paragraph the range cut short is left out rather than shown cut.
    if res and res.status == 206 and #res.body == 8192 then table.remove(lines) end
    items[#items + 1] = table.concat{
      '<li><a href="', name, '.md"><b>', escape(title_of(lines, name)), '</b></a> ',
      '<code>docs/', name, '.md</code><br>', summary(lines), '</li>',
    }
  end
  r:set_header("Content-Type", "text/html; charset=utf-8")
  r:set_header("Cache-Control", "no-cache")
  return page("Documentation", table.concat{
    "<h1>Documentation</h1>\n<p>Every page of the repository's <code>docs/</code>, ",
    "as this server renders it from the Markdown on each request.</p>\n",
    '<ul class="index">\n', table.concat(items, "\n"), "\n</ul>",
  })
end

function M.content(r)
  local path = r:path()
  if path == "/docs" then
    r:redirect("/docs/", 301)
  elseif path == "/docs/" then
    return index(r)
  end
  local name = path:sub(7)
  local res, err = fetch("/" .. name)
  if not res then r:exit(502, "cannot read docs/" .. name .. ": " .. err .. "\n") end
  if res.status ~= 200 or name:sub(-3) ~= ".md" then
    -- Not found, or not a page: passed on as the file server answered.
    r:set_status(res.status)
    if res.headers["content-type"] then
      r:set_header("Content-Type", res.headers["content-type"])
    end
    return res.body
  end
  local lines = split_lines(res.body)
  r:set_header("Content-Type", "text/html; charset=utf-8")
  r:set_header("Cache-Control", "no-cache")
  return page(title_of(lines, name), blocks(lines, {}, false))
end

return M
