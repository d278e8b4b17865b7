//! The demo that README.md's first command starts (examples/demo): run exactly as the
//! README says (its first `sh` block, with only the listen address made ephemeral), its
//! home page holds every fragment in order, fetched in parallel, the Lua one and the
//! failed include's fallback included, and a second fetch takes fragments from the cache;
//! `/docs/` is an index of docs/ and each page HTML with working links.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::{Response, Server};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The arguments of `tessera` in the README's first command: the first line of its first
/// ```sh block, `cargo run --release -- ARGS`.
fn readme_command() -> Vec<String> {
    let readme = std::fs::read_to_string(repository().join("README.md")).unwrap();
    let block = readme
        .split("```sh\n")
        .nth(1)
        .expect("README.md has a ```sh block");
    let line = block.lines().next().unwrap();
    let (cargo, args) = line
        .split_once(" -- ")
        .unwrap_or_else(|| panic!("not `cargo run ... -- ARGS`: {line}"));
    assert_eq!(cargo, "cargo run --release", "{line}");
    args.split_whitespace().map(String::from).collect()
}

fn start_demo() -> Server {
    let mut args = readme_command();
    assert_eq!(args[0], "serve");
    args.extend(["--listen".into(), "127.0.0.1:0".into()]);
    Server::start_args_in(&repository(), &args)
}

fn text(response: &Response) -> String {
    String::from_utf8(response.body.clone()).expect("utf-8 page")
}

/// The value of `attribute="..."` in the element with `id="id"` or after it.
fn attribute_after(page: &str, id: &str, attribute: &str) -> String {
    let at = page
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in {page}"));
    let rest = &page[at..];
    let start = rest
        .find(&format!("{attribute}=\""))
        .unwrap_or_else(|| panic!("no {attribute} after #{id}"))
        + attribute.len()
        + 2;
    rest[start..][..rest[start..].find('"').unwrap()].to_string()
}

#[test]
fn readme_demo_assembles_every_fragment_in_parallel_and_caches_them() {
    let server = start_demo();

    let started = Instant::now();
    let first = server.get("/");
    let took = started.elapsed();
    assert_eq!(first.status, 200, "{first:?}");
    let page = text(&first);
    assert!(!page.contains("<esi:"), "unprocessed ESI: {page}");
    // Every fragment, in the template's order.
    let mut at = 0;
    for marker in [
        "id=\"news\"",
        "id=\"weather\"",
        "id=\"prices\"",
        "id=\"visits\"",
        "id=\"reviews\"",
        "id=\"assets\"",
    ] {
        let found = page[at..]
            .find(marker)
            .unwrap_or_else(|| panic!("{marker} missing or out of order in {page}"));
        at += found + marker.len();
    }
    // The Lua fragment counts pages in a shared dictionary.
    assert!(page.contains("<p class=\"big\">1</p>"), "{page}");
    // The reviews service is down: its include's alt fragment stands in.
    assert!(
        page.contains("served the include's <code>alt</code> fragment"),
        "{page}"
    );
    // 100, 200 and 300 ms fragments fetched at once: the slowest, not the sum (600 ms).
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(600),
        "the page took {took:?}"
    );

    let second = server.get("/");
    assert_eq!(second.status, 200);
    let again = text(&second);
    assert!(again.contains("<p class=\"big\">2</p>"), "{again}");
    for cached in ["news", "weather", "reviews"] {
        assert_eq!(
            attribute_after(&page, cached, "data-made"),
            attribute_after(&again, cached, "data-made"),
            "#{cached} was made again instead of coming from the cache"
        );
    }
    assert_ne!(
        attribute_after(&page, "prices", "data-made"),
        attribute_after(&again, "prices", "data-made"),
        "#prices is no-store and must be fetched for every page"
    );

    // A HEAD of the cached page gets the page's fields, not the template's length.
    assert_head_has_no_template_length(&server);

    // Static assets are cached by browsers for a year.
    let css = server.get("/examples/demo/static/demo.css");
    assert_eq!(css.status, 200);
    assert_eq!(
        css.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    // Every docs link of the page is served as an HTML page (docs_pages_are_html_...).
    let mut links = 0;
    for part in page.split("href=\"/docs/").skip(1) {
        let name = &part[..part.find('"').unwrap()];
        let doc = server.get(&format!("/docs/{name}"));
        assert_eq!(doc.status, 200, "/docs/{name}");
        assert_eq!(doc.header("content-type"), Some("text/html; charset=utf-8"));
        links += 1;
    }
    assert!(links >= 10, "only {links} docs links");

    // The start-up output lists the URLs to open.
    std::thread::sleep(Duration::from_millis(100));
    let stderr = server.stderr.lock().unwrap().join("\n");
    for prefix in ["/docs", "/examples/demo/static", "/origin"] {
        assert!(
            stderr.contains(&format!("http://{}{prefix}", server.addr)),
            "{prefix} not listed in {stderr}"
        );
    }
}

/// README.md links every page of docs/, and every file it links to exists.
#[test]
fn readme_links_every_docs_page_and_nothing_missing() {
    let root = repository();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut linked = Vec::new();
    for part in readme.split("](").skip(1) {
        let target = &part[..part.find(')').unwrap()];
        if target.starts_with("http") {
            continue;
        }
        let file = target.split('#').next().unwrap();
        assert!(
            root.join(file).exists(),
            "README.md links {target}, which is missing"
        );
        linked.push(file.to_string());
    }
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            let doc = format!("docs/{name}");
            assert!(linked.contains(&doc), "README.md does not link {doc}");
        }
    }
    assert!(linked.contains(&"docs/img/demo.png".to_string()));
}

/// A HEAD of an ESI page, which the origin answers with its template's Content-Length,
/// must not claim the template's length for the assembled page (cache miss and hit).
#[test]
fn a_head_of_the_demo_page_does_not_claim_the_template_length() {
    let server = start_demo();
    assert_head_has_no_template_length(&server);
    assert_eq!(server.get("/").status, 200);
    assert_head_has_no_template_length(&server);
}

fn assert_head_has_no_template_length(server: &Server) {
    let head = server.exchange(b"HEAD / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "a HEAD has no body: {head}");
    assert!(
        !head.to_ascii_lowercase().contains("content-length"),
        "{head}"
    );
}

/// The `id`s of a page's elements and the targets of its links.
fn ids_and_links(html: &str) -> (Vec<String>, Vec<String>) {
    let values = |attribute: &str| -> Vec<String> {
        html.split(&format!(" {attribute}=\"")[..])
            .skip(1)
            .map(|rest| rest[..rest.find('"').unwrap()].to_string())
            .collect()
    };
    (values("id"), values("href"))
}

/// `/docs/` lists every page of docs/, and each page is HTML rendered from its Markdown
/// (examples/demo/docs.lua): no Markdown syntax left, its title as the first heading, and
/// every link between pages (and to an anchor in one, GitHub's way) leads somewhere that
/// exists; images and other files of docs/ are served as they are.
#[test]
fn docs_are_an_index_and_html_pages_with_working_links() {
    let server = start_demo();
    let index = server.get("/docs/");
    assert_eq!(index.status, 200);
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let index = text(&index);
    let mut pages: Vec<String> = std::fs::read_dir(repository().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .collect();
    pages.sort();
    for name in &pages {
        assert!(
            index.contains(&format!("<a href=\"{name}\">")),
            "{name} not in the index"
        );
    }
    assert_eq!(server.get("/docs").status, 301);

    let mut rendered = std::collections::HashMap::new();
    for name in &pages {
        let r = server.get(&format!("/docs/{name}"));
        assert_eq!(r.status, 200, "{name}");
        let html = text(&r);
        let source = std::fs::read_to_string(repository().join("docs").join(name)).unwrap();
        let title = source.lines().next().unwrap().trim_start_matches("# ");
        assert!(html.contains("<h1 id=\""), "{name}: no title heading");
        assert!(
            html.contains(&format!("<title>{}", title.replace('`', ""))),
            "{name}: title {title:?}"
        );
        // Outside code blocks (where a shell's `# ` is text), no Markdown is left.
        let prose: String = html
            .split("<pre>")
            .map(|part| part.split_once("</pre>").map_or(part, |(_, after)| after))
            .collect();
        for leftover in ["```", "](", "\n# ", "\n## ", "**"] {
            assert!(
                !prose.contains(leftover),
                "{name}: {leftover:?} left in the page"
            );
        }
        rendered.insert(name.clone(), html);
    }
    let mut checked = 0;
    for (name, html) in &rendered {
        let (_, links) = ids_and_links(html);
        for link in links {
            if link.starts_with("http") || link.starts_with('/') {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                Some(html)
            } else {
                rendered.get(file)
            };
            match target {
                Some(target) if !anchor.is_empty() => {
                    let (ids, _) = ids_and_links(target);
                    assert!(
                        ids.iter().any(|id| id == anchor),
                        "{name} links {link}: no such anchor"
                    );
                }
                Some(_) => {}
                None => {
                    let r = server.get(&format!("/docs/{file}"));
                    assert_eq!(r.status, 200, "{name} links {link}");
                    assert_eq!(
                        r.body,
                        std::fs::read(repository().join("docs").join(file)).unwrap(),
                        "{file} is served as it is"
                    );
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 50, "only {checked} links between pages");
    assert_eq!(
        server.get("/docs/img/demo.png").header("content-type"),
        Some("image/png")
    );
    assert_eq!(server.get("/docs/missing.md").status, 404);
}
