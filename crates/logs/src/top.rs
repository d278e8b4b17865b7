//! `logs top`: the Wide Finder query. Count the first capture group of a regular
//! expression over every line it matches, and list the most frequent.
//!
//! The pattern is the `regex` crate's syntax on bytes (`regex::bytes` semantics: Unicode
//! classes, but lines need not be UTF-8), run through `regex-automata`'s meta engine, the
//! engine inside `regex`, because it can search *anchored* at a given offset. Most lines
//! of a log do not match, so when every match must begin with a literal (for the Wide
//! Finder pattern, `GET /ongoing/When/`) the scan looks for that literal with `memmem`
//! across the whole chunk and runs an anchored search only where the literal occurs. An
//! anchored search of a one-pass pattern like Wide Finder's resolves the capture group in
//! one forward pass, instead of the three (find end, find start, resolve captures) of an
//! unanchored one. Trying each occurrence of the literal left to right gives exactly the
//! leftmost-first match an unanchored search would, because every match starts with it.

use memchr::memmem;
use regex_automata::meta::Regex;
use regex_automata::util::captures::Captures;
use regex_automata::{Anchored, Input};
use regex_syntax::hir::{Hir, HirKind};

use crate::input::{Job, Opened, Options, Progress};
use crate::key::{Key, Probe};
use crate::Error;

type Map<K, V> = hashbrown::HashMap<K, V, foldhash::fast::RandomState>;

/// A compiled `top` query.
#[derive(Debug)]
pub struct TopQuery {
    regex: Regex,
    /// A literal every match starts with, if there is a useful one.
    prefix: Option<memmem::Finder<'static>>,
    /// When the pattern is that literal followed by the rest, the rest compiled on its
    /// own: the search resumes right after the literal `memmem` already matched.
    rest: Option<Regex>,
    /// Whether the pattern looks around (`^`, `$`, `\b`): only then does the search need
    /// the start of the line as context.
    looks_around: bool,
    /// The capture group counted: 1 if the pattern has one, else the whole match (0).
    group: usize,
}

/// Counts per key of a finished `top` query.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TopCounts {
    /// Every key seen and how many lines produced it.
    counts: Map<Key, u64>,
    /// Lines the pattern matched.
    pub matched: u64,
}

impl TopQuery {
    /// Compiles the pattern. Matching is per line: `^` and `$` are the line's ends, and a
    /// trailing `\r` (CRLF logs) is not part of the line.
    pub fn new(pattern: &str) -> Result<TopQuery, Error> {
        // Compiled by `regex` first for its error messages; then by the meta engine with
        // the same configuration `regex::bytes::Regex` uses.
        regex::bytes::Regex::new(pattern)?;
        let regex = Regex::builder()
            .syntax(regex_automata::util::syntax::Config::new().utf8(false))
            .configure(Regex::config().utf8_empty(false))
            .build(pattern)
            .map_err(|e| Error::Pattern(regex::Error::Syntax(e.to_string())))?;
        let group = if regex
            .group_info()
            .group_len(regex_automata::PatternID::ZERO)
            > 1
        {
            1
        } else {
            0
        };
        let hir = regex_syntax::ParserBuilder::new()
            .utf8(false)
            .build()
            .parse(pattern)
            .map_err(|e| Error::Pattern(regex::Error::Syntax(e.to_string())))?;
        let looks_around = !hir.properties().look_set().is_empty();
        let prefix = required_prefix(&hir);
        let rest = prefix.as_deref().and_then(|lit| rest_after(&hir, lit));
        Ok(TopQuery {
            regex,
            prefix: prefix.map(|lit| memmem::Finder::new(&lit).into_owned()),
            rest,
            looks_around,
            group,
        })
    }

    /// The literal the prefilter searches for, if any.
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

    /// Counts `line` if the pattern matches it, searching anchored at `at` (where the
    /// prefix literal occurs) and then at each later occurrence of the literal.
    #[inline]
    fn count_line(&self, tally: &mut Tally, line: &[u8], mut at: usize) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let caps = &mut tally.captures;
        match &self.prefix {
            None => self.regex.search_captures(&Input::new(line), caps),
            Some(finder) => loop {
                let (regex, from) = match &self.rest {
                    Some(rest) => (rest, at + finder.needle().len()),
                    None => (&self.regex, at),
                };
                let input = Input::new(line)
                    .span(from..line.len())
                    .anchored(Anchored::Yes);
                regex.search_captures(&input, caps);
                if caps.is_match() || at >= line.len() {
                    break;
                }
                match finder.find(&line[at + 1..]) {
                    Some(next) => at += 1 + next,
                    None => break,
                }
            },
        }
        if let Some(span) = caps.get_group(self.group) {
            // The whole match (group 0) of the rest starts after the literal.
            let start = if self.group == 0 && self.rest.is_some() {
                at
            } else {
                span.start
            };
            tally.matched += 1;
            *tally
                .counts
                .entry_ref(&Probe(&line[start..span.end]))
                .or_insert(0) += 1;
        }
    }
}

impl TopCounts {
    /// The `n` most frequent keys, highest count first, ties broken by key (bytewise).
    pub fn top(&self, n: usize) -> Vec<(&[u8], u64)> {
        let mut rows: Vec<(&[u8], u64)> = self.counts.iter().map(|(k, &v)| (&k[..], v)).collect();
        rows.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        rows.truncate(n);
        rows
    }
}

/// A thread's counts. Keys are copied out of the log the first time they are seen (see
/// [`Key`]): a key borrowed from the map would point back to wherever in the file it
/// first appeared, and every later lookup would pay a cache miss to compare against it.
pub(crate) struct Tally {
    counts: Map<Key, u64>,
    matched: u64,
    captures: Captures,
}

impl Job for TopQuery {
    type Tally = Tally;
    type Total = TopCounts;

    fn tally(&self) -> Tally {
        Tally {
            counts: Map::default(),
            matched: 0,
            captures: self.regex.create_captures(),
        }
    }

    fn scan(&self, tally: &mut Tally, block: &[u8]) {
        let Some(finder) = &self.prefix else {
            for line in block.split(|&b| b == b'\n') {
                self.count_line(tally, line, 0);
            }
            return;
        };
        // `pos` is always the start of a line.
        let mut pos = 0;
        while let Some(i) = finder.find(&block[pos..]) {
            let hit = pos + i;
            let start = if self.looks_around {
                memchr::memrchr(b'\n', &block[pos..hit]).map_or(pos, |j| pos + j + 1)
            } else {
                hit
            };
            let end = memchr::memchr(b'\n', &block[hit..]).map_or(block.len(), |j| hit + j);
            self.count_line(tally, &block[start..end], hit - start);
            pos = end + 1;
            if pos >= block.len() {
                break;
            }
        }
    }

    fn merge(&self, total: &mut TopCounts, tally: Tally) {
        total.matched += tally.matched;
        for (key, n) in tally.counts {
            *total.counts.entry(key).or_insert(0) += n;
        }
    }
}

/// The longest literal that every match of `pattern` begins with, if it is worth a
/// prefilter. A line ending in it would break the line logic, so such literals are refused.
fn required_prefix(hir: &Hir) -> Option<Vec<u8>> {
    use regex_syntax::hir::literal::{ExtractKind, Extractor};
    let seq = Extractor::new().kind(ExtractKind::Prefix).extract(hir);
    let prefix = seq.longest_common_prefix()?;
    if prefix.is_empty() || prefix.contains(&b'\n') || prefix.contains(&b'\r') {
        return None;
    }
    Some(prefix.to_vec())
}

/// If `hir` is exactly `literal` followed by something, that something compiled alone.
/// Capture groups keep their numbers, since the literal holds none.
fn rest_after(hir: &Hir, literal: &[u8]) -> Option<Regex> {
    let HirKind::Concat(parts) = hir.kind() else {
        return None;
    };
    let HirKind::Literal(first) = parts.first()?.kind() else {
        return None;
    };
    if &*first.0 != literal {
        return None;
    }
    let rest = Hir::concat(parts[1..].to_vec());
    Regex::builder()
        .configure(Regex::config().utf8_empty(false))
        .build_from_hir(&rest)
        .ok()
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
