//! Renders a [`Report`] as plain text (the default output of `tessera logs report`) or as
//! one self-contained HTML page with tables and inline SVG charts: no scripts, no fonts,
//! no network, so the file can be mailed or opened from a laptop offline.

use std::fmt::Write;

use crate::Report;

/// `1536` → `1.5 KiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "0.0%".to_string()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// A table in plain text: `align` has one `l` or `r` per column. The last column is
/// never padded, so long URLs do not leave trailing spaces.
fn text_table(out: &mut String, title: &str, align: &str, headers: &[&str], rows: &[Vec<String>]) {
    let _ = writeln!(out, "\n{title}");
    if rows.is_empty() {
        out.push_str("  (none)\n");
        return;
    }
    let align = align.as_bytes();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::from(" ");
        for (i, cell) in cells.enumerate() {
            let pad = widths[i] - cell.chars().count();
            text.push(' ');
            let last = i + 1 == widths.len();
            if align[i] == b'r' {
                text.push_str(&" ".repeat(pad));
                text.push_str(cell);
            } else {
                text.push_str(cell);
                if !last {
                    text.push_str(&" ".repeat(pad));
                }
            }
            if !last {
                text.push(' ');
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
}

/// The plain-text report.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    let r = report;
    let _ = writeln!(out, "Log report (format: {})\n", r.format);
    let _ = writeln!(
        out,
        "  lines     {} ({} hits, {} malformed)",
        r.lines, r.hits, r.malformed
    );
    let _ = writeln!(out, "  bytes     {} ({})", r.bytes, human_bytes(r.bytes));
    let _ = writeln!(out, "  visitors  {}", r.visitors);
    let _ = writeln!(out, "  urls      {}", r.unique_urls);
    let _ = writeln!(out, "  clients   {}", r.unique_clients);
    if !r.own_hosts.is_empty() {
        let _ = writeln!(out, "  own site  {}", r.own_hosts.join(" "));
    }
    let url_rows = |rows: &[crate::UrlRow]| -> Vec<Vec<String>> {
        rows.iter()
            .map(|u| vec![u.hits.to_string(), u.bytes.to_string(), u.url.clone()])
            .collect()
    };
    text_table(
        &mut out,
        "Top URLs by hits",
        "rrl",
        &["hits", "bytes", "url"],
        &url_rows(&r.top_urls_by_hits),
    );
    text_table(
        &mut out,
        "Top URLs by bytes",
        "rrl",
        &["hits", "bytes", "url"],
        &url_rows(&r.top_urls_by_bytes),
    );
    let key_rows = |rows: &[crate::KeyRow]| -> Vec<Vec<String>> {
        rows.iter()
            .map(|k| vec![k.hits.to_string(), k.key.clone()])
            .collect()
    };
    text_table(
        &mut out,
        "Top 404 URLs",
        "rl",
        &["hits", "url"],
        &key_rows(&r.top_not_found),
    );
    let clients: Vec<Vec<String>> = r
        .top_clients
        .iter()
        .map(|c| vec![c.hits.to_string(), c.bytes.to_string(), c.client.clone()])
        .collect();
    text_table(
        &mut out,
        "Top clients",
        "rrl",
        &["hits", "bytes", "client"],
        &clients,
    );
    text_table(
        &mut out,
        "Top referrers",
        "rl",
        &["hits", "referrer"],
        &key_rows(&r.top_referrers),
    );
    let statuses: Vec<Vec<String>> = r
        .statuses
        .iter()
        .map(|s| {
            vec![
                s.status.to_string(),
                s.hits.to_string(),
                percent(s.hits, r.hits),
            ]
        })
        .collect();
    text_table(
        &mut out,
        "Status codes",
        "rrr",
        &["status", "hits", "share"],
        &statuses,
    );
    let max = r.hours.iter().map(|h| h.hits).max().unwrap_or(0);
    let hours: Vec<Vec<String>> = r
        .hours
        .iter()
        .map(|h| {
            let bar = if max == 0 {
                0
            } else {
                (h.hits * 40).div_ceil(max) as usize
            };
            vec![
                h.hour.clone(),
                h.hits.to_string(),
                h.bytes.to_string(),
                "#".repeat(bar),
            ]
        })
        .collect();
    text_table(
        &mut out,
        "Hits per hour",
        "lrrl",
        &["hour", "hits", "bytes", ""],
        &hours,
    );
    text_table(
        &mut out,
        "User agents",
        "rl",
        &["hits", "user agent"],
        &key_rows(&r.top_user_agents),
    );
    for (title, align, headers, rows) in section_tables(r) {
        text_table(&mut out, title, align, headers, &rows);
    }
    out
}

/// A table of the report: title, alignment per column (`l`, `r`), headers, rows.
type Table = (
    &'static str,
    &'static str,
    &'static [&'static str],
    Vec<Vec<String>>,
);

/// The tables of the sections the log has fields for (none for a plain combined log).
fn section_tables(r: &Report) -> Vec<Table> {
    let s = &r.sections;
    let ms = |us: u64| format!("{:.1}", us as f64 / 1000.0);
    let mut tables = Vec::new();
    if !s.hosts.is_empty() {
        let rows = s.hosts.iter().map(|h| {
            let (c, e) = (h.client_errors, h.server_errors);
            vec![
                h.hits.to_string(),
                h.bytes.to_string(),
                c.to_string(),
                e.to_string(),
                h.host.clone(),
            ]
        });
        tables.push((
            "By host",
            "rrrrl",
            &["hits", "bytes", "4xx", "5xx", "host"][..],
            rows.collect(),
        ));
    }
    if !s.slowest_routes.is_empty() {
        let rows = s.slowest_routes.iter().map(|l| {
            vec![
                l.hits.to_string(),
                ms(l.p50_us),
                ms(l.p95_us),
                ms(l.p99_us),
                ms(l.max_us),
                l.route.clone(),
            ]
        });
        let headers = &["hits", "p50 ms", "p95 ms", "p99 ms", "max ms", "route"][..];
        tables.push((
            "Slowest routes (by 95th percentile)",
            "rrrrrl",
            headers,
            rows.collect(),
        ));
    }
    if !s.upstream_peers.is_empty() {
        let opt = |v: Option<u64>| v.map_or("-".to_string(), ms);
        let rows = s.upstream_peers.iter().map(|p| {
            vec![
                p.attempts.to_string(),
                p.status_2xx.to_string(),
                p.status_4xx.to_string(),
                p.status_5xx.to_string(),
                p.no_status.to_string(),
                opt(p.p50_us),
                opt(p.p95_us),
                opt(p.p99_us),
                p.peer.clone(),
            ]
        });
        let headers = &[
            "attempts", "2xx", "4xx", "5xx", "none", "p50 ms", "p95 ms", "p99 ms", "peer",
        ][..];
        tables.push(("Upstream peers", "rrrrrrrrl", headers, rows.collect()));
    }
    if !s.cache_by_route.is_empty() {
        let rows = s.cache_by_route.iter().map(|c| {
            let results: Vec<String> = c
                .results
                .iter()
                .map(|k| format!("{} {}", k.key, k.hits))
                .collect();
            vec![
                c.total.to_string(),
                percent(c.served_from_cache, c.total),
                results.join(", "),
                c.route.clone(),
            ]
        });
        let headers = &["requests", "from cache", "results", "route"][..];
        tables.push(("Cache by route", "rrll", headers, rows.collect()));
    }
    if !s.failing_esi_fragments.is_empty() {
        let rows = s
            .failing_esi_fragments
            .iter()
            .map(|f| vec![f.failures.to_string(), f.fragment.clone()]);
        let headers = &["failures", "fragment"][..];
        tables.push(("Failing ESI fragments", "rl", headers, rows.collect()));
    }
    tables
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn html_table(out: &mut String, title: &str, headers: &[&str], rows: &[Vec<String>]) {
    let _ = writeln!(out, "<section><h2>{}</h2>", escape(title));
    if rows.is_empty() {
        out.push_str("<p class=none>none</p></section>\n");
        return;
    }
    out.push_str("<table><thead><tr>");
    for (i, h) in headers.iter().enumerate() {
        let class = if i + 1 == headers.len() {
            ""
        } else {
            " class=n"
        };
        let _ = write!(out, "<th{class}>{}</th>", escape(h));
    }
    out.push_str("</tr></thead><tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = if i + 1 == row.len() {
                " class=k"
            } else {
                " class=n"
            };
            let _ = write!(out, "<td{class}>{}</td>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></section>\n");
}

/// Horizontal bars, one per (label, value), as inline SVG.
fn bar_chart(out: &mut String, title: &str, bars: &[(String, u64)]) {
    if bars.is_empty() {
        return;
    }
    let max = bars.iter().map(|b| b.1).max().unwrap_or(1).max(1);
    let row = 22;
    let label_width = 360.0;
    let plot = 520.0;
    let height = bars.len() * row + 10;
    let _ = writeln!(
        out,
        r#"<figure><figcaption>{}</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="960" height="{height}" viewBox="0 0 960 {height}" role="img">"#,
        escape(title)
    );
    for (i, (label, value)) in bars.iter().enumerate() {
        let y = i * row + 4;
        let width = (*value as f64 / max as f64 * plot).max(1.0);
        let short: String = if label.chars().count() > 48 {
            label.chars().take(47).chain(std::iter::once('…')).collect()
        } else {
            label.clone()
        };
        let _ = writeln!(
            out,
            r#"<text x="{x}" y="{ty}" text-anchor="end">{}</text><rect x="{rx}" y="{y}" width="{width:.1}" height="16" rx="2"><title>{}: {value}</title></rect><text x="{vx:.1}" y="{ty}">{value}</text>"#,
            escape(&short),
            escape(label),
            x = label_width - 8.0,
            ty = y + 13,
            rx = label_width,
            vx = label_width + width + 6.0,
        );
    }
    out.push_str("</svg></figure>\n");
}

/// Vertical bars of hits per hour, as inline SVG.
fn hour_chart(out: &mut String, report: &Report) {
    let hours = &report.hours;
    if hours.is_empty() {
        return;
    }
    let max = hours.iter().map(|h| h.hits).max().unwrap_or(1).max(1);
    let (width, height, left, bottom) = (960.0, 260.0, 60.0, 40.0);
    let plot_w = width - left - 10.0;
    let plot_h = height - bottom - 10.0;
    let step = plot_w / hours.len() as f64;
    let _ = writeln!(
        out,
        r#"<figure><figcaption>Hits per hour</figcaption><svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">"#
    );
    let _ = writeln!(
        out,
        r#"<line x1="{left}" y1="10" x2="{left}" y2="{base}" class=axis /><line x1="{left}" y1="{base}" x2="{right}" y2="{base}" class=axis /><text x="{lx}" y="18" text-anchor="end">{max}</text><text x="{lx}" y="{base}" text-anchor="end">0</text>"#,
        base = 10.0 + plot_h,
        right = width - 10.0,
        lx = left - 6.0,
    );
    for (i, h) in hours.iter().enumerate() {
        let bar_h = h.hits as f64 / max as f64 * plot_h;
        let x = left + i as f64 * step;
        let _ = writeln!(
            out,
            r#"<rect x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{bar_h:.2}"><title>{}: {} hits</title></rect>"#,
            escape(&h.hour),
            h.hits,
            y = 10.0 + plot_h - bar_h,
            w = (step * 0.85).max(0.5),
        );
    }
    // Labels about 120 px apart, none running off the right edge.
    let label_every = ((120.0 / step).ceil() as usize).max(1);
    for (i, h) in hours.iter().enumerate().step_by(label_every) {
        let x = left + i as f64 * step;
        if x > width - 110.0 && i > 0 {
            break;
        }
        let _ = writeln!(
            out,
            r#"<text x="{x:.1}" y="{y}">{}</text>"#,
            escape(&h.hour),
            y = height - bottom + 26.0,
        );
    }
    out.push_str("</svg></figure>\n");
}

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1000px;color:#222;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.15em;margin:1.6em 0 .4em;border-bottom:1px solid #ddd}
.fmt{color:#666;font-family:monospace;font-size:12px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:1em 0}
.card{background:#f4f6f8;border-radius:6px;padding:10px 16px;min-width:120px}
.card b{display:block;font-size:1.5em}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
th.n,td.n{text-align:right;white-space:nowrap;width:1%}td.k{word-break:break-all}
figure{margin:1em 0}figcaption{font-weight:600;margin-bottom:4px}
svg{max-width:100%;height:auto;font-size:11px}svg rect{fill:#3b7dd8}svg text{fill:#333}
.axis{stroke:#999}.none{color:#888}
"#;

/// The HTML report: one page, no external resources.
pub fn html(report: &Report) -> String {
    let r = report;
    let mut out = String::with_capacity(64 << 10);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\"><title>tessera logs report</title><style>{STYLE}</style></head><body>\n<h1>Access log report</h1><p class=fmt>format: {}</p>\n<div class=cards>",
        escape(&r.format)
    );
    let cards = [
        ("hits", r.hits.to_string()),
        ("bytes", human_bytes(r.bytes)),
        ("visitors", r.visitors.to_string()),
        ("unique URLs", r.unique_urls.to_string()),
        ("clients", r.unique_clients.to_string()),
        ("malformed lines", r.malformed.to_string()),
    ];
    let own = if r.own_hosts.is_empty() {
        "-".to_string()
    } else {
        r.own_hosts.join(" ")
    };
    for (label, value) in cards {
        let _ = write!(
            out,
            "<div class=card>{label}<b>{}</b></div>",
            escape(&value)
        );
    }
    out.push_str("</div>\n");
    let _ = writeln!(
        out,
        "<p class=fmt>own site (not counted as referrers): {}</p>",
        escape(&own)
    );
    hour_chart(&mut out, r);
    let status_bars: Vec<(String, u64)> = r
        .statuses
        .iter()
        .map(|s| (s.status.to_string(), s.hits))
        .collect();
    bar_chart(&mut out, "Status codes", &status_bars);
    let url_bars: Vec<(String, u64)> = r
        .top_urls_by_hits
        .iter()
        .map(|u| (u.url.clone(), u.hits))
        .collect();
    bar_chart(&mut out, "Top URLs by hits", &url_bars);
    let url_rows = |rows: &[crate::UrlRow]| -> Vec<Vec<String>> {
        rows.iter()
            .map(|u| vec![u.hits.to_string(), human_bytes(u.bytes), u.url.clone()])
            .collect()
    };
    let key_rows = |rows: &[crate::KeyRow]| -> Vec<Vec<String>> {
        rows.iter()
            .map(|k| vec![k.hits.to_string(), k.key.clone()])
            .collect()
    };
    html_table(
        &mut out,
        "Top URLs by hits",
        &["hits", "bytes", "URL"],
        &url_rows(&r.top_urls_by_hits),
    );
    html_table(
        &mut out,
        "Top URLs by bytes",
        &["hits", "bytes", "URL"],
        &url_rows(&r.top_urls_by_bytes),
    );
    html_table(
        &mut out,
        "Top 404 URLs",
        &["hits", "URL"],
        &key_rows(&r.top_not_found),
    );
    let clients: Vec<Vec<String>> = r
        .top_clients
        .iter()
        .map(|c| vec![c.hits.to_string(), human_bytes(c.bytes), c.client.clone()])
        .collect();
    html_table(
        &mut out,
        "Top clients",
        &["hits", "bytes", "client"],
        &clients,
    );
    html_table(
        &mut out,
        "Top referrers",
        &["hits", "referrer"],
        &key_rows(&r.top_referrers),
    );
    let statuses: Vec<Vec<String>> = r
        .statuses
        .iter()
        .map(|s| {
            vec![
                s.hits.to_string(),
                percent(s.hits, r.hits),
                s.status.to_string(),
            ]
        })
        .collect();
    html_table(
        &mut out,
        "Status codes",
        &["hits", "share", "status"],
        &statuses,
    );
    html_table(
        &mut out,
        "User agents",
        &["hits", "user agent"],
        &key_rows(&r.top_user_agents),
    );
    let hours: Vec<Vec<String>> = r
        .hours
        .iter()
        .map(|h| vec![h.hits.to_string(), human_bytes(h.bytes), h.hour.clone()])
        .collect();
    html_table(
        &mut out,
        "Hits per hour",
        &["hits", "bytes", "hour"],
        &hours,
    );
    for (title, _, headers, rows) in section_tables(r) {
        html_table(&mut out, title, headers, &rows);
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_picks_a_unit() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 30), "5.0 GiB");
    }

    #[test]
    fn escape_covers_markup() {
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
