//! The compressed forms of cached objects count in the cache's weight: `[cache]
//! max_size` bounds bodies and forms together, and adding forms to objects already
//! stored evicts older objects rather than passing the bound.

use crate::compression::{decode, request};
use crate::harness::{Server, Site};
use crate::metrics::{admin_addr, admin_get, samples};

/// An origin (a Lua handler behind the proxy, on the same server) whose `/p/N` pages are
/// 8000 random letters of text/html, cacheable for a minute: they compress to about
/// two thirds, so each form weighs nearly as much as the page.
fn serve_with_budget(site: &Site) -> Server {
    let dir = site.dir.path();
    std::fs::write(
        dir.join("origin.lua"),
        "return { content = function(r)\n\
           r:set_header('Cache-Control', 'max-age=60')\n\
           r:set_header('Content-Type', 'text/html')\n\
           r:no_compress()\n\
           local t = {}\n\
           for i = 1, 8000 do t[i] = string.char(97 + math.random(0, 25)) end\n\
           return table.concat(t) end }",
    )
    .unwrap();
    // One shard of 64 KiB: six pages fit, not six pages with their forms.
    site.serve_with(&format!(
        "admin_listen = \"127.0.0.1:0\"\n\
         [cache]\nmax_size = 65536\nmax_object_size = 16384\n\n\
         [[upstream]]\nname = \"o\"\naddresses = [\"self\"]\npath_prefix = \"/origin\"\n\n\
         [[route]]\nprefix = \"/p\"\nupstream = \"o\"\n\n\
         [[script]]\nprefix = \"/origin\"\npath = \"{}/origin.lua\"\n",
        dir.display()
    ))
}

#[test]
fn compressed_forms_count_in_the_cache_weight_and_evict_older_objects() {
    let site = Site::new();
    let server = serve_with_budget(&site);
    let admin = admin_addr(&server);
    let metrics = || samples(&admin_get(admin, "/metrics", "").1);
    let pages: Vec<Vec<u8>> = (0..6)
        .map(|i| request(&server, "GET", &format!("/p/{i}"), "").body)
        .collect();
    let before = metrics();
    assert_eq!(before["tessera_cache_objects"], 6.0);
    assert_eq!(
        before["tessera_cache_evictions_total{reason=\"capacity\"}"],
        0.0
    );
    // The forms of one page add exactly their bytes to the cache's weight.
    let mut forms = 0;
    for coding in ["gzip", "br", "zstd"] {
        let fields = format!("Accept-Encoding: {coding}\r\n");
        let r = request(&server, "GET", "/p/5", &fields);
        assert_eq!(r.header("content-encoding"), Some(coding));
        assert!(decode(coding, &r.body) == pages[5], "/p/5 {coding}");
        forms += r.body.len();
    }
    let after = metrics();
    assert_eq!(
        after["tessera_cache_bytes"] - before["tessera_cache_bytes"],
        forms as f64,
        "{after:?}"
    );
    // Forms for every page: the weight would pass 64 KiB, so older objects go.
    for i in 0..5 {
        for coding in ["gzip", "br", "zstd"] {
            let fields = format!("Accept-Encoding: {coding}\r\n");
            let r = request(&server, "GET", &format!("/p/{i}"), &fields);
            // A page evicted meanwhile comes again from the origin, other letters.
            assert_eq!(decode(coding, &r.body).len(), 8000, "/p/{i} {coding}");
            let s = metrics();
            assert!(
                s["tessera_cache_bytes"] <= s["tessera_cache_capacity_bytes"],
                "over the bound after /p/{i} {coding}: {s:?}"
            );
        }
    }
    let s = metrics();
    let evicted = s["tessera_cache_evictions_total{reason=\"capacity\"}"];
    assert!(evicted > 0.0, "{s:?}");
    // The oldest objects went: `/p/0` is fetched again, a new page.
    let again = request(&server, "GET", "/p/0", "").body;
    assert!(again.len() == 8000 && again != pages[0]);
    assert!(s["tessera_cache_objects"] < 6.0, "{s:?}");
    assert_eq!(
        s["tessera_cache_stores_total"] - evicted,
        s["tessera_cache_objects"],
        "every object stored is there or counted as evicted once"
    );
}
