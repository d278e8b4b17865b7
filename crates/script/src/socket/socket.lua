-- The methods of tessera.socket.tcp()'s sockets. A socket is { userdata, number }.
-- The methods a client library calls on every request first call a C function of
-- fast.rs with the socket's number (`quick.*`): it answers `true, ...` when done, `false`
-- when the call must wait, and `nil` when it leaves the call to the userdata's methods
-- (ops.rs, through mlua), which give the same answers and every error. Each method that
-- may wait then tries the part that finishes at once (`_receive_now` when the data is
-- buffered, `_send_now` when the write fits in the socket, `_connect_now` when the pool
-- has a connection) and calls the part that yields (`_receive`, ...) only when it must
-- wait, so the common case creates no future.
--
-- A receive that must wait on a plain connection waits here rather than in a future:
-- `quick.wait_receive` reads what has arrived and answers `false` while it must wait,
-- having registered the script call's waker, and the method yields the coroutine with
-- mlua's pending marker (`pending`), as mlua's async calls do, until the call is polled
-- again. A yield that returns a value is mlua dropping the call (its request ended):
-- the wait is given up and the coroutine stays suspended, as mlua's own calls do.
local new, quick, pending = ...
local q_connect, q_send, q_receive = quick.connect, quick.send, quick.receive
local q_setkeepalive, q_settimeouts = quick.setkeepalive, quick.settimeouts
local q_wait_receive, q_give_up = quick.wait_receive, quick.give_up
local yield = coroutine.yield
local methods = {}
local mt = { __index = methods }

function methods:connect(host, port, opts)
  local ok, a, b = q_connect(self[2], host, port, opts)
  local u = self[1]
  if ok == nil then ok, a, b = u:_connect_now(host, port, opts) end
  if ok then return a, b end
  return u:_connect()
end

local concat, pcall, type = table.concat, pcall, type

function methods:send(data)
  if type(data) == "table" then
    -- Most sends are an array of strings and numbers (a Redis command): joined here into
    -- one string rather than read item by item from Rust; one holding a boolean or a
    -- nested array goes as it is (`flatten` in ops.rs).
    local joined, flat = pcall(concat, data)
    if joined then data = flat end
  end
  local ok, a, b = q_send(self[2], data)
  local u = self[1]
  if ok == nil then ok, a, b = u:_send_now(data) end
  if ok then return a, b end
  return u:_send()
end

function methods:receive(pattern)
  local id = self[2]
  local ok, a, b, c = q_receive(id, pattern)
  local u = self[1]
  if ok == nil then ok, a, b, c = u:_receive_now(pattern) end
  if ok then return a, b, c end
  ok, a, b, c = q_wait_receive(id, pattern)
  while ok == false do
    if yield(pending) ~= nil then
      q_give_up(id)
      yield()
    end
    ok, a, b, c = q_wait_receive(id, pattern)
  end
  if ok then return a, b, c end
  return u:_receive(pattern)
end

function methods:receiveany(max)
  local u = self[1]
  local ok, a, b, c = u:_receiveany_now(max)
  if ok then return a, b, c end
  return u:_receiveany(max)
end

function methods:setkeepalive(idle, size)
  local ok, a, b = q_setkeepalive(self[2], idle, size)
  if ok then return a, b end
  local u = self[1]
  return u:setkeepalive(idle, size)
end

function methods:settimeouts(c, s, r)
  if q_settimeouts(self[2], c, s, r) then return end
  local u = self[1]
  return u:settimeouts(c, s, r)
end

for _, name in ipairs{ "sslhandshake", "receiveuntil", "settimeout", "getreusedtimes",
                       "close" } do
  methods[name] = function(self, ...)
    local u = self[1]
    return u[name](u, ...)
  end
end

return function()
  local u, id = new()
  return setmetatable({ u, id }, mt)
end
