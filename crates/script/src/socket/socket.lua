-- The methods of tessera.socket.tcp()'s sockets. A socket is { handle, number } (the
-- handle a userdata of fast.rs's holding the number, whose collection frees it), and
-- { handle, number, userdata } once a method has needed the userdata of ops.rs.
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
local userdata_of, quick, pending = ...
local q_connect, q_send, q_receive = quick.connect, quick.send, quick.receive
local q_setkeepalive, q_settimeouts = quick.setkeepalive, quick.settimeouts
local q_wait_receive, q_give_up, q_is_light = quick.wait_receive, quick.give_up, quick.is_light
local q_new, q_number = quick.new, quick.number
local yield = coroutine.yield
local methods = {}
local mt = { __index = methods }
local handle_mt = { __gc = quick.collect, __metatable = "tessera.socket" }

-- The socket's userdata of ops.rs, made the first time it is needed.
local function slow(self)
  local u = self[3]
  if u == nil then
    u = userdata_of(q_number(self[1], handle_mt))
    self[3] = u
  end
  return u
end

function methods:connect(host, port, opts)
  local ok, a, b = q_connect(self[2], host, port, opts)
  if ok == nil then ok, a, b = slow(self):_connect_now(host, port, opts) end
  if ok then return a, b end
  return slow(self):_connect()
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
  if ok == nil then ok, a, b = slow(self):_send_now(data) end
  if ok then return a, b end
  return slow(self):_send()
end

function methods:receive(pattern)
  local id = self[2]
  local ok, a, b, c = q_receive(id, pattern)
  if ok == nil then ok, a, b, c = slow(self):_receive_now(pattern) end
  if ok then return a, b, c end
  ok, a, b, c = q_wait_receive(id, pattern)
  while ok == false do
    -- mlua resumes with nothing to poll again, with a light userdata when it drops the
    -- call (its request ended); a script's own coroutine.resume may pass anything else,
    -- and the wait goes on.
    local resumed = yield(pending)
    if resumed ~= nil and q_is_light(resumed) then
      q_give_up(id)
      yield()
    end
    ok, a, b, c = q_wait_receive(id, pattern)
  end
  if ok then return a, b, c end
  return slow(self):_receive(pattern)
end

function methods:receiveany(max)
  local u = slow(self)
  local ok, a, b, c = u:_receiveany_now(max)
  if ok then return a, b, c end
  return u:_receiveany(max)
end

function methods:setkeepalive(idle, size)
  local ok, a, b = q_setkeepalive(self[2], idle, size)
  if ok then return a, b end
  local u = slow(self)
  return u:setkeepalive(idle, size)
end

function methods:settimeouts(c, s, r)
  if q_settimeouts(self[2], c, s, r) then return end
  local u = slow(self)
  return u:settimeouts(c, s, r)
end

for _, name in ipairs{ "sslhandshake", "receiveuntil", "settimeout", "getreusedtimes",
                       "close" } do
  methods[name] = function(self, ...)
    local u = slow(self)
    return u[name](u, ...)
  end
end

return function()
  local handle, id = q_new(handle_mt)
  -- nil: a phase that refuses cosockets, whose error this raises.
  if handle == nil then userdata_of() end
  return setmetatable({ handle, id }, mt)
end
