//! `logs top`: the Wide Finder query. Count the first capture group of a regular
//! expression over every line it matches, and list the most frequent.
//!
//! The regex runs on the bytes of each line (the `regex` crate's bytes API). Most lines of
//! a log do not match, so when every match must begin with a literal (for the Wide Finder
//! pattern, `GET /ongoing/When/`) the scan looks for that literal with `memmem` across the
//! whole chunk and runs the regex only on lines that contain it.

use std::collections::HashMap;

use memchr::memmem;
use regex::bytes::{CaptureLocations, Regex};

use crate::input::{Job, Opened, Options, Progress};
use crate::Error;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A compiled `top` query.
#[derive(Debug)]
pub struct TopQuery {
    regex: Regex,
    /// A literal every match starts with, if there is a useful one.
    prefix: Option<memmem::Finder<'static>>,
    /// The capture group counted: 1 if the pattern has one, else the whole match (0).
    group: usize,
}

/// Counts per key of a finished `top` query.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TopCounts {
    /// Every key seen and how many lines produced it.
    pub counts: HashMap<Vec<u8>, u64>,
    /// Lines the pattern matched.
    pub matched: u64,
}

impl TopQuery {
    /// Compiles the pattern. Matching is per line: `^` and `$` are the line's ends, and a
    /// trailing `\r` (CRLF logs) is not part of the line.
    pub fn new(pattern: &str) -> Result<TopQuery, Error> {
        let regex = Regex::new(pattern)?;
        let group = if regex.captures_len() > 1 { 1 } else { 0 };
        let prefix = required_prefix(pattern).map(|lit| memmem::Finder::new(&lit).into_owned());
        Ok(TopQuery {
            regex,
            prefix,
            group,
        })
    }

    /// The literal the prefilter searches for, if any (for tests and `--verbose` output).
    pub fn prefilter(&self) -> Option<&[u8]> {
        self.prefix.as_ref().map(|f| f.needle())
    }

    /// Runs the query over opened inputs.
    pub fn run(
        &self,
        inputs: &mut Opened,
        opts: &Options,
        progress: Option<Progress<'_>>,
    ) -> Result<TopCounts, Error> {
        inputs.run(self, TopCounts::default(), opts, progress)
    }

    /// Counts one block of lines into a fresh tally and returns it owned; the
    /// single-threaded path tests compare the parallel one against.
    pub fn count_block(&self, block: &[u8]) -> TopCounts {
        let mut tally = self.tally();
        self.scan(&mut tally, block);
        let mut total = TopCounts::default();
        self.merge(&mut total, tally);
        total
    }

    #[inline]
    fn count_line<'a>(&self, tally: &mut Tally<'a>, line: &'a [u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if self
            .regex
            .captures_read(&mut tally.locations, line)
            .is_some()
        {
            if let Some((start, end)) = tally.locations.get(self.group) {
                tally.matched += 1;
                *tally.counts.entry(&line[start..end]).or_insert(0) += 1;
            }
        }
    }
}

impl TopCounts {
    /// The `n` most frequent keys, highest count first, ties broken by key (bytewise).
    pub fn top(&self, n: usize) -> Vec<(&[u8], u64)> {
        let mut rows: Vec<(&[u8], u64)> = self
            .counts
            .iter()
            .map(|(k, &v)| (k.as_slice(), v))
            .collect();
        rows.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        rows.truncate(n);
        rows
    }
}

pub(crate) struct Tally<'a> {
    counts: Map<&'a [u8], u64>,
    matched: u64,
    locations: CaptureLocations,
}

impl Job for TopQuery {
    type Tally<'a> = Tally<'a>;
    type Total = TopCounts;

    fn tally<'a>(&self) -> Tally<'a> {
        Tally {
            counts: Map::default(),
            matched: 0,
            locations: self.regex.capture_locations(),
        }
    }

    fn scan<'a>(&self, tally: &mut Tally<'a>, block: &'a [u8]) {
        let Some(finder) = &self.prefix else {
            for line in block.split(|&b| b == b'\n') {
                self.count_line(tally, line);
            }
            return;
        };
        // `pos` is always the start of a line.
        let mut pos = 0;
        while let Some(i) = finder.find(&block[pos..]) {
            let hit = pos + i;
            let start = memchr::memrchr(b'\n', &block[pos..hit]).map_or(pos, |j| pos + j + 1);
            let end = memchr::memchr(b'\n', &block[hit..]).map_or(block.len(), |j| hit + j);
            self.count_line(tally, &block[start..end]);
            pos = end + 1;
            if pos >= block.len() {
                break;
            }
        }
    }

    fn merge(&self, total: &mut TopCounts, tally: Tally<'_>) {
        total.matched += tally.matched;
        total.counts.reserve(tally.counts.len());
        for (key, n) in tally.counts {
            match total.counts.get_mut(key) {
                Some(count) => *count += n,
                None => {
                    total.counts.insert(key.to_vec(), n);
                }
            }
        }
    }
}

/// The longest literal that every match of `pattern` begins with, if it is worth a
/// prefilter. A newline in it would break the line logic, so such literals are refused.
fn required_prefix(pattern: &str) -> Option<Vec<u8>> {
    use regex_syntax::hir::literal::{ExtractKind, Extractor};
    let hir = regex_syntax::ParserBuilder::new()
        .utf8(false)
        .build()
        .parse(pattern)
        .ok()?;
    let seq = Extractor::new().kind(ExtractKind::Prefix).extract(&hir);
    let prefix = seq.longest_common_prefix()?;
    if prefix.is_empty() || prefix.contains(&b'\n') {
        return None;
    }
    Some(prefix.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_wide_finder_prefix() {
        let q = TopQuery::new(r"GET /ongoing/When/\d\d\dx/(\d\d\d\d/\d\d/\d\d/[^ .]+) ").unwrap();
        assert_eq!(q.prefilter(), Some(&b"GET /ongoing/When/"[..]));
        assert_eq!(
            TopQuery::new(r"(foo|fob)x").unwrap().prefilter(),
            Some(&b"fo"[..])
        );
        assert_eq!(TopQuery::new(r"(?i)get (\S+)").unwrap().prefilter(), None);
        assert_eq!(TopQuery::new(r".*x(\d+)").unwrap().prefilter(), None);
        assert_eq!(TopQuery::new(r"a\nb").unwrap().prefilter(), None);
    }

    #[test]
    fn counts_one_per_line_and_strips_cr() {
        let q = TopQuery::new(r"k=(\w+)").unwrap();
        let counts = q.count_block(b"k=a k=b\r\nk=a\r\nnothing\nx k=b");
        assert_eq!(counts.top(10), vec![(&b"a"[..], 2), (&b"b"[..], 1)]);
        assert_eq!(counts.matched, 3);
    }

    #[test]
    fn literal_that_does_not_lead_to_a_match_does_not_hide_a_later_one() {
        let q = TopQuery::new(r"id=(\d+)").unwrap();
        let counts = q.count_block(b"id=x id=7\nid=\nid=8");
        assert_eq!(counts.top(10), vec![(&b"7"[..], 1), (&b"8"[..], 1)]);
    }
}
