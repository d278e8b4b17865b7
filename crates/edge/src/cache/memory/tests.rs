//! Unit tests of the cache's keys, variants, records and purge log.

use std::time::SystemTime;

use super::*;
use handler::FieldList;
use http::StatusCode;

fn entry(body: &str, cache_control: &str, vary: Option<&str>, now: u64) -> Arc<Entry> {
    let mut h = FieldList::new();
    h.insert(b"cache-control", cache_control.as_bytes());
    if let Some(v) = vary {
        h.insert(b"vary", v.as_bytes());
    }
    let rules = Rules {
        device_token: "tessera",
        default_stale_while_revalidate: Duration::ZERO,
        default_stale_if_error: Duration::ZERO,
        store_set_cookie: false,
        route: None,
    };
    let f =
        crate::cache::freshness::decide(StatusCode::OK, &h, &rules, None, false, SystemTime::now());
    assert!(f.store);
    Arc::new(Entry::new(
        StatusCode::OK,
        h,
        Bytes::from(body.to_string()),
        None,
        Some(&f),
        now,
    ))
}

fn fields(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<HeaderValue> {
    move |n| {
        pairs
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| HeaderValue::from_static(v))
    }
}

#[test]
fn vary_table() {
    let cache = Cache::new(&CacheConfig::default()).unwrap();
    let now = now_ms();
    let k = key("shop.example", "/greeting");
    let en = fields(&[("accept-language", "en"), ("user-agent", "a")]);
    cache.insert(
        &k,
        &en,
        entry("hello", "max-age=60", Some("Accept-Language"), now),
        now,
    );
    // (request fields, expected body)
    type Row = (
        &'static [(&'static str, &'static str)],
        Option<&'static str>,
    );
    let table: &[Row] = &[
        (&[("accept-language", "en")], Some("hello")),
        (
            &[("accept-language", "en"), ("user-agent", "b")],
            Some("hello"),
        ),
        (&[("accept-language", "fr")], None),
        (&[], None),
    ];
    for (req, want) in table {
        let got = cache.lookup(&k, &fields(req), now);
        assert_eq!(
            got.as_ref().map(|e| &e.body[..]),
            want.map(str::as_bytes),
            "{req:?}"
        );
    }
    let fr = fields(&[("accept-language", "fr")]);
    cache.insert(
        &k,
        &fr,
        entry("bonjour", "max-age=60", Some("accept-language"), now),
        now,
    );
    assert_eq!(&cache.lookup(&k, &fr, now).unwrap().body[..], b"bonjour");
    assert_eq!(&cache.lookup(&k, &en, now).unwrap().body[..], b"hello");
    // Purging the URL removes every variant.
    assert_eq!(cache.purge(&k), 2, "two variants");
    assert!(cache.lookup(&k, &en, now).is_none());
    assert!(cache.lookup(&k, &fr, now).is_none());
    assert_eq!(cache.purge(&k), 0);
}

#[test]
fn ages_and_windows() {
    let now = now_ms();
    let e = entry(
        "x",
        "max-age=10, stale-while-revalidate=5, stale-if-error=60",
        None,
        now,
    );
    assert!(e.is_fresh(now + 9_999));
    assert!(!e.is_fresh(now + 10_000));
    assert!(e.may_revalidate_stale(now + 14_999));
    assert!(!e.may_revalidate_stale(now + 15_000));
    assert!(e.may_serve_on_error(now + 69_999));
    assert!(e.useless(now + 70_000));
    assert_eq!(e.age_secs(now + 3_500), 3);
}

#[test]
fn memory_stays_within_budget_under_unique_keys() {
    let config = CacheConfig {
        max_size: 1 << 20,
        max_object_size: 64 << 10,
        ..CacheConfig::default()
    };
    let cache = Cache::new(&config).unwrap();
    let now = now_ms();
    let body = "x".repeat(3000);
    let none = fields(&[]);
    for i in 0..20_000 {
        cache.insert(
            &key("a", &format!("/u/{i}")),
            &none,
            entry(&body, "max-age=60", None, now),
            now,
        );
        if i % 1000 == 0 {
            let s = cache.stats();
            assert!(s.weight <= s.capacity, "{s:?}");
        }
    }
    let s = cache.stats();
    assert!(s.weight <= 1 << 20 && s.weight > (1 << 20) / 2, "{s:?}");
    // A hot key read between scans survives them.
    let hot = key("a", "/hot");
    cache.insert(&hot, &none, entry(&body, "max-age=60", None, now), now);
    for i in 0..20_000 {
        assert!(
            cache.lookup(&hot, &none, now).is_some(),
            "hot key evicted at {i}"
        );
        cache.insert(
            &key("b", &format!("/scan/{i}")),
            &none,
            entry(&body, "max-age=60", None, now),
            now,
        );
    }
}

#[test]
fn shared_tier_encoding_round_trips() {
    let now = now_ms();
    let e = entry("body", "max-age=60, stale-if-error=30", None, now);
    let d = Entry::decode(Bytes::from(e.encode()), 1 << 20, now).unwrap();
    assert_eq!(&d.body[..], b"body");
    assert_eq!(d.headers, e.headers);
    assert_eq!(
        (d.born_ms, d.fresh_ms, d.sie_ms),
        (e.born_ms, e.fresh_ms, e.sie_ms)
    );
    let mut c = esi::Compiler::new(&esi::Options::default());
    let src = Bytes::from_static(b"<p><esi:include src=\"/f\"/></p>");
    c.feed(src.clone());
    let t = Entry::new(
        StatusCode::OK,
        FieldList::new(),
        Bytes::new(),
        Some((c.finish(), vec![src])),
        None,
        now,
    );
    let d = Entry::decode(Bytes::from(t.encode()), 1 << 20, now).unwrap();
    let ev = d
        .template
        .unwrap()
        .evaluate(&esi::Request::new("http://x/"));
    assert_eq!(ev.includes()[0].src, "http://x/f");
    assert!(Entry::decode(Bytes::from_static(b"TSC1\x01"), 1 << 20, now).is_none());
}

#[test]
fn purge_log_remembers_recent_purges_and_bans_within_bounds() {
    let mut log = PurgeLog::default();
    log.record(Purged::Key("h/a".into()), 100);
    log.record(Purged::Prefix("h/news/".into()), 200);
    assert_eq!(log.purged_at("h/a"), Some(100));
    assert_eq!(log.purged_at("h/ab"), None, "a purge is exact");
    assert_eq!(log.purged_at("h/news/today"), Some(200));
    log.record(Purged::Key("h/news/today".into()), 300);
    assert_eq!(log.purged_at("h/news/today"), Some(300));
    log.record(Purged::Key("h/a".into()), 400);
    // Bounded: the oldest are forgotten, but a later purge of a key keeps its time.
    for i in 0..PURGE_LOG_LEN - 2 {
        log.record(Purged::Key(format!("h/other/{i}")), 500);
    }
    assert_eq!(log.order.len(), PURGE_LOG_LEN);
    assert_eq!(
        log.purged_at("h/news/today"),
        Some(300),
        "the ban is forgotten"
    );
    assert_eq!(log.purged_at("h/a"), Some(400));
    assert_eq!(log.keys.len() + log.prefixes.len(), PURGE_LOG_LEN);
    // Expired: no record made before them can still be in Redis.
    log.record(
        Purged::Key("h/late".into()),
        501 + PurgeLog::longest_record_ms(),
    );
    assert_eq!(log.order.len(), 1);
    assert_eq!(log.purged_at("h/a"), None);
}

#[test]
fn huge_lifetimes_are_capped_not_overflowed() {
    let now = now_ms();
    let e = entry(
        "x",
        "max-age=18446744073709551615, stale-while-revalidate=18446744073709551615, stale-if-error=18446744073709551615",
        None,
        now,
    );
    let year = MAX_LIFETIME.as_millis() as u64;
    assert_eq!((e.fresh_ms, e.swr_ms, e.sie_ms), (year, year, year));
    assert!(e.is_fresh(now) && e.storable() && !e.useless(now + year));
    assert!(e.useless(now + 3 * year));
    assert_eq!(e.fresh_until(), now + year);
    assert!(e.remaining_secs(now) <= 2 * year / 1000 + 1);
    // An entry (as from a hostile record) with times at the limit of u64.
    let mut e = Entry::new(
        StatusCode::OK,
        FieldList::new(),
        Bytes::new(),
        None,
        None,
        0,
    );
    (e.born_ms, e.fresh_ms, e.swr_ms, e.sie_ms) = (u64::MAX, u64::MAX, u64::MAX, u64::MAX);
    assert!(e.storable() && e.is_fresh(u64::MAX) && !e.useless(u64::MAX));
    assert_eq!(e.fresh_until(), u64::MAX);
    assert!(e.remaining_secs(0) > 0);
}

#[test]
fn decode_refuses_records_the_store_would_not_make() {
    let now = now_ms();
    let good = entry("body", "max-age=60", None, now);
    let record = |status: u16, times: [u64; 4], header: (&str, &str), body: &[u8]| {
        let mut e = Entry::new(
            StatusCode::from_u16(status).unwrap(),
            FieldList::new(),
            Bytes::copy_from_slice(body),
            None,
            None,
            0,
        );
        e.headers.insert(header.0.as_bytes(), header.1.as_bytes());
        (e.born_ms, e.fresh_ms, e.swr_ms, e.sie_ms) = (times[0], times[1], times[2], times[3]);
        Bytes::from(e.encode())
    };
    let ok = [now, 60_000, 0, 0];
    let decode = |b: Bytes| Entry::decode(b, 1024, now);
    assert!(decode(record(200, ok, ("content-type", "text/plain"), b"x")).is_some());
    assert!(decode(Bytes::from(good.encode())).is_some());
    // Statuses the store never keeps.
    for status in [206, 304, 500, 503, 100] {
        assert!(
            decode(record(status, ok, ("content-type", "t"), b"x")).is_none(),
            "{status}"
        );
    }
    // Times: beyond the lifetime cap, or born in the future.
    let year = MAX_LIFETIME.as_millis() as u64;
    for times in [
        [now, year + 1, 0, 0],
        [now, 1000, u64::MAX, 0],
        [now, 1000, 0, u64::MAX],
        [now + 3_600_000, 1000, 0, 0],
        [u64::MAX, 1000, 0, 0],
    ] {
        assert!(
            decode(record(200, times, ("content-type", "t"), b"x")).is_none(),
            "{times:?}"
        );
    }
    // Kept for revalidation: with a validator only.
    let kept = |header: (&str, &str)| {
        let mut e = Entry::new(
            StatusCode::OK,
            FieldList::new(),
            Bytes::new(),
            None,
            None,
            0,
        );
        e.headers.insert(header.0.as_bytes(), header.1.as_bytes());
        (e.born_ms, e.fresh_ms, e.keep_ms) = (now, 1000, 60_000);
        Bytes::from(e.encode())
    };
    let back = decode(kept(("etag", "\"a\""))).unwrap();
    assert_eq!(back.keep_ms, 60_000);
    assert!(!back.useless(now + 30_000) && back.may_revalidate(now + 30_000));
    assert!(back.useless(now + 61_000));
    assert!(decode(kept(("content-type", "t"))).is_none());
    // Hop-by-hop fields.
    assert!(decode(record(200, ok, ("transfer-encoding", "chunked"), b"x")).is_none());
    assert!(decode(record(200, ok, ("connection", "close"), b"x")).is_none());
    // A body above max_object_size, and trailing garbage.
    assert!(decode(record(200, ok, ("content-type", "t"), &[b'x'; 2048])).is_none());
    let mut trailing = record(200, ok, ("content-type", "t"), b"x").to_vec();
    trailing.push(0);
    assert!(decode(Bytes::from(trailing)).is_none());
}

/// A cache of 1 MiB in four shards (objects up to 64 KiB) holding one small object.
fn one_object() -> (Arc<Cache>, Arc<Entry>) {
    let config = CacheConfig {
        max_size: 1 << 20,
        max_object_size: 64 << 10,
        ..CacheConfig::default()
    };
    let cache = Cache::new(&config).unwrap();
    let now = now_ms();
    let object = entry(&"t".repeat(2000), "max-age=60", None, now);
    cache.insert(&key("a", "/page"), &fields(&[]), object.clone(), now);
    (cache, object)
}

#[test]
fn forms_added_at_once_by_several_workers_are_all_weighed() {
    let (cache, object) = one_object();
    let base = cache.stats().weight;
    let rounds = 1000u64;
    // Each round both add a form and reweigh at the same moment; after it, the weight
    // holds both.
    let barrier = std::sync::Barrier::new(4);
    let lost = AtomicU64::new(0);
    std::thread::scope(|s| {
        for size in [3u64, 5, 7, 11] {
            let (cache, object, barrier, lost) = (&cache, &object, &barrier, &lost);
            s.spawn(move || {
                for round in 1..=rounds {
                    barrier.wait();
                    object.forms.fetch_add(size, Ordering::AcqRel);
                    cache.reweigh(object);
                    barrier.wait();
                    let weight = cache.stats().weight;
                    if size == 3 && weight != base + round * 26 {
                        // Not asserted here: the others would wait for this thread.
                        lost.fetch_max(round, Ordering::Relaxed);
                    }
                    barrier.wait();
                }
            });
        }
    });
    assert_eq!(lost.into_inner(), 0, "a round whose growth was not weighed");
    assert_eq!(cache.stats().weight, base + rounds * 26);
}

#[test]
fn a_reweighing_of_a_key_gone_leaves_it_gone() {
    let (cache, object) = one_object();
    assert_eq!(cache.purge(&key("a", "/page")), 1);
    object.forms.fetch_add(100, Ordering::AcqRel);
    cache.reweigh(&object);
    assert_eq!(cache.stats().weight, 0);
    assert!(cache
        .lookup(&key("a", "/page"), &fields(&[]), now_ms())
        .is_none());
}

#[test]
fn a_form_that_would_weigh_its_object_past_its_shard_is_not_kept() {
    use compress::{Accepted, CompressionConfig};
    let (cache, object) = one_object();
    // A memoized page of 200 KB that does not compress, counted in its small template:
    // its shard holds 248 KiB, so one form fits and a second would not.
    let mut noise = 0x2545_f491_4f6c_dd1du64;
    let page: Vec<u8> = (0..200_000)
        .map(|_| {
            noise ^= noise << 13;
            noise ^= noise >> 7;
            noise ^= noise << 17;
            noise as u8
        })
        .collect();
    let page = [Bytes::from(page)];
    let variants = crate::cache::variants::Variants::counted_in(object.forms.clone());
    let policy = CompressionConfig::default().build().unwrap().unwrap();
    let lines = Bytes::from_static(b"Content-Type: text/html\r\n");
    let mut head = handler::ResponseHead::new(200);
    head.set_encoded(lines.clone(), false);
    for coding in ["gzip", "br", "zstd"] {
        let identity = crate::cache::variants::Identity {
            head: &head,
            lines: &lines,
            date: false,
            chunks: &page,
        };
        let room = cache.form_room(&object);
        let answer = variants.respond(
            &policy,
            Accepted::parse(Some(coding.as_bytes())),
            identity,
            room,
            || cache.reweigh(&object),
        );
        assert!(answer.is_some(), "{coding}: served");
        assert!(
            cache
                .lookup(&key("a", "/page"), &fields(&[]), now_ms())
                .is_some(),
            "{coding}: the object evicted by its own form"
        );
    }
    let kept = object.forms.load(Ordering::Acquire);
    assert!(
        kept > 200_000 && kept < 2 * 200_000,
        "one form kept: {kept}"
    );
    let s = cache.stats();
    assert!(s.weight <= s.capacity / 4, "{s:?}");
}

/// An object with `fields` (a lifetime of 60 s and a grace of 60 s).
fn tagged(body: &str, fields: &[(&str, &str)], now: u64) -> Arc<Entry> {
    let mut h = FieldList::new();
    h.insert(b"cache-control", b"max-age=60, stale-while-revalidate=60");
    for (n, v) in fields {
        h.append(n.as_bytes(), v.as_bytes());
    }
    let rules = Cache::new(&CacheConfig::default())
        .unwrap()
        .rules("tessera");
    let f =
        crate::cache::freshness::decide(StatusCode::OK, &h, &rules, None, false, SystemTime::now());
    Arc::new(Entry::new(
        StatusCode::OK,
        h,
        Bytes::from(body.to_string()),
        None,
        Some(&f),
        now,
    ))
}

#[test]
fn surrogate_keys_from_each_field_once() {
    let e = tagged(
        "x",
        &[
            ("Surrogate-Key", "a  b"),
            ("cache-tag", "b,c, d"),
            ("xkey", "e"),
            ("xkey", "a"),
        ],
        now_ms(),
    );
    let keys: Vec<&str> = e.keys.iter().map(|k| &**k).collect();
    assert_eq!(keys, ["a", "b", "c", "d", "e"]);
    // Kept with the object, not sent downstream unless exposed.
    assert!(e.headers.contains(b"cache-tag"));
    assert!(!e.response_headers("tessera").contains(b"cache-tag"));
    let mut exposed = Entry::decode(Bytes::from(e.encode()), 1 << 20, now_ms()).unwrap();
    assert!(!exposed.expose_keys);
    exposed.expose_keys = true;
    let back = Entry::decode(Bytes::from(exposed.encode()), 1 << 20, now_ms()).unwrap();
    assert!(back.expose_keys && back.keys == e.keys);
    assert_eq!(
        back.response_headers("tessera").get(b"cache-tag"),
        Some(&b"b,c, d"[..])
    );
}

#[test]
fn purge_by_key_removes_and_soft_purge_marks_stale() {
    let cache = Cache::new(&CacheConfig::default()).unwrap();
    let now = now_ms();
    let none = fields(&[]);
    for (path, keys) in [("/a", "x y"), ("/b", "y"), ("/c", "z")] {
        let e = tagged(path, &[("surrogate-key", keys)], now);
        cache.insert(&key("h", path), &none, e, now);
    }
    let generation = cache.generation();
    assert_eq!(cache.purge_keys(&["x", "nothing"], false), 1);
    assert!(
        cache.generation() > generation,
        "memoized pages are checked again"
    );
    assert!(cache.lookup(&key("h", "/a"), &none, now).is_none());
    assert!(cache.lookup(&key("h", "/b"), &none, now).is_some());
    // Soft: still there, no longer fresh, within its grace.
    assert_eq!(cache.purge_keys(&["y", "z"], true), 2);
    let later = now_ms();
    for path in ["/b", "/c"] {
        let e = cache.lookup(&key("h", path), &none, later).unwrap();
        assert!(
            !e.is_fresh(later) && e.may_revalidate_stale(later),
            "{path}"
        );
        assert_eq!(&e.body[..], path.as_bytes());
    }
    // A URL's soft purge; nothing to mark: 0.
    let e = tagged("/d", &[], now);
    cache.insert(&key("h", "/d"), &none, e, now);
    assert_eq!(cache.soft_purge(&key("h", "/d")), 1);
    let e = cache.lookup(&key("h", "/d"), &none, now_ms()).unwrap();
    assert!(!e.is_fresh(now_ms()) && e.may_revalidate_stale(now_ms()));
    assert_eq!(cache.soft_purge(&key("h", "/none")), 0);
    assert_eq!(cache.purge_keys(&["absent"], false), 0);
}

#[test]
fn purge_log_refuses_records_made_before_a_key_purge() {
    let mut log = PurgeLog::default();
    log.record(Purged::Tag("k".into()), 100);
    let keys: Box<[Box<str>]> = vec!["j".into(), "k".into()].into();
    assert_eq!(log.tag_purged_at(&keys), Some(100));
    assert_eq!(log.tag_purged_at(&keys[..1]), None);
}

#[test]
fn another_process_invalidations_and_a_dropped_memory_tier() {
    use crate::cache::fanout::{Invalidated, Invalidation};
    let cache = Cache::new(&CacheConfig::default()).unwrap();
    let none = |_: &str| None;
    let now = now_ms();
    for path in ["/a", "/b", "/news/1"] {
        cache.insert(
            &key("h", path),
            &none,
            entry(path, "max-age=60", None, now),
            now,
        );
    }
    cache.clone().apply_remote(&Invalidation::Purge {
        key: key("h", "/a"),
        soft: false,
    });
    cache.clone().apply_remote(&Invalidation::Ban {
        prefix: key("h", "/news/"),
    });
    assert!(cache.lookup(&key("h", "/a"), &none, now).is_none());
    assert!(cache.lookup(&key("h", "/news/1"), &none, now).is_none());
    assert!(cache.lookup(&key("h", "/b"), &none, now).is_some());
    assert!(!cache.memory_empty());
    // What was missed is unknown: everything goes, and every record made before now is
    // refused.
    cache.drop_memory("a test");
    assert!(cache.memory_empty());
    let floor = cache
        .purges
        .lock()
        .unwrap()
        .purged_at(&key("x", "/never-purged"));
    assert!(floor.is_some_and(|t| t >= now), "{floor:?}");
}
