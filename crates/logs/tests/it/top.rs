//! `top` agrees with a straightforward reference implementation of Wide Finder: split
//! into lines, run `regex::bytes` on each, count the first group, sort.

use std::collections::HashMap;

use logs::{Input, TopQuery};
use regex::bytes::Regex;

use crate::{gzip, many_chunks, synthetic, write_file};

const WIDE_FINDER: &str = r"GET /ongoing/When/\d\d\dx/(\d\d\d\d/\d\d/\d\d/[^ .]+) ";

/// Patterns that exercise each path: literal prefix with a separately compiled rest,
/// prefix without a rest, no prefix at all, look-around, no capture group, a group that
/// may not participate, a literal that occurs several times per line, and groups between
/// parts of fixed length.
const PATTERNS: &[&str] = &[
    WIDE_FINDER,
    r#""GET (/[^ ]*) HTTP"#,
    r"(?i)get (\S+)",
    r"When/(\d+)x",
    r"o(n)",
    r"ongoing",
    r"^(\S+) - -",
    r"\bcrawl-(\d+)",
    r"(a+)|zz",
    r"x=(\d)?",
    r"(GET|HEAD) (/ongoing/[a-z]+)",
    r#"" (\d\d\d) (-|\d+)$"#,
    r"HTTP/1\.1",
    r"\.png HTTP",
    // Group 1 between parts of a fixed number of characters: counted from the match's
    // bounds alone when the match is ASCII.
    r"When/\d\d\dx/(\d+)/",
    r"(?:GET|PUT) (/\S+) HTTP/1\.[01]",
    r"\d\d(:\d\d):",
    r"(\w)",
    // Patterns that match an empty line.
    r"^$",
    r"(a*)",
];

fn reference(regex: &Regex, log: &[u8]) -> Vec<(Vec<u8>, u64)> {
    let group = if regex.captures_len() > 1 { 1 } else { 0 };
    let mut counts: HashMap<Vec<u8>, u64> = HashMap::new();
    // Lines end with a newline; the last may lack it.
    let log = log.strip_suffix(b"\n").unwrap_or(log);
    for line in log.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(key) = regex.captures(line).and_then(|c| c.get(group)) {
            *counts.entry(key.as_bytes().to_vec()).or_default() += 1;
        }
    }
    let mut rows: Vec<_> = counts.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    rows
}

fn owned(rows: Vec<(&[u8], u64)>) -> Vec<(Vec<u8>, u64)> {
    rows.into_iter().map(|(k, v)| (k.to_vec(), v)).collect()
}

#[test]
fn agrees_with_reference_on_random_logs() {
    // Regexes compile once: in a debug build compiling is most of the test's time.
    let logs: Vec<Vec<u8>> = (1..=4).map(|seed| synthetic(3_000, seed, true)).collect();
    for pattern in PATTERNS {
        let regex = Regex::new(pattern).unwrap();
        let query = TopQuery::new(pattern).unwrap();
        for (seed, log) in logs.iter().enumerate() {
            let single = query.count_block(log);
            assert_eq!(
                owned(single.top(usize::MAX)),
                reference(&regex, log),
                "pattern {pattern}, seed {seed}"
            );
        }
    }
}

#[test]
fn empty_matching_patterns_count_blank_lines_not_chunk_ends() {
    // 64 lines, one of them blank, cut into many chunks and blocks: only the real blank
    // line matches `^$`, and `(a*)` matches each line once.
    let dir = tempfile::tempdir().unwrap();
    let mut log = b"x\n".repeat(40);
    log.extend_from_slice(b"\n");
    log.extend_from_slice(&b"y\n".repeat(23));
    let plain = write_file(&dir, "access.log", &log);
    let gz = write_file(&dir, "access.log.1.gz", &gzip(&log));
    for (pattern, expected) in [
        (r"^$", vec![(Vec::new(), 1)]),
        (r"(a*)", vec![(Vec::new(), 64)]),
        (
            r"^(\S*)$",
            vec![(b"x".to_vec(), 40), (b"y".to_vec(), 23), (Vec::new(), 1)],
        ),
    ] {
        let query = TopQuery::new(pattern).unwrap();
        assert_eq!(
            reference(&Regex::new(pattern).unwrap(), &log),
            expected,
            "{pattern}"
        );
        for path in [&plain, &gz] {
            for threads in [1, 2, 3] {
                let mut opened = logs::open(&[Input::Path(path.clone())]).unwrap();
                let opts = logs::Options {
                    threads,
                    min_chunk: 1,
                    block_size: 7,
                };
                let counts = query.run(&mut opened, &opts, None).unwrap();
                assert_eq!(
                    owned(counts.top(usize::MAX)),
                    expected,
                    "{pattern} on {}, {threads} threads",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn parallel_files_and_gzip_agree_with_reference() {
    let dir = tempfile::tempdir().unwrap();
    let log = synthetic(8_000, 11, true);
    let plain = write_file(&dir, "access.log", &log);
    let gz = write_file(&dir, "access.log.1.gz", &gzip(&log));
    for pattern in [WIDE_FINDER, r"(?i)get (\S+)", r"^(\S+) - -"] {
        let expected = reference(&Regex::new(pattern).unwrap(), &log);
        let query = TopQuery::new(pattern).unwrap();
        for path in [&plain, &gz] {
            let mut opened = logs::open(&[Input::Path(path.clone())]).unwrap();
            let counts = query.run(&mut opened, &many_chunks(4, 1000), None).unwrap();
            assert_eq!(
                owned(counts.top(usize::MAX)),
                expected,
                "{pattern} on {}",
                path.display()
            );
        }
        // Two inputs count twice.
        let mut opened =
            logs::open(&[Input::Path(plain.clone()), Input::Path(gz.clone())]).unwrap();
        let counts = query.run(&mut opened, &many_chunks(3, 777), None).unwrap();
        let doubled: Vec<_> = expected.iter().map(|(k, v)| (k.clone(), v * 2)).collect();
        assert_eq!(owned(counts.top(usize::MAX)), doubled);
    }
}

#[test]
fn wide_finder_output_is_ordered_by_count_then_key() {
    let log = b"GET /ongoing/When/200x/2007/06/15/B \n\
GET /ongoing/When/200x/2007/06/15/A \n\
GET /ongoing/When/200x/2007/06/15/C \n\
GET /ongoing/When/200x/2007/06/15/C \n\
GET /ongoing/When/200x/2007/06/15/C.png \n\
GET /ongoing/When/200x/2007/06/15/D\n";
    let counts = TopQuery::new(WIDE_FINDER).unwrap().count_block(log);
    let rows: Vec<(&[u8], u64)> = counts.top(10);
    assert_eq!(
        rows,
        vec![
            (&b"2007/06/15/C"[..], 2),
            (&b"2007/06/15/A"[..], 1),
            (&b"2007/06/15/B"[..], 1),
        ]
    );
    assert_eq!(counts.top(1).len(), 1);
}

#[test]
fn rejects_an_invalid_pattern() {
    let err = TopQuery::new("GET (unclosed").unwrap_err();
    assert!(err.to_string().starts_with("invalid pattern"), "{err}");
}
