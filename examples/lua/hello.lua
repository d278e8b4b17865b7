-- The hello handler of bench/lua.sh: answers 200 with the 12 bytes "Hello World\n".
--   tessera serve --script /hello=examples/lua/hello.lua
local M = {}

function M.content(r)
  r:say("Hello World")
end

return M
