-- tessera.ngx_compat: the part of OpenResty's `ngx` table that libraries written for it
-- (lua-resty-redis first) touch, made of tessera's own functions. docs/lua.md,
-- "Running OpenResty libraries: tessera.ngx_compat", lists what it holds.
local tessera, log = ...
local re, crypto, hex = tessera.re, tessera.crypto, tessera.hex

local ngx = {
  socket = { tcp = tessera.socket.tcp },
  null = tessera.json.null,
  log = log,
  -- nginx's log levels, as ngx.* names them; ngx.log maps them onto tessera.log's.
  STDERR = 0, EMERG = 1, ALERT = 2, CRIT = 3, ERR = 4, WARN = 5, NOTICE = 6, INFO = 7,
  DEBUG = 8,
  OK = 0, ERROR = -1, AGAIN = -2, DONE = -4, DECLINED = -5,
  now = tessera.now,
  time = function() return math.floor(tessera.now()) end,
  sleep = tessera.sleep,
  worker = { id = function() return tessera.worker_id end },
  timer = {
    -- ngx's callbacks get `premature` first: false, since tessera drops a timer
    -- instead of calling it early.
    at = function(delay, f, ...)
      return tessera.timer.at(delay, function(...) return f(false, ...) end, ...)
    end,
  },
  re = { match = re.match, find = re.find, gmatch = re.gmatch, sub = re.sub, gsub = re.gsub },
  encode_base64 = tessera.base64.encode,
  decode_base64 = function(s) return (tessera.base64.decode(s)) end,
  encode_base64url = tessera.base64.encode_url,
  decode_base64url = tessera.base64.decode_url,
  md5 = function(s) return hex.encode(crypto.md5(s)) end,
  md5_bin = crypto.md5,
  sha1_bin = crypto.sha1,
  hmac_sha1 = crypto.hmac_sha1,
  escape_uri = tessera.uri.escape,
  unescape_uri = tessera.uri.unescape,
  http_time = tessera.http_time,
  cookie_time = tessera.cookie_time,
  parse_http_time = tessera.parse_http_time,
}
return ngx
