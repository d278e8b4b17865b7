//! RFC 9110 semantics of static files, table-driven: each case is one request and the
//! status, headers and exact body bytes its response must have. Every file has the same
//! fixed mtime, so Last-Modified is known; entity tags are computed from the files'
//! metadata the way the server documents them (inode, mtime in ns, size, in hex).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, UNIX_EPOCH};

use crate::harness::{read_response, read_to_close, Server, Site};

/// Tue, 02 Jan 2024 03:04:05 GMT
const MTIME: u64 = 1_704_164_645;
const LM: &str = "Tue, 02 Jan 2024 03:04:05 GMT";
const BIG_LEN: usize = 100_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Srv {
    /// `autoindex = true` and Cache-Control rules.
    Configured,
    /// No config file at all.
    Defaults,
}

enum Body {
    Empty,
    Bytes(&'static [u8]),
    /// Bytes `first..=last` of a file in the root.
    Slice(&'static str, u64, u64),
    /// multipart/byteranges of these ranges of a file, with the response's boundary.
    Multipart(&'static str, &'static [(u64, u64)]),
    /// The generated error page for this status line.
    ErrorPage(&'static str),
    /// An HTML listing containing this text.
    Contains(&'static str),
}

struct Case {
    name: &'static str,
    server: Srv,
    method: &'static str,
    target: &'static str,
    /// Request headers; `{file}` in a value is that file's entity tag.
    headers: &'static [(&'static str, &'static str)],
    status: u16,
    /// Response headers: `Some(value)` must be present with that value (after the same
    /// substitution), `None` must be absent.
    expect: &'static [(&'static str, Option<&'static str>)],
    body: Body,
}

use Body::*;
use Srv::*;

const TEXT: &str = "text/plain; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";

const CASES: &[Case] = &[
    // --- validators and conditional requests
    Case {
        name: "plain GET carries validators and Accept-Ranges",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[],
        status: 200,
        expect: &[
            ("ETag", Some("{hello.txt}")),
            ("Last-Modified", Some(LM)),
            ("Accept-Ranges", Some("bytes")),
            ("Content-Type", Some(TEXT)),
            ("Content-Length", Some("12")),
            ("Vary", None),
            ("Cache-Control", None),
            ("Content-Encoding", None),
        ],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "HEAD has the GET head and no body",
        server: Configured,
        method: "HEAD",
        target: "/hello.txt",
        headers: &[],
        status: 200,
        expect: &[
            ("Content-Length", Some("12")),
            ("ETag", Some("{hello.txt}")),
        ],
        body: Empty,
    },
    Case {
        name: "If-None-Match with the current tag: 304 with validators, no body",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-None-Match", "{hello.txt}")],
        status: 304,
        expect: &[
            ("ETag", Some("{hello.txt}")),
            ("Last-Modified", Some(LM)),
            ("Content-Length", None),
            ("Content-Type", None),
        ],
        body: Empty,
    },
    Case {
        name: "If-None-Match with another tag: 200",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-None-Match", "\"other\"")],
        status: 200,
        expect: &[],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "If-None-Match compares weakly",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-None-Match", "W/{hello.txt}")],
        status: 304,
        expect: &[],
        body: Empty,
    },
    Case {
        name: "If-None-Match: * matches an existing file",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-None-Match", "*")],
        status: 304,
        expect: &[],
        body: Empty,
    },
    Case {
        name: "If-None-Match list containing the tag",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-None-Match", "\"a\", {hello.txt}, \"b\"")],
        status: 304,
        expect: &[],
        body: Empty,
    },
    Case {
        name: "If-Modified-Since equal to Last-Modified: 304",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Modified-Since", LM)],
        status: 304,
        expect: &[("Last-Modified", Some(LM))],
        body: Empty,
    },
    Case {
        name: "If-Modified-Since later: 304",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Modified-Since", "Wed, 03 Jan 2024 00:00:00 GMT")],
        status: 304,
        expect: &[],
        body: Empty,
    },
    Case {
        name: "If-Modified-Since after the server's clock is ignored",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Modified-Since", "Fri, 01 Jan 2100 00:00:00 GMT")],
        status: 200,
        expect: &[],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "If-Modified-Since earlier: 200",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Modified-Since", "Tue, 02 Jan 2024 03:04:04 GMT")],
        status: 200,
        expect: &[],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "If-Modified-Since in the obsolete RFC 850 form",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Modified-Since", "Tuesday, 02-Jan-24 03:04:05 GMT")],
        status: 304,
        expect: &[],
        body: Empty,
    },
    Case {
        name: "invalid If-Modified-Since is ignored",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Modified-Since", "yesterday")],
        status: 200,
        expect: &[],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "If-None-Match takes precedence over If-Modified-Since",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-None-Match", "\"other\""), ("If-Modified-Since", LM)],
        status: 200,
        expect: &[],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "If-Match with the current tag: 200",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Match", "{hello.txt}")],
        status: 200,
        expect: &[],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "If-Match with another tag: 412",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Match", "\"other\"")],
        status: 412,
        expect: &[("Content-Type", Some(HTML))],
        body: ErrorPage("412 Precondition Failed"),
    },
    Case {
        name: "If-Match compares strongly: a weak tag fails",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Match", "W/{hello.txt}")],
        status: 412,
        expect: &[],
        body: ErrorPage("412 Precondition Failed"),
    },
    Case {
        name: "If-Match: * holds for an existing file",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Match", "*")],
        status: 200,
        expect: &[],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "If-Unmodified-Since earlier than the file: 412",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Unmodified-Since", "Mon, 01 Jan 2024 00:00:00 GMT")],
        status: 412,
        expect: &[],
        body: ErrorPage("412 Precondition Failed"),
    },
    Case {
        name: "If-Unmodified-Since equal to Last-Modified: 200",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Unmodified-Since", LM)],
        status: 200,
        expect: &[],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "If-Match wins over If-Unmodified-Since",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[
            ("If-Match", "{hello.txt}"),
            ("If-Unmodified-Since", "Mon, 01 Jan 2024 00:00:00 GMT"),
        ],
        status: 200,
        expect: &[],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "a failed If-Match wins over a matching If-None-Match (412, not 304)",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("If-Match", "\"other\""), ("If-None-Match", "{hello.txt}")],
        status: 412,
        expect: &[],
        body: ErrorPage("412 Precondition Failed"),
    },
    Case {
        name: "HEAD with a matching If-None-Match: 304",
        server: Configured,
        method: "HEAD",
        target: "/hello.txt",
        headers: &[("If-None-Match", "{hello.txt}")],
        status: 304,
        expect: &[("ETag", Some("{hello.txt}"))],
        body: Empty,
    },
    // --- ranges
    Case {
        name: "one range: 206 with Content-Range",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=0-4")],
        status: 206,
        expect: &[
            ("Content-Range", Some("bytes 0-4/12")),
            ("Content-Length", Some("5")),
            ("Content-Type", Some(TEXT)),
            ("ETag", Some("{hello.txt}")),
            ("Last-Modified", Some(LM)),
            ("Accept-Ranges", None),
        ],
        body: Bytes(b"hello"),
    },
    Case {
        name: "open-ended range",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=6-")],
        status: 206,
        expect: &[("Content-Range", Some("bytes 6-11/12"))],
        body: Bytes(b"world\n"),
    },
    Case {
        name: "suffix range",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=-3")],
        status: 206,
        expect: &[("Content-Range", Some("bytes 9-11/12"))],
        body: Bytes(b"ld\n"),
    },
    Case {
        name: "range past the end is cut to the end",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=0-999")],
        status: 206,
        expect: &[("Content-Range", Some("bytes 0-11/12"))],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "range of a sendfile-sized file, from an offset",
        server: Configured,
        method: "GET",
        target: "/big.bin",
        headers: &[("Range", "bytes=70000-70099")],
        status: 206,
        expect: &[
            ("Content-Range", Some("bytes 70000-70099/100000")),
            ("Content-Length", Some("100")),
        ],
        body: Slice("big.bin", 70000, 70099),
    },
    Case {
        name: "suffix range of a sendfile-sized file",
        server: Configured,
        method: "GET",
        target: "/big.bin",
        headers: &[("Range", "bytes=-10")],
        status: 206,
        expect: &[("Content-Range", Some("bytes 99990-99999/100000"))],
        body: Slice("big.bin", 99990, 99999),
    },
    Case {
        name: "range starting at the end: 416 with the length",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=12-")],
        status: 416,
        expect: &[("Content-Range", Some("bytes */12"))],
        body: ErrorPage("416 Range Not Satisfiable"),
    },
    Case {
        name: "empty suffix: 416",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=-0")],
        status: 416,
        expect: &[("Content-Range", Some("bytes */12"))],
        body: ErrorPage("416 Range Not Satisfiable"),
    },
    Case {
        name: "a range of an empty file is ignored: 200 with the empty body",
        server: Configured,
        method: "GET",
        target: "/empty.txt",
        headers: &[("Range", "bytes=0-0")],
        status: 200,
        expect: &[("Content-Range", None), ("Content-Length", Some("0"))],
        body: Empty,
    },
    Case {
        name: "malformed range (last before first): 416",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=5-1")],
        status: 416,
        expect: &[("Content-Range", Some("bytes */12"))],
        body: ErrorPage("416 Range Not Satisfiable"),
    },
    Case {
        name: "a range that is not numbers: 416",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=0-1,x-y")],
        status: 416,
        expect: &[("Content-Range", Some("bytes */12"))],
        body: ErrorPage("416 Range Not Satisfiable"),
    },
    Case {
        name: "unknown range unit is ignored",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "items=0-1")],
        status: 200,
        expect: &[("Content-Range", None)],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "two ranges: multipart/byteranges",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=0-1,4-5")],
        status: 206,
        expect: &[("Content-Range", None), ("ETag", Some("{hello.txt}"))],
        body: Multipart("hello.txt", &[(0, 1), (4, 5)]),
    },
    Case {
        name: "three ranges of a sendfile-sized file, in the order asked",
        server: Configured,
        method: "GET",
        target: "/big.bin",
        headers: &[("Range", "bytes=90000-90009,0-9,-5")],
        status: 206,
        expect: &[],
        body: Multipart("big.bin", &[(90000, 90009), (0, 9), (99995, 99999)]),
    },
    Case {
        name: "overlapping ranges are merged into one",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=3-8,0-5")],
        status: 206,
        expect: &[("Content-Range", Some("bytes 0-8/12"))],
        body: Bytes(b"hello wor"),
    },
    Case {
        name: "unsatisfiable ranges next to a satisfiable one are dropped",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=50-60,0-0")],
        status: 206,
        expect: &[("Content-Range", Some("bytes 0-0/12"))],
        body: Bytes(b"h"),
    },
    Case {
        name: "If-Range with the current tag: the range is served",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=0-4"), ("If-Range", "{hello.txt}")],
        status: 206,
        expect: &[("Content-Range", Some("bytes 0-4/12"))],
        body: Bytes(b"hello"),
    },
    Case {
        name: "If-Range with an old tag: the whole file",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=0-4"), ("If-Range", "\"old\"")],
        status: 200,
        expect: &[("Content-Range", None), ("Content-Length", Some("12"))],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "If-Range with the Last-Modified date",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=6-10"), ("If-Range", LM)],
        status: 206,
        expect: &[("Content-Range", Some("bytes 6-10/12"))],
        body: Bytes(b"world"),
    },
    Case {
        name: "If-Range with a weak tag never matches",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=0-4"), ("If-Range", "W/{hello.txt}")],
        status: 200,
        expect: &[],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "Range on HEAD is ignored",
        server: Configured,
        method: "HEAD",
        target: "/hello.txt",
        headers: &[("Range", "bytes=0-4")],
        status: 200,
        expect: &[("Content-Length", Some("12")), ("Content-Range", None)],
        body: Empty,
    },
    Case {
        name: "a matching If-None-Match beats Range",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Range", "bytes=0-4"), ("If-None-Match", "{hello.txt}")],
        status: 304,
        expect: &[("Content-Range", None)],
        body: Empty,
    },
    // --- precompressed siblings
    Case {
        name: "no Accept-Encoding: the file itself, with Vary",
        server: Configured,
        method: "GET",
        target: "/page.html",
        headers: &[],
        status: 200,
        expect: &[
            ("Content-Encoding", None),
            ("Vary", Some("Accept-Encoding")),
            ("ETag", Some("{page.html}")),
            ("Content-Type", Some(HTML)),
        ],
        body: Bytes(b"<p>page</p>\n"),
    },
    Case {
        name: "gzip accepted: the .gz sibling with its own validators",
        server: Configured,
        method: "GET",
        target: "/page.html",
        headers: &[("Accept-Encoding", "gzip")],
        status: 200,
        expect: &[
            ("Content-Encoding", Some("gzip")),
            ("Vary", Some("Accept-Encoding")),
            ("ETag", Some("{page.html.gz}")),
            ("Content-Type", Some(HTML)),
            ("Content-Length", Some("9")),
        ],
        body: Bytes(b"GZIP-DATA"),
    },
    Case {
        name: "br and gzip accepted equally: Brotli",
        server: Configured,
        method: "GET",
        target: "/page.html",
        headers: &[("Accept-Encoding", "gzip, deflate, br")],
        status: 200,
        expect: &[
            ("Content-Encoding", Some("br")),
            ("ETag", Some("{page.html.br}")),
        ],
        body: Bytes(b"BR-DATA"),
    },
    Case {
        name: "q-values decide: gzip preferred over br",
        server: Configured,
        method: "GET",
        target: "/page.html",
        headers: &[("Accept-Encoding", "br;q=0.5, gzip;q=0.9")],
        status: 200,
        expect: &[("Content-Encoding", Some("gzip"))],
        body: Bytes(b"GZIP-DATA"),
    },
    Case {
        name: "q=0 refuses a coding",
        server: Configured,
        method: "GET",
        target: "/page.html",
        headers: &[("Accept-Encoding", "br;q=0, gzip;q=0")],
        status: 200,
        expect: &[
            ("Content-Encoding", None),
            ("Vary", Some("Accept-Encoding")),
        ],
        body: Bytes(b"<p>page</p>\n"),
    },
    Case {
        name: "* accepts any coding",
        server: Configured,
        method: "GET",
        target: "/page.html",
        headers: &[("Accept-Encoding", "*")],
        status: 200,
        expect: &[("Content-Encoding", Some("br"))],
        body: Bytes(b"BR-DATA"),
    },
    Case {
        name: "a range refers to the compressed representation",
        server: Configured,
        method: "GET",
        target: "/page.html",
        headers: &[("Accept-Encoding", "gzip"), ("Range", "bytes=0-3")],
        status: 206,
        expect: &[
            ("Content-Encoding", Some("gzip")),
            ("Content-Range", Some("bytes 0-3/9")),
        ],
        body: Bytes(b"GZIP"),
    },
    Case {
        name: "304 for the gzip tag carries Vary and that tag",
        server: Configured,
        method: "GET",
        target: "/page.html",
        headers: &[
            ("Accept-Encoding", "gzip"),
            ("If-None-Match", "{page.html.gz}"),
        ],
        status: 304,
        expect: &[
            ("ETag", Some("{page.html.gz}")),
            ("Vary", Some("Accept-Encoding")),
        ],
        body: Empty,
    },
    Case {
        name: "the gzip tag does not validate the Brotli representation",
        server: Configured,
        method: "GET",
        target: "/page.html",
        headers: &[
            ("Accept-Encoding", "br"),
            ("If-None-Match", "{page.html.gz}"),
        ],
        status: 200,
        expect: &[("Content-Encoding", Some("br"))],
        body: Bytes(b"BR-DATA"),
    },
    Case {
        name: "no siblings: no Vary, no Content-Encoding",
        server: Configured,
        method: "GET",
        target: "/hello.txt",
        headers: &[("Accept-Encoding", "gzip, br")],
        status: 200,
        expect: &[("Vary", None), ("Content-Encoding", None)],
        body: Bytes(b"hello world\n"),
    },
    Case {
        name: "the index of a directory has siblings too",
        server: Configured,
        method: "GET",
        target: "/docs/",
        headers: &[("Accept-Encoding", "gzip")],
        status: 200,
        expect: &[
            ("Content-Encoding", Some("gzip")),
            ("Content-Type", Some(HTML)),
        ],
        body: Bytes(b"GZ-INDEX"),
    },
    // --- OPTIONS and methods
    Case {
        name: "OPTIONS *: the server-wide Allow",
        server: Configured,
        method: "OPTIONS",
        target: "*",
        headers: &[],
        status: 204,
        expect: &[
            ("Allow", Some("GET, HEAD, OPTIONS")),
            ("Content-Length", None),
        ],
        body: Empty,
    },
    Case {
        name: "OPTIONS for a file",
        server: Configured,
        method: "OPTIONS",
        target: "/hello.txt",
        headers: &[],
        status: 204,
        expect: &[("Allow", Some("GET, HEAD, OPTIONS"))],
        body: Empty,
    },
    Case {
        name: "OPTIONS for a missing file: 404",
        server: Configured,
        method: "OPTIONS",
        target: "/missing.txt",
        headers: &[],
        status: 404,
        expect: &[],
        body: ErrorPage("404 Not Found"),
    },
    Case {
        name: "TRACE: 405 with Allow",
        server: Configured,
        method: "TRACE",
        target: "/hello.txt",
        headers: &[],
        status: 405,
        expect: &[("Allow", Some("GET, HEAD, OPTIONS"))],
        body: ErrorPage("405 Method Not Allowed"),
    },
    Case {
        name: "DELETE: 405 with Allow",
        server: Configured,
        method: "DELETE",
        target: "/hello.txt",
        headers: &[],
        status: 405,
        expect: &[("Allow", Some("GET, HEAD, OPTIONS"))],
        body: ErrorPage("405 Method Not Allowed"),
    },
    Case {
        name: "unknown method: 501",
        server: Configured,
        method: "PURGE",
        target: "/hello.txt",
        headers: &[],
        status: 501,
        expect: &[("Allow", None)],
        body: ErrorPage("501 Not Implemented"),
    },
    // --- directories, types, Cache-Control
    Case {
        name: "a directory without its slash: 301",
        server: Configured,
        method: "GET",
        target: "/list",
        headers: &[],
        status: 301,
        expect: &[("Location", Some("/list/"))],
        body: ErrorPage("301 Moved Permanently"),
    },
    Case {
        name: "autoindex lists a directory with escaped names",
        server: Configured,
        method: "GET",
        target: "/list/",
        headers: &[],
        status: 200,
        expect: &[("Content-Type", Some(HTML)), ("ETag", None)],
        body: Contains(
            "<a href=\"%3Cb%3E%26.txt\">&lt;b&gt;&amp;.txt</a>\n<a href=\"a.txt\">a.txt</a>\n",
        ),
    },
    Case {
        name: "autoindex lists subdirectories first, with a slash",
        server: Configured,
        method: "GET",
        target: "/list/",
        headers: &[],
        status: 200,
        expect: &[],
        body: Contains("<a href=\"../\">../</a>\n<a href=\"sub/\">sub/</a>\n<a href=\"%3Cb"),
    },
    Case {
        name: "listing is off by default: 403",
        server: Defaults,
        method: "GET",
        target: "/list/",
        headers: &[],
        status: 403,
        expect: &[],
        body: ErrorPage("403 Forbidden"),
    },
    Case {
        name: "Cache-Control of the matching prefix",
        server: Configured,
        method: "GET",
        target: "/assets/app.js",
        headers: &[],
        status: 200,
        expect: &[
            ("Cache-Control", Some("public, max-age=31536000, immutable")),
            ("Content-Type", Some("text/javascript; charset=utf-8")),
        ],
        body: Bytes(b"app();\n"),
    },
    Case {
        name: "the longest prefix wins",
        server: Configured,
        method: "GET",
        target: "/assets/live/data.json",
        headers: &[],
        status: 200,
        expect: &[
            ("Cache-Control", Some("no-cache")),
            ("Content-Type", Some("application/json")),
        ],
        body: Bytes(b"{}\n"),
    },
    Case {
        name: "a 304 repeats Cache-Control",
        server: Configured,
        method: "GET",
        target: "/assets/app.js",
        headers: &[("If-Modified-Since", LM)],
        status: 304,
        expect: &[("Cache-Control", Some("public, max-age=31536000, immutable"))],
        body: Empty,
    },
    Case {
        name: "no Cache-Control without configuration",
        server: Defaults,
        method: "GET",
        target: "/assets/app.js",
        headers: &[],
        status: 200,
        expect: &[("Cache-Control", None)],
        body: Bytes(b"app();\n"),
    },
    Case {
        name: "text types carry charset=utf-8",
        server: Defaults,
        method: "GET",
        target: "/style.css",
        headers: &[],
        status: 200,
        expect: &[("Content-Type", Some("text/css; charset=utf-8"))],
        body: Bytes(b"body{}\n"),
    },
];

const CONFIG: &str = r#"
autoindex = true

[[cache_control]]
prefix = "/assets/"
value = "public, max-age=31536000, immutable"

[[cache_control]]
prefix = "/assets/live/"
value = "no-cache"
"#;

fn big_data() -> Vec<u8> {
    (0..BIG_LEN)
        .map(|i| (i % 251) as u8 ^ (i / 997) as u8)
        .collect()
}

/// The site of the table: the harness site plus files for ranges, siblings, listings and
/// Cache-Control, all with mtime `MTIME`.
fn site() -> Site {
    let site = Site::new();
    let root = site.root();
    std::fs::create_dir_all(root.join("assets/live")).unwrap();
    std::fs::create_dir_all(root.join("list/sub")).unwrap();
    for (name, data) in [
        ("big.bin", big_data()),
        ("empty.txt", Vec::new()),
        ("page.html", b"<p>page</p>\n".to_vec()),
        ("page.html.gz", b"GZIP-DATA".to_vec()),
        ("page.html.br", b"BR-DATA".to_vec()),
        ("docs/index.html.gz", b"GZ-INDEX".to_vec()),
        ("assets/app.js", b"app();\n".to_vec()),
        ("assets/live/data.json", b"{}\n".to_vec()),
        ("list/a.txt", b"a".to_vec()),
        ("list/<b>&.txt", b"b".to_vec()),
        ("list/.hidden", b"h".to_vec()),
    ] {
        std::fs::write(root.join(name), data).unwrap();
    }
    let mtime = UNIX_EPOCH + Duration::from_secs(MTIME);
    for name in [
        "hello.txt",
        "style.css",
        "docs/index.html",
        "big.bin",
        "empty.txt",
        "page.html",
        "page.html.gz",
        "page.html.br",
        "docs/index.html.gz",
        "assets/app.js",
        "assets/live/data.json",
    ] {
        std::fs::File::options()
            .write(true)
            .open(root.join(name))
            .unwrap()
            .set_modified(mtime)
            .unwrap();
    }
    site
}

/// The entity tag the server documents: inode, mtime in nanoseconds, size, in hex.
fn etag(path: &std::path::Path) -> String {
    let m = std::fs::metadata(path).unwrap();
    let nanos = m.mtime() as u64 * 1_000_000_000 + m.mtime_nsec() as u64;
    format!("\"{:x}-{:x}-{:x}\"", m.ino(), nanos, m.len())
}

fn fill(text: &str, tags: &HashMap<String, String>) -> String {
    let mut out = text.to_string();
    for (name, tag) in tags {
        out = out.replace(&format!("{{{name}}}"), tag);
    }
    out
}

fn error_page(status_line: &str) -> Vec<u8> {
    format!(
        "<html><head><title>{status_line}</title></head><body><h1>{status_line}</h1></body></html>\n"
    )
    .into_bytes()
}

#[test]
fn http_semantics_table() {
    assert!(CASES.len() >= 40);
    let site = site();
    let root = site.root();
    let tags: HashMap<String, String> = [
        "hello.txt",
        "big.bin",
        "page.html",
        "page.html.gz",
        "page.html.br",
    ]
    .iter()
    .map(|name| (name.to_string(), etag(&root.join(name))))
    .collect();
    let configured = site.serve_with(CONFIG);
    let default = site.serve();
    let mut failures = Vec::new();
    for case in CASES {
        let server: &Server = match case.server {
            Configured => &configured,
            Defaults => &default,
        };
        if let Err(why) = run(case, server, &tags, &root) {
            failures.push(format!("{}: {why}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

fn run(
    case: &Case,
    server: &Server,
    tags: &HashMap<String, String>,
    root: &std::path::Path,
) -> Result<(), String> {
    let mut request = format!(
        "{} {} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n",
        case.method, case.target
    );
    for (name, value) in case.headers {
        request.push_str(&format!("{name}: {}\r\n", fill(value, tags)));
    }
    request.push_str("\r\n");
    let mut stream = server.connect();
    stream.write_all(request.as_bytes()).unwrap();
    let response = read_response(&mut stream, case.method == "HEAD");
    // Nothing may follow the body: the declared length is the whole response.
    let rest = read_to_close(&mut stream);
    if !rest.is_empty() {
        return Err(format!("{} bytes after the response", rest.len()));
    }
    if response.status != case.status {
        return Err(format!(
            "status {} instead of {} ({:?})",
            response.status, case.status, response.headers
        ));
    }
    for (name, expected) in case.expect {
        let expected = expected.map(|v| fill(v, tags));
        let actual = response.header(name).map(str::to_string);
        if actual != expected {
            return Err(format!("{name}: {actual:?} instead of {expected:?}"));
        }
    }
    let expected_body = match &case.body {
        Empty => Vec::new(),
        Bytes(bytes) => bytes.to_vec(),
        ErrorPage(line) => error_page(line),
        Slice(name, first, last) => {
            std::fs::read(root.join(name)).unwrap()[*first as usize..=*last as usize].to_vec()
        }
        Multipart(name, ranges) => {
            let data = std::fs::read(root.join(name)).unwrap();
            let content_type = response.header("content-type").unwrap_or("");
            let boundary = content_type
                .strip_prefix("multipart/byteranges; boundary=")
                .ok_or_else(|| format!("Content-Type {content_type:?}"))?;
            if boundary.len() != 16 {
                return Err(format!("boundary {boundary:?}"));
            }
            let part_type = if name.ends_with(".txt") {
                TEXT
            } else {
                "application/octet-stream"
            };
            let mut body = Vec::new();
            for &(first, last) in *ranges {
                body.extend_from_slice(
                    format!(
                        "\r\n--{boundary}\r\nContent-Type: {part_type}\r\nContent-Range: bytes {first}-{last}/{}\r\n\r\n",
                        data.len()
                    )
                    .as_bytes(),
                );
                body.extend_from_slice(&data[first as usize..=last as usize]);
            }
            body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
            body
        }
        Contains(text) => {
            let body = String::from_utf8_lossy(&response.body);
            if !body.contains(text) || body.contains("hidden") {
                return Err(format!("body {body:?} lacks {text:?}"));
            }
            return Ok(());
        }
    };
    if response.body != expected_body {
        return Err(format!(
            "body {:?} instead of {:?}",
            String::from_utf8_lossy(&response.body[..response.body.len().min(300)]),
            String::from_utf8_lossy(&expected_body[..expected_body.len().min(300)])
        ));
    }
    Ok(())
}

/// A file truncated while it is being sent: the response cannot be completed, so the
/// connection closes after what could be sent: fewer bytes than announced, never a
/// hang and never bytes past the new end.
#[test]
fn file_shrinking_during_sendfile_closes_the_connection() {
    let site = Site::new();
    let size = 32 << 20;
    let data: Vec<u8> = (0..size).map(|i: usize| (i % 253) as u8).collect();
    site.write("shrinking.bin", &data);
    let server = site.serve();
    let mut stream = server.connect();
    stream
        .write_all(b"GET /shrinking.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    // Read a little, so the server is mid-file with the socket full, then truncate.
    let mut first = vec![0u8; 64 * 1024];
    stream.read_exact(&mut first).unwrap();
    std::fs::File::options()
        .write(true)
        .open(site.root().join("shrinking.bin"))
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let started = std::time::Instant::now();
    let rest = read_to_close(&mut stream);
    assert!(started.elapsed() < Duration::from_secs(10), "took too long");
    let mut all = first;
    all.extend_from_slice(&rest);
    let head_end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&all[..head_end]);
    assert!(
        head.contains(&format!("Content-Length: {size}\r\n")),
        "{head}"
    );
    let body = &all[head_end..];
    assert!(
        body.len() < size,
        "the whole file was sent after truncation"
    );
    // Up to the truncation point what was sent is the file. Bytes the kernel was moving
    // at the moment of the truncation may be stale or zeros (sendfile reads the page
    // cache without a lock against truncate); the short body and the close are what tell
    // the client the response is incomplete.
    let kept = body.len().min(1 << 20);
    let differs = body[..kept].iter().zip(&data).position(|(a, b)| a != b);
    assert_eq!(differs, None, "the first {kept} bytes differ from the file");
}

/// With `file_cache_valid_ms = 100`, a changed file is served within about that time,
/// a deleted one answers 404, and a recreated one is served again.
#[test]
fn changes_are_noticed_within_file_cache_valid_ms() {
    let site = Site::new();
    site.write("live.txt", b"one");
    let server = site.serve_with("file_cache_valid_ms = 100\n");
    assert_eq!(server.get("/live.txt").body, b"one");
    // Atomically replaced (a new inode): noticed even with the same size and mtime second.
    site.write("live.tmp", b"two");
    std::fs::rename(site.root().join("live.tmp"), site.root().join("live.txt")).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    let r = server.get("/live.txt");
    assert_eq!(r.body, b"two");
    assert_eq!(
        r.header("etag"),
        Some(etag(&site.root().join("live.txt")).as_str())
    );
    std::fs::remove_file(site.root().join("live.txt")).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(server.get("/live.txt").status, 404);
    site.write("live.txt", b"three");
    assert_eq!(server.get("/live.txt").body, b"three");
}

/// A file replaced over and over while two workers serve it: every response is one
/// version whole (its length, its bytes, its entity tag), never a mix.
#[test]
fn replaced_files_are_never_served_mixed() {
    let site = Site::new();
    let root = site.root();
    let versions: Vec<Vec<u8>> = [b'a', b'b']
        .iter()
        .flat_map(|&c| [vec![c; 1000], vec![c.to_ascii_uppercase(); 40_000]])
        .collect();
    site.write("v.bin", &versions[0]);
    let config = site.dir.path().join("two.toml");
    std::fs::write(&config, "file_cache_valid_ms = 0\nworkers = 2\n").unwrap();
    let server = Server::start_args(&[
        "serve".into(),
        "--root".into(),
        root.display().to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--config".into(),
        config.display().to_string(),
    ]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (root, versions, stop) = (root.clone(), versions.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let tmp = root.join("v.tmp");
                std::fs::write(&tmp, &versions[i % versions.len()]).unwrap();
                std::fs::rename(&tmp, root.join("v.bin")).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let mut seen = std::collections::HashSet::new();
    for _ in 0..300 {
        let r = server.get("/v.bin");
        assert_eq!(r.status, 200);
        assert!(
            versions.contains(&r.body),
            "a response of {} bytes is no version of the file",
            r.body.len()
        );
        let len = r.header("content-length").unwrap();
        assert_eq!(len, r.body.len().to_string());
        let tag = r.header("etag").unwrap();
        assert!(tag.ends_with(&format!("-{:x}\"", r.body.len())), "{tag}");
        seen.insert(r.body[0]);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(seen.len() > 1, "the file never changed while served");
}
