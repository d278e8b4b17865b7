//! A self-contained HTML report: one file, inline CSS and SVG charts, no
//! scripts and nothing fetched from the network, so it opens anywhere, offline,
//! years later.

use crate::find_max::FindMaxReport;
use crate::report::{fmt_ms, fmt_si, Latency, Report};
use std::fmt::Write as _;

const BLUE: &str = "#2563eb";
const ORANGE: &str = "#ea580c";
const GREEN: &str = "#16a34a";
const GREY: &str = "#6b7280";
const RED: &str = "#dc2626";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

struct Series<'a> {
    name: &'a str,
    color: &'a str,
    points: Vec<(f64, f64)>,
    bars: bool,
    /// Draw points as dots instead of a line.
    dots: bool,
}

struct Chart<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    x_ticks: Vec<(f64, String)>,
    y_log: bool,
    /// Optional horizontal reference line (value, label).
    y_line: Option<(f64, String)>,
    bar_width: f64,
}

const W: f64 = 600.0;
const H: f64 = 300.0;
const ML: f64 = 64.0;
const MR: f64 = 16.0;
const MT: f64 = 34.0;
const MB: f64 = 46.0;

fn nice_step(range: f64) -> f64 {
    let raw = range / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    mag * if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    }
}

fn fmt_tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e4 {
        fmt_si(v)
    } else if v.abs() < 1e-3 {
        format!("{v:e}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn render_chart(c: &Chart, series: &[Series]) -> String {
    let mut o = String::new();
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|p| p.1.is_finite())
        .collect();
    let _ = write!(
        o,
        r#"<figure><svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{t}"><text x="{}" y="20" class="t">{t}</text>"#,
        W / 2.0,
        t = esc(c.title)
    );
    if all.is_empty() {
        let _ = write!(
            o,
            r#"<text x="{}" y="{}" class="l">no data</text></svg></figure>"#,
            W / 2.0,
            H / 2.0
        );
        return o;
    }
    let (mut x0, mut x1) = c
        .x_ticks
        .iter()
        .map(|t| t.0)
        .chain(all.iter().map(|p| p.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    x0 -= c.bar_width / 2.0;
    x1 += c.bar_width / 2.0;
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let mut y_values: Vec<f64> = all.iter().map(|p| p.1).collect();
    if let Some((v, _)) = &c.y_line {
        y_values.push(*v);
    }
    let ymax = y_values.iter().copied().fold(0.0, f64::max);
    let (y0, y1, y_ticks): (f64, f64, Vec<f64>) = if c.y_log {
        let pos: Vec<f64> = y_values.iter().copied().filter(|v| *v > 0.0).collect();
        let lo = pos.iter().copied().fold(f64::INFINITY, f64::min);
        let lo = if lo.is_finite() {
            lo.log10().floor()
        } else {
            0.0
        };
        let hi = ymax.max(1e-9).log10().ceil().max(lo + 1.0);
        let ticks = (lo as i32..=hi as i32).map(|e| e as f64).collect();
        (lo, hi, ticks)
    } else {
        let top = if ymax > 0.0 { ymax * 1.1 } else { 1.0 };
        let step = nice_step(top);
        let top = (top / step).ceil() * step;
        let n = (top / step).round() as usize;
        (0.0, top, (0..=n).map(|i| i as f64 * step).collect())
    };
    let px = |x: f64| ML + (x - x0) / (x1 - x0) * (W - ML - MR);
    let ty = |y: f64| {
        if c.y_log {
            y.max(10f64.powf(y0)).log10()
        } else {
            y
        }
    };
    let py = |y: f64| H - MB - (ty(y) - y0) / (y1 - y0) * (H - MT - MB);
    for t in &y_ticks {
        let y = H - MB - (t - y0) / (y1 - y0) * (H - MT - MB);
        let label = if c.y_log {
            fmt_tick(10f64.powf(*t))
        } else {
            fmt_tick(*t)
        };
        let _ = write!(
            o,
            r#"<line x1="{ML}" x2="{}" y1="{y:.1}" y2="{y:.1}" class="g"/><text x="{}" y="{:.1}" class="yt">{}</text>"#,
            W - MR,
            ML - 6.0,
            y + 4.0,
            esc(&label)
        );
    }
    for (x, label) in &c.x_ticks {
        let _ = write!(
            o,
            r#"<line x1="{X:.1}" x2="{X:.1}" y1="{}" y2="{}" class="g"/><text x="{X:.1}" y="{}" class="xt">{}</text>"#,
            MT,
            H - MB,
            H - MB + 16.0,
            esc(label),
            X = px(*x)
        );
    }
    let _ = write!(
        o,
        r#"<line x1="{ML}" x2="{ML}" y1="{MT}" y2="{}" class="a"/><line x1="{ML}" x2="{}" y1="{}" y2="{}" class="a"/>"#,
        H - MB,
        W - MR,
        H - MB,
        H - MB
    );
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" class="l">{}</text><text x="14" y="{}" class="l" transform="rotate(-90 14 {})">{}</text>"#,
        ML + (W - ML - MR) / 2.0,
        H - 8.0,
        esc(c.x_label),
        MT + (H - MT - MB) / 2.0,
        MT + (H - MT - MB) / 2.0,
        esc(c.y_label)
    );
    for s in series {
        if s.bars {
            let bw = (px(c.bar_width) - px(0.0)).abs().max(1.0) * 0.9;
            for &(x, y) in &s.points {
                if y <= 0.0 {
                    continue;
                }
                let top = py(y);
                let _ = write!(
                    o,
                    r#"<rect x="{:.1}" y="{top:.1}" width="{bw:.1}" height="{:.1}" fill="{}" fill-opacity="0.75"/>"#,
                    px(x) - bw / 2.0,
                    (H - MB - top).max(0.0),
                    s.color
                );
            }
        } else if s.dots {
            for &(x, y) in &s.points {
                let _ = write!(
                    o,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{}"/>"#,
                    px(x),
                    py(y),
                    s.color
                );
            }
        } else {
            // A NaN value is a gap (e.g. a second without responses): the line breaks.
            for run in s.points.split(|p| p.1.is_nan()) {
                if let [(x, y)] = run {
                    let _ = write!(
                        o,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"/>"#,
                        px(*x),
                        py(*y),
                        s.color
                    );
                    continue;
                }
                let d: Vec<String> = run
                    .iter()
                    .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                    .collect();
                let _ = write!(
                    o,
                    r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
                    d.join(" "),
                    s.color
                );
            }
        }
    }
    if let Some((v, label)) = &c.y_line {
        let y = py(*v);
        let _ = write!(
            o,
            r#"<line x1="{ML}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="{RED}" stroke-dasharray="6 4"/><text x="{}" y="{:.1}" class="yt">{}</text>"#,
            W - MR,
            W - MR - 4.0,
            y - 4.0,
            esc(label)
        );
    }
    // Legend.
    let mut lx = ML + 8.0;
    for s in series {
        let _ = write!(
            o,
            r#"<rect x="{lx:.1}" y="{}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{}" class="lg">{}</text>"#,
            MT + 2.0,
            s.color,
            lx + 16.0,
            MT + 12.0,
            esc(s.name)
        );
        lx += 28.0 + 7.0 * s.name.len() as f64;
    }
    o.push_str("</svg></figure>");
    o
}

fn nines(p: f64) -> f64 {
    -(1.0 - (p / 100.0).min(0.999_999)).log10()
}

fn latency_table(rows: &[(&str, &Latency)]) -> String {
    let mut o = String::from(
        "<table><tr><th></th><th>mean</th><th>stdev</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>p99.99</th><th>max</th></tr>",
    );
    for (name, l) in rows {
        let _ = write!(
            o,
            "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(name),
            fmt_ms(l.mean),
            fmt_ms(l.stdev),
            fmt_ms(l.p50),
            fmt_ms(l.p90),
            fmt_ms(l.p99),
            fmt_ms(l.p99_9),
            fmt_ms(l.p99_99),
            fmt_ms(l.max)
        );
    }
    o.push_str("</table>");
    o
}

const STYLE: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1240px;color:#111827;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:24px 0 8px}
.sub{color:#4b5563;margin-bottom:16px;word-break:break-all}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{border:1px solid #e5e7eb;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:22px}.card span{color:#6b7280;font-size:12px}
.ok{color:#16a34a}.bad{color:#dc2626}
table{border-collapse:collapse;margin:6px 0}td,th{padding:4px 10px;border-bottom:1px solid #e5e7eb;text-align:right}
th:first-child{text-align:left}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));gap:12px}
figure{margin:0;border:1px solid #e5e7eb;border-radius:8px;padding:4px}
svg{max-width:100%;height:auto;font-family:inherit}
svg .t{font-size:14px;font-weight:600;text-anchor:middle}svg .l{font-size:12px;fill:#374151;text-anchor:middle}
svg .xt{font-size:11px;fill:#4b5563;text-anchor:middle}svg .yt{font-size:11px;fill:#4b5563;text-anchor:end}
svg .lg{font-size:11px;fill:#374151}svg .g{stroke:#e5e7eb}svg .a{stroke:#9ca3af}
code{background:#f3f4f6;padding:1px 4px;border-radius:4px;word-break:break-all}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px}dt{color:#6b7280}dd{margin:0}
"#;

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>{}</title><style>{STYLE}</style></head><body>{body}</body></html>\n",
        esc(title)
    )
}

fn charts(r: &Report) -> String {
    let mut o = String::from("<div class=\"charts\">");
    // Latency distribution on a log axis.
    let dist_u: Vec<(f64, f64)> = r
        .distribution
        .iter()
        .map(|b| (b.le_ms.log10() - 1.0 / 16.0, b.count as f64))
        .collect();
    let dist_c: Vec<(f64, f64)> = r
        .distribution
        .iter()
        .map(|b| (b.le_ms.log10() - 1.0 / 16.0, b.corrected_count as f64))
        .collect();
    let decade_ticks = |lo: f64, hi: f64| -> Vec<(f64, String)> {
        (lo.floor() as i32..=hi.ceil() as i32)
            .map(|e| (e as f64, fmt_ms(10f64.powi(e))))
            .collect()
    };
    let (lo, hi) = dist_u
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.0), b.max(p.0))
        });
    let mut series = vec![Series {
        name: "uncorrected",
        color: BLUE,
        points: dist_u,
        bars: true,
        dots: false,
    }];
    if r.correction == "intended-send-time" {
        series.push(Series {
            name: "corrected",
            color: ORANGE,
            points: dist_c,
            bars: false,
            dots: false,
        });
    }
    o += &render_chart(
        &Chart {
            title: "Latency distribution",
            x_label: "latency (log scale)",
            y_label: "requests",
            x_ticks: if lo.is_finite() {
                decade_ticks(lo, hi)
            } else {
                Vec::new()
            },
            y_log: false,
            y_line: None,
            bar_width: 1.0 / 8.0,
        },
        &series,
    );
    // Percentile curve.
    let pts = |f: fn(&crate::report::PercentilePoint) -> f64| -> Vec<(f64, f64)> {
        r.percentiles
            .iter()
            .map(|p| (nines(p.percentile), f(p)))
            .collect()
    };
    let nine_ticks = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"]
        .iter()
        .enumerate()
        .map(|(i, l)| (i as f64, l.to_string()))
        .collect();
    o += &render_chart(
        &Chart {
            title: "Latency by percentile",
            x_label: "percentile",
            y_label: "latency (ms, log scale)",
            x_ticks: nine_ticks,
            y_log: true,
            y_line: None,
            bar_width: 0.0,
        },
        &[
            Series {
                name: "uncorrected",
                color: BLUE,
                points: pts(|p| p.ms),
                bars: false,
                dots: false,
            },
            Series {
                name: "corrected",
                color: ORANGE,
                points: pts(|p| p.corrected_ms),
                bars: false,
                dots: false,
            },
        ],
    );
    let secs = r.series.len().max(1) as f64;
    let time_ticks = |n: f64| -> Vec<(f64, String)> {
        let step = nice_step(n).max(1.0);
        let mut t = Vec::new();
        let mut v = 0.0;
        while v <= n {
            t.push((v, format!("{v}s")));
            v += step;
        }
        t
    };
    o += &render_chart(
        &Chart {
            title: "Requests per second",
            x_label: "time",
            y_label: "requests/s",
            x_ticks: time_ticks(secs),
            y_log: false,
            y_line: r
                .settings
                .rate
                .map(|rate| (rate, format!("target {}", fmt_si(rate)))),
            bar_width: 1.0,
        },
        &[
            Series {
                name: "responses",
                color: GREEN,
                points: r
                    .series
                    .iter()
                    .map(|s| (s.second as f64 + 0.5, s.requests as f64))
                    .collect(),
                bars: true,
                dots: false,
            },
            Series {
                name: "errors",
                color: RED,
                points: r
                    .series
                    .iter()
                    .map(|s| (s.second as f64 + 0.5, s.errors as f64))
                    .collect(),
                bars: true,
                dots: false,
            },
        ],
    );
    let mut lat_series = vec![
        Series {
            name: "p50",
            color: BLUE,
            points: r
                .series
                .iter()
                .map(|s| (s.second as f64 + 0.5, gap(s, s.p50_ms)))
                .collect(),
            bars: false,
            dots: false,
        },
        Series {
            name: "p99",
            color: GREY,
            points: r
                .series
                .iter()
                .map(|s| (s.second as f64 + 0.5, gap(s, s.p99_ms)))
                .collect(),
            bars: false,
            dots: false,
        },
    ];
    if r.series.iter().any(|s| s.corrected_p99_ms.is_some()) {
        lat_series.push(Series {
            name: "corrected p99",
            color: ORANGE,
            points: r
                .series
                .iter()
                .filter_map(|s| {
                    s.corrected_p99_ms
                        .map(|v| (s.second as f64 + 0.5, gap(s, v)))
                })
                .collect(),
            bars: false,
            dots: false,
        });
    }
    o += &render_chart(
        &Chart {
            title: "Latency over time",
            x_label: "time",
            y_label: "latency (ms, log scale)",
            x_ticks: time_ticks(secs),
            y_log: true,
            y_line: None,
            bar_width: 0.0,
        },
        &lat_series,
    );
    o.push_str("</div>");
    o
}

/// Seconds without responses have no latency: NaN breaks the line there.
fn gap(s: &crate::report::SecondPoint, v: f64) -> f64 {
    if s.requests == 0 {
        f64::NAN
    } else {
        v
    }
}

fn body(r: &Report) -> String {
    let st = &r.settings;
    let mut o = String::new();
    let model = match st.rate {
        Some(rate) => format!("open model at {} req/s", fmt_si(rate)),
        None => "closed model".into(),
    };
    let conn = if !st.keepalive {
        "one connection per request".to_string()
    } else if st.pipeline > 1 {
        format!("keep-alive, pipeline depth {}", st.pipeline)
    } else {
        "keep-alive".into()
    };
    let _ = write!(
        o,
        "<div class=\"sub\">{} &middot; {model} &middot; {} &middot; {} &middot; {conn}</div>",
        esc(&st.urls.join(", ")),
        crate::report::plural(st.connections as u64, "connection"),
        crate::report::plural(st.threads as u64, "thread")
    );
    let sc = &r.self_check;
    let _ = write!(
        o,
        "<div class=\"cards\"><div class=\"card\"><b>{}</b><span>requests/s</span></div><div class=\"card\"><b>{}</b><span>requests in {:.2} s</span></div><div class=\"card\"><b>{}</b><span>p99 (corrected {})</span></div><div class=\"card\"><b>{}B/s</b><span>read</span></div><div class=\"card\"><b class=\"{}\">{}</b><span>errors</span></div><div class=\"card\"><b class=\"{}\">{}</b><span>generator self-check</span></div></div>",
        fmt_si(r.requests_per_second),
        r.requests,
        r.duration_s,
        fmt_ms(r.latency_ms.p99),
        fmt_ms(r.corrected_latency_ms.p99),
        fmt_si(r.bytes_per_second),
        if r.errors.total == 0 { "ok" } else { "bad" },
        r.errors.total,
        if sc.valid { "ok" } else { "bad" },
        if sc.valid { "valid" } else { "INVALID" }
    );
    for reason in &sc.reasons {
        let _ = write!(o, "<p class=\"bad\">{}</p>", esc(reason));
    }
    for note in &sc.notes {
        let _ = write!(o, "<p>Note: {}</p>", esc(note));
    }
    o += "<h2>Latency</h2>";
    o += &latency_table(&[
        ("uncorrected", &r.latency_ms),
        ("corrected", &r.corrected_latency_ms),
    ]);
    let _ = write!(
        o,
        "<p>Corrected: {}.</p>",
        if r.correction == "intended-send-time" {
            "measured from each request's intended send time (coordinated omission corrected)"
        } else {
            "closed model, HdrHistogram's expected-interval correction at the mean latency"
        }
    );
    o += &charts(r);
    o += "<h2>Errors and connections</h2><table>";
    let e = &r.errors;
    for (k, v) in [
        ("connect", e.connect),
        ("timeout", e.timeout),
        ("reset", e.reset),
        ("bad response", e.bad_response),
        ("tls", e.tls),
        ("non-2xx", e.non_2xx),
    ] {
        let _ = write!(o, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    for (code, n) in &r.status {
        let _ = write!(o, "<tr><th>status {}</th><td>{n}</td></tr>", esc(code));
    }
    let _ = write!(
        o,
        "<tr><th>connects</th><td>{} ({}/s, connect p99 {})</td></tr>",
        r.connects.count,
        fmt_si(r.connects.per_second),
        fmt_ms(r.connects.time_ms.p99)
    );
    if let (Some(t), Some(rate)) = (r.connects.all_connected_s, r.connects.ramp_rate) {
        let _ = write!(
            o,
            "<tr><th>all connections open after</th><td>{t:.3} s ({}/s)</td></tr>",
            fmt_si(rate)
        );
    }
    o += "</table>";
    o += "<h2>Generator</h2><dl>";
    let _ = write!(
        o,
        "<dt>CPU</dt><dd>{:.3} s, {:.2} µs per request, busiest thread {:.0}%</dd>",
        sc.cpu_s, sc.cpu_us_per_request, sc.busiest_thread_percent
    );
    if let Some(l) = &sc.send_lag_ms {
        let _ = write!(
            o,
            "<dt>send lag</dt><dd>p50 {}, p99 {}, max {}</dd>",
            fmt_ms(l.p50),
            fmt_ms(l.p99),
            fmt_ms(l.max)
        );
    }
    let _ = write!(
        o,
        "<dt>command</dt><dd><code>{}</code></dd><dt>version</dt><dd>tessera {}</dd><dt>CPU</dt><dd>{} (cores available: {})</dd><dt>kernel</dt><dd>{}</dd><dt>open files limit</dt><dd>{} soft, {} hard</dd><dt>target</dt><dd>{}</dd>",
        esc(&r.args.join(" ")),
        esc(&r.tessera_version),
        esc(&r.system.cpu_model),
        r.system.cores,
        esc(&r.system.kernel),
        r.system.nofile_soft,
        r.system.nofile_hard,
        esc(&st.address)
    );
    o += "</dl>";
    o
}

/// The report of one run as a complete HTML page.
pub fn render(r: &Report) -> String {
    let mut b = String::from("<h1>tessera bench</h1>");
    b += &body(r);
    page("tessera bench report", &b)
}

/// A find-max search: the throughput-versus-latency curve, then the confirming run.
pub fn render_find_max(f: &FindMaxReport) -> String {
    let mut b = String::from("<h1>tessera bench &mdash; find-max</h1>");
    let slo: Vec<String> = f
        .slo
        .iter()
        .map(|s| format!("{} &lt; {} ms", esc(&s.metric), s.limit_ms))
        .collect();
    let _ = write!(
        b,
        "<div class=\"sub\">objective {} on corrected latency &middot; max rate {}</div>",
        slo.join(", "),
        f.max_rate
            .map(|r| format!(
                "{} req/s{}",
                fmt_si(r),
                if f.confirmed {
                    " (confirmed)"
                } else {
                    " (not confirmed)"
                }
            ))
            .unwrap_or_else(|| "none found".into())
    );
    let pass: Vec<(f64, f64)> = f
        .steps
        .iter()
        .filter(|s| s.passed)
        .map(|s| (s.achieved_rps, s.corrected_p99_ms))
        .collect();
    let fail: Vec<(f64, f64)> = f
        .steps
        .iter()
        .filter(|s| !s.passed)
        .map(|s| (s.achieved_rps, s.corrected_p99_ms))
        .collect();
    let xmax = f
        .steps
        .iter()
        .map(|s| s.achieved_rps.max(s.rate))
        .fold(0.0, f64::max);
    let step = nice_step(xmax.max(1.0));
    let mut ticks = Vec::new();
    let mut v = 0.0;
    while v <= xmax + step {
        ticks.push((v, fmt_si(v)));
        v += step;
    }
    let p99_limit = f
        .slo
        .iter()
        .find(|s| s.metric == "p99")
        .map(|s| (s.limit_ms, format!("p99 < {} ms", s.limit_ms)));
    b += "<div class=\"charts\">";
    b += &render_chart(
        &Chart {
            title: "Throughput vs corrected p99",
            x_label: "achieved requests/s",
            y_label: "corrected p99 (ms, log scale)",
            x_ticks: ticks,
            y_log: true,
            y_line: p99_limit,
            bar_width: 0.0,
        },
        &[
            Series {
                name: "pass",
                color: GREEN,
                points: pass,
                bars: false,
                dots: true,
            },
            Series {
                name: "fail",
                color: RED,
                points: fail,
                bars: false,
                dots: true,
            },
        ],
    );
    b += "</div><table><tr><th>rate</th><th>achieved</th><th>p99</th><th>corrected p99</th><th>result</th></tr>";
    for s in &f.steps {
        let _ =
            write!(
            b,
            "<tr><td>{:.0}</td><td>{:.0}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
            s.rate,
            s.achieved_rps,
            fmt_ms(s.latency_p99_ms),
            fmt_ms(s.corrected_p99_ms),
            if s.passed { "ok" } else { "bad" },
            if s.passed { "pass".to_string() } else { esc(&s.reason) }
        );
    }
    b += "</table>";
    if let Some(c) = &f.confirm {
        b += "<h2>Confirming run</h2>";
        b += &body(c);
    }
    page("tessera bench find-max report", &b)
}
