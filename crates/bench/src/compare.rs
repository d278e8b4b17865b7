//! A/B mode: alternate short rounds against two targets (A, B, A, B, ...) so
//! both see the same machine noise, then report each side's figures and the
//! ratio B/A with its spread over the round pairs.

use crate::report::{fmt_ms, fmt_si, Invocation, Report, SCHEMA};
use crate::{Config, Error};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Round {
    pub requests_per_second: f64,
    pub p99_ms: f64,
    pub corrected_p99_ms: f64,
    pub errors: u64,
    pub valid: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Side {
    pub url: String,
    pub rounds: Vec<Round>,
    pub median_rps: f64,
    pub median_p99_ms: f64,
}

/// Median and range of a ratio over the round pairs.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Spread {
        v.retain(|x| x.is_finite());
        if v.is_empty() {
            return Spread {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        v.sort_by(f64::total_cmp);
        Spread {
            median: median_sorted(&v),
            min: v[0],
            max: v[v.len() - 1],
        }
    }
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        0.0
    } else {
        median_sorted(&v)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CompareReport {
    pub schema: String,
    pub tessera_version: String,
    pub args: Vec<String>,
    pub a: Side,
    pub b: Side,
    /// requests/s of B divided by A, per round pair.
    pub ratio_rps: Spread,
    /// p99 of B divided by A, per round pair.
    pub ratio_p99: Spread,
    /// Every round's full report, in the order run (A, B, A, B, ...).
    pub runs: Vec<Report>,
}

/// Runs `rounds` rounds of each side, alternating. `on_round` sees each round
/// (side 0 = A, 1 = B) as it finishes.
pub fn compare(
    a: &Config,
    b: &Config,
    rounds: usize,
    inv: &Invocation,
    on_round: &mut dyn FnMut(usize, usize, &Report),
) -> Result<CompareReport, Error> {
    if rounds == 0 {
        return Err(Error::InvalidOption {
            option: "rounds",
            reason: "must be at least 1".into(),
        });
    }
    let mut runs = Vec::new();
    let mut sides: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
    for i in 0..rounds {
        for (side, cfg) in [a, b].into_iter().enumerate() {
            let r = crate::run(cfg, inv, None)?;
            on_round(i, side, &r);
            sides[side].push(Round {
                requests_per_second: r.requests_per_second,
                p99_ms: r.latency_ms.p99,
                corrected_p99_ms: r.corrected_latency_ms.p99,
                errors: r.errors.total,
                valid: r.self_check.valid,
            });
            runs.push(r);
        }
    }
    let [ra, rb] = sides;
    let ratio =
        |f: fn(&Round) -> f64| Spread::of(ra.iter().zip(&rb).map(|(x, y)| f(y) / f(x)).collect());
    let side = |cfg: &Config, rounds: Vec<Round>| Side {
        url: cfg
            .requests
            .first()
            .map(|r| r.url.clone())
            .unwrap_or_default(),
        median_rps: median(rounds.iter().map(|r| r.requests_per_second)),
        median_p99_ms: median(rounds.iter().map(|r| r.p99_ms)),
        rounds,
    };
    Ok(CompareReport {
        schema: SCHEMA.into(),
        tessera_version: inv.tessera_version.clone(),
        args: inv.args.clone(),
        ratio_rps: ratio(|r| r.requests_per_second),
        ratio_p99: ratio(|r| r.p99_ms),
        a: side(a, ra),
        b: side(b, rb),
        runs,
    })
}

impl CompareReport {
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "A/B comparison, {} rounds each, alternating A, B",
            self.a.rounds.len()
        );
        for (name, s) in [("A", &self.a), ("B", &self.b)] {
            let rps: Vec<String> = s
                .rounds
                .iter()
                .map(|r| fmt_si(r.requests_per_second))
                .collect();
            let _ = writeln!(
                o,
                "  {name} {}\n    median {} req/s, p99 {}   rounds: {}",
                s.url,
                fmt_si(s.median_rps),
                fmt_ms(s.median_p99_ms),
                rps.join(" ")
            );
            if s.rounds.iter().any(|r| !r.valid) {
                let _ = writeln!(
                    o,
                    "    warning: some rounds failed the generator self-check"
                );
            }
            let errs: u64 = s.rounds.iter().map(|r| r.errors).sum();
            if errs > 0 {
                let _ = writeln!(o, "    errors: {errs}");
            }
        }
        let _ = writeln!(
            o,
            "  B/A requests/s  {:.3}  (min {:.3}, max {:.3})",
            self.ratio_rps.median, self.ratio_rps.min, self.ratio_rps.max
        );
        let _ = writeln!(
            o,
            "  B/A p99         {:.3}  (min {:.3}, max {:.3})",
            self.ratio_p99.median, self.ratio_p99.min, self.ratio_p99.max
        );
        o
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes")
    }
}
