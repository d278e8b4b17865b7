//! The tokenizer and compiler fed in chunks: same answers as one buffer, bounded memory.

use bytes::Bytes;
use esi::{Compiler, Event, Options, Request, TagName, Template, Tokenizer, WarningKind};

use crate::conformance::{render, CASES};

/// A deterministic xorshift generator, so chunkings are random-looking but reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn events(chunks: &[&[u8]]) -> Vec<Event> {
    let mut t = Tokenizer::new(16 * 1024);
    let mut out = Vec::new();
    for c in chunks {
        t.feed(Bytes::copy_from_slice(c), &mut |e| out.push(e));
    }
    t.finish(&mut |e| out.push(e));
    out
}

#[test]
fn tag_across_three_chunks() {
    let ev = events(&[b"ab<es", b"i:include src=\"/x", b"\"/>cd"]);
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert_eq!(ev[0], Event::Text(Bytes::from_static(b"ab")));
    let Event::Start(tag) = &ev[1] else {
        panic!("{:?}", ev[1])
    };
    assert_eq!(tag.name, TagName::Include);
    assert_eq!(tag.attr("src"), Some("/x"));
    assert!(tag.self_closing);
    assert_eq!(tag.offset, 2);
    assert_eq!(ev[2], Event::Text(Bytes::from_static(b"cd")));
}

#[test]
fn quoted_gt_does_not_end_a_tag_across_chunks() {
    let ev = events(&[b"<esi:when test=\"1 >", b" 0\">x</esi:when>"]);
    let Event::Start(tag) = &ev[0] else {
        panic!("{:?}", ev[0])
    };
    assert_eq!(tag.attr("test"), Some("1 > 0"));
}

#[test]
fn text_events_are_slices_of_the_chunk() {
    let chunk = Bytes::from_static(b"0123456789<esi:comment text=\"c\"/>abcdefghij");
    let base = chunk.as_ptr() as usize;
    let mut t = Tokenizer::new(1024);
    let mut texts = Vec::new();
    t.feed(chunk.clone(), &mut |e| {
        if let Event::Text(b) = e {
            texts.push(b)
        }
    });
    t.finish(&mut |_| {});
    assert_eq!(texts.len(), 2);
    assert_eq!(texts[0].as_ptr() as usize, base);
    assert_eq!(texts[1].as_ptr() as usize, base + 33);
}

#[test]
fn overlong_tag_is_text_in_one_chunk_and_across_chunks() {
    let opts = Options {
        max_tag_len: 64,
        ..Options::default()
    };
    let long = format!("a<esi:include src=\"{}\"/>b", "x".repeat(100));
    let whole = Template::parse_with(long.clone(), &opts);
    assert_eq!(whole.warnings()[0].kind, WarningKind::UnterminatedTag);
    let mut c = Compiler::new(&opts);
    for piece in long.as_bytes().chunks(7) {
        c.feed(Bytes::copy_from_slice(piece));
    }
    let streamed = c.finish();
    assert_eq!(streamed.warnings()[0].kind, WarningKind::UnterminatedTag);
    for t in [&whole, &streamed] {
        let out = t
            .evaluate(&Request::new("http://h/"))
            .assemble(|_, _, _| Ok(()))
            .unwrap()
            .concat();
        assert!(
            out.starts_with(b"a<esi:include src=\"xxx"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert!(out.ends_with(b"b"));
    }
}

#[test]
fn unbalanced_quote_stops_at_the_limit() {
    // A stray quote would make the tag swallow the page; the limit passes it through.
    let page = format!(
        "<esi:include src=\"/x/>{}<esi:include src=\"/y\"/>",
        "z".repeat(40_000)
    );
    let t = Template::parse(page);
    assert_eq!(t.warnings()[0].kind, WarningKind::UnterminatedTag);
    let srcs: Vec<_> = t.includes().map(|i| i.src.clone()).collect();
    assert_eq!(srcs, ["/y"]);
}

#[test]
fn random_chunkings_match_whole_parse() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for case in CASES.iter().filter(|c| c.template.len() > 20) {
        let want = render(case, &Template::parse(case.template));
        let input = case.template.as_bytes();
        for _ in 0..20 {
            let mut c = Compiler::new(&Options::default());
            let mut pos = 0;
            while pos < input.len() {
                let n = 1 + (rng.next() % 9) as usize;
                let end = (pos + n).min(input.len());
                c.feed(Bytes::copy_from_slice(&input[pos..end]));
                pos = end;
            }
            assert_eq!(render(case, &c.finish()), want, "{}", case.name);
        }
    }
}

#[test]
fn big_page_in_network_sized_chunks() {
    let mut page = String::new();
    let mut expected = String::new();
    for i in 0..2000 {
        let row = format!("<div class=\"row\">row {i} design resin <span>esi</span></div>\n");
        page.push_str(&row);
        expected.push_str(&row);
        if i % 100 == 0 {
            page.push_str(&format!(
                "<esi:include src=\"/frag/{i}\" onerror=\"continue\"/>\n"
            ));
            expected.push_str(&format!("[{i}]\n"));
        }
    }
    let whole = Template::parse(page.clone());
    assert_eq!(whole.includes().count(), 20);
    let mut c = Compiler::new(&Options::default());
    for piece in page.as_bytes().chunks(1460) {
        c.feed(Bytes::copy_from_slice(piece));
    }
    let streamed = c.finish();
    let req = Request::new("http://h/");
    for t in [whole, streamed] {
        let ev = t.evaluate(&req);
        let out = ev
            .assemble(|_, inc, out| {
                let n = inc.src.rsplit('/').next().unwrap_or_default();
                out.push(Bytes::from(format!("[{n}]")));
                Ok(())
            })
            .unwrap()
            .concat();
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }
}
