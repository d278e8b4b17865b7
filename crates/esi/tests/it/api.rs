//! The API a proxy consumes: items, include requests, assembly, template metadata.

use std::time::Duration;

use bytes::Bytes;
use esi::{FragmentFailed, IncludeFailed, Item, Request, Template, WarningKind};

fn ok(
    body: &'static str,
) -> impl FnMut(usize, &esi::IncludeRequest, &mut Vec<Bytes>) -> Result<(), FragmentFailed> {
    move |_, _, out| {
        out.push(Bytes::from_static(body.as_bytes()));
        Ok(())
    }
}

#[test]
fn template_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Template>();
    assert_send_sync::<esi::Evaluation>();
}

#[test]
fn include_attributes_are_parsed() {
    let t = Template::parse(
        r#"<esi:include src="/a" ttl="30s" timeout="250" no-store/><esi:include src="/b" alt="/c" maxwait="2s" ttl="90" no-store="off" onerror="continue"/>"#,
    );
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
    let incs: Vec<_> = t.includes().collect();
    assert_eq!(incs.len(), 2);
    assert_eq!(incs[0].src, "/a");
    assert_eq!(incs[0].ttl, Some(Duration::from_secs(30)));
    assert_eq!(incs[0].timeout, Some(Duration::from_millis(250)));
    assert!(incs[0].no_store);
    assert!(!incs[0].continue_on_error);
    assert_eq!(incs[1].alt.as_deref(), Some("/c"));
    assert_eq!(incs[1].timeout, Some(Duration::from_secs(2)));
    assert_eq!(incs[1].ttl, Some(Duration::from_secs(90)));
    assert!(!incs[1].no_store);
    assert!(incs[1].continue_on_error);
    assert_eq!(incs[1].offset, 56);

    let ev = t.evaluate(&Request::new("https://shop.example/x/y"));
    let reqs = ev.includes();
    assert_eq!(reqs[0].src, "https://shop.example/a");
    assert_eq!(reqs[1].alt.as_deref(), Some("https://shop.example/c"));
    assert_eq!(reqs[1].ttl, Some(Duration::from_secs(90)));
}

#[test]
fn evaluation_lays_out_try_blocks_as_ranges() {
    let t = Template::parse(
        r#"a<esi:try><esi:attempt>b<esi:include src="/1"/></esi:attempt><esi:except>c<esi:include src="/2"/></esi:except></esi:try>d"#,
    );
    let ev = t.evaluate(&Request::new("http://h/"));
    assert_eq!(
        ev.items(),
        &[
            Item::Bytes(Bytes::from_static(b"a")),
            Item::Try {
                attempt_end: 4,
                end: 6
            },
            Item::Bytes(Bytes::from_static(b"b")),
            Item::Include(0),
            Item::Bytes(Bytes::from_static(b"c")),
            Item::Include(1),
            Item::Bytes(Bytes::from_static(b"d")),
        ]
    );
    assert!(ev.includes().iter().all(|i| i.in_try));
    assert_eq!(ev.includes()[1].src, "http://h/2");
}

#[test]
fn assemble_fetches_except_only_when_attempt_fails() {
    let t = Template::parse(
        r#"<esi:try><esi:attempt><esi:include src="/1"/></esi:attempt><esi:except><esi:include src="/2"/></esi:except></esi:try>"#,
    );
    let ev = t.evaluate(&Request::new("http://h/"));
    let mut asked = Vec::new();
    let out = ev
        .assemble(|id, _, out| {
            asked.push(id);
            out.push(Bytes::from_static(b"F"));
            Ok(())
        })
        .unwrap();
    assert_eq!(asked, [0]);
    assert_eq!(out.concat(), b"F");

    let mut asked = Vec::new();
    let out = ev
        .assemble(|id, _, out| {
            asked.push(id);
            if id == 0 {
                return Err(FragmentFailed);
            }
            out.push(Bytes::from_static(b"E"));
            Ok(())
        })
        .unwrap();
    assert_eq!(asked, [0, 1]);
    assert_eq!(out.concat(), b"E");
}

#[test]
fn assemble_discards_what_a_failed_fetch_appended() {
    let t = Template::parse(r#"[<esi:include src="/1" onerror="continue"/>]"#);
    let ev = t.evaluate(&Request::new("http://h/"));
    let out = ev
        .assemble(|_, _, out| {
            out.push(Bytes::from_static(b"half"));
            Err(FragmentFailed)
        })
        .unwrap();
    assert_eq!(out.concat(), b"[]");
}

#[test]
fn unabsorbed_failure_names_the_include() {
    let t = Template::parse(r#"ok<esi:include src="/gone"/>"#);
    let ev = t.evaluate(&Request::new("http://h/p"));
    let err = ev.assemble(|_, _, _| Err(FragmentFailed)).unwrap_err();
    assert_eq!(
        err,
        IncludeFailed {
            include: 0,
            src: "http://h/gone".into()
        }
    );
}

#[test]
fn literal_text_is_not_copied() {
    let input = Bytes::from_static(b"<html>head<esi:include src=\"/x\"/>tail</html>");
    let range = input.as_ptr() as usize..input.as_ptr() as usize + input.len();
    let ev = Template::parse(input.clone()).evaluate(&Request::new("http://h/"));
    let mut literals = 0;
    for item in ev.items() {
        if let Item::Bytes(b) = item {
            assert!(range.contains(&(b.as_ptr() as usize)), "{b:?} was copied");
            literals += 1;
        }
    }
    assert_eq!(literals, 2);
    let out = ev.assemble(ok("X")).unwrap();
    assert_eq!(out.concat(), b"<html>headXtail</html>");
}

#[test]
fn metadata_lists_variables_inlines_and_esi_presence() {
    let t = Template::parse(
        r#"<esi:vars>$(HTTP_COOKIE{id}) $(HTTP_HOST)</esi:vars><esi:choose><esi:when test="$(QUERY_STRING{q}) == 'a' | $(HTTP_COOKIE{id}) == 1">x</esi:when></esi:choose><esi:inline name="/frag" fetchable="yes">in<esi:vars>$(HTTP_HOST)</esi:vars><esi:remove>gone</esi:remove></esi:inline>"#,
    );
    assert_eq!(
        t.variables(),
        ["HTTP_COOKIE{id}", "HTTP_HOST", "QUERY_STRING{q}"]
    );
    assert_eq!(t.inlines().len(), 1);
    assert_eq!(t.inlines()[0].name, "/frag");
    assert!(t.inlines()[0].fetchable);
    assert_eq!(
        t.inlines()[0].body,
        Bytes::from_static(b"in<esi:vars>$(HTTP_HOST)</esi:vars><esi:remove>gone</esi:remove>")
    );
    assert!(t.has_esi());
    assert!(!Template::parse("<p>plain <b>html</b> with $(HTTP_HOST)</p>").has_esi());
}

#[test]
fn warnings_point_at_the_tag() {
    let t = Template::parse("0123456789<esi:bogus/>xx</esi:when>");
    let w: Vec<_> = t
        .warnings()
        .iter()
        .map(|w| (w.offset, w.kind.clone()))
        .collect();
    assert_eq!(
        w,
        [
            (10, WarningKind::UnknownElement("bogus".into())),
            (24, WarningKind::UnexpectedEndTag("when".into())),
        ]
    );
    assert_eq!(
        t.warnings()[0].to_string(),
        "unknown element esi:bogus, tag dropped (at byte 10)"
    );
}

#[test]
fn same_template_many_requests() {
    let t = Template::parse(
        r#"<esi:choose><esi:when test="$(HTTP_COOKIE{tier}) == 'gold'"><esi:include src="/gold/$(HTTP_COOKIE{id})"/></esi:when><esi:otherwise><esi:include src="/std"/></esi:otherwise></esi:choose>"#,
    );
    for (cookie, want) in [
        ("tier=gold; id=7", "http://h/gold/7"),
        ("tier=tin", "http://h/std"),
        ("", "http://h/std"),
    ] {
        let ev = t.evaluate(&Request::new("http://h/").header("Cookie", cookie));
        assert_eq!(ev.includes().len(), 1, "{cookie}");
        assert_eq!(ev.includes()[0].src, want, "{cookie}");
    }
}
