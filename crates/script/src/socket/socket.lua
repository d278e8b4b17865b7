-- The methods of tessera.socket.tcp()'s sockets. Each that may wait first tries the
-- part that finishes at once (a plain call into Rust: `_receive_now` when the data is
-- buffered, `_send_now` when the write fits in the socket, `_connect_now` when the pool
-- has a connection) and calls the part that yields (`_receive`, ...) only when it must
-- wait, so the common case creates no future. crates/script/src/socket/ops.rs has both.
local new = ...
local methods = {}
local mt = { __index = methods }

function methods:connect(host, port, opts)
  local u = self[1]
  local ok, a, b = u:_connect_now(host, port, opts)
  if ok then return a, b end
  return u:_connect()
end

local concat, pcall, type = table.concat, pcall, type

function methods:send(data)
  local u = self[1]
  if type(data) == "table" then
    -- Most sends are an array of strings and numbers (a Redis command): joined here into
    -- one string rather than read item by item from Rust; one holding a boolean or a
    -- nested array goes as it is (`flatten` in ops.rs).
    local joined, flat = pcall(concat, data)
    if joined then data = flat end
  end
  local ok, a, b = u:_send_now(data)
  if ok then return a, b end
  return u:_send()
end

function methods:receive(pattern)
  local u = self[1]
  local ok, a, b, c = u:_receive_now(pattern)
  if ok then return a, b, c end
  return u:_receive(pattern)
end

function methods:receiveany(max)
  local u = self[1]
  local ok, a, b, c = u:_receiveany_now(max)
  if ok then return a, b, c end
  return u:_receiveany(max)
end

for _, name in ipairs{ "sslhandshake", "receiveuntil", "settimeout", "settimeouts",
                       "setkeepalive", "getreusedtimes", "close" } do
  methods[name] = function(self, ...)
    local u = self[1]
    return u[name](u, ...)
  end
end

return function()
  return setmetatable({ new() }, mt)
end
