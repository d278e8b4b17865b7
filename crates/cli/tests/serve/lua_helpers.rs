//! The `tessera.*` helpers (JSON, base64, hex, digests and HMACs, random bytes, regular
//! expressions, URI escapes, HTTP dates, cookies) through the real binary: a script at
//! `/h` runs one case per path and answers what it got; each is compared here with what
//! OpenResty's equivalent (cjson, ngx.*, resty.*) gives, or with where it differs on
//! purpose (docs/lua.md).

use std::io::Write;
use std::net::TcpStream;

use crate::harness::{read_response, Response, Server, Site};

const CASES: &str = r#"
local json, re = tessera.json, tessera.re
local hex = tessera.hex.encode

local function err(f, ...)
  local ok, e = pcall(f, ...)
  if ok then return "no error" end
  return tostring(e)
end

local function nested(n)
  local t = {}
  for _ = 2, n do t = { t } end
  return t
end

local cases = {}

-- JSON: cjson's own edge cases.
cases.json_empty = function() return json.encode({}) end
cases.json_empty_array = function() return json.encode({ a = json.empty_array }) end
cases.json_array_mt = function()
  return json.encode(setmetatable({}, json.array_mt)) .. json.encode(setmetatable({}, json.empty_array_mt))
end
cases.json_nested_empty = function() return json.encode({ {}, { {} }, { json.empty_array } }) end
cases.json_null = function()
  local t = json.decode('[1,null,3]')
  return json.encode({ 1, json.null, 3 }) .. " " .. tostring(t[2] == json.null) .. " " .. #t
end
cases.json_escape = function() return json.encode("a/b\"c\\d\n\t\r\b\f\1\31\127é") end
cases.json_numbers = function()
  return json.encode({ 0.1, 3, -2.5, 1e300, 2 ^ 53, 123456789012, -0.000001, 1e17, 2 ^ 70 })
end
cases.json_nan = function()
  return err(json.encode, 0 / 0) .. "|" .. err(json.encode, { x = math.huge }) .. "|" .. err(json.encode, -math.huge)
end
cases.json_sparse = function()
  return json.encode({ [1] = 1, [3] = 3 }) .. "|" .. err(json.encode, { [1] = 1, [20] = 2 })
end
cases.json_keys = function()
  return json.encode({ [2.5] = "x" }) .. "|" .. json.encode({ [5] = "a", b = 1 } ) :len() .. "|" ..
    err(json.encode, { [true] = 1 })
end
cases.json_depth = function()
  local ok1 = pcall(json.encode, nested(1000))
  local deep = string.rep("[", 1000) .. string.rep("]", 1000)
  local ok2 = pcall(json.decode, deep)
  return tostring(ok1) .. " " .. tostring(ok2) .. "|" .. err(json.encode, nested(1001)) .. "|" ..
    err(json.decode, "[" .. deep .. "]")
end
cases.json_cycle = function()
  local t = {}
  t.self = t
  return err(json.encode, t)
end
cases.json_types = function() return err(json.encode, { f = print }) end
cases.json_decode = function()
  local v = json.decode(' {"a":[1,2,{"b":null}],"c":"\\u00e9\\ud83d\\ude00\\/","d":-0.5e1,"e":12345678901234,"f":true,"g":false} ')
  return table.concat({ tostring(v.a[3].b == json.null), v.c, tostring(v.d), string.format("%.0f", v.e),
    tostring(v.f), tostring(v.g), tostring(#v.a) }, " ")
end
cases.json_roundtrip = function()
  return json.encode(json.decode('[]')) .. json.encode(json.decode('{}')) ..
    json.encode(json.decode('{"a":[]}')) .. json.encode(json.decode('[[],{}]'))
end
cases.json_scalars = function()
  return tostring(json.decode('"x"')) .. tostring(json.decode("12")) .. tostring(json.decode(" true ")) ..
    tostring(json.decode("null") == json.null) .. json.encode("s") .. json.encode(7) .. json.encode(nil)
end
cases.json_big = function()
  return string.format("%.0f", json.decode("9007199254740993")) .. " " .. json.encode(json.decode("12345678901234567890"))
end
cases.json_invalid = function()
  local out = {}
  for _, text in ipairs({ '{"a":1,}', '[1 2]', 'nul', '01', '"abc', '{"a" 1}', '1 2', '', '"\\ud800"',
      '"tab\there"', '{1:2}', '[1,]', '"\\x"', 'NaN', '-', '1.', '1e' }) do
    out[#out + 1] = (err(json.decode, text):gsub("^h.lua:%d+: ", ""))
  end
  return table.concat(out, "\n")
end

-- base64, hex, URI escapes.
cases.base64 = function()
  local b = tessera.base64
  local d, e = b.decode("!!")
  return table.concat({ b.encode("hello"), b.encode("hello", true), b.decode("aGVsbG8"), b.decode("aGVsbG8="),
    tostring(d) .. "," .. e, b.encode(""), b.encode_url("\255\254\253\252"), hex(b.decode_url("__79_A")),
    hex(b.decode_url("__79_A==")), b.encode("\255\254\253\252") }, " ")
end
cases.hex = function()
  local d, e = tessera.hex.decode("abc")
  return hex("\0\255A") .. " " .. tessera.hex.decode("00FF41"):byte(2) .. " " .. tostring(d) .. "," .. e
end
cases.uri = function()
  return tessera.uri.escape("a b&c=d/é~._-") .. " " .. tessera.uri.unescape("a%20b+c%zz%2F%")
end

-- Digests, HMACs, random bytes.
cases.crypto = function()
  local c = tessera.crypto
  local fox = "The quick brown fox jumps over the lazy dog"
  return table.concat({ hex(c.sha1("abc")), hex(c.sha256("abc")), hex(c.md5("abc")),
    hex(c.hmac_sha1("key", fox)), hex(c.hmac_sha256("key", fox)), #c.sha1(""), #c.md5("") }, " ")
end
cases.random = function()
  local c = tessera.crypto
  local a, b = c.random_bytes(16), c.random_bytes(16)
  return #a .. " " .. tostring(a ~= b) .. " " .. #c.random_bytes(0) .. "|" .. err(c.random_bytes, -1) .. "|" ..
    err(c.random_bytes, 2 ^ 21)
end

-- Regular expressions.
cases.re_match = function()
  local m = re.match("hello 1234 world", "([0-9]+)")
  local d = re.match("2024-05-06", [[(?<y>\d+)-(?<m>\d+)-(?<d>\d+)]])
  local u = re.match("ab", "(a)(x)?b")
  local i = re.match("HELLO", "hello", "ijo")
  local none = re.match("abc", "[0-9]")
  return table.concat({ m[0], m[1], d.y, d.m, d[3], tostring(u[2]), i[0], tostring(none) }, " ")
end
cases.re_ctx = function()
  local ctx = { pos = 2 }
  local a = re.match("a1b2c3", "[0-9]", "", ctx)
  local p1 = ctx.pos
  local b = re.match("a1b2c3", "[0-9]", "", ctx)
  local from, to = re.find("a1b2c3", "[a-z]", "", ctx)
  return table.concat({ a[0], p1, b[0], ctx.pos, from, to, tostring(re.match("ab", "b", "a")) }, " ")
end
cases.re_find = function()
  local f1, t1 = re.find("hello world", "o w")
  local f2, t2 = re.find("key=value", [[(\w+)=(\w+)]], "", nil, 2)
  local f3, t3 = re.find("abc", "x*")
  return table.concat({ f1, t1, f2, t2, f3, t3, tostring(re.find("abc", "z")) }, " ")
end
cases.re_gmatch = function()
  local out = {}
  for m in re.gmatch("a1b22c333", "([a-z])([0-9]+)") do out[#out + 1] = m[1] .. "=" .. m[2] end
  local empties = 0
  for _ in re.gmatch("abc", "x*") do empties = empties + 1 end
  return table.concat(out, ",") .. " " .. empties
end
cases.re_sub = function()
  local s1, n1 = re.sub("hello world", "o", "0")
  local s2, n2 = re.gsub("hello world", "o", "[$0]")
  local s3, n3 = re.gsub("k1=v1,k2=v2", [[(\w+)=(\w+)]], "$2:${1}$$")
  local s4, n4 = re.gsub("a1b2", "[0-9]", function(m) return m[0] * 2 end)
  local s5, n5 = re.gsub("abc", "z", "y")
  local s6 = re.gsub("a-b", "(?<x>[a-z])", "<${x}>")
  local s7 = re.gsub("abc", "", "-")
  return table.concat({ s1, n1, s2, n2, s3, n3, s4, n4, s5, n5, s6, s7 }, " ")
end
cases.re_errors = function()
  local m, e1 = re.match("a", "(")
  local _, e2 = re.match("a", "a", "d")
  local _, _, e3 = re.gsub("a", "(", "")
  return table.concat({ tostring(m), e1:sub(1, 24), e2, e3:sub(1, 24), err(re.gsub, "a", "a", "$x"),
    err(re.gsub, "a", "a", {}), err(re.gsub, "a", "a", function() return {} end) }, "|")
end
cases.re_linear = function()
  -- Catastrophic for a backtracking engine (PCRE gives up with a "backtrack limit"
  -- error); linear here.
  local subject = string.rep("a", 100000)
  local m = re.match(subject, "(a*)*b")
  local n = select(2, re.gsub(subject, "(a|aa)+$", "x"))
  return tostring(m) .. " " .. n
end
cases.re_bytes = function()
  local m = re.match("\255abc", "^.")
  local u = re.match("éa", "^.", "u")
  local w = re.match("é", [[\w]])
  return #m[0] .. " " .. #u[0] .. " " .. tostring(w) .. " " .. tostring(re.match("ÉCOLE", "école", "iu") ~= nil)
end

-- HTTP dates and cookies.
cases.time = function()
  return table.concat({ tessera.http_time(1290079655), tessera.cookie_time(1290079655),
    tessera.parse_http_time("Thu, 18 Nov 2010 11:27:35 GMT"), tostring(tessera.parse_http_time("junk")),
    tessera.parse_http_time("Thursday, 18-Nov-10 11:27:35 GMT"), err(tessera.http_time, -1) }, "|")
end
cases.cookie = function(r)
  local c = tessera.cookie.parse(" a=1; b = two ;junk; a=3")
  return table.concat({ tostring(r:cookie("session")), tostring(r:cookie("later")), tostring(r:cookie("none")),
    c.a, c.b, tostring(c.junk) }, " ")
end
cases.unguarded = function() return json.encode(print) end
cases.json_hog = function()
  -- 3 MB of text, 1,000,000 tables: past the 64 MiB memory limit inside the decoder.
  local t = json.decode("[" .. string.rep("{},", 1000000) .. "{}]")
  return tostring(#t)
end

return {
  content = function(r)
    local case = cases[r:path():sub(4)]
    if not case then r:exit(404) end
    return case(r)
  end,
}
"#;

fn helpers_site() -> (Site, Server) {
    let site = Site::new();
    std::fs::write(site.dir.path().join("h.lua"), CASES).unwrap();
    let server = site.serve_with(&format!(
        "[[script]]\nprefix = \"/h\"\npath = \"{}/h.lua\"\ntime_limit = 2.0\n",
        site.dir.path().display()
    ));
    (site, server)
}

fn case(stream: &mut TcpStream, name: &str) -> String {
    write!(
        stream,
        "GET /h/{name} HTTP/1.1\r\nHost: test\r\nCookie: a=1; session=abc123\r\nCookie: later=2\r\n\r\n"
    )
    .unwrap();
    let r: Response = read_response(stream, false);
    assert_eq!(
        r.status,
        200,
        "{name}: {}",
        String::from_utf8_lossy(&r.body)
    );
    String::from_utf8(r.body).unwrap()
}

#[test]
fn json_as_cjson_encodes_and_decodes_it() {
    let (_site, server) = helpers_site();
    let mut s = server.connect();
    let expect = [
        ("json_empty", "{}"),
        ("json_empty_array", r#"{"a":[]}"#),
        ("json_array_mt", "[][]"),
        ("json_nested_empty", "[{},[{}],[[]]]"),
        ("json_null", "[1,null,3] true 3"),
        (
            "json_escape",
            r#""a\/b\"c\\d\n\t\r\b\f\u0001\u001f\u007fé""#,
        ),
        (
            "json_numbers",
            "[0.1,3,-2.5,1e300,9007199254740992,123456789012,-1e-6,1e17,1.1805916207174113e21]",
        ),
        (
            "json_sparse",
            "[1,null,3]|Cannot serialise table: excessively sparse array",
        ),
        ("json_cycle", "Cannot serialise, excessive nesting (1001)"),
        (
            "json_types",
            "Cannot serialise function: type not supported",
        ),
        ("json_decode", "true é😀/ -5 12345678901234 true false 3"),
        ("json_roundtrip", r#"[]{}{"a":[]}[[],{}]"#),
        ("json_scalars", r#"x12truetrue"s"7null"#),
        ("json_big", "9007199254740992 1.2345678901234567e19"),
    ];
    for (name, want) in expect {
        assert_eq!(unplaced(&case(&mut s, name)), want, "{name}");
    }
    let nan = case(&mut s, "json_nan");
    assert_eq!(
        nan.matches("Cannot serialise number: must not be NaN or Infinity")
            .count(),
        3,
        "{nan}"
    );
    let keys = case(&mut s, "json_keys");
    assert!(keys.starts_with(r#"{"2.5":"x"}|"#), "{keys}");
    // {[5]="a", b=1}: not an array, so an object with the key "5" (15 bytes in either order).
    assert!(keys.contains("|15|"), "{keys}");
    assert!(
        keys.ends_with("Cannot serialise boolean: table key must be a number or string"),
        "{keys}"
    );
    let depth = case(&mut s, "json_depth");
    assert!(depth.starts_with("true true|"), "{depth}");
    assert!(
        depth.contains("Cannot serialise, excessive nesting (1001)"),
        "{depth}"
    );
    assert!(
        depth.ends_with("Found too many nested data structures (1001) at character 1001"),
        "{depth}"
    );
    let invalid = case(&mut s, "json_invalid");
    let lines: Vec<&str> = invalid.lines().collect();
    assert_eq!(
        lines,
        [
            "Expected object key string but found T_OBJ_END at character 8",
            "Expected comma or array end but found T_NUMBER at character 4",
            "Expected value but found invalid token at character 1",
            "invalid number at character 2",
            "unexpected end of string at character 5",
            "Expected colon but found T_NUMBER at character 6",
            "Expected the end but found T_NUMBER at character 3",
            "Expected value but found T_END at character 1",
            "invalid unicode escape code at character 2",
            "control character in string at character 5",
            "Expected object key string but found T_NUMBER at character 2",
            "Expected value but found T_ARR_END at character 4",
            "invalid escape code at character 2",
            "Expected value but found invalid token at character 1",
            "invalid number at character 2",
            "invalid number at character 3",
            "invalid number at character 3",
        ]
    );
}

/// `s` without the script positions its error messages start with (`h.lua:12: `).
fn unplaced(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("h.lua:") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 6..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        rest = after[digits..]
            .strip_prefix(": ")
            .unwrap_or(&after[digits..]);
    }
    out.push_str(rest);
    out
}

#[test]
fn codecs_digests_and_random_bytes() {
    let (_site, server) = helpers_site();
    let mut s = server.connect();
    assert_eq!(
        case(&mut s, "base64"),
        "aGVsbG8= aGVsbG8 hello hello nil,invalid base64  __79_A fffefdfc fffefdfc //79/A=="
    );
    assert_eq!(case(&mut s, "hex"), "00ff41 255 nil,invalid hex");
    assert_eq!(case(&mut s, "uri"), "a%20b%26c%3Dd%2F%C3%A9~._- a b c%zz/%");
    assert_eq!(
        case(&mut s, "crypto"),
        "a9993e364706816aba3e25717850c26c9cd0d89d \
         ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad \
         900150983cd24fb0d6963f7d28e17f72 \
         de7c9b85b8b78aa6bc8a7a36f70a90701c9db4d9 \
         f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8 20 16"
    );
    let random = case(&mut s, "random");
    assert!(random.starts_with("16 true 0|"), "{random}");
    assert_eq!(
        random.matches("bytes asked, 0 to 1048576 allowed").count(),
        2,
        "{random}"
    );
}

#[test]
fn regexes_match_find_gmatch_sub_gsub_with_captures() {
    let (_site, server) = helpers_site();
    let mut s = server.connect();
    assert_eq!(
        case(&mut s, "re_match"),
        "1234 1234 2024 05 06 false HELLO nil"
    );
    assert_eq!(case(&mut s, "re_ctx"), "1 3 2 6 5 5 nil");
    assert_eq!(case(&mut s, "re_find"), "5 7 5 9 1 0 nil");
    assert_eq!(case(&mut s, "re_gmatch"), "a=1,b=22,c=333 4");
    assert_eq!(
        case(&mut s, "re_sub"),
        "hell0 world 1 hell[o] w[o]rld 2 v1:k1$,v2:k2$ 2 a2b4 2 abc 0 <a>-<b> -a-b-c-"
    );
    let errors = case(&mut s, "re_errors");
    let parts: Vec<&str> = errors.split('|').collect();
    assert_eq!(parts[0], "nil");
    assert_eq!(parts[1], "failed to compile regex:");
    assert_eq!(
        parts[2],
        "regex option \"d\" is not supported (docs/lua.md)"
    );
    assert_eq!(parts[3], "failed to compile regex:");
    assert!(
        parts[4].ends_with("invalid capturing variable name in replace template \"$x\""),
        "{errors}"
    );
    assert!(
        parts[5].ends_with("bad replace argument: a string or a function expected, got table"),
        "{errors}"
    );
    assert!(
        parts[6].ends_with("the replace function returned a table: a string expected"),
        "{errors}"
    );
    assert_eq!(case(&mut s, "re_linear"), "nil 1");
    assert_eq!(case(&mut s, "re_bytes"), "1 2 nil true");
}

#[test]
fn dates_cookies_and_a_helper_error_or_the_memory_limit_is_a_500_for_its_request_alone() {
    let (_site, server) = helpers_site();
    let mut s = server.connect();
    let time = case(&mut s, "time");
    assert!(
        time.starts_with(
            "Thu, 18 Nov 2010 11:27:35 GMT|Thu, 18-Nov-10 11:27:35 GMT|1290079655|nil|1290079655|"
        ),
        "{time}"
    );
    assert!(
        time.ends_with("time -1 is out of range: 0 to 253402300799 seconds since 1970"),
        "{time}"
    );
    assert_eq!(case(&mut s, "cookie"), "abc123 2 nil 1 two nil");
    for failing in ["unguarded", "json_hog"] {
        write!(s, "GET /h/{failing} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut s, false).status, 500, "{failing}");
    }
    assert_eq!(case(&mut s, "hex"), "00ff41 255 nil,invalid hex");
}
