//! Hostile and random input: the page is always produced (or fails cleanly), never a panic.

use bytes::Bytes;
use esi::{Compiler, FragmentFailed, Options, Request, Template};

const PIECES: &[&str] = &[
    "<esi:include src=\"/a\"/>",
    "<esi:include src=\"$(QUERY_STRING{x})\" alt='/b' onerror=\"continue\"/>",
    "<esi:try>",
    "</esi:try>",
    "<esi:attempt>",
    "</esi:attempt>",
    "<esi:except>",
    "</esi:except>",
    "<esi:choose>",
    "</esi:choose>",
    "<esi:when test=\"$(HTTP_COOKIE{a}) == 'x' | !(1<2)\">",
    "<esi:when test=\"((((\">",
    "</esi:when>",
    "<esi:otherwise>",
    "</esi:otherwise>",
    "<esi:vars>",
    "</esi:vars>",
    "$(HTTP_COOKIE{a}|'d')",
    "$(HTTP_USER_AGENT{os})",
    "$(",
    "<esi:remove>",
    "</esi:remove>",
    "<!--esi",
    "-->",
    "<esi:comment text=\"c\"/>",
    "<esi:inline name=\"/i\">",
    "</esi:inline>",
    "<esi:",
    "</esi:",
    "\"",
    "'",
    ">",
    "<",
    "text ",
    "\u{e9}\u{1F600}",
    "\0\u{ff}",
    "<esi:bogus>",
    "</esi:bogus>",
    "<esi:include>",
    "&amp;",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 as usize
    }
}

#[test]
fn random_esi_soup_never_panics_and_streams_identically() {
    let mut rng = Rng(42);
    let req = Request::new("http://h/p?x=..%2F")
        .header("cookie", "a=x")
        .header("user-agent", "Mozilla/5.0 (Windows NT 10.0)");
    for round in 0..3000 {
        let mut page = String::new();
        for _ in 0..(rng.next() % 40) {
            page.push_str(PIECES[rng.next() % PIECES.len()]);
        }
        let opts = Options {
            max_depth: 1 + rng.next() % 8,
            max_tag_len: 16 + rng.next() % 64,
        };
        let whole = Template::parse_with(page.clone(), &opts);
        let mut c = Compiler::new(&opts);
        let bytes = page.as_bytes();
        let mut pos = 0;
        while pos < bytes.len() {
            let end = (pos + 1 + rng.next() % 13).min(bytes.len());
            c.feed(Bytes::copy_from_slice(&bytes[pos..end]));
            pos = end;
        }
        let streamed = c.finish();
        let fail_mask = rng.next();
        let out = |t: &Template| {
            t.evaluate(&req)
                .assemble(|id, _, out| {
                    if fail_mask >> (id % 64) & 1 == 1 {
                        out.push(Bytes::from_static(b"partial"));
                        return Err(FragmentFailed);
                    }
                    out.push(Bytes::from(format!("<{id}>")));
                    Ok(())
                })
                .map(|parts| parts.concat())
        };
        assert_eq!(out(&whole), out(&streamed), "round {round}: {page:?}");
        assert_eq!(
            whole.warnings(),
            streamed.warnings(),
            "round {round}: {page:?}"
        );
    }
}

// The next two would take minutes if any per-tag step scanned the whole stack or the
// rest of the input; they are here to keep parsing linear on hostile pages.

#[test]
fn deep_unknown_nesting_and_unmatched_end_tags_stay_linear() {
    let n = 50_000;
    let mut page = String::from("<esi:choose>");
    page.push_str(&"<esi:when test=\"1==1\"><esi:foo>".repeat(n));
    page.push('x');
    page.push_str(&"</esi:try>".repeat(n));
    page.push_str("</esi:choose>");
    let t = Template::parse(page);
    let out = t
        .evaluate(&Request::new("http://h/"))
        .assemble(|_, _, _| Ok(()))
        .unwrap();
    assert_eq!(out.concat(), b"x");
    let unexpected = t
        .warnings()
        .iter()
        .filter(|w| matches!(w.kind, esi::WarningKind::UnexpectedEndTag(_)))
        .count();
    assert_eq!(unexpected, n);
}

#[test]
fn long_unterminated_esi_comment_block_stays_linear() {
    let n = 50_000;
    let page = format!("<!--esi {}", "<esi:comment text=\"c\"/>-".repeat(n));
    let t = Template::parse(page);
    assert_eq!(t.warnings().len(), 1);
    let out = t
        .evaluate(&Request::new("http://h/"))
        .assemble(|_, _, _| Ok(()))
        .unwrap();
    assert_eq!(out.concat().len(), 1 + n);
}
