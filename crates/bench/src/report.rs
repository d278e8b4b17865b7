//! The result of a run and its renderings: a terminal summary and JSON. The JSON
//! shape is documented in `docs/bench.md` and `schema/report.schema.json`; it only
//! ever grows (new fields), so scripts written against it keep working.

use crate::config::{Config, Plan};
use crate::engine::Measured;
use crate::stats::{corrected_by_interval, Failures};
use crate::sysinfo::System;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Identifies the JSON layout; bumped only on incompatible changes.
pub const SCHEMA: &str = "tessera-bench/1";

/// Who ran the benchmark and how; filled in by the binary.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Invocation {
    pub tessera_version: String,
    pub args: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    pub model: String,
    pub urls: Vec<String>,
    pub address: String,
    pub connections: usize,
    pub threads: usize,
    pub keepalive: bool,
    /// Requests in flight per connection: pipelined (HTTP/1.1) or streams (HTTP/2).
    pub pipeline: usize,
    /// "HTTP/1.1", "HTTP/2" or "HTTP/3".
    #[serde(default)]
    pub protocol: String,
    /// Over TLS (`https://`).
    #[serde(default)]
    pub tls: bool,
    pub rate: Option<f64>,
    pub ramp: Option<f64>,
    pub duration_s: Option<f64>,
    pub requests_limit: Option<u64>,
    pub timeout_s: f64,
}

/// Latency figures in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub mean: f64,
    pub stdev: f64,
    pub min: f64,
    pub p50: f64,
    pub p75: f64,
    pub p90: f64,
    pub p99: f64,
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    #[serde(rename = "p99.99")]
    pub p99_99: f64,
    pub max: f64,
}

impl Latency {
    pub(crate) fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            count: h.len(),
            mean: h.mean() / 1000.0,
            stdev: h.stdev() / 1000.0,
            min: ms(h.min()),
            p50: ms(h.value_at_quantile(0.50)),
            p75: ms(h.value_at_quantile(0.75)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p99_9: ms(h.value_at_quantile(0.999)),
            p99_99: ms(h.value_at_quantile(0.9999)),
            max: ms(h.max()),
        }
    }

    /// A named figure (`p99`, `p99.9`, `mean`, `max`, ...), for latency objectives.
    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name {
            "mean" => self.mean,
            "min" => self.min,
            "p50" | "median" => self.p50,
            "p75" => self.p75,
            "p90" => self.p90,
            "p99" => self.p99,
            "p99.9" => self.p99_9,
            "p99.99" => self.p99_99,
            "max" => self.max,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Errors {
    /// Failed requests plus non-2xx responses.
    pub total: u64,
    pub connect: u64,
    pub timeout: u64,
    pub reset: u64,
    pub bad_response: u64,
    /// Failed TLS handshakes or bad records.
    #[serde(default)]
    pub tls: u64,
    pub non_2xx: u64,
    /// Non-2xx responses by status code.
    pub status: BTreeMap<String, u64>,
    /// The first failed read or write's error, as the system or TLS said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PercentilePoint {
    pub percentile: f64,
    pub ms: f64,
    pub corrected_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Bucket {
    /// Upper bound of the bucket in milliseconds.
    pub le_ms: f64,
    pub count: u64,
    pub corrected_count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SecondPoint {
    pub second: u64,
    pub requests: u64,
    pub errors: u64,
    pub bytes: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Open model only: p99 from the intended send times.
    pub corrected_p99_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SelfCheck {
    /// False when the generator itself may have been the bottleneck.
    pub valid: bool,
    pub reasons: Vec<String>,
    /// User + system CPU of the generator process during the run.
    pub cpu_s: f64,
    pub cpu_us_per_request: f64,
    /// CPU time / wall time of the busiest worker thread, in percent.
    pub busiest_thread_percent: f64,
    /// Open model: how late requests left after they were due and a connection was free.
    pub send_lag_ms: Option<Latency>,
    /// Observations that do not invalidate the result (e.g. wake-up jitter).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Connects {
    pub count: u64,
    /// Connections established per second over the whole run.
    pub per_second: f64,
    /// Seconds until every connection had been established once.
    pub all_connected_s: Option<f64>,
    /// Connections per second while opening the initial set (the ramp).
    pub ramp_rate: Option<f64>,
    pub time_ms: Latency,
}

/// One run's result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub schema: String,
    pub tessera_version: String,
    pub args: Vec<String>,
    pub system: System,
    pub settings: Settings,
    pub duration_s: f64,
    /// Completed responses, any status.
    pub requests: u64,
    pub requests_per_second: f64,
    pub bytes: u64,
    pub bytes_per_second: f64,
    pub connects: Connects,
    pub errors: Errors,
    /// Every response status seen, with counts.
    pub status: BTreeMap<String, u64>,
    /// Latency from the moment each request was written (uncorrected).
    pub latency_ms: Latency,
    /// Latency corrected for coordinated omission (see `correction`).
    pub corrected_latency_ms: Latency,
    /// `intended-send-time` (open model) or `expected-interval` (closed model).
    pub correction: String,
    pub percentiles: Vec<PercentilePoint>,
    pub distribution: Vec<Bucket>,
    pub series: Vec<SecondPoint>,
    pub self_check: SelfCheck,
}

const CURVE: [f64; 17] = [
    0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 97.5, 99.0, 99.5, 99.75, 99.9, 99.95, 99.99, 99.995,
    99.999, 100.0,
];

/// Busiest-thread CPU above this share of wall time means the generator, not the
/// server, may have limited the result.
const BUSY_LIMIT: f64 = 0.90;
/// Open model: a generator that cannot keep its schedule falls behind on
/// average, so its mean send lag (how late requests left after they were due
/// with a free connection waiting) grows past a millisecond. Occasional late
/// wake-ups (scheduler jitter on a busy machine) only move the tail; they are
/// reported as a note, since they also end up in the corrected latency.
const SEND_LAG_MEAN_LIMIT_MS: f64 = 1.0;
const SEND_LAG_NOTE_MS: f64 = 1.0;
const SEND_LAG_NOTE_SHARE: f64 = 0.25;

pub(crate) fn build(cfg: &Config, plan: &Plan, m: Measured, inv: &Invocation) -> Report {
    let s = &m.stats;
    let secs = m.elapsed.as_secs_f64().max(1e-9);
    let open = plan.rate.is_some();
    let latency = Latency::of(&s.latency);
    let corrected_hist = match &s.corrected {
        Some(h) => h.clone(),
        None => corrected_by_interval(&s.latency, s.latency.mean() as u64),
    };
    let corrected = Latency::of(&corrected_hist);
    let status: BTreeMap<String, u64> = s
        .status
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(code, &n)| (code.to_string(), n))
        .collect();
    let non_2xx_status: BTreeMap<String, u64> = status
        .iter()
        .filter(|(c, _)| !c.starts_with('2') || c.len() != 3)
        .map(|(c, n)| (c.clone(), *n))
        .collect();
    let non_2xx: u64 = non_2xx_status.values().sum();
    let f: Failures = s.failures;
    let errors = Errors {
        total: f.total() + non_2xx,
        connect: f.connect,
        timeout: f.timeout,
        reset: f.reset,
        bad_response: f.bad_response,
        tls: f.tls,
        non_2xx,
        status: non_2xx_status,
        first: s.first_error.clone(),
    };
    let q = |h: &Histogram<u64>, p: f64| {
        if h.is_empty() {
            0.0
        } else {
            h.value_at_quantile(p / 100.0) as f64 / 1000.0
        }
    };
    let percentiles = CURVE
        .iter()
        .map(|&p| PercentilePoint {
            percentile: p,
            ms: q(&s.latency, p),
            corrected_ms: q(&corrected_hist, p),
        })
        .collect();
    let distribution = distribution(&s.latency, &corrected_hist);
    let n_seconds = (m.elapsed.as_secs_f64().ceil() as usize).max(1);
    let series = s
        .series
        .iter()
        .take(n_seconds)
        .enumerate()
        .map(|(i, sec)| {
            let p = |h: &Histogram<u32>, q: f64| {
                if h.is_empty() {
                    0.0
                } else {
                    h.value_at_quantile(q) as f64 / 1000.0
                }
            };
            SecondPoint {
                second: i as u64,
                requests: sec.responses,
                errors: sec.failures + sec.non_2xx,
                bytes: sec.bytes,
                p50_ms: p(&sec.latency, 0.5),
                p99_ms: p(&sec.latency, 0.99),
                max_ms: if sec.latency.is_empty() {
                    0.0
                } else {
                    sec.latency.max() as f64 / 1000.0
                },
                corrected_p99_ms: sec.corrected.as_ref().map(|h| p(h, 0.99)),
            }
        })
        .collect();
    let send_lag = s.send_lag.as_ref().map(Latency::of);
    let (reasons, notes) = self_check(m.busiest_thread, send_lag.as_ref(), &corrected);
    let cpu_s = m.process_cpu.as_secs_f64();
    let all_connected_s = s.all_connected_at.map(|d| d.as_secs_f64());
    Report {
        schema: SCHEMA.into(),
        tessera_version: inv.tessera_version.clone(),
        args: inv.args.clone(),
        system: System::detect(),
        settings: Settings {
            model: if open { "open" } else { "closed" }.into(),
            urls: cfg.requests.iter().map(|r| r.url.clone()).collect(),
            address: plan.address.to_string(),
            connections: plan.connections,
            threads: plan.threads,
            keepalive: plan.keepalive,
            pipeline: plan.pipeline,
            protocol: match (plan.http2, plan.http3) {
                (_, true) => "HTTP/3",
                (true, _) => "HTTP/2",
                _ => "HTTP/1.1",
            }
            .into(),
            tls: plan.tls.is_some(),
            rate: plan.rate,
            ramp: plan.ramp,
            duration_s: plan.duration.map(|d| d.as_secs_f64()),
            requests_limit: plan.requests_total,
            timeout_s: plan.timeout.as_secs_f64(),
        },
        duration_s: secs,
        requests: s.responses,
        requests_per_second: s.responses as f64 / secs,
        bytes: s.bytes,
        bytes_per_second: s.bytes as f64 / secs,
        connects: Connects {
            count: s.connects,
            per_second: s.connects as f64 / secs,
            all_connected_s,
            ramp_rate: all_connected_s
                .filter(|_| plan.keepalive)
                .map(|t| plan.connections as f64 / t.max(1e-6)),
            time_ms: Latency::of(&s.connect_time),
        },
        errors,
        status,
        latency_ms: latency,
        corrected_latency_ms: corrected,
        correction: if open {
            "intended-send-time"
        } else {
            "expected-interval"
        }
        .into(),
        percentiles,
        distribution,
        series,
        self_check: SelfCheck {
            valid: reasons.is_empty(),
            reasons,
            cpu_s,
            cpu_us_per_request: if s.responses > 0 {
                cpu_s * 1e6 / s.responses as f64
            } else {
                0.0
            },
            busiest_thread_percent: m.busiest_thread * 100.0,
            send_lag_ms: send_lag,
            notes,
        },
    }
}

/// Why a result may reflect the generator rather than the server (empty: valid),
/// and notes that do not invalidate it.
fn self_check(
    busiest_thread: f64,
    send_lag: Option<&Latency>,
    corrected: &Latency,
) -> (Vec<String>, Vec<String>) {
    let mut reasons = Vec::new();
    let mut notes = Vec::new();
    if busiest_thread >= BUSY_LIMIT {
        reasons.push(format!(
            "a generator thread was busy {:.0}% of the time: the generator, not the server, may be the bottleneck (add threads or cores)",
            busiest_thread * 100.0
        ));
    }
    if let Some(l) = send_lag.filter(|l| l.count > 0) {
        if l.mean > SEND_LAG_MEAN_LIMIT_MS {
            reasons.push(format!(
                "requests left {} late on average although a connection was free: the generator could not keep the schedule",
                fmt_ms(l.mean)
            ));
        } else if l.p99 > SEND_LAG_NOTE_MS && l.p99 > SEND_LAG_NOTE_SHARE * corrected.p99 {
            notes.push(format!(
                "the generator woke up to {} late at p99 (mean {}), a large share of the corrected p99 of {}: a busy machine's scheduling jitter is part of that tail",
                fmt_ms(l.p99),
                fmt_ms(l.mean),
                fmt_ms(corrected.p99)
            ));
        }
    }
    (reasons, notes)
}

/// Log-spaced buckets from the fastest to the slowest response, 8 per decade.
fn distribution(h: &Histogram<u64>, corrected: &Histogram<u64>) -> Vec<Bucket> {
    if h.is_empty() {
        return Vec::new();
    }
    let lo = h.min().min(corrected.min()).max(1) as f64;
    let hi = h.max().max(corrected.max()).max(1) as f64;
    let step = 10f64.powf(1.0 / 8.0);
    let mut edges = Vec::new();
    let mut e = 10f64.powf((lo.log10() * 8.0).floor() / 8.0);
    while e < hi * step {
        edges.push(e);
        e *= step;
    }
    let mut out: Vec<Bucket> = edges
        .iter()
        .skip(1)
        .map(|&le| Bucket {
            le_ms: round_significant(le / 1000.0, 4),
            count: 0,
            corrected_count: 0,
        })
        .collect();
    let place = |v: u64| {
        let v = v as f64;
        out_index(&edges, v)
    };
    for v in h.iter_recorded() {
        if let Some(i) = place(v.value_iterated_to()) {
            out[i].count += v.count_at_value();
        }
    }
    for v in corrected.iter_recorded() {
        if let Some(i) = place(v.value_iterated_to()) {
            out[i].corrected_count += v.count_at_value();
        }
    }
    out
}

fn round_significant(v: f64, digits: i32) -> f64 {
    if v == 0.0 {
        return 0.0;
    }
    let scale = 10f64.powi(digits - 1 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

fn out_index(edges: &[f64], v: f64) -> Option<usize> {
    if edges.len() < 2 {
        return None;
    }
    let i = edges
        .iter()
        .skip(1)
        .position(|&le| v <= le)
        .unwrap_or(edges.len() - 2);
    Some(i)
}

/// `1 thread`, `2 threads`.
pub fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Milliseconds with a sensible number of digits.
pub fn fmt_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2}s", ms / 1000.0)
    } else if ms >= 10.0 {
        format!("{ms:.1}ms")
    } else {
        format!("{ms:.3}ms")
    }
}

/// SI-scaled numbers: 1.23k, 4.56M.
pub fn fmt_si(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.1}")
    }
}

fn latency_row(out: &mut String, name: &str, l: &Latency) {
    let _ = writeln!(
        out,
        "  {name:<12}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        fmt_ms(l.mean),
        fmt_ms(l.stdev),
        fmt_ms(l.p50),
        fmt_ms(l.p90),
        fmt_ms(l.p99),
        fmt_ms(l.p99_9),
        fmt_ms(l.max)
    );
}

impl Report {
    /// A human-readable summary for the terminal.
    pub fn text(&self) -> String {
        let st = &self.settings;
        let mut o = String::new();
        let mode = match st.rate {
            Some(r) => format!("open model, {} req/s", fmt_si(r)),
            None => "closed model".into(),
        };
        let conn_mode = if !st.keepalive {
            "one connection per request".to_string()
        } else if st.protocol == "HTTP/2" || st.protocol == "HTTP/3" {
            plural(st.pipeline as u64, "stream") + " per connection"
        } else if st.pipeline > 1 {
            format!("keep-alive, pipeline {}", st.pipeline)
        } else {
            "keep-alive".to_string()
        };
        let _ = writeln!(
            o,
            "{} ({}, {}{}), {mode}, {}, {}, {conn_mode}",
            st.urls.first().map(String::as_str).unwrap_or(""),
            st.address,
            if st.protocol.is_empty() {
                "HTTP/1.1"
            } else {
                &st.protocol
            },
            if st.tls && st.protocol != "HTTP/3" {
                " over TLS"
            } else {
                ""
            },
            plural(st.connections as u64, "connection"),
            plural(st.threads as u64, "thread")
        );
        if st.urls.len() > 1 {
            let more = st.urls.len() - 1;
            let _ = writeln!(
                o,
                "  and {more} more URL{} in the mix",
                if more == 1 { "" } else { "s" }
            );
        }
        let _ = writeln!(
            o,
            "  requests    {} in {:.2}s, {} req/s, {}B/s",
            self.requests,
            self.duration_s,
            fmt_si(self.requests_per_second),
            fmt_si(self.bytes_per_second)
        );
        let mut c = format!(
            "  connects    {} ({}/s, connect p99 {})",
            self.connects.count,
            fmt_si(self.connects.per_second),
            fmt_ms(self.connects.time_ms.p99)
        );
        if let (Some(t), Some(r)) = (self.connects.all_connected_s, self.connects.ramp_rate) {
            let _ = write!(
                c,
                ", all {} open after {t:.2}s ({}/s)",
                st.connections,
                fmt_si(r)
            );
        }
        let _ = writeln!(o, "{c}");
        let e = &self.errors;
        let _ = writeln!(
            o,
            "  errors      {} (connect {}, timeout {}, reset {}, bad response {}, tls {}, non-2xx {})",
            e.total, e.connect, e.timeout, e.reset, e.bad_response, e.tls, e.non_2xx
        );
        if let Some(first) = &e.first {
            let _ = writeln!(o, "  first error {first}");
        }
        let statuses: Vec<String> = self
            .status
            .iter()
            .map(|(c, n)| format!("{c}: {n}"))
            .collect();
        if !statuses.is_empty() {
            let _ = writeln!(o, "  status      {}", statuses.join(", "));
        }
        let _ = writeln!(
            o,
            "  latency           mean     stdev       p50       p90       p99     p99.9       max"
        );
        latency_row(&mut o, "uncorrected", &self.latency_ms);
        latency_row(&mut o, "corrected", &self.corrected_latency_ms);
        let _ = writeln!(
            o,
            "  (corrected: {})",
            if self.correction == "intended-send-time" {
                "measured from each request's intended send time"
            } else {
                "closed model, HdrHistogram expected-interval correction at the mean latency"
            }
        );
        let sc = &self.self_check;
        let lag = sc
            .send_lag_ms
            .as_ref()
            .map(|l| format!(", send lag p99 {}", fmt_ms(l.p99)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "  generator   {:.2} µs CPU per request, busiest thread {:.0}%{lag}: {}",
            sc.cpu_us_per_request,
            sc.busiest_thread_percent,
            if sc.valid { "ok" } else { "INVALID" }
        );
        for r in &sc.reasons {
            let _ = writeln!(o, "  warning     {r}");
        }
        for n in &sc.notes {
            let _ = writeln!(o, "  note        {n}");
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

    fn lat(mean: f64, p99: f64) -> Latency {
        Latency {
            count: 100,
            mean,
            p99,
            ..Latency::default()
        }
    }

    #[test]
    fn self_check_flags_a_busy_or_late_generator() {
        let ok = |r: (Vec<String>, Vec<String>)| r.0.is_empty();
        assert!(ok(self_check(0.5, None, &lat(1.0, 1.0))));
        assert!(!ok(self_check(0.95, None, &lat(1.0, 1.0))));
        // Behind schedule on average: the generator set the pace.
        assert!(!ok(self_check(0.1, Some(&lat(2.0, 9.0)), &lat(3.0, 10.0))));
        // Occasional late wake-ups against a 5 ms tail: valid, with a note.
        let (reasons, notes) = self_check(0.1, Some(&lat(0.1, 3.0)), &lat(1.0, 5.0));
        assert!(reasons.is_empty());
        assert_eq!(notes.len(), 1);
        // The same jitter against a 1 s stall: nothing to say.
        assert_eq!(
            self_check(0.1, Some(&lat(0.1, 3.0)), &lat(50.0, 1000.0)),
            (vec![], vec![])
        );
    }

    #[test]
    fn distribution_buckets_hold_every_sample() {
        let mut h = crate::stats::latency_histogram();
        for v in [1u64, 50, 900, 12_000, 3_000_000] {
            h.record(v).unwrap();
        }
        let d = distribution(&h, &h);
        assert_eq!(d.iter().map(|b| b.count).sum::<u64>(), 5);
        assert!(d.windows(2).all(|w| w[0].le_ms < w[1].le_ms));
        assert!(d.last().unwrap().le_ms >= 3000.0);
    }
}
