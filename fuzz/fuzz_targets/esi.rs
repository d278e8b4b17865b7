//! Fuzzes the ESI tokenizer, compiler, evaluator and assembler together.
//!
//! Input: byte 0 picks the chunk size (1..=64) for a streamed parse, byte 1 which includes
//! fail, byte 2 the parser limits; the rest is the template. Besides "no panic", the
//! target checks the streaming property: the template compiled from chunks produces the
//! same warnings and the same page as the template compiled in one piece.
#![no_main]

use bytes::Bytes;
use esi::{Compiler, FragmentFailed, Options, Request, Template};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let chunk = 1 + (data[0] as usize % 64);
    let fail_mask = data[1];
    let options = Options { max_depth: 1 + (data[2] as usize % 40), max_tag_len: 16 + (data[2] as usize) * 64 };
    let input = Bytes::copy_from_slice(&data[3..]);

    let whole = Template::parse_with(input.clone(), &options);
    let mut compiler = Compiler::new(&options);
    for piece in input.chunks(chunk) {
        compiler.feed(input.slice_ref(piece));
    }
    let streamed = compiler.finish();
    assert_eq!(whole.warnings(), streamed.warnings());

    let req = Request::new("http://example.com/dir/page?first_name=Robin&x=..%2F&n=10")
        .header("cookie", "group=Advanced; type=gold; name=<b>; visits=42")
        .header("accept-language", "da, en-gb;q=0.8, en;q=0")
        .header("user-agent", "Mozilla/4.0 (compatible; MSIE 5.5; Windows NT 5.0)")
        .header("host", "example.com:8080");
    let render = |t: &Template| {
        let ev = t.evaluate(&req);
        for inc in ev.includes() {
            assert!(!inc.src.contains(['<', '>']) || t.includes().any(|i| i.src.contains(['<', '>'])));
        }
        ev.assemble(|id, _, out| {
            if fail_mask >> (id % 8) & 1 == 1 {
                return Err(FragmentFailed);
            }
            out.push(Bytes::from_static(b"<frag>"));
            Ok(())
        })
        .map(|parts| parts.concat())
    };
    assert_eq!(render(&whole), render(&streamed));
    let _ = (whole.variables(), whole.inlines(), whole.has_esi());
});
