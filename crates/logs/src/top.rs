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
use regex_automata::meta::{Cache, Regex};
use regex_automata::util::captures::Captures;
use regex_automata::{Anchored, Input};
use regex_syntax::hir::{Hir, HirKind};

use crate::input::{Job, Opened, Options, Progress};
use crate::key::{first_n, Key};
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
    /// When group 1 sits between parts that match a fixed number of characters (Wide
    /// Finder's `\d\d\dx/(...) `), their lengths in ASCII bytes: in a match that is all
    /// ASCII the group is the match less them at either end, so a search needs only the
    /// match's bounds (the lazy DFA, a few instructions a byte) instead of the capture
    /// engine (about six times as many per byte, in cachegrind). Other matches (`\d`
    /// matches multi-byte digits too) go through the capture engine.
    group_bounds: Option<(usize, usize)>,
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
        let (rest, searched) = match prefix.as_deref().and_then(|lit| rest_after(&hir, lit)) {
            Some((rest, rest_hir)) => (Some(rest), rest_hir),
            None => (None, hir),
        };
        let group_bounds = if group == 1 {
            fixed_around_group(&searched)
        } else {
            None
        };
        Ok(TopQuery {
            regex,
            prefix: prefix.map(|lit| memmem::Finder::new(&lit).into_owned()),
            rest,
            looks_around,
            group,
            group_bounds,
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
        let found = match &self.prefix {
            None => self.search(&self.regex, tally, &Input::new(line), 0),
            Some(finder) => loop {
                let (regex, from) = match &self.rest {
                    Some(rest) => (rest, at + finder.needle().len()),
                    None => (&self.regex, at),
                };
                let input = Input::new(line)
                    .span(from..line.len())
                    .anchored(Anchored::Yes);
                let found = self.search(regex, tally, &input, at);
                if found.is_some() || at >= line.len() {
                    break found;
                }
                match finder.find(&line[at + 1..]) {
                    Some(next) => at += 1 + next,
                    None => break None,
                }
            },
        };
        if let Some(Some((start, end))) = found {
            tally.matched += 1;
            *tally.counts.entry_ref(&line[start..end]).or_insert(0) += 1;
        }
    }

    /// One search of `regex` (the pattern, or the rest after the literal found at `at`):
    /// `None` without a match, else the counted span, if the group took part.
    #[inline]
    fn search(
        &self,
        regex: &Regex,
        tally: &mut Tally,
        input: &Input<'_>,
        at: usize,
    ) -> Option<Option<(usize, usize)>> {
        if let Some((before, after)) = self.group_bounds {
            let m = regex.search_with(&mut tally.cache, input)?;
            if input.haystack()[m.range()].is_ascii() {
                return Some(Some((m.start() + before, m.end() - after)));
            }
        }
        let caps = &mut tally.captures;
        regex.search_captures_with(&mut tally.cache, input, caps);
        if !caps.is_match() {
            return None;
        }
        Some(caps.get_group(self.group).map(|span| {
            // The whole match (group 0) of the rest starts at the literal.
            let start = if self.group == 0 && self.rest.is_some() {
                at
            } else {
                span.start
            };
            (start, span.end)
        }))
    }
}

impl TopCounts {
    /// The `n` most frequent keys, highest count first, ties broken by key (bytewise).
    pub fn top(&self, n: usize) -> Vec<(&[u8], u64)> {
        let mut rows: Vec<(&[u8], u64)> = self.counts.iter().map(|(k, &v)| (&k[..], v)).collect();
        first_n(&mut rows, n, |a, b| {
            b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0))
        });
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
    /// The search cache of the regex run per line (`rest` if there is one), owned by the
    /// thread rather than taken from the regex's shared pool on every search.
    cache: Cache,
}

impl Job for TopQuery {
    type Tally = Tally;
    type Total = TopCounts;

    fn tally(&self) -> Tally {
        Tally {
            counts: Map::default(),
            matched: 0,
            captures: self.regex.create_captures(),
            cache: self.rest.as_ref().unwrap_or(&self.regex).create_cache(),
        }
    }

    fn scan(&self, tally: &mut Tally, block: &[u8]) {
        let Some(finder) = &self.prefix else {
            if block.is_empty() {
                return;
            }
            // A block ends just after a newline (but for the last of an input without
            // one), and what follows that newline is no line: counted, it gave a pattern
            // that matches the empty line (`^$`, `(a*)`) one phantom match per block.
            let lines = block.strip_suffix(b"\n").unwrap_or(block);
            for line in lines.split(|&b| b == b'\n') {
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

/// If `hir` is a sequence whose group 1 is one of its parts, with parts before and after
/// it that hold no groups and match a fixed number of characters: the lengths those
/// parts have in a match of ASCII text, before and after.
fn fixed_around_group(hir: &Hir) -> Option<(usize, usize)> {
    let parts = match hir.kind() {
        HirKind::Concat(parts) => parts,
        HirKind::Capture(c) if c.index == 1 => return Some((0, 0)),
        _ => return None,
    };
    let k = parts
        .iter()
        .position(|p| matches!(p.kind(), HirKind::Capture(c) if c.index == 1))?;
    let fixed = |parts: &[Hir]| parts.iter().map(ascii_len).sum::<Option<usize>>();
    Some((fixed(&parts[..k])?, fixed(&parts[k + 1..])?))
}

/// The length of every ASCII text `hir` matches, if they all have the same length and
/// `hir` holds no group: a class matches one character, which in ASCII is one byte.
fn ascii_len(hir: &Hir) -> Option<usize> {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => Some(0),
        HirKind::Literal(literal) => Some(literal.0.len()),
        HirKind::Class(_) => Some(1),
        HirKind::Repetition(r) if r.max == Some(r.min) => Some(r.min as usize * ascii_len(&r.sub)?),
        HirKind::Concat(parts) => parts.iter().map(ascii_len).sum(),
        HirKind::Alternation(alternatives) => {
            let first = ascii_len(alternatives.first()?)?;
            alternatives[1..]
                .iter()
                .all(|a| ascii_len(a) == Some(first))
                .then_some(first)
        }
        HirKind::Repetition(_) | HirKind::Capture(_) => None,
    }
}

/// If `hir` is exactly `literal` followed by something, that something compiled alone,
/// and its syntax. Capture groups keep their numbers, since the literal holds none.
fn rest_after(hir: &Hir, literal: &[u8]) -> Option<(Regex, Hir)> {
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
    let regex = Regex::builder()
        .configure(Regex::config().utf8_empty(false))
        .build_from_hir(&rest)
        .ok()?;
    Some((regex, rest))
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
    fn groups_between_fixed_parts_are_cut_from_the_match() {
        let bounds = |p: &str| TopQuery::new(p).unwrap().group_bounds;
        // After the literal `GET /ongoing/When/`: `\d\d\dx/` (5 bytes), the group, ` `.
        assert_eq!(
            bounds(r"GET /ongoing/When/\d\d\dx/(\d\d\d\d/\d\d/\d\d/[^ .]+) "),
            Some((5, 1))
        );
        assert_eq!(bounds(r"k=(\w+)"), Some((0, 0)));
        assert_eq!(bounds(r"\bk(é)\d"), Some((1, 1)), "\\b has no length");
        assert_eq!(bounds(r"\bk(é)(\d)"), None, "a group after group 1");
        assert_eq!(bounds(r"(?:ab|cd)\d{3}(x)(?:y|z)"), Some((5, 1)));
        // A part of varying length, or a group before group 1's part: the capture engine.
        assert_eq!(bounds(r"a+(b)"), None);
        assert_eq!(bounds(r"(?:a|bc)(b)"), None);
        assert_eq!(bounds(r"x(b)c*"), None);
        assert_eq!(bounds(r"x(?:(a)|b)(c)"), None);
        assert_eq!(bounds(r"(a)|(b)"), None);
        assert_eq!(bounds(r"ab"), None, "no group: group 0 is counted");
        // Both ways count the same.
        let log = b"GET /a/x1 z\nGET /a/yy2 \nGET /a/ \nGET /a/x1 \nGET /a/x1 GET /a/q9 \n";
        let fast = TopQuery::new(r"GET /a/(\w+)\d ").unwrap();
        assert_eq!(fast.group_bounds, Some((0, 2)));
        let mut slow = TopQuery::new(r"GET /a/(\w+)\d ").unwrap();
        slow.group_bounds = None;
        assert_eq!(fast.count_block(log), slow.count_block(log));
        assert_eq!(
            fast.count_block(log).top(10),
            vec![(&b"x"[..], 3), (&b"yy"[..], 1)]
        );
        // Non-ASCII matches: `\d` takes the 3-byte digit `१`, `.` a 2-byte letter; the
        // capture engine finds the group.
        let q = TopQuery::new(r"id=\d(.)x").unwrap();
        assert_eq!(q.group_bounds, Some((1, 1)));
        let counts = q.count_block("id=१éx\nid=7ax\nid=7éx\n".as_bytes());
        assert_eq!(counts.top(10), vec![("é".as_bytes(), 2), (&b"a"[..], 1)]);
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
