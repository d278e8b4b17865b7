//! The figures a scrape of the admin listener's `/metrics` returns: the server's own and
//! each module's ([`crate::Module::metrics`]), collected into families and written in
//! the Prometheus text format or in OpenMetrics.
//!
//! Written here rather than with prometheus-client, which encodes OpenMetrics only:
//! `promtool check metrics` and older scrapers read the Prometheus text format, and the
//! two differ in three details (the `# EOF` trailer, a counter family's name without
//! `_total`, the content type), which one small writer covers. Nothing here is on the
//! request path: the figures are summed from per-worker counters at scrape time.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Adds `by` to a counter only one thread writes (a worker's, or a thread's block of
/// [`PerThread`]): a relaxed load and store, no atomic read-modify-write, so counting
/// costs the request path nothing measurable.
pub fn bump(counter: &AtomicU64, by: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// Counters kept in a block per thread and summed at scrape time. A crate declares
/// `static ALL: PerThread<Block> = PerThread::new();` and a `thread_local!` holding
/// `ALL.register()`; each thread then counts in its own block with [`bump`], and a
/// block stays in the list after its thread ends, so its counts are never lost.
pub struct PerThread<T> {
    all: Mutex<Vec<Arc<T>>>,
}

impl<T: Default> PerThread<T> {
    pub const fn new() -> PerThread<T> {
        PerThread {
            all: Mutex::new(Vec::new()),
        }
    }

    /// A new block for the calling thread, listed for [`PerThread::sum`].
    pub fn register(&self) -> Arc<T> {
        let block = Arc::new(T::default());
        self.all
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(block.clone());
        block
    }

    /// The sum of one counter over every block.
    pub fn sum(&self, pick: &dyn Fn(&T) -> &AtomicU64) -> u64 {
        let all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().map(|t| pick(t).load(Ordering::Relaxed)).sum()
    }
}

impl<T: Default> Default for PerThread<T> {
    fn default() -> Self {
        PerThread::new()
    }
}

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

/// Label pairs, `le` last for a histogram bucket.
type OwnedLabels = Vec<(String, String)>;

struct Family {
    name: String,
    help: &'static str,
    kind: MetricKind,
    /// `name{labels} value` lines without the family name: (suffix, labels, value).
    samples: Vec<(&'static str, OwnedLabels, f64)>,
}

/// Families of samples, in the order they were first added.
#[derive(Default)]
pub struct Metrics {
    families: Vec<Family>,
}

/// Label pairs: `&[("upstream", "app")]`.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// A counter sample; `name` ends in `_total`.
    pub fn counter(&mut self, name: &str, help: &'static str, labels: Labels<'_>, value: u64) {
        self.family(name, help, MetricKind::Counter).samples.push((
            "",
            owned(labels, None),
            value as f64,
        ));
    }

    /// A gauge sample.
    pub fn gauge(&mut self, name: &str, help: &'static str, labels: Labels<'_>, value: f64) {
        self.family(name, help, MetricKind::Gauge)
            .samples
            .push(("", owned(labels, None), value));
    }

    /// A histogram: `buckets` are (upper bound, count of observations at most that),
    /// cumulative and increasing; `count` and `sum` over every observation.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &'static str,
        labels: Labels<'_>,
        buckets: &[(f64, u64)],
        count: u64,
        sum: f64,
    ) {
        let family = self.family(name, help, MetricKind::Histogram);
        for &(le, n) in buckets {
            let le = format_value(le);
            family
                .samples
                .push(("_bucket", owned(labels, Some(&le)), n as f64));
        }
        family
            .samples
            .push(("_bucket", owned(labels, Some("+Inf")), count as f64));
        family.samples.push(("_sum", owned(labels, None), sum));
        family
            .samples
            .push(("_count", owned(labels, None), count as f64));
    }

    fn family(&mut self, name: &str, help: &'static str, kind: MetricKind) -> &mut Family {
        match self.families.iter().position(|f| f.name == name) {
            Some(i) => &mut self.families[i],
            None => {
                self.families.push(Family {
                    name: name.to_string(),
                    help,
                    kind,
                    samples: Vec::new(),
                });
                self.families.last_mut().expect("just pushed")
            }
        }
    }

    /// The Prometheus text format (version 0.0.4), or OpenMetrics 1.0 when `openmetrics`.
    pub fn render(&self, openmetrics: bool) -> String {
        let mut out = String::new();
        for f in &self.families {
            let kind = match f.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            // OpenMetrics names a counter family without its `_total` suffix.
            let family_name = match (openmetrics, f.kind) {
                (true, MetricKind::Counter) => f.name.strip_suffix("_total").unwrap_or(&f.name),
                _ => &f.name,
            };
            let _ = writeln!(out, "# HELP {family_name} {}", f.help);
            let _ = writeln!(out, "# TYPE {family_name} {kind}");
            for (suffix, labels, value) in &f.samples {
                let labels = label_text(labels);
                let _ = writeln!(out, "{}{suffix}{labels} {}", f.name, format_value(*value));
            }
        }
        if openmetrics {
            out.push_str("# EOF\n");
        }
        out
    }
}

impl Metrics {
    /// The same families as one JSON array, for the admin listener's `/status.json`:
    /// `[{"name", "type", "help", "samples": [{"name", "labels": {..}, "value"}]}]`, a
    /// sample's name with its suffix (`_bucket`, `_sum`, `_count`).
    pub fn render_json(&self) -> String {
        let mut out = String::from("[");
        for (i, f) in self.families.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let kind = match f.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            out.push_str("\n{\"name\":");
            json_string(&mut out, &f.name);
            let _ = write!(out, ",\"type\":\"{kind}\",\"help\":");
            json_string(&mut out, f.help);
            out.push_str(",\"samples\":[");
            for (j, (suffix, labels, value)) in f.samples.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                out.push_str("{\"name\":");
                json_string(&mut out, &format!("{}{suffix}", f.name));
                out.push_str(",\"labels\":{");
                for (k, (name, value)) in labels.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    json_string(&mut out, name);
                    out.push(':');
                    json_string(&mut out, value);
                }
                out.push_str("},\"value\":");
                // JSON has no infinities; no sample holds one (bounds are labels).
                if value.is_finite() {
                    out.push_str(&format_value(*value));
                } else {
                    out.push_str("null");
                }
                out.push('}');
            }
            out.push_str("]}");
        }
        out.push(']');
        out
    }
}

/// `s` as a JSON string literal.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The content type of [`Metrics::render`]'s output.
pub fn content_type(openmetrics: bool) -> &'static str {
    if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    }
}

/// The label pairs, with `le` last when it is given.
fn owned(labels: Labels<'_>, le: Option<&str>) -> OwnedLabels {
    let all = labels.iter().copied().chain(le.map(|le| ("le", le)));
    all.map(|(n, v)| (n.to_string(), v.to_string())).collect()
}

/// `{a="x",b="y"}` (empty without labels), values escaped as the format says.
fn label_text(labels: &[(String, String)]) -> String {
    let mut text = String::new();
    for (i, (name, value)) in labels.iter().enumerate() {
        text.push(if i == 0 { '{' } else { ',' });
        text.push_str(name);
        text.push_str("=\"");
        for c in value.chars() {
            match c {
                '\\' => text.push_str("\\\\"),
                '"' => text.push_str("\\\""),
                '\n' => text.push_str("\\n"),
                c => text.push(c),
            }
        }
        text.push('"');
    }
    if !text.is_empty() {
        text.push('}');
    }
    text
}

fn format_value(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    format!("{v}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_both_formats() {
        let mut m = Metrics::new();
        m.counter("t_requests_total", "Requests.", &[("code", "2xx")], 3);
        m.counter("t_requests_total", "Requests.", &[("code", "5xx")], 1);
        m.gauge("t_up", "Up.", &[], 1.0);
        m.histogram(
            "t_seconds",
            "Time.",
            &[("kind", "a\"b")],
            &[(0.5, 1), (1.0, 2)],
            3,
            2.25,
        );
        assert_eq!(
            m.render(false),
            "# HELP t_requests_total Requests.\n# TYPE t_requests_total counter\n\
             t_requests_total{code=\"2xx\"} 3\nt_requests_total{code=\"5xx\"} 1\n\
             # HELP t_up Up.\n# TYPE t_up gauge\nt_up 1\n\
             # HELP t_seconds Time.\n# TYPE t_seconds histogram\n\
             t_seconds_bucket{kind=\"a\\\"b\",le=\"0.5\"} 1\n\
             t_seconds_bucket{kind=\"a\\\"b\",le=\"1\"} 2\n\
             t_seconds_bucket{kind=\"a\\\"b\",le=\"+Inf\"} 3\n\
             t_seconds_sum{kind=\"a\\\"b\"} 2.25\nt_seconds_count{kind=\"a\\\"b\"} 3\n"
        );
        assert_eq!(
            m.render_json(),
            "[\n{\"name\":\"t_requests_total\",\"type\":\"counter\",\"help\":\"Requests.\",\"samples\":[\
             {\"name\":\"t_requests_total\",\"labels\":{\"code\":\"2xx\"},\"value\":3},\
             {\"name\":\"t_requests_total\",\"labels\":{\"code\":\"5xx\"},\"value\":1}]},\
             \n{\"name\":\"t_up\",\"type\":\"gauge\",\"help\":\"Up.\",\"samples\":[\
             {\"name\":\"t_up\",\"labels\":{},\"value\":1}]},\
             \n{\"name\":\"t_seconds\",\"type\":\"histogram\",\"help\":\"Time.\",\"samples\":[\
             {\"name\":\"t_seconds_bucket\",\"labels\":{\"kind\":\"a\\\"b\",\"le\":\"0.5\"},\"value\":1},\
             {\"name\":\"t_seconds_bucket\",\"labels\":{\"kind\":\"a\\\"b\",\"le\":\"1\"},\"value\":2},\
             {\"name\":\"t_seconds_bucket\",\"labels\":{\"kind\":\"a\\\"b\",\"le\":\"+Inf\"},\"value\":3},\
             {\"name\":\"t_seconds_sum\",\"labels\":{\"kind\":\"a\\\"b\"},\"value\":2.25},\
             {\"name\":\"t_seconds_count\",\"labels\":{\"kind\":\"a\\\"b\"},\"value\":3}]}]"
        );
        let open = m.render(true);
        assert!(open.starts_with("# HELP t_requests Requests.\n# TYPE t_requests counter\n"));
        assert!(open.ends_with("# EOF\n"));
    }
}
