//! The parallel result equals the single-threaded one, whatever the chunking, the
//! number of threads, or whether the input is mapped, gzip-streamed or in small blocks.

use logs::{Input, LogFormat, ReportQuery};

use crate::{gzip, many_chunks, synthetic, write_file};

#[test]
fn report_parallel_equals_single_threaded_on_random_logs() {
    let dir = tempfile::tempdir().unwrap();
    let query = ReportQuery::new(
        LogFormat::new("combined").unwrap(),
        &["www.tbray.org".into()],
    );
    for seed in 1..=4 {
        let log = synthetic(3_000 + seed * 500, seed, true);
        let single = query.analyse_block(&log).report(&query, usize::MAX);
        assert!(
            single.malformed > 0 && single.hits > 3_000,
            "the log should be tricky"
        );
        let path = write_file(&dir, &format!("{seed}.log"), &log);
        for (threads, min_chunk) in [(1, 1 << 20), (2, 1), (3, 997), (8, 4096)] {
            let mut opened = logs::open(&[Input::Path(path.clone())]).unwrap();
            let analysis = query
                .run(&mut opened, &many_chunks(threads, min_chunk), None)
                .unwrap();
            assert_eq!(
                analysis.report(&query, usize::MAX),
                single,
                "seed {seed}, {threads} threads, chunks of {min_chunk}"
            );
        }
    }
}

#[test]
fn gzip_and_plain_give_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    let log = synthetic(10_000, 5, true);
    let plain = write_file(&dir, "access.log", &log);
    let gz = write_file(&dir, "access.log.2.gz", &gzip(&log));
    let query = ReportQuery::new(LogFormat::new("combined").unwrap(), &[]);
    let report = |path: &std::path::Path| {
        let mut opened = logs::open(&[Input::Path(path.to_path_buf())]).unwrap();
        // Blocks of 4 KiB: many block boundaries, and some lines straddle them.
        let analysis = query.run(&mut opened, &many_chunks(2, 1), None).unwrap();
        analysis.report(&query, usize::MAX)
    };
    assert_eq!(report(&gz), report(&plain));
}

#[test]
fn progress_reports_every_mapped_byte() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let log = synthetic(5_000, 3, false);
    let path = write_file(&dir, "access.log", &log);
    let query = ReportQuery::new(LogFormat::new("combined").unwrap(), &[]);
    let seen = AtomicU64::new(0);
    let tick = |n: u64| {
        seen.fetch_add(n, Ordering::Relaxed);
    };
    let mut opened = logs::open(&[Input::Path(path)]).unwrap();
    assert_eq!(opened.mapped_bytes(), log.len() as u64);
    query
        .run(&mut opened, &many_chunks(3, 1000), Some(&tick))
        .unwrap();
    assert_eq!(seen.load(Ordering::Relaxed), log.len() as u64);
}

#[test]
fn split_lines_cuts_only_after_newlines() {
    let log = synthetic(500, 9, true);
    for target in [1, 7, 100, 4096, log.len() + 1] {
        let pieces = logs::split_lines(&log, target);
        assert_eq!(pieces.concat(), log, "target {target}");
        for piece in &pieces[..pieces.len() - 1] {
            assert_eq!(piece.last(), Some(&b'\n'), "target {target}");
        }
    }
}

#[test]
fn visitors_match_a_naive_distinct_count() {
    use std::collections::HashSet;
    let format = LogFormat::new("combined").unwrap();
    let query = ReportQuery::new(format.clone(), &[]);
    for seed in [21, 22] {
        let log = synthetic(6_000, seed, true);
        let mut naive = HashSet::new();
        for line in log.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(r) = format.parse_line(line) {
                naive.insert((r.client, r.user_agent, r.hour.map(|h| h.div_euclid(24))));
            }
        }
        let report = query.analyse_block(&log).report(&query, 1);
        assert_eq!(report.visitors, naive.len() as u64, "seed {seed}");
        // Some client must have shown more than eight (agent, day) pairs, so that the
        // spill from the short list into a set is exercised too.
        let mut pairs_per_client = std::collections::HashMap::<&[u8], usize>::new();
        for (client, _, _) in &naive {
            *pairs_per_client.entry(client).or_default() += 1;
        }
        assert!(pairs_per_client.values().any(|&n| n > 8), "seed {seed}");
    }
}

#[test]
fn a_line_longer_than_the_stream_block_is_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = synthetic(300, 4, false);
    let agent = "x".repeat(20_000);
    log.extend_from_slice(
        format!(
            "\n10.9.9.9 - - [21/Nov/2026:00:00:09 +0000] \"GET /long HTTP/1.1\" 200 5 \"-\" \"{agent}\"\n"
        )
        .as_bytes(),
    );
    log.extend_from_slice(&synthetic(300, 5, false));
    let gz = write_file(&dir, "long.log.gz", &gzip(&log));
    let query = ReportQuery::new(LogFormat::new("combined").unwrap(), &[]);
    let mut opened = logs::open(&[Input::Path(gz)]).unwrap();
    // Blocks of 4 KiB, a line of 20 KiB.
    let streamed = query.run(&mut opened, &many_chunks(2, 1), None).unwrap();
    let single = query.analyse_block(&log);
    assert_eq!(
        streamed.report(&query, usize::MAX),
        single.report(&query, usize::MAX)
    );
    let report = single.report(&query, usize::MAX);
    assert!(report.top_user_agents.iter().any(|a| a.key == agent));
    assert_eq!(report.malformed, 0);
}
