//! Counters and HDR histograms, one set per worker thread, merged once at the end.

use hdrhistogram::Histogram;
use std::time::{Duration, Instant};

/// Latencies are recorded in microseconds, 1 µs to 1 h, 3 significant digits.
pub(crate) const LATENCY_MAX_US: u64 = 3_600_000_000;

pub(crate) fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_MAX_US, 3).expect("valid histogram bounds")
}

/// Per-second histograms are smaller: 2 significant digits, grown on demand.
fn second_histogram() -> Histogram<u32> {
    let mut h = Histogram::new(2).expect("valid histogram precision");
    h.auto(true);
    h
}

/// How a request failed. Non-2xx responses are counted separately by status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The connection could not be established (refused, unreachable, connect timeout).
    Connect,
    /// No complete response within the timeout.
    Timeout,
    /// The connection was reset or closed before the response was complete.
    Reset,
    /// The response could not be parsed as HTTP/1.1 (or HTTP/2's frames broke the protocol).
    BadResponse,
    /// The TLS handshake failed (the certificate did not verify, no common protocol) or
    /// a record was bad.
    Tls,
}

/// Failed requests by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Failures {
    pub connect: u64,
    pub timeout: u64,
    pub reset: u64,
    pub bad_response: u64,
    #[serde(default)]
    pub tls: u64,
}

impl Failures {
    pub fn add(&mut self, kind: FailureKind, n: u64) {
        match kind {
            FailureKind::Connect => self.connect += n,
            FailureKind::Timeout => self.timeout += n,
            FailureKind::Reset => self.reset += n,
            FailureKind::BadResponse => self.bad_response += n,
            FailureKind::Tls => self.tls += n,
        }
    }

    pub fn total(&self) -> u64 {
        self.connect + self.timeout + self.reset + self.bad_response + self.tls
    }

    fn merge(&mut self, o: &Failures) {
        self.connect += o.connect;
        self.timeout += o.timeout;
        self.reset += o.reset;
        self.bad_response += o.bad_response;
        self.tls += o.tls;
    }
}

/// One second of the run.
#[derive(Debug, Clone)]
pub(crate) struct Second {
    pub responses: u64,
    pub non_2xx: u64,
    pub failures: u64,
    pub bytes: u64,
    pub latency: Histogram<u32>,
    pub corrected: Option<Histogram<u32>>,
}

impl Second {
    fn new(open_model: bool) -> Self {
        Second {
            responses: 0,
            non_2xx: 0,
            failures: 0,
            bytes: 0,
            latency: second_histogram(),
            corrected: open_model.then(second_histogram),
        }
    }

    fn merge(&mut self, o: &Second) {
        self.responses += o.responses;
        self.non_2xx += o.non_2xx;
        self.failures += o.failures;
        self.bytes += o.bytes;
        let _ = self.latency.add(&o.latency);
        if let (Some(a), Some(b)) = (&mut self.corrected, &o.corrected) {
            let _ = a.add(b);
        }
    }
}

/// What one worker measured.
#[derive(Debug, Clone)]
pub(crate) struct ThreadStats {
    pub responses: u64,
    pub bytes: u64,
    pub connects: u64,
    pub failures: Failures,
    pub status: Box<[u64; 600]>,
    pub latency: Histogram<u64>,
    pub corrected: Option<Histogram<u64>>,
    pub connect_time: Histogram<u64>,
    /// Open model: how late the generator sent requests it could have sent on time.
    pub send_lag: Option<Histogram<u64>>,
    pub series: Vec<Second>,
    /// When the last of this thread's connections was first established.
    pub all_connected_at: Option<Duration>,
    /// The first failed read or write's error text.
    pub first_error: Option<String>,
    /// CPU time (user + system) of this thread.
    pub cpu: Duration,
    start: Instant,
    second_end: Instant,
    open_model: bool,
}

impl ThreadStats {
    pub fn new(start: Instant, open_model: bool) -> Self {
        ThreadStats {
            responses: 0,
            bytes: 0,
            connects: 0,
            failures: Failures::default(),
            status: Box::new([0; 600]),
            latency: latency_histogram(),
            corrected: open_model.then(latency_histogram),
            connect_time: latency_histogram(),
            send_lag: open_model.then(latency_histogram),
            series: vec![Second::new(open_model)],
            all_connected_at: None,
            first_error: None,
            cpu: Duration::ZERO,
            start,
            second_end: start + Duration::from_secs(1),
            open_model,
        }
    }

    /// The per-second bucket for `now`; a branch on the hot path, a push once a second.
    #[inline]
    fn second(&mut self, now: Instant) -> &mut Second {
        if now >= self.second_end {
            let idx = now.saturating_duration_since(self.start).as_secs() as usize;
            while self.series.len() <= idx {
                self.series.push(Second::new(self.open_model));
            }
            self.second_end = self.start + Duration::from_secs(idx as u64 + 1);
        }
        self.series.last_mut().expect("series is never empty")
    }

    #[inline]
    pub fn bytes_read(&mut self, now: Instant, n: usize) {
        self.bytes += n as u64;
        self.second(now).bytes += n as u64;
    }

    #[inline]
    pub fn response(&mut self, now: Instant, status: u16, sent: Instant, intended: Instant) {
        let us = micros(now.saturating_duration_since(sent));
        self.responses += 1;
        self.status[(status as usize).min(599)] += 1;
        self.latency.saturating_record(us);
        let corrected = self.corrected.as_mut().map(|h| {
            let c = micros(now.saturating_duration_since(intended));
            h.saturating_record(c);
            c
        });
        let non_2xx = !(200..300).contains(&status);
        let s = self.second(now);
        s.responses += 1;
        s.non_2xx += non_2xx as u64;
        // `record`, not `saturating_record`: only `record` grows an auto-resizing
        // histogram; the saturating variant would clamp a 1 s stall to 2 µs.
        let _ = s.latency.record(us);
        if let (Some(h), Some(c)) = (&mut s.corrected, corrected) {
            let _ = h.record(c);
        }
    }

    pub fn failure(&mut self, now: Instant, kind: FailureKind, n: u64) {
        self.failures.add(kind, n);
        self.second(now).failures += n;
    }

    pub fn merge(&mut self, o: &ThreadStats) {
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
        self.responses += o.responses;
        self.bytes += o.bytes;
        self.connects += o.connects;
        self.failures.merge(&o.failures);
        for (a, b) in self.status.iter_mut().zip(o.status.iter()) {
            *a += b;
        }
        let _ = self.latency.add(&o.latency);
        if let (Some(a), Some(b)) = (&mut self.corrected, &o.corrected) {
            let _ = a.add(b);
        }
        let _ = self.connect_time.add(&o.connect_time);
        if let (Some(a), Some(b)) = (&mut self.send_lag, &o.send_lag) {
            let _ = a.add(b);
        }
        for (i, s) in o.series.iter().enumerate() {
            if i < self.series.len() {
                self.series[i].merge(s);
            } else {
                self.series.push(s.clone());
            }
        }
        self.all_connected_at = match (self.all_connected_at, o.all_connected_at) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.cpu += o.cpu;
    }
}

#[inline]
pub(crate) fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

/// Closed-model correction for coordinated omission, HdrHistogram's
/// expected-interval method: every recorded latency L longer than the expected
/// interval I also stands for the requests that would have been sent at
/// L - I, L - 2I, ... had the connection not been stuck.
pub(crate) fn corrected_by_interval(h: &Histogram<u64>, interval_us: u64) -> Histogram<u64> {
    let mut out = latency_histogram();
    if interval_us == 0 {
        let _ = out.add(h);
        return out;
    }
    for v in h.iter_recorded() {
        let value = v.value_iterated_to();
        let count = v.count_at_value();
        let _ = out.record_n(value, count);
        let mut missing = value.saturating_sub(interval_us);
        while missing >= interval_us {
            let _ = out.record_n(missing, count);
            missing -= interval_us;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Latency;

    #[test]
    fn percentiles_are_within_hdr_precision() {
        let start = Instant::now();
        let mut s = ThreadStats::new(start, false);
        // 1..=10000 µs, once each: p50 = 5 ms, p99 = 9.9 ms, max = 10 ms.
        for us in 1..=10_000u64 {
            s.response(start + Duration::from_micros(us), 200, start, start);
        }
        let l = Latency::of(&s.latency);
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.001 + 0.001;
        assert!(close(l.p50, 5.0), "p50 {}", l.p50);
        assert!(close(l.p90, 9.0), "p90 {}", l.p90);
        assert!(close(l.p99, 9.9), "p99 {}", l.p99);
        assert!(close(l.max, 10.0), "max {}", l.max);
        assert!(close(l.mean, 5.0005), "mean {}", l.mean);
        assert_eq!(l.count, 10_000);
    }

    #[test]
    fn per_second_histograms_keep_long_latencies() {
        let start = Instant::now();
        let mut s = ThreadStats::new(start, true);
        let now = start + Duration::from_millis(1500);
        s.response(now, 200, now - Duration::from_millis(2), start);
        let sec = &s.series[1];
        assert_eq!(sec.responses, 1);
        assert!(sec.latency.max() >= 1_990, "{}", sec.latency.max());
        assert!(sec.corrected.as_ref().unwrap().max() >= 1_490_000);
    }

    #[test]
    fn expected_interval_correction_fills_in_the_stall() {
        let mut h = latency_histogram();
        h.record_n(1_000, 99).unwrap();
        h.record(100_000).unwrap();
        let c = corrected_by_interval(&h, 1_000);
        // The 100 ms sample stands for 99 more at 99, 98, ... 1 ms.
        assert_eq!(c.len(), 100 + 99);
        assert!(c.value_at_quantile(0.75) > 40_000);
    }
}
