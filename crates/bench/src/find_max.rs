//! `--find-max --slo 'p99<10ms'`: the highest request rate a server sustains
//! within a latency objective. Open-model steps, doubling from a start rate until
//! a step fails, then bisecting between the best passing and the lowest failing
//! rate, then one confirming run at the rate found. The steps, in order of rate,
//! are the throughput-versus-latency curve; where it bends up is the knee.

use crate::report::{Invocation, Report, SCHEMA};
use crate::{Config, Error};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One clause of a latency objective, e.g. `p99<10ms`, on corrected latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// `mean`, `p50`, `p75`, `p90`, `p99`, `p99.9`, `p99.99` or `max`.
    pub metric: String,
    pub limit_ms: f64,
}

impl Slo {
    /// Parses `p99<10ms`, `p99.9<=50ms,max<1s` (clauses separated by commas).
    pub fn parse_all(s: &str) -> Result<Vec<Slo>, Error> {
        let bad = || Error::Slo(s.to_string());
        let mut out = Vec::new();
        for clause in s.split(',') {
            let clause = clause.trim();
            let (metric, limit) = clause.split_once('<').ok_or_else(bad)?;
            let limit = limit.trim_start_matches('=').trim();
            let metric = metric.trim().to_ascii_lowercase();
            if crate::report::Latency::default().get(&metric).is_none() {
                return Err(bad());
            }
            let d = crate::config::parse_duration(limit).ok_or_else(bad)?;
            out.push(Slo {
                metric,
                limit_ms: d.as_secs_f64() * 1000.0,
            });
        }
        if out.is_empty() {
            return Err(bad());
        }
        Ok(out)
    }
}

#[derive(Debug, Clone)]
pub struct FindMaxOptions {
    /// First rate tried, requests/s. Default 1000.
    pub start_rate: f64,
    /// Length of each step. Default 5 s.
    pub step: Duration,
    /// Most steps before the confirming run. Default 12.
    pub max_steps: usize,
    /// Bisection stops when the bracket is narrower than this fraction. Default 0.05.
    pub precision: f64,
    /// A step fails when more than this fraction of requests failed or was non-2xx. Default 0.01.
    pub max_error_ratio: f64,
}

impl Default for FindMaxOptions {
    fn default() -> Self {
        FindMaxOptions {
            start_rate: 1000.0,
            step: Duration::from_secs(5),
            max_steps: 12,
            precision: 0.05,
            max_error_ratio: 0.01,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Step {
    pub rate: f64,
    pub achieved_rps: f64,
    /// The objective's metrics on corrected latency, in the order of the clauses.
    pub measured_ms: Vec<f64>,
    pub latency_p99_ms: f64,
    pub corrected_p99_ms: f64,
    pub errors: u64,
    pub generator_valid: bool,
    pub passed: bool,
    /// Why a step failed (empty when it passed).
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FindMaxReport {
    pub schema: String,
    pub slo: Vec<Slo>,
    pub steps: Vec<Step>,
    /// Highest rate that met the objective, if any.
    pub max_rate: Option<f64>,
    /// Lowest rate that missed it.
    pub first_failing_rate: Option<f64>,
    /// The confirming run at `max_rate`, and whether it passed too.
    pub confirmed: bool,
    pub confirm: Option<Report>,
}

fn evaluate(r: &Report, rate: f64, slo: &[Slo], opts: &FindMaxOptions) -> Step {
    let measured: Vec<f64> = slo
        .iter()
        .map(|c| {
            r.corrected_latency_ms
                .get(&c.metric)
                .unwrap_or(f64::INFINITY)
        })
        .collect();
    let mut reasons = Vec::new();
    for (c, m) in slo.iter().zip(&measured) {
        if *m >= c.limit_ms {
            reasons.push(format!("{} {:.3}ms >= {}ms", c.metric, m, c.limit_ms));
        }
    }
    let attempted = r.requests + r.errors.total - r.errors.non_2xx;
    if attempted == 0 || r.errors.total as f64 > opts.max_error_ratio * attempted as f64 {
        reasons.push(format!("{} errors", r.errors.total));
    }
    if r.requests_per_second < 0.95 * rate {
        reasons.push(format!("achieved only {:.0} req/s", r.requests_per_second));
    }
    if !r.self_check.valid {
        reasons.push("generator overloaded".into());
    }
    Step {
        rate,
        achieved_rps: r.requests_per_second,
        measured_ms: measured,
        latency_p99_ms: r.latency_ms.p99,
        corrected_p99_ms: r.corrected_latency_ms.p99,
        errors: r.errors.total,
        generator_valid: r.self_check.valid,
        passed: reasons.is_empty(),
        reason: reasons.join("; "),
    }
}

/// Runs the search. `on_step` sees each step as it finishes (for live output).
pub fn find_max(
    base: &Config,
    slo: &[Slo],
    opts: &FindMaxOptions,
    inv: &Invocation,
    on_step: &mut dyn FnMut(&Step),
) -> Result<FindMaxReport, Error> {
    if !(opts.start_rate.is_finite() && opts.start_rate > 0.0) {
        return Err(Error::InvalidOption {
            option: "rate",
            reason: "the start rate must be positive".into(),
        });
    }
    let run_at = |rate: f64| -> Result<Report, Error> {
        let mut cfg = base.clone();
        cfg.rate = Some(rate);
        cfg.duration = Some(opts.step);
        cfg.requests_total = None;
        crate::run(&cfg, inv, None)
    };
    let mut good: Option<f64> = None;
    let mut bad: Option<f64> = None;
    let mut steps = Vec::new();
    for _ in 0..opts.max_steps {
        let rate = match (good, bad) {
            (None, None) => opts.start_rate,
            (Some(g), None) => g * 2.0,
            (None, Some(b)) => b / 2.0,
            (Some(g), Some(b)) => {
                if (b - g) / g < opts.precision {
                    break;
                }
                (g + b) / 2.0
            }
        };
        let report = run_at(rate)?;
        let step = evaluate(&report, rate, slo, opts);
        on_step(&step);
        if step.passed {
            good = Some(rate);
        } else {
            bad = Some(rate);
        }
        steps.push(step);
    }
    let (confirmed, confirm) = match good {
        Some(g) => {
            let report = run_at(g)?;
            let step = evaluate(&report, g, slo, opts);
            on_step(&step);
            (step.passed, Some(report))
        }
        None => (false, None),
    };
    steps.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    Ok(FindMaxReport {
        schema: SCHEMA.into(),
        slo: slo.to_vec(),
        steps,
        max_rate: good,
        first_failing_rate: bad,
        confirmed,
        confirm,
    })
}

impl FindMaxReport {
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let slo: Vec<String> = self
            .slo
            .iter()
            .map(|s| format!("{}<{}ms", s.metric, s.limit_ms))
            .collect();
        let _ = writeln!(
            o,
            "find-max, objective {} (corrected latency)",
            slo.join(",")
        );
        let _ = writeln!(
            o,
            "  {:>12} {:>12} {:>12} {:>14}  result",
            "rate", "achieved", "p99", "corrected p99"
        );
        for s in &self.steps {
            let _ = writeln!(
                o,
                "  {:>12.0} {:>12.0} {:>12} {:>14}  {}",
                s.rate,
                s.achieved_rps,
                crate::report::fmt_ms(s.latency_p99_ms),
                crate::report::fmt_ms(s.corrected_p99_ms),
                if s.passed {
                    "pass".to_string()
                } else {
                    format!("fail: {}", s.reason)
                }
            );
        }
        match self.max_rate {
            Some(r) => {
                let _ = writeln!(
                    o,
                    "  max rate within objective: {r:.0} req/s ({}){}",
                    if self.confirmed {
                        "confirmed"
                    } else {
                        "NOT confirmed by the final run"
                    },
                    self.first_failing_rate
                        .map(|b| format!("; fails at {b:.0} req/s"))
                        .unwrap_or_default()
                );
            }
            None => {
                let _ = writeln!(o, "  no rate tried met the objective");
            }
        }
        o
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_objectives() {
        let s = Slo::parse_all("p99<10ms, p99.9<=0.5s,mean<250us").unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].metric.as_str(), s[0].limit_ms), ("p99", 10.0));
        assert_eq!((s[1].metric.as_str(), s[1].limit_ms), ("p99.9", 500.0));
        assert!((s[2].limit_ms - 0.25).abs() < 1e-9);
        assert!(Slo::parse_all("p98<10ms").is_err());
        assert!(Slo::parse_all("p99>10ms").is_err());
        assert!(Slo::parse_all("p99<10").is_err());
    }
}
