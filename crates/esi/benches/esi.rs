//! Parse throughput and per-request evaluation cost.
//!
//! `cargo bench -p esi --bench esi`. Figures and the machine they were taken on are in
//! docs/benchmarks.md.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use esi::{Compiler, Options, Request, Template};

/// A 1 MiB product-listing page with 10 includes spread through it.
fn page_1mib_10_includes() -> Bytes {
    const TARGET: usize = 1 << 20;
    let mut page = String::with_capacity(TARGET + 4096);
    page.push_str("<!doctype html><html><head><title>Shop</title></head><body>\n");
    let mut i = 0;
    let mut includes = 0;
    while page.len() < TARGET - 200 {
        if page.len() >= includes * TARGET / 10 && includes < 10 {
            page.push_str(&format!(
                "<esi:include src=\"/fragments/box-{includes}.html\" alt=\"/fallback.html\" onerror=\"continue\"/>\n"
            ));
            includes += 1;
        }
        page.push_str(&format!(
            "<div class=\"item\" data-id=\"{i}\"><a href=\"/product/{i}\">Handmade ceramic design vase, resin finish #{i}</a> \
             <span class=\"price\">${}.{:02}</span><img src=\"/img/{i}.jpg\" alt=\"\"></div>\n",
            10 + i % 90,
            i % 100
        ));
        i += 1;
    }
    while page.len() < TARGET - 15 {
        page.push(' ');
    }
    page.push_str("</body></html>\n");
    assert_eq!(Template::parse(page.clone()).includes().count(), 10);
    Bytes::from(page)
}

fn parse(c: &mut Criterion) {
    let page = page_1mib_10_includes();
    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Bytes(page.len() as u64));
    group.bench_function("1MiB page, 10 includes, one buffer", |b| {
        b.iter(|| Template::parse(black_box(page.clone())))
    });
    group.bench_function("1MiB page, 10 includes, 16KiB chunks", |b| {
        b.iter(|| {
            let mut compiler = Compiler::new(&Options::default());
            let mut pos = 0;
            while pos < page.len() {
                let end = (pos + 16 * 1024).min(page.len());
                compiler.feed(page.slice(pos..end));
                pos = end;
            }
            compiler.finish()
        })
    });
    group.finish();
}

/// A page with 10 includes and 10 variable references (in include URLs, a test and
/// esi:vars text).
const EVAL_TEMPLATE: &str = r#"<html><head><title>Account</title></head><body>
<esi:include src="/header?lang=$(HTTP_ACCEPT_LANGUAGE{en})" ttl="60"/>
<esi:vars><p>Welcome back, $(HTTP_COOKIE{name}|'guest') from $(QUERY_STRING{city}) on $(HTTP_HOST)</p></esi:vars>
<esi:choose><esi:when test="$(HTTP_COOKIE{tier}) == 'gold' & $(QUERY_STRING{n}) > 5">
<esi:include src="/gold/$(HTTP_COOKIE{id})/offers"/></esi:when>
<esi:otherwise><esi:include src="/offers"/></esi:otherwise></esi:choose>
<esi:include src="/cart/$(HTTP_COOKIE{cart})" no-store/>
<esi:try><esi:attempt><esi:include src="/recs?ua=$(HTTP_USER_AGENT{browser})&os=$(HTTP_USER_AGENT{os})"/></esi:attempt>
<esi:except><esi:include src="/recs/default"/></esi:except></esi:try>
<esi:include src="/news" onerror="continue"/><esi:include src="/weather/$(QUERY_STRING{city})"/>
<esi:include src="/ads/1" timeout="200"/><esi:include src="/ads/2"/><esi:include src="/footer"/>
</body></html>"#;

fn request() -> Request {
    Request::new("http://shop.example/account?city=Oslo&n=7")
        .header("Host", "shop.example")
        .header("Accept-Language", "nb, en;q=0.7")
        .header(
            "User-Agent",
            "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
        )
        .header(
            "Cookie",
            "id=4711; name=Kari; tier=gold; cart=abc123; session=zzz",
        )
}

fn eval(c: &mut Criterion) {
    let template = Template::parse(EVAL_TEMPLATE);
    assert!(template.warnings().is_empty(), "{:?}", template.warnings());
    assert_eq!(template.includes().count(), 11);
    assert_eq!(template.variables().len(), 10);
    let req = request();
    let ev = template.evaluate(&req);
    assert_eq!(ev.includes().len(), 10, "10 includes are taken per request");
    let mut group = c.benchmark_group("eval");
    group.bench_function("10 includes + 10 variables: evaluate", |b| {
        b.iter(|| black_box(&template).evaluate(black_box(&req)))
    });
    let fragment = Bytes::from_static(b"<div>fragment</div>");
    group.bench_function(
        "10 includes + 10 variables: build request, evaluate, assemble",
        |b| {
            b.iter(|| {
                let req = request();
                let ev = black_box(&template).evaluate(&req);
                ev.assemble(|_, _, out| {
                    out.push(fragment.clone());
                    Ok(())
                })
            })
        },
    );
    group.finish();
}

criterion_group!(benches, parse, eval);
criterion_main!(benches);
