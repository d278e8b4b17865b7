//! A deterministic synthetic access log, for tests and `bench/logs.sh`.
//!
//! Lines are Apache combined format, shaped like the log of a blog (Tim Bray's ongoing,
//! the Wide Finder data set): most hits are articles under `/ongoing/When/`, feeds,
//! images and stylesheets, with skewed popularity, a few 404s, search and internal
//! referrers, and a pool of clients (IPv4, IPv6, host names) and user agents. The same
//! seed always gives the same bytes; the generator has its own PRNG so no dependency
//! upgrade can change the output.
//!
//! With `tricky`, about one line in fifty is one of the awkward cases the parser must
//! survive: CRLF endings, blank lines, escaped quotes, `-` sizes, HTTP/0.9 and garbage
//! request lines, and outright malformed lines.

use std::io::{self, Write};

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    pub seed: u64,
    /// Mix in awkward and malformed lines.
    pub tricky: bool,
    /// End the output without a final newline.
    pub no_final_newline: bool,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            seed: 1,
            tricky: false,
            no_final_newline: false,
        }
    }
}

/// SplitMix64: tiny, fast, and fixed forever.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// An index in `0..n` skewed towards 0, like page popularity.
    fn skewed(&mut self, n: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((u * u * u) * n as f64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const WORDS: [&str; 32] = [
    "Wide",
    "Finder",
    "Erlang",
    "Ruby",
    "Java",
    "Atom",
    "Feed",
    "Photo",
    "Music",
    "Canada",
    "Sun",
    "Niagara",
    "Cores",
    "Threads",
    "Disk",
    "Memory",
    "Speed",
    "Garden",
    "Coffee",
    "Vancouver",
    "Guitar",
    "Camera",
    "Search",
    "Browser",
    "Mobile",
    "Cloud",
    "Language",
    "Parsing",
    "Regex",
    "Benchmark",
    "Dinner",
    "Travel",
];

const AGENTS: [&str; 12] = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "NetNewsWire/6.1 (Macintosh; https://netnewswire.com/)",
    "Feedly/1.0 (+http://www.feedly.com/fetcher.html; 123 subscribers)",
    "curl/8.11.0",
    "Wget/1.21.4",
    "python-requests/2.32.3",
    r#"Mozilla/5.0 (compatible; \"QuotedBot\"/1.0; +https://example.net/bot)"#,
];

const REFERRERS: [&str; 6] = [
    "https://www.google.com/",
    "https://www.bing.com/search?q=wide+finder",
    "https://news.ycombinator.com/item?id=4242",
    "https://duckduckgo.com/",
    "https://www.reddit.com/r/programming/",
    "https://lobste.rs/t/performance",
];

const STATIC: [&str; 6] = [
    "/ongoing/serif.css",
    "/ongoing/ongoing.js",
    "/favicon.ico",
    "/robots.txt",
    "/ongoing/pics/tbray.jpg",
    "/ongoing/misc/Feed.png",
];

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

struct World {
    articles: Vec<String>,
    clients: Vec<String>,
}

impl World {
    fn new(rng: &mut Rng) -> World {
        let articles = (0..3000)
            .map(|_| {
                let year = 2003 + rng.below(23);
                let (month, day) = (1 + rng.below(12), 1 + rng.below(28));
                let name = match rng.below(3) {
                    0 => WORDS[rng.below(32) as usize].to_string(),
                    1 => format!(
                        "{}-{}",
                        WORDS[rng.below(32) as usize],
                        WORDS[rng.below(32) as usize]
                    ),
                    _ => format!("{}{}", WORDS[rng.below(32) as usize], rng.below(100)),
                };
                format!(
                    "/ongoing/When/{}x/{year}/{month:02}/{day:02}/{name}",
                    year / 10 % 1000
                )
            })
            .collect();
        let clients = (0..20_000)
            .map(|i| match i % 10 {
                0 => format!("2001:db8:{:x}::{:x}", rng.below(65536), rng.below(65536)),
                1 => format!(
                    "crawl-66-249-{}-{}.googlebot.com",
                    rng.below(256),
                    rng.below(256)
                ),
                _ => format!(
                    "{}.{}.{}.{}",
                    1 + rng.below(223),
                    rng.below(256),
                    rng.below(256),
                    1 + rng.below(254)
                ),
            })
            .collect();
        World { articles, clients }
    }
}

/// Writes `lines` lines of synthetic log to `out`.
pub fn generate(lines: u64, options: &SynthOptions, out: &mut impl Write) -> io::Result<()> {
    let mut rng = Rng(options.seed);
    let world = World::new(&mut rng);
    // 2026-11-21 00:00:00 +0000, advancing ~86 ms a line: a million lines is about a day.
    let mut millis: u64 = 0;
    let mut line = Vec::with_capacity(512);
    for i in 0..lines {
        millis += rng.below(173);
        line.clear();
        let last = i + 1 == lines;
        if options.tricky && rng.chance(2) {
            tricky_line(&mut rng, &world, millis, &mut line);
        } else {
            normal_line(&mut rng, &world, millis, &mut line);
            line.push(b'\n');
        }
        if last && options.no_final_newline {
            while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                line.pop();
            }
        }
        out.write_all(&line)?;
    }
    Ok(())
}

fn timestamp(millis: u64) -> String {
    let secs = millis / 1000;
    let day = 21 + secs / 86_400;
    // Days past the end of November roll into December; enough for any test size.
    let (month, day) = if day > 30 { (12, day - 30) } else { (11, day) };
    format!(
        "{day:02}/{}/2026:{:02}:{:02}:{:02} +0000",
        MONTHS[month - 1],
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60
    )
}

fn normal_line(rng: &mut Rng, world: &World, millis: u64, out: &mut Vec<u8>) {
    let client = &world.clients[rng.skewed(world.clients.len())];
    let roll = rng.below(100);
    let (method, path, status, size): (&str, String, u16, Option<u64>) = match roll {
        0..=39 => {
            let article = &world.articles[rng.skewed(world.articles.len())];
            let status = if rng.chance(5) { 304 } else { 200 };
            (
                "GET",
                article.clone(),
                status,
                Some(8_000 + rng.below(40_000)),
            )
        }
        40..=49 => {
            let article = &world.articles[rng.skewed(world.articles.len())];
            (
                "GET",
                format!("{article}.png"),
                200,
                Some(20_000 + rng.below(200_000)),
            )
        }
        50..=69 => {
            let status = if rng.chance(40) { 304 } else { 200 };
            (
                "GET",
                "/ongoing/ongoing.atom".to_string(),
                status,
                Some(90_000 + rng.below(5_000)),
            )
        }
        70..=84 => {
            let path = STATIC[rng.skewed(STATIC.len())];
            ("GET", path.to_string(), 200, Some(500 + rng.below(30_000)))
        }
        85..=89 => {
            let path = match rng.below(3) {
                0 => "/wp-login.php".to_string(),
                1 => format!("/ongoing/When/200x/2007/13/{:02}/Missing", rng.below(40)),
                _ => format!("/.env?x={}", rng.below(10)),
            };
            ("GET", path, 404, Some(300 + rng.below(200)))
        }
        90..=93 => ("POST", "/ongoing/comment".to_string(), 303, None),
        94..=97 => ("HEAD", "/ongoing/".to_string(), 200, None),
        _ => {
            let q = WORDS[rng.below(32) as usize];
            (
                "GET",
                format!("/ongoing/search?q={q}"),
                if rng.chance(3) { 500 } else { 200 },
                Some(4_000),
            )
        }
    };
    let size = match (status, size) {
        (304, _) | (_, None) => "-".to_string(),
        (_, Some(n)) => n.to_string(),
    };
    let referrer = match rng.below(10) {
        0..=3 => "-".to_string(),
        4..=6 => format!(
            "https://www.tbray.org{}",
            world.articles[rng.skewed(world.articles.len())]
        ),
        _ => REFERRERS[rng.skewed(REFERRERS.len())].to_string(),
    };
    let agent = AGENTS[rng.skewed(AGENTS.len())];
    let _ = write!(
        out,
        r#"{client} - - [{}] "{method} {path} HTTP/1.1" {status} {size} "{referrer}" "{agent}""#,
        timestamp(millis)
    );
}

fn tricky_line(rng: &mut Rng, world: &World, millis: u64, out: &mut Vec<u8>) {
    let time = timestamp(millis);
    let article = &world.articles[rng.skewed(world.articles.len())];
    let line = match rng.below(10) {
        // CRLF ending on an otherwise normal line.
        0 => {
            normal_line(rng, world, millis, out);
            out.extend_from_slice(b"\r\n");
            return;
        }
        1 => String::new(),
        2 => format!(
            r#"::1 - - [{time}] "GET {article}?q=\"quoted\" HTTP/1.1" 200 1234 "-" "agent with \"quotes\" and \\ backslash""#
        ),
        3 => format!(
            r#"10.0.0.{} - - [{time}] "-" 408 - "-" "-""#,
            rng.below(256)
        ),
        4 => format!(r#"10.0.0.1 - - [{time}] "GET {article}" 200 77 "-" "HTTP/0.9 client""#),
        5 => format!(
            r#"10.0.0.2 - - [{time}] "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" 400 226 "-" "-""#
        ),
        6 => format!(r#"10.0.0.3 - - [{time}] "GET {article} HTTP/1.1" 2OO 512 "-" "bad status""#),
        7 => format!(r#"10.0.0.4 - - [{time}] "GET {article} HTTP/1.1" 200 12"#),
        8 => format!(r#"10.0.0.5 - - [{time}] "GET {article} HTTP/1.1 200 12 "-" "unclosed"#),
        _ => "this is not a log line at all".to_string(),
    };
    out.extend_from_slice(line.as_bytes());
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_bytes_different_seed_different_bytes() {
        let make = |seed| {
            let mut out = Vec::new();
            generate(
                500,
                &SynthOptions {
                    seed,
                    tricky: true,
                    ..Default::default()
                },
                &mut out,
            )
            .unwrap();
            out
        };
        assert_eq!(make(7), make(7));
        assert_ne!(make(7), make(8));
    }

    #[test]
    fn timestamps_roll_into_december() {
        assert_eq!(timestamp(0), "21/Nov/2026:00:00:00 +0000");
        assert_eq!(
            timestamp(10 * 86_400_000 + 3_723_000),
            "01/Dec/2026:01:02:03 +0000"
        );
    }
}
