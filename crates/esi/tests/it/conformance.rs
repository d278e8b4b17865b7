//! The conformance table: template + request context + fragments -> exact output (or a
//! page failure) and exact warning kinds. Every case is also re-run with the template
//! split into two chunks at every byte position and into 1-byte chunks, so the streaming
//! tokenizer is held to the same answers.

use std::collections::HashMap;

use bytes::Bytes;
use esi::{render_sync, Compiler, Options, Request, Template};

pub struct Case {
    pub name: &'static str,
    pub template: &'static str,
    pub url: &'static str,
    pub headers: &'static [(&'static str, &'static str)],
    pub fragments: &'static [(&'static str, &'static str)],
    /// `None`: the page fails (an include failed with nothing to absorb it).
    pub expect: Option<&'static str>,
    /// Warning kinds (the variant name), in order.
    pub warnings: &'static [&'static str],
}

const D: Case = Case {
    name: "",
    template: "",
    url: "http://example.com/page",
    headers: &[],
    fragments: &[],
    expect: Some(""),
    warnings: &[],
};

const AD: &[(&str, &str)] = &[("http://www.example.com/ad1.html", "[AD]")];
const ONE: &[(&str, &str)] = &[("http://example.com/1.html", "one")];
const BAK: &[(&str, &str)] = &[("http://bak.example.com/2.html", "backup")];
const GROUPS: &[(&str, &str)] = &[
    ("http://www.example.com/advanced.html", "ADV"),
    ("http://www.example.com/basic.html", "BASIC"),
    ("http://www.example.com/new_user.html", "NEW"),
];

#[rustfmt::skip]
pub const CASES: &[Case] = &[
    // --- W3C note 3.1 include ---
    Case { name: "w3c include src", template: r#"<esi:include src="http://example.com/1.html" alt="http://bak.example.com/2.html" onerror="continue"/>"#, fragments: ONE, expect: Some("one"), ..D },
    Case { name: "w3c include alt when src fails", template: r#"<esi:include src="http://example.com/1.html" alt="http://bak.example.com/2.html" onerror="continue"/>"#, fragments: BAK, expect: Some("backup"), ..D },
    Case { name: "w3c include onerror continue", template: r#"a<esi:include src="http://example.com/1.html" alt="http://bak.example.com/2.html" onerror="continue"/>b"#, expect: Some("ab"), ..D },
    Case { name: "w3c include with query variable", template: r#"<esi:include src="http://example.com/search?query=$(QUERY_STRING{query})"/>"#, url: "http://example.com/page?query=edge+side", fragments: &[("http://example.com/search?query=edge%20side", "results")], expect: Some("results"), ..D },
    Case { name: "include failure fails page", template: r#"a<esi:include src="http://example.com/1.html"/>b"#, expect: None, ..D },
    Case { name: "include relative src", template: r#"<esi:include src="1.html"/>"#, fragments: ONE, ..D_ONE },
    Case { name: "include absolute path src", template: r#"<esi:include src="/1.html"/>"#, url: "http://example.com/a/b/page", fragments: ONE, expect: Some("one"), ..D },
    Case { name: "include dot segments", template: r#"<esi:include src="../1.html"/>"#, url: "http://example.com/a/page", fragments: ONE, expect: Some("one"), ..D },
    Case { name: "include with space before slash", template: r#"<esi:include src="http://example.com/1.html" />"#, fragments: ONE, expect: Some("one"), ..D },
    Case { name: "include not self-closed", template: r#"x<esi:include src="http://example.com/1.html">y"#, fragments: ONE, expect: Some("xoney"), ..D },
    Case { name: "include with end tag", template: r#"<esi:include src="http://example.com/1.html"></esi:include>"#, fragments: ONE, expect: Some("one"), ..D },
    Case { name: "include single-quoted src", template: r#"<esi:include src='http://example.com/1.html'/>"#, fragments: ONE, expect: Some("one"), ..D },
    Case { name: "include entity in src", template: r#"<esi:include src="/q?a=1&amp;b=2"/>"#, fragments: &[("http://example.com/q?a=1&b=2", "Q")], expect: Some("Q"), ..D },
    Case { name: "include missing src", template: r#"a<esi:include alt="x"/>b"#, expect: Some("ab"), warnings: &["MissingAttribute"], ..D },
    Case { name: "include bad onerror", template: r#"<esi:include src="/1.html" onerror="ignore"/>"#, expect: None, warnings: &["InvalidAttribute"], ..D },
    Case { name: "include bad ttl ignored", template: r#"<esi:include src="/1.html" ttl="soon"/>"#, fragments: ONE, expect: Some("one"), warnings: &["InvalidAttribute"], ..D },
    Case { name: "include nested esi fragment", template: r#"[<esi:include src="/outer"/>]"#, fragments: &[("http://example.com/outer", r#"(<esi:include src="/inner"/>)"#), ("http://example.com/inner", "in")], expect: Some("[(in)]"), ..D },
    Case { name: "nested fragment resolves against its own url", template: r#"<esi:include src="/f/outer"/>"#, fragments: &[("http://example.com/f/outer", r#"<esi:include src="inner"/>"#), ("http://example.com/f/inner", "deep")], expect: Some("deep"), ..D },
    Case { name: "two includes in order", template: r#"<esi:include src="/a"/>-<esi:include src="/b"/>"#, fragments: &[("http://example.com/a", "A"), ("http://example.com/b", "B")], expect: Some("A-B"), ..D },
    Case { name: "include of its own page is refused, not recursed", template: r#"<esi:include src="/loop" onerror="continue"/>."#, fragments: &[("http://example.com/loop", r#"x<esi:include src="/loop" onerror="continue"/>"#)], expect: Some("x."), ..D },
    Case { name: "a chain of includes stops at the depth limit", template: r#"<esi:include src="/d0" onerror="continue"/>."#, fragments: &[("http://example.com/d0", r#"x<esi:include src="/d1" onerror="continue"/>"#), ("http://example.com/d1", r#"x<esi:include src="/d2" onerror="continue"/>"#), ("http://example.com/d2", r#"x<esi:include src="/d3" onerror="continue"/>"#), ("http://example.com/d3", r#"x<esi:include src="/d4" onerror="continue"/>"#), ("http://example.com/d4", r#"x<esi:include src="/d5" onerror="continue"/>"#), ("http://example.com/d5", r#"x<esi:include src="/d6" onerror="continue"/>"#), ("http://example.com/d6", r#"x<esi:include src="/d7" onerror="continue"/>"#), ("http://example.com/d7", r#"x<esi:include src="/d8" onerror="continue"/>"#), ("http://example.com/d8", r#"x<esi:include src="/d9" onerror="continue"/>"#), ("http://example.com/d9", r#"x<esi:include src="/d10" onerror="continue"/>"#), ("http://example.com/d10", r#"x<esi:include src="/d11" onerror="continue"/>"#), ("http://example.com/d11", r#"x<esi:include src="/d12" onerror="continue"/>"#)], expect: Some("xxxxxxxxxx."), ..D },

    // --- W3C note 3.2 inline ---
    Case { name: "w3c inline output in place", template: r#"a<esi:inline name="http://www.example.com/fragment.html" fetchable="no">stored <b>fragment</b></esi:inline>b"#, expect: Some("astored <b>fragment</b>b"), ..D },
    Case { name: "inline may contain esi", template: r#"<esi:inline name="/x" fetchable="yes"><esi:vars>$(HTTP_HOST)</esi:vars></esi:inline>"#, expect: Some("example.com"), ..D },
    Case { name: "inline without name", template: r#"<esi:inline>body</esi:inline>"#, expect: Some("body"), warnings: &["MissingAttribute"], ..D },
    Case { name: "nested inline", template: r#"<esi:inline name="/a"><esi:inline name="/b">x</esi:inline></esi:inline>"#, expect: Some("x"), warnings: &["MisplacedElement"], ..D },

    // --- W3C note 3.3 choose ---
    Case { name: "w3c choose advanced", template: W3C_CHOOSE, headers: &[("cookie", "group=Advanced")], fragments: GROUPS, expect: Some("\n    ADV\n  "), ..D },
    Case { name: "w3c choose basic user", template: W3C_CHOOSE, headers: &[("cookie", "group=Basic User")], fragments: GROUPS, expect: Some("\n    BASIC\n  "), ..D },
    Case { name: "w3c choose otherwise", template: W3C_CHOOSE, fragments: GROUPS, expect: Some("\n    NEW\n  "), ..D },
    Case { name: "choose first true when wins", template: r#"<esi:choose><esi:when test="1==1">a</esi:when><esi:when test="2==2">b</esi:when></esi:choose>"#, expect: Some("a"), ..D },
    Case { name: "choose no match no otherwise", template: r#"[<esi:choose><esi:when test="1==2">a</esi:when></esi:choose>]"#, expect: Some("[]"), ..D },
    Case { name: "choose otherwise before when", template: r#"<esi:choose><esi:otherwise>o</esi:otherwise><esi:when test="1==1">w</esi:when></esi:choose>"#, expect: Some("w"), ..D },
    Case { name: "choose stray text dropped", template: r#"<esi:choose>junk<esi:when test="1==1">w</esi:when></esi:choose>"#, expect: Some("w"), warnings: &["StrayContent"], ..D },
    Case { name: "choose stray include dropped", template: r#"<esi:choose><esi:include src="/1.html"/><esi:when test="1==1">w</esi:when></esi:choose>"#, expect: Some("w"), warnings: &["StrayContent"], ..D },
    Case { name: "choose without when", template: r#"<esi:choose><esi:otherwise>o</esi:otherwise></esi:choose>"#, expect: Some("o"), warnings: &["MissingBranch"], ..D },
    Case { name: "when outside choose", template: r#"<esi:when test="1==2">x</esi:when>"#, expect: Some("x"), warnings: &["MisplacedElement"], ..D },
    Case { name: "when without test", template: r#"<esi:choose><esi:when>a</esi:when><esi:otherwise>b</esi:otherwise></esi:choose>"#, expect: Some("b"), warnings: &["MissingAttribute"], ..D },
    Case { name: "bad expression is false", template: r#"<esi:choose><esi:when test="1 ==">a</esi:when><esi:otherwise>b</esi:otherwise></esi:choose>"#, expect: Some("b"), warnings: &["BadExpression"], ..D },
    Case { name: "nested choose", template: r#"<esi:choose><esi:when test="1==1"><esi:choose><esi:when test="1==2">x</esi:when><esi:otherwise>y</esi:otherwise></esi:choose></esi:when></esi:choose>"#, expect: Some("y"), ..D },
    Case { name: "include only in taken branch", template: r#"<esi:choose><esi:when test="1==2"><esi:include src="/missing"/></esi:when><esi:otherwise>ok</esi:otherwise></esi:choose>"#, expect: Some("ok"), ..D },

    // --- W3C note 3.4 try ---
    Case { name: "w3c try attempt succeeds", template: W3C_TRY, fragments: AD, expect: Some("\n    \n    [AD]\n  "), ..D },
    Case { name: "w3c try except", template: W3C_TRY, expect: Some("\n    \n    <a href=www.akamai.com>www.example.com</a>\n  "), ..D },
    Case { name: "try discards partial attempt", template: r#"<esi:try><esi:attempt>a<esi:include src="/1.html"/>b<esi:include src="/x"/>c</esi:attempt><esi:except>E</esi:except></esi:try>"#, fragments: ONE, expect: Some("E"), ..D },
    Case { name: "try onerror continue inside attempt", template: r#"<esi:try><esi:attempt>a<esi:include src="/x" onerror="continue"/>b</esi:attempt><esi:except>E</esi:except></esi:try>"#, expect: Some("ab"), ..D },
    Case { name: "nested try inner absorbs", template: r#"<esi:try><esi:attempt>(<esi:try><esi:attempt><esi:include src="/x"/></esi:attempt><esi:except>in</esi:except></esi:try>)</esi:attempt><esi:except>out</esi:except></esi:try>"#, expect: Some("(in)"), ..D },
    Case { name: "nested try inner except fails", template: r#"<esi:try><esi:attempt>(<esi:try><esi:attempt><esi:include src="/x"/></esi:attempt><esi:except><esi:include src="/y"/></esi:except></esi:try>)</esi:attempt><esi:except>out</esi:except></esi:try>"#, expect: Some("out"), ..D },
    Case { name: "except failure fails page", template: r#"<esi:try><esi:attempt><esi:include src="/x"/></esi:attempt><esi:except><esi:include src="/y"/></esi:except></esi:try>"#, expect: None, ..D },
    Case { name: "except before attempt", template: r#"<esi:try><esi:except>E</esi:except><esi:attempt>A</esi:attempt></esi:try>"#, expect: Some("A"), ..D },
    Case { name: "try without except", template: r#"<esi:try><esi:attempt><esi:include src="/x"/></esi:attempt></esi:try>!"#, expect: Some("!"), warnings: &["MissingBranch"], ..D },
    Case { name: "try without attempt", template: r#"<esi:try><esi:except>E</esi:except></esi:try>"#, expect: Some(""), warnings: &["MissingBranch"], ..D },
    Case { name: "second attempt dropped", template: r#"<esi:try><esi:attempt>1</esi:attempt><esi:attempt>2</esi:attempt><esi:except>E</esi:except></esi:try>"#, expect: Some("1"), warnings: &["MisplacedElement"], ..D },
    Case { name: "attempt outside try", template: r#"<esi:attempt>x</esi:attempt>"#, expect: Some("x"), warnings: &["MisplacedElement"], ..D },
    Case { name: "try stray text", template: r#"<esi:try>zz<esi:attempt>A</esi:attempt><esi:except>E</esi:except></esi:try>"#, expect: Some("A"), warnings: &["StrayContent"], ..D },
    Case { name: "try inside when", template: r#"<esi:choose><esi:when test="1==1"><esi:try><esi:attempt><esi:include src="/x"/></esi:attempt><esi:except>E</esi:except></esi:try></esi:when></esi:choose>"#, expect: Some("E"), ..D },

    // --- W3C note 3.5 comment, 3.6 remove ---
    Case { name: "w3c comment", template: r#"a<esi:comment text="the following animation will have a 24 hr TTL." />b"#, expect: Some("ab"), ..D },
    Case { name: "comment with end tag", template: r#"a<esi:comment text="x"></esi:comment>b"#, expect: Some("ab"), ..D },
    Case { name: "w3c remove", template: "<esi:include src=\"http://www.example.com/ad.html\"/> \n<esi:remove> \n  <a href=\"http://www.example.com\">www.example.com</a>\n</esi:remove>", fragments: &[("http://www.example.com/ad.html", "[AD]")], expect: Some("[AD] \n"), ..D },
    Case { name: "remove hides esi inside", template: r#"a<esi:remove><esi:include src="/x"/><esi:bogus></esi:remove>b"#, expect: Some("ab"), ..D },
    Case { name: "unclosed remove drops rest", template: r#"a<esi:remove>bbb"#, expect: Some("a"), warnings: &["UnclosedElement"], ..D },
    Case { name: "self-closed remove", template: r#"a<esi:remove/>b"#, expect: Some("ab"), ..D },

    // --- W3C note 3.7 vars ---
    Case { name: "w3c vars", template: "<esi:vars>\n  <img src=\"http://www.example.com/$(HTTP_COOKIE{type})/hello.gif\"/>\n</esi:vars>", headers: &[("cookie", "type=gold")], expect: Some("\n  <img src=\"http://www.example.com/gold/hello.gif\"/>\n"), ..D },
    Case { name: "vars with space before slash", template: r#"<esi:vars><img src="http://www.example.com/$(HTTP_COOKIE{type})/hello.gif"/ ></esi:vars>"#, headers: &[("cookie", "type=gold")], expect: Some(r#"<img src="http://www.example.com/gold/hello.gif"/ >"#), ..D },
    Case { name: "text outside vars is not substituted", template: r#"$(HTTP_HOST)"#, expect: Some("$(HTTP_HOST)"), ..D },
    Case { name: "vars escapes markup", template: r#"<esi:vars>Hi $(HTTP_COOKIE{name})</esi:vars>"#, headers: &[("cookie", "name=<script>\"x'&")], expect: Some("Hi &lt;script&gt;&quot;x&#39;&amp;"), ..D },
    Case { name: "vars unset is empty", template: r#"<esi:vars>[$(HTTP_COOKIE{nope})]</esi:vars>"#, expect: Some("[]"), ..D },
    Case { name: "vars keeps unknown lowercase refs", template: r#"<esi:vars>$(document).ready()</esi:vars>"#, expect: Some("$(document).ready()"), ..D },
    Case { name: "vars unknown upper-case variable", template: r#"<esi:vars>$(HTTP_FOO)</esi:vars>"#, expect: Some("$(HTTP_FOO)"), warnings: &["UnknownVariable"], ..D },
    Case { name: "vars with include inside", template: r#"<esi:vars>$(HTTP_HOST):<esi:include src="/1.html"/>:$(HTTP_HOST)</esi:vars>"#, fragments: ONE, expect: Some("example.com:one:example.com"), ..D },
    Case { name: "vars self-closing", template: r#"<esi:vars/>$(HTTP_HOST)"#, expect: Some("$(HTTP_HOST)"), ..D },

    // --- W3C note 3.8 <!--esi --> ---
    Case { name: "w3c esi comment block", template: "<!--esi  \n  <p><esi:vars>Hello, $(HTTP_COOKIE{name})!</esi:vars></p>\n-->", headers: &[("cookie", "name=Robin")], expect: Some("  \n  <p>Hello, Robin!</p>\n"), ..D },
    Case { name: "esi comment block include", template: r#"a<!--esi <esi:include src="/1.html"/> -->b"#, fragments: ONE, expect: Some("a one b"), ..D },
    Case { name: "ordinary html comment untouched", template: "<!-- <esi:include src=\"/1.html\"/> -->", fragments: ONE, expect: Some("<!-- one -->"), ..D },
    Case { name: "unterminated esi comment block", template: "a<!--esi b", expect: Some("a b"), warnings: &["UnterminatedCommentBlock"], ..D },
    Case { name: "arrow outside block is text", template: "a-->b", expect: Some("a-->b"), ..D },

    // --- W3C note 4 variables ---
    Case { name: "w3c accept-language list true", template: r#"<esi:vars>$(HTTP_ACCEPT_LANGUAGE{en-gb})</esi:vars>"#, headers: &[("accept-language", "da, en-gb, en")], expect: Some("true"), ..D },
    Case { name: "w3c accept-language list false", template: r#"<esi:vars>$(HTTP_ACCEPT_LANGUAGE{fr})</esi:vars>"#, headers: &[("accept-language", "da, en-gb, en")], expect: Some("false"), ..D },
    Case { name: "accept-language in test", template: r#"<esi:choose><esi:when test="$(HTTP_ACCEPT_LANGUAGE{da})">dansk</esi:when></esi:choose>"#, headers: &[("accept-language", "da, en-gb")], expect: Some("dansk"), ..D },
    Case { name: "w3c cookie dictionary", template: r#"<esi:vars>$(HTTP_COOKIE{visits})</esi:vars>"#, headers: &[("cookie", "id=571; visits=42")], expect: Some("42"), ..D },
    Case { name: "whole cookie header", template: r#"<esi:vars>$(HTTP_COOKIE)</esi:vars>"#, headers: &[("cookie", "id=571; visits=42")], expect: Some("id=571; visits=42"), ..D },
    Case { name: "w3c host", template: r#"<esi:vars>$(HTTP_HOST)</esi:vars>"#, headers: &[("host", "esi.xyz.com")], expect: Some("esi.xyz.com"), ..D },
    Case { name: "w3c referer", template: r#"<esi:vars>$(HTTP_REFERER)</esi:vars>"#, headers: &[("referer", "http://roberts.xyz.com/")], expect: Some("http://roberts.xyz.com/"), ..D },
    Case { name: "w3c user agent browser os version", template: r#"<esi:vars>$(HTTP_USER_AGENT{browser}) $(HTTP_USER_AGENT{os}) $(HTTP_USER_AGENT{version})</esi:vars>"#, headers: &[("user-agent", "Mozilla/4.0 (compatible; MSIE 5.5; Windows NT 5.0)")], expect: Some("MSIE WIN 5.5"), ..D },
    Case { name: "w3c user agent table example", template: r#"<esi:vars>$(HTTP_USER_AGENT{browser}) $(HTTP_USER_AGENT{os}) $(HTTP_USER_AGENT{version})</esi:vars>"#, headers: &[("user-agent", "Mozilla; MSIE 5.5")], expect: Some("MSIE OTHER 5.5"), ..D },
    Case { name: "w3c cookie username", template: r#"<esi:vars>$(HTTP_COOKIE{username})</esi:vars>"#, headers: &[("cookie", "username=robin")], expect: Some("robin"), ..D },
    Case { name: "user agent mozilla unix", template: r#"<esi:vars>$(HTTP_USER_AGENT{browser}) $(HTTP_USER_AGENT{os})</esi:vars>"#, headers: &[("user-agent", "Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0")], expect: Some("MOZILLA UNIX"), ..D },
    Case { name: "w3c query string dictionary", template: r#"<esi:vars>$(QUERY_STRING{first})</esi:vars>"#, url: "http://example.com/page?first=Robin&last=Roberts", expect: Some("Robin"), ..D },
    Case { name: "w3c whole query string", template: r#"<esi:vars>$(QUERY_STRING)</esi:vars>"#, url: "http://example.com/page?first=Robin&last=Roberts", expect: Some("first=Robin&amp;last=Roberts"), ..D },
    Case { name: "query string decoded", template: r#"<esi:vars>$(QUERY_STRING{q})</esi:vars>"#, url: "http://example.com/page?q=a%20b+c", expect: Some("a b c"), ..D },

    // --- W3C note 4.2 defaults ---
    Case { name: "w3c default value in src", template: r#"<esi:include src="http://example.com/$(HTTP_COOKIE{id}|default).html"/>"#, fragments: &[("http://example.com/default.html", "welcome")], expect: Some("welcome"), ..D },
    Case { name: "w3c quoted default with space", template: r#"<esi:vars>$(HTTP_COOKIE{first_name}|'new user')</esi:vars>"#, expect: Some("new user"), ..D },
    Case { name: "default not used when set", template: r#"<esi:vars>$(HTTP_COOKIE{a}|'none')</esi:vars>"#, headers: &[("cookie", "a=set")], expect: Some("set"), ..D },
    Case { name: "default used when empty", template: r#"<esi:vars>$(HTTP_COOKIE{a}|'none')</esi:vars>"#, headers: &[("cookie", "a=")], expect: Some("none"), ..D },
    Case { name: "unquoted default", template: r#"<esi:vars>$(HTTP_COOKIE{a}|none)</esi:vars>"#, expect: Some("none"), ..D },
    Case { name: "default with spaces", template: r#"<esi:vars>$(HTTP_REFERER|'no referer here')</esi:vars>"#, expect: Some("no referer here"), ..D },

    // --- variables in include URLs are escaped ---
    Case { name: "cookie cannot change include host", template: r#"<esi:include src="/u/$(HTTP_COOKIE{u})" onerror="continue"/>"#, headers: &[("cookie", "u=//evil.com/x")], fragments: &[("http://example.com/u/%2F%2Fevil.com%2Fx", "safe")], expect: Some("safe"), ..D },
    Case { name: "cookie cannot traverse", template: r#"<esi:include src="/a/$(HTTP_COOKIE{u})/b"/>"#, headers: &[("cookie", "u=..")], fragments: &[("http://example.com/a/%2E%2E/b", "kept")], expect: Some("kept"), ..D },
    Case { name: "query value cannot become absolute url", template: r#"<esi:include src="$(QUERY_STRING{u})"/>"#, url: "http://example.com/p/page?u=http://evil.com/", fragments: &[("http://example.com/p/http%3A%2F%2Fevil.com%2F", "relative")], expect: Some("relative"), ..D },
    Case { name: "host variable keeps port", template: r#"<esi:include src="http://$(HTTP_HOST)/1.html"/>"#, headers: &[("host", "example.com:8080")], fragments: &[("http://example.com:8080/1.html", "port")], expect: Some("port"), ..D },
    Case { name: "variable in alt", template: r#"<esi:include src="/none" alt="/alt/$(QUERY_STRING{v})"/>"#, url: "http://example.com/?v=7", fragments: &[("http://example.com/alt/7", "seven")], expect: Some("seven"), ..D },

    // --- W3C note 5 expressions ---
    Case { name: "w3c expr not", template: r#"<esi:choose><esi:when test="!(1==1)">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, expect: Some("F"), ..D },
    Case { name: "w3c expr not le", template: r#"<esi:choose><esi:when test="!('a'<='c')">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, expect: Some("F"), ..D },
    Case { name: "w3c expr or", template: r#"<esi:choose><esi:when test="(1==1)|('abc'=='def')">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, expect: Some("T"), ..D },
    Case { name: "w3c expr and", template: r#"<esi:choose><esi:when test="(4!=5)&(4==5)">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, expect: Some("F"), ..D },
    Case { name: "w3c expr host literal", template: r#"<esi:choose><esi:when test="$(HTTP_HOST) == 'example.com'">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, expect: Some("T"), ..D },
    Case { name: "w3c logical operator on numbers does not evaluate", template: r#"<esi:choose><esi:when test="(1 & 4)">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, expect: Some("F"), warnings: &["BadExpression"], ..D },
    Case { name: "w3c logical operator on strings does not evaluate", template: r#"<esi:choose><esi:when test='("abc" | "edf")'>T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, expect: Some("F"), warnings: &["BadExpression"], ..D },
    Case { name: "comparison binds tighter than not", template: r#"<esi:choose><esi:when test="!$(HTTP_COOKIE{a}) == 'x'">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, headers: &[("cookie", "a=y")], expect: Some("T"), ..D },
    Case { name: "w3c version that is not a number", template: r#"<esi:choose><esi:when test="$(HTTP_COOKIE{v}) > 9">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, headers: &[("cookie", "v=10.05a")], expect: Some("F"), ..D },
    Case { name: "numeric comparison of variables", template: r#"<esi:choose><esi:when test="$(QUERY_STRING{n}) > 9">big</esi:when><esi:otherwise>small</esi:otherwise></esi:choose>"#, url: "http://example.com/?n=10", expect: Some("big"), ..D },
    Case { name: "string comparison when not numeric", template: r#"<esi:choose><esi:when test="$(QUERY_STRING{n}) > '9'">gt</esi:when><esi:otherwise>le</esi:otherwise></esi:choose>"#, url: "http://example.com/?n=10", expect: Some("le"), ..D },
    Case { name: "unset operand makes comparison false", template: r#"<esi:choose><esi:when test="$(HTTP_COOKIE{x}) != 'a'">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, expect: Some("F"), ..D },
    Case { name: "and binds tighter than or", template: r#"<esi:choose><esi:when test="1==1 | 1==2 & 1==2">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, expect: Some("T"), ..D },
    Case { name: "entities in test", template: r#"<esi:choose><esi:when test="2 &gt; 1 &amp; 1 &lt; 2">T</esi:when></esi:choose>"#, expect: Some("T"), ..D },
    Case { name: "greater-than inside quoted test", template: r#"<esi:choose><esi:when test="$(HTTP_COOKIE{n}) >= 5">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, headers: &[("cookie", "n=5")], expect: Some("T"), ..D },
    Case { name: "negative and decimal numbers", template: r#"<esi:choose><esi:when test="-1.5 < 0.25">T</esi:when></esi:choose>"#, expect: Some("T"), ..D },
    Case { name: "unknown variable in test", template: r#"<esi:choose><esi:when test="$(NOPE)==1">T</esi:when><esi:otherwise>F</esi:otherwise></esi:choose>"#, expect: Some("F"), warnings: &["BadExpression"], ..D },

    // --- malformed input: one behaviour each ---
    Case { name: "unknown element tag dropped content kept", template: r#"a<esi:foo x="1">b</esi:foo>c"#, expect: Some("abc"), warnings: &["UnknownElement"], ..D },
    Case { name: "unterminated tag is text", template: r#"a<esi:include src="/x""#, expect: Some(r#"a<esi:include src="/x""#), warnings: &["UnterminatedTag"], ..D },
    Case { name: "unexpected end tag dropped", template: r#"a</esi:choose>b"#, expect: Some("ab"), warnings: &["UnexpectedEndTag"], ..D },
    Case { name: "unclosed vars closed at eof", template: r#"<esi:vars>$(HTTP_HOST)"#, expect: Some("example.com"), warnings: &["UnclosedElement"], ..D },
    Case { name: "unclosed when closed by choose end", template: r#"<esi:choose><esi:when test="1==1">a</esi:choose>b"#, expect: Some("ab"), warnings: &["UnclosedElement"], ..D },
    Case { name: "unclosed try at eof", template: r#"<esi:try><esi:attempt>a"#, expect: Some("a"), warnings: &["UnclosedElement", "MissingBranch", "UnclosedElement"], ..D },
    Case { name: "upper-case tags are not esi", template: r#"<ESI:include src="/x"/>"#, expect: Some(r#"<ESI:include src="/x"/>"#), ..D },
    Case { name: "esi-like text untouched", template: "design <esix <esi desi:", expect: Some("design <esix <esi desi:"), ..D },
    Case { name: "lone lt at end", template: "a <", expect: Some("a <"), ..D },
    Case { name: "nesting too deep", template: NESTED_40, expect: Some("deep"), warnings: &["NestingTooDeep"; 8], ..D },
];

/// A relative-src case with the default url and an expected `one`.
const D_ONE: Case = Case {
    expect: Some("one"),
    ..D
};

const W3C_CHOOSE: &str = r#"<esi:choose>
  <esi:when test="$(HTTP_COOKIE{group})=='Advanced'">
    <esi:include src="http://www.example.com/advanced.html"/>
  </esi:when>
  <esi:when test="$(HTTP_COOKIE{group})=='Basic User'">
    <esi:include src="http://www.example.com/basic.html"/>
  </esi:when>
  <esi:otherwise>
    <esi:include src="http://www.example.com/new_user.html"/>
  </esi:otherwise>
</esi:choose>"#;

const W3C_TRY: &str = r#"<esi:try>
  <esi:attempt>
    <esi:comment text="Include an ad"/>
    <esi:include src="http://www.example.com/ad1.html"/>
  </esi:attempt>
  <esi:except>
    <esi:comment text="Just write some HTML instead"/>
    <a href=www.akamai.com>www.example.com</a>
  </esi:except>
</esi:try>"#;

/// 40 nested `esi:vars`: the 8 beyond the default depth of 32 are dropped.
const NESTED_40: &str = concat!(
    "<esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars>",
    "<esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars>",
    "<esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars>",
    "<esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars><esi:vars>",
    "deep",
    "</esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars>",
    "</esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars>",
    "</esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars>",
    "</esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars></esi:vars>",
);

pub fn request(case: &Case) -> Request {
    let mut req = Request::new(case.url);
    for (name, value) in case.headers {
        req.set_header(name, value);
    }
    req
}

/// Renders a compiled template for a case; `None` when the page fails.
pub fn render(case: &Case, template: &Template) -> Option<String> {
    let fragments: HashMap<&str, &str> = case.fragments.iter().copied().collect();
    let mut get = |url: &str| fragments.get(url).map(|body| Bytes::from(body.to_string()));
    let parts = render_sync(template, &request(case), &mut get, 10).ok()?;
    Some(String::from_utf8(parts.concat()).expect("cases are UTF-8"))
}

fn warning_kinds(template: &Template) -> Vec<String> {
    template
        .warnings()
        .iter()
        .map(|w| {
            let debug = format!("{:?}", w.kind);
            debug
                .split(['(', ' ', '{'])
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

fn compile_chunks(input: &[u8], split: impl Iterator<Item = usize>) -> Template {
    let mut compiler = Compiler::new(&Options::default());
    let mut last = 0;
    for at in split {
        compiler.feed(Bytes::copy_from_slice(&input[last..at]));
        last = at;
    }
    compiler.feed(Bytes::copy_from_slice(&input[last..]));
    compiler.finish()
}

#[test]
fn table_has_enough_cases() {
    assert!(CASES.len() >= 80, "only {} cases", CASES.len());
    let mut names: Vec<_> = CASES.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), CASES.len(), "case names must be unique");
}

#[test]
fn conformance_table() {
    let mut failures = Vec::new();
    for case in CASES {
        let template = Template::parse(case.template);
        let got = render(case, &template);
        let want = case.expect.map(str::to_string);
        if got != want {
            failures.push(format!(
                "{}: output\n  want {want:?}\n  got  {got:?}",
                case.name
            ));
        }
        let kinds = warning_kinds(&template);
        if kinds != case.warnings {
            failures.push(format!(
                "{}: warnings\n  want {:?}\n  got  {kinds:?} ({:?})",
                case.name,
                case.warnings,
                template.warnings()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn conformance_table_streamed_at_every_split() {
    for case in CASES {
        let whole = Template::parse(case.template);
        let want = render(case, &whole);
        let input = case.template.as_bytes();
        for at in 1..input.len() {
            let t = compile_chunks(input, std::iter::once(at));
            assert_eq!(render(case, &t), want, "{}: split at {at}", case.name);
            assert_eq!(
                t.warnings(),
                whole.warnings(),
                "{}: split at {at}",
                case.name
            );
        }
        let bytewise = compile_chunks(input, 1..input.len());
        assert_eq!(
            render(case, &bytewise),
            want,
            "{}: 1-byte chunks",
            case.name
        );
        assert_eq!(
            bytewise.warnings(),
            whole.warnings(),
            "{}: 1-byte chunks",
            case.name
        );
    }
}
