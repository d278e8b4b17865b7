//! A stored response ([`Entry`]): its status, fields, body or compiled template, its
//! lifetime windows, and its encoding for the Redis tier.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use handler::FieldList;
use http::StatusCode;

use super::freshness::{Freshness, MAX_LIFETIME};

/// One stored response.
pub(crate) struct Entry {
    pub(crate) status: StatusCode,
    /// The origin's fields, hop-by-hop fields (and Set-Cookie) removed; Surrogate-Control
    /// kept (it is removed when sent downstream).
    pub(crate) headers: FieldList,
    /// The body, when not ESI.
    pub(crate) body: Bytes,
    /// Compiled when the response is ESI.
    pub(crate) template: Option<Arc<esi::Template>>,
    /// The template's source as it arrived (the same buffers its text points into), to
    /// serialize it for the shared tier.
    source: Vec<Bytes>,
    /// When it was generated at the origin (received, minus its Age), Unix ms.
    pub(super) born_ms: u64,
    pub(super) fresh_ms: u64,
    pub(super) swr_ms: u64,
    pub(super) sie_ms: u64,
    /// Kept this long after its stale windows, to be revalidated (only with validators).
    pub(super) keep_ms: u64,
    pub(super) weight: u64,
    /// The fields sent downstream, made on the first hit.
    out: std::sync::OnceLock<FieldList>,
    /// The same but Age and the framing fields, as HTTP/1 lines, made on the first hit,
    /// and whether they hold a Date.
    out_h1: std::sync::OnceLock<(Bytes, bool)>,
    /// For an ESI page: the last assembly from cached fragments, reused while it holds.
    memo: Mutex<Option<Arc<Memo>>>,
    /// The body's compressed forms, made on demand.
    pub(crate) variants: Arc<super::variants::Variants>,
    /// Bytes of the compressed forms of its body and of its memoized assemblies, counted
    /// in its weight in memory ([`Cache::reweigh`]).
    pub(crate) forms: Arc<AtomicU64>,
    /// The key it is stored under in memory, once stored.
    pub(super) stored_as: std::sync::OnceLock<String>,
    /// When it was put in memory (Unix ms; 0 before): a ban by expression made later
    /// does not concern it.
    pub(super) stored_ms: AtomicU64,
    /// Its surrogate keys, from the origin's `Surrogate-Key`, `Cache-Tag` and `xkey`
    /// fields (a `PURGE` with `Surrogate-Key` removes every object with one of them).
    pub(crate) keys: Box<[Box<str>]>,
    /// Whether those fields reach the client (the route's `expose_keys`); they are
    /// removed from what is sent otherwise.
    pub(crate) expose_keys: bool,
    /// Whether it may be kept in the disk tier (its route's `disk`). Not stored: a copy
    /// read back from Redis or from disk is not written to disk again.
    pub(crate) disk: bool,
    /// For a fresh disk object too large for memory: its body, left on disk and read as
    /// it is sent (`body` is empty then). Such an object is served, never stored again.
    pub(crate) on_disk: Option<super::disk::stream::OnDisk>,
    /// For an object fetched in slices: the head read from disk (its body empty), the
    /// slices served from disk or fetched as they are needed. Never stored in memory.
    pub(crate) sliced: Option<Arc<super::disk::slices::Sliced>>,
}

/// The surrogate keys in `fields`' key fields (split at spaces and commas, each once).
pub(crate) fn surrogate_keys(fields: &FieldList) -> Box<[Box<str>]> {
    let mut keys: Vec<Box<str>> = Vec::new();
    for name in crate::headers::KEY_FIELDS {
        for value in fields.get_all(name) {
            for key in value.split(|&b| b == b' ' || b == b',' || b == b'\t') {
                if key.is_empty() {
                    continue;
                }
                let key = String::from_utf8_lossy(key);
                if !keys.iter().any(|k| **k == *key) {
                    keys.push(key.into());
                }
            }
        }
    }
    keys.into()
}

/// A page assembled from cached fragments, for a template whose evaluation does not
/// depend on the request (it reads no variables, and no fragment varies): the next
/// request gets the same chunks without evaluating or looking anything up, while every
/// fragment is still fresh and nothing was purged since.
pub(crate) struct Memo {
    pub(crate) chunks: Arc<[Bytes]>,
    /// The earliest time one of its fragments stops being fresh (Unix ms).
    pub(crate) fresh_until: u64,
    /// [`Cache::generation`] when it was made.
    pub(crate) generation: u64,
    /// Its compressed forms, made on demand.
    pub(crate) variants: Arc<super::variants::Variants>,
}

impl Entry {
    /// The body's length, in memory or on disk.
    pub(crate) fn body_len(&self) -> u64 {
        match (&self.on_disk, &self.sliced) {
            (Some(d), _) => d.len(),
            (None, Some(sliced)) => sliced.total,
            (None, None) => self.body.len() as u64,
        }
    }

    /// Its weight in memory now: its own bytes and its forms'.
    pub(super) fn weight_with_forms(&self) -> u64 {
        self.weight + self.forms.load(Ordering::Acquire)
    }

    /// The headers to send downstream (Surrogate-Control and hop-by-hop fields removed,
    /// Via added; an ESI page's length and validators removed, as it is assembled).
    /// [`Entry::response_headers`] but Age (which changes per response) and the framing
    /// fields, encoded once as HTTP/1 lines.
    /// Also says whether they hold a Date field.
    pub(crate) fn response_head_h1(&self, token: &str) -> (Bytes, bool) {
        self.out_h1
            .get_or_init(|| {
                let fields = self.response_headers(token);
                let mut lines = Vec::new();
                for (name, value) in fields.iter() {
                    if !name.eq_ignore_ascii_case(b"age") && !wire::is_framing_field(name) {
                        wire::write_field(&mut lines, name, value);
                    }
                }
                (lines.into(), fields.contains(b"date"))
            })
            .clone()
    }

    pub(crate) fn response_headers(&self, token: &str) -> &FieldList {
        self.out.get_or_init(|| {
            let mut h =
                crate::headers::forward_response(&self.headers, http::Version::HTTP_11, token);
            if self.expose_keys {
                crate::headers::expose_keys(&mut h, &self.headers);
            }
            if self.template.is_some() {
                crate::headers::page_headers(h)
            } else {
                h
            }
        })
    }

    /// Whether the response said it may be stored.
    pub(crate) fn storable(&self) -> bool {
        self.fresh_ms
            .saturating_add(self.swr_ms)
            .saturating_add(self.sie_ms)
            > 0
    }

    /// A response as fetched; `freshness` is `None` for one that is not stored.
    pub(crate) fn new(
        status: StatusCode,
        mut headers: FieldList,
        body: Bytes,
        template: Option<(esi::Template, Vec<Bytes>)>,
        freshness: Option<&Freshness>,
        now: u64,
    ) -> Entry {
        headers.remove(b"set-cookie");
        // A parsed head's buffers have room for more (and a removed field's bytes): the
        // fields are copied into buffers of their size, so a stored object holds only its
        // own bytes (the weight below).
        let headers = headers.clone();
        let (template, source) = match template {
            Some((t, s)) => (Some(Arc::new(t)), s),
            None => (None, Vec::new()),
        };
        let ms = |d: Duration| d.min(MAX_LIFETIME).as_millis() as u64;
        let f = freshness.copied().unwrap_or(Freshness {
            store: false,
            fresh: Duration::ZERO,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            keep: Duration::ZERO,
            age: Duration::ZERO,
        });
        let header_bytes: usize = headers.names_and_values_len() + 16 * headers.len();
        let keys = surrogate_keys(&headers);
        let source_len: usize = source.iter().map(Bytes::len).sum();
        let forms = Arc::<AtomicU64>::default();
        Entry {
            status,
            weight: (body.len() + source_len + header_bytes + 256) as u64,
            headers,
            body,
            template,
            source,
            born_ms: now.saturating_sub(ms(f.age)),
            fresh_ms: ms(f.fresh),
            swr_ms: ms(f.stale_while_revalidate),
            sie_ms: ms(f.stale_if_error),
            keep_ms: ms(f.keep),
            out: std::sync::OnceLock::new(),
            out_h1: std::sync::OnceLock::new(),
            memo: Mutex::new(None),
            variants: Arc::new(super::variants::Variants::counted_in(forms.clone())),
            forms,
            stored_as: std::sync::OnceLock::new(),
            stored_ms: AtomicU64::new(0),
            keys,
            expose_keys: false,
            disk: true,
            on_disk: None,
            sliced: None,
        }
    }

    pub(crate) fn age_secs(&self, now: u64) -> u64 {
        now.saturating_sub(self.born_ms) / 1000
    }

    pub(crate) fn is_fresh(&self, now: u64) -> bool {
        now.saturating_sub(self.born_ms) < self.fresh_ms
    }

    /// When it stops being fresh (Unix ms).
    pub(crate) fn fresh_until(&self) -> u64 {
        self.born_ms.saturating_add(self.fresh_ms)
    }

    /// The memoized assembly, if it still holds at `now` for this cache `generation`.
    pub(crate) fn memo(&self, now: u64, generation: u64) -> Option<Arc<Memo>> {
        let memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        memo.as_ref()
            .filter(|m| now < m.fresh_until && m.generation == generation)
            .cloned()
    }

    pub(crate) fn set_memo(&self, memo: Memo) {
        *self.memo.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(memo));
    }

    /// Stale, but within `stale-while-revalidate`.
    pub(crate) fn may_revalidate_stale(&self, now: u64) -> bool {
        now.saturating_sub(self.born_ms) < self.fresh_ms.saturating_add(self.swr_ms)
    }

    /// Stale, but within `stale-if-error`.
    pub(crate) fn may_serve_on_error(&self, now: u64) -> bool {
        now.saturating_sub(self.born_ms) < self.fresh_ms.saturating_add(self.sie_ms)
    }

    /// Expired, and its validators (`ETag`, `Last-Modified`) can be sent back to the
    /// origin in a conditional request (RFC 9111 4.3.1); usable while it is still held
    /// (in a stale window or its `keep`).
    pub(crate) fn may_revalidate(&self, now: u64) -> bool {
        // A sliced object is fetched again (its first slice), not revalidated whole.
        !self.is_fresh(now)
            && super::freshness::has_validators(&self.headers)
            && self.sliced.is_none()
    }

    /// How long after its birth it is of any use: its lifetime, its stale windows and
    /// its `keep` (ms).
    fn useful_ms(&self) -> u64 {
        self.fresh_ms
            .saturating_add(self.swr_ms.max(self.sie_ms))
            .saturating_add(self.keep_ms)
    }

    /// When it stops being of any use (Unix ms).
    pub(super) fn useless_at(&self) -> u64 {
        self.born_ms.saturating_add(self.useful_ms())
    }

    pub(super) fn useless(&self, now: u64) -> bool {
        now.saturating_sub(self.born_ms) >= self.useful_ms()
    }

    /// Seconds Redis keeps it: as long as it can be of any use.
    pub(super) fn remaining_secs(&self, now: u64) -> u64 {
        let end = self.born_ms.saturating_add(self.useful_ms());
        end.saturating_sub(now).div_ceil(1000).max(1)
    }

    /// This object as a 304 from the origin refreshed it (RFC 9111 4.3.4): the same
    /// body or template, `headers` (the stored ones updated with the 304's), and the
    /// lifetime `freshness` gives from `now`.
    pub(crate) fn refreshed(&self, headers: FieldList, freshness: &Freshness, now: u64) -> Entry {
        let mut e = Entry::new(
            self.status,
            headers,
            self.body.clone(),
            None,
            Some(freshness),
            now,
        );
        e.template = self.template.clone();
        e.source = self.source.clone();
        let source_len: usize = e.source.iter().map(Bytes::len).sum();
        e.weight += source_len as u64;
        e.expose_keys = self.expose_keys;
        e.disk = self.disk;
        e
    }

    /// This object marked stale at `now` (a soft purge): no longer fresh, with its stale
    /// windows and `keep` counted from now, so it is served within stale-while-revalidate
    /// while one request refreshes it (or revalidated, within `keep`). One already stale
    /// stays as it is.
    pub(crate) fn expired_at(&self, now: u64) -> Entry {
        let mut e = Entry::new(
            self.status,
            self.headers.clone(),
            self.body.clone(),
            None,
            None,
            0,
        );
        e.template = self.template.clone();
        e.source = self.source.clone();
        e.weight = self.weight;
        e.expose_keys = self.expose_keys;
        e.disk = self.disk;
        e.stored_ms = AtomicU64::new(self.stored_ms.load(Ordering::Acquire));
        e.born_ms = self.born_ms;
        e.fresh_ms = self.fresh_ms.min(now.saturating_sub(self.born_ms));
        (e.swr_ms, e.sie_ms, e.keep_ms) = (self.swr_ms, self.sie_ms, self.keep_ms);
        e
    }

    /// This object (its head: status, fields, freshness) with its body on disk.
    pub(super) fn with_body_on_disk(&self, on_disk: super::disk::stream::OnDisk) -> Entry {
        let mut e = self.head_with(self.headers.clone());
        e.weight = self.weight + on_disk.len();
        e.on_disk = Some(on_disk);
        e
    }

    /// This object's status and freshness with `headers`, and no body.
    pub(super) fn head_with(&self, headers: FieldList) -> Entry {
        let mut e = Entry::new(self.status, headers, Bytes::new(), None, None, 0);
        (e.born_ms, e.fresh_ms, e.swr_ms, e.sie_ms, e.keep_ms) = (
            self.born_ms,
            self.fresh_ms,
            self.swr_ms,
            self.sie_ms,
            self.keep_ms,
        );
        e.expose_keys = self.expose_keys;
        e
    }

    /// The shared tier's encoding: a versioned binary record.
    pub(super) fn encode(&self) -> Vec<u8> {
        let body_len = self.record_body_len();
        let mut out = BytesMut::with_capacity(self.weight as usize + 64);
        self.encode_head(&mut out, body_len as u64);
        if self.template.is_some() {
            for s in &self.source {
                out.put_slice(s);
            }
        } else {
            out.put_slice(&self.body);
        }
        out.to_vec()
    }

    /// The length of the body [`Entry::encode`] writes: the ESI source of a template.
    pub(super) fn record_body_len(&self) -> usize {
        match self.template.is_some() {
            true => self.source.iter().map(Bytes::len).sum(),
            false => self.body.len(),
        }
    }

    /// The record's head ([`Entry::encode`]): all but the body, which is `body_len`
    /// bytes and follows it.
    pub(super) fn encode_head(&self, out: &mut BytesMut, body_len: u64) {
        out.put_slice(b"TSC2");
        out.put_u8(u8::from(self.template.is_some()) | u8::from(self.expose_keys) << 1);
        out.put_u16(self.status.as_u16());
        for v in [
            self.born_ms,
            self.fresh_ms,
            self.swr_ms,
            self.sie_ms,
            self.keep_ms,
        ] {
            out.put_u64(v);
        }
        out.put_u32(self.headers.len() as u32);
        for (n, v) in self.headers.iter() {
            out.put_u32(n.len() as u32);
            out.put_slice(n);
            out.put_u32(v.len() as u32);
            out.put_slice(v);
        }
        out.put_u32(body_len as u32);
    }

    /// A record read back from Redis, which anyone able to write there may have made:
    /// accepted only as the store would have made it (a cacheable status, lifetimes
    /// within [`MAX_LIFETIME`], born no later than a minute from `now`, no hop-by-hop
    /// fields, a body within `max_object_size`); anything else is `None`.
    pub(super) fn decode(mut b: Bytes, max_object_size: usize, now: u64) -> Option<Entry> {
        let head = RecordHead::decode(&mut b, max_object_size, now)?;
        if b.remaining() != head.body_len {
            return None;
        }
        Some(head.into_entry(b))
    }
}

/// A record's head: everything but its body, which follows it (`body_len` bytes).
pub(super) struct RecordHead {
    is_template: bool,
    expose_keys: bool,
    status: StatusCode,
    headers: FieldList,
    times: [u64; 5],
    pub(super) body_len: usize,
}

impl RecordHead {
    /// The head at the start of `b` (consumed), checked as [`Entry::decode`] says; `None`
    /// also when `b` ends before the head does.
    pub(super) fn decode(b: &mut Bytes, max_object_size: usize, now: u64) -> Option<RecordHead> {
        fn take(b: &mut Bytes, n: usize) -> Option<Bytes> {
            (b.remaining() >= n).then(|| b.split_to(n))
        }
        // TSC1: records made before `keep` (no keep time); TSC2 has one, and its flags
        // byte says `expose_keys` too.
        let with_keep = match take(b, 4)?.as_ref() {
            b"TSC1" => false,
            b"TSC2" => true,
            _ => return None,
        };
        if b.remaining() < 1 + 2 + 32 + 8 * usize::from(with_keep) + 4 {
            return None;
        }
        let flags = b.get_u8();
        if flags > if with_keep { 3 } else { 1 } {
            return None;
        }
        let (is_template, expose_keys) = (flags & 1 != 0, flags & 2 != 0);
        let status = StatusCode::from_u16(b.get_u16()).ok()?;
        if !super::freshness::status_cacheable(status) {
            return None;
        }
        let born_ms = b.get_u64();
        let fresh_ms = b.get_u64();
        let swr_ms = b.get_u64();
        let sie_ms = b.get_u64();
        let keep_ms = if with_keep { b.get_u64() } else { 0 };
        let longest = MAX_LIFETIME.as_millis() as u64;
        if born_ms > now.saturating_add(60_000)
            || [fresh_ms, swr_ms, sie_ms, keep_ms]
                .iter()
                .any(|&t| t > longest)
        {
            return None;
        }
        let count = b.get_u32() as usize;
        let mut headers = FieldList::new();
        for _ in 0..count {
            let n = (b.remaining() >= 4).then(|| b.get_u32())? as usize;
            let name = take(b, n)?;
            // A field name is a token, and hop-by-hop fields are never stored.
            if name.is_empty()
                || name.len() >= 1 << 16
                || !name.iter().all(|&c| wire::is_tchar(c))
                || crate::headers::is_hop_by_hop(&name)
            {
                return None;
            }
            let n = (b.remaining() >= 4).then(|| b.get_u32())? as usize;
            let value = take(b, n)?;
            if !value
                .iter()
                .all(|&c| c == b'\t' || (c >= 0x20 && c != 0x7f))
            {
                return None;
            }
            headers.append_lowercase(&name, &value);
        }
        // The store keeps an object for revalidation only when it has validators.
        if keep_ms > 0 && !super::freshness::has_validators(&headers) {
            return None;
        }
        let body_len = (b.remaining() >= 4).then(|| b.get_u32())? as usize;
        if body_len > max_object_size {
            return None;
        }
        Some(RecordHead {
            is_template,
            expose_keys,
            status,
            headers,
            times: [born_ms, fresh_ms, swr_ms, sie_ms, keep_ms],
            body_len,
        })
    }

    /// Whether the record is an ESI template (its body the template's source).
    pub(super) fn is_template(&self) -> bool {
        self.is_template
    }

    /// Whether the object is fresh at `now`.
    pub(super) fn is_fresh(&self, now: u64) -> bool {
        now.saturating_sub(self.times[0]) < self.times[1]
    }

    /// The stored object with `body` (the template's source for an ESI page).
    pub(super) fn into_entry(self, body: Bytes) -> Entry {
        let mut e = if self.is_template {
            let mut compiler = esi::Compiler::new(&esi::Options::default());
            compiler.feed(body.clone());
            Entry::new(
                self.status,
                self.headers,
                Bytes::new(),
                Some((compiler.finish(), vec![body])),
                None,
                0,
            )
        } else {
            Entry::new(self.status, self.headers, body, None, None, 0)
        };
        [e.born_ms, e.fresh_ms, e.swr_ms, e.sie_ms, e.keep_ms] = self.times;
        e.expose_keys = self.expose_keys;
        e
    }
}
