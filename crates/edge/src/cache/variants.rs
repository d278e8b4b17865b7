//! Compressed once, served many times: the coded forms of a cached object (or of a
//! cached assembled page), each made by the first request that wants it and kept with the
//! object, so that a hit costs a lookup and no compressor run. One stored object serves a
//! client that accepts zstd, one that accepts gzip and one that accepts nothing.
//!
//! The compression filter of the server (the `compress` crate) does the same per
//! response for everything else; a response made here is marked so that it leaves it
//! alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use compress::{Accepted, Coding, Compression};
use handler::{Body, ResponseHead};

/// The forms of one body, by coding (identity included: its head adds
/// `Vary: Accept-Encoding`). Never changes once made; a new body (a new object, a new
/// assembly of a page) comes with new `Variants`.
pub(crate) struct Variants {
    forms: [OnceLock<Form>; 4],
    /// Whether the object is the policy's to compress (its status, type, length and
    /// fields do not change), decided on its first request rather than on every one.
    eligible: OnceLock<bool>,
    /// Bytes of compressed bodies held here.
    bytes: AtomicU64,
    /// The cached object's count of its forms' bytes (its own forms and its memoized
    /// assemblies'), which is in its weight in the cache (`Entry::forms`).
    counted_in: Arc<AtomicU64>,
}

impl Variants {
    /// No forms yet; those made will count in `counted_in`.
    pub(crate) fn counted_in(counted_in: Arc<AtomicU64>) -> Variants {
        Variants {
            forms: Default::default(),
            eligible: OnceLock::new(),
            bytes: AtomicU64::new(0),
            counted_in,
        }
    }
}

impl Drop for Variants {
    fn drop(&mut self) {
        // A memoized assembly replaced: its forms leave the object's count (its weight in
        // the cache follows at its next reweighing).
        self.counted_in
            .fetch_sub(*self.bytes.get_mut(), Ordering::Relaxed);
    }
}

/// A body in one coding, with its head's fields as HTTP/1 lines.
struct Form {
    lines: Bytes,
    /// Whether the lines hold a Date.
    date: bool,
    body: FormBody,
}

enum FormBody {
    /// Compressed, in one piece.
    Whole(Bytes),
    /// The identity body as cached (a page's pieces, shared with the cache).
    Pieces(Arc<[Bytes]>),
}

fn index(coding: Coding) -> usize {
    match coding {
        Coding::Identity => 0,
        Coding::Gzip => 1,
        Coding::Brotli => 2,
        Coding::Zstd => 3,
    }
}

/// A cached response as stored: its head (with the fields as HTTP/1 lines, and whether
/// they hold a Date) and its body's chunks.
pub(crate) struct Identity<'a> {
    pub head: &'a ResponseHead,
    pub lines: &'a Bytes,
    pub date: bool,
    pub chunks: &'a [Bytes],
}

impl Variants {
    /// The response for a client that accepts `accepted`, per `policy`: the form of the
    /// coding it gets, made now if this is the first request to want it. `None` when
    /// the response is not the policy's to compress (its type, its length, its status,
    /// no-transform, a coding already) or the client refuses every form: the server's
    /// filter then sees the identity response as it is. `room`: the bytes of forms the
    /// object may count in all ([`Cache::form_room`](crate::cache::Cache::form_room)); a
    /// form that would pass it is served to this request and not kept, so that the
    /// object is never weighed past what its shard holds (which would evict it). `grew`
    /// is called when a form was made and kept here (so that the cache weighs the object
    /// again).
    pub(crate) fn respond(
        &self,
        policy: &Compression,
        accepted: Accepted,
        identity: Identity<'_>,
        room: u64,
        grew: impl FnOnce(),
    ) -> Option<(Bytes, bool, Body)> {
        let Identity {
            head: identity,
            lines,
            date,
            chunks,
        } = identity;
        let eligible = *self.eligible.get_or_init(|| {
            let length = chunks.iter().map(|c| c.len() as u64).sum();
            compress::compressible(policy, identity, Some(length))
        });
        if !eligible {
            return None;
        }
        let coding = match accepted.choose(&policy.order) {
            Some(c) => c,
            None if accepted.accepts(Coding::Identity) => Coding::Identity,
            None => return None,
        };
        let slot = &self.forms[index(coding)];
        let form = match slot.get() {
            Some(form) => form,
            None => {
                let form = make(policy, coding, lines, date, chunks)?;
                let size = match &form.body {
                    FormBody::Whole(b) => b.len() as u64,
                    FormBody::Pieces(_) => 0,
                };
                // Counted before it is kept, within the room, in one step: two forms
                // made at once cannot both pass it.
                let counted = size == 0
                    || self
                        .counted_in
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                            c.checked_add(size).filter(|&total| total <= room)
                        })
                        .is_ok();
                if !counted {
                    return Some(form.response());
                }
                // Two workers may make it at once; the first stored wins, both are right.
                match slot.set(form) {
                    Ok(()) if size > 0 => {
                        self.bytes.fetch_add(size, Ordering::Relaxed);
                        grew();
                    }
                    Ok(()) => {}
                    Err(_) => {
                        self.counted_in.fetch_sub(size, Ordering::AcqRel);
                    }
                }
                slot.get()?
            }
        };
        Some(form.response())
    }
}

impl Form {
    /// Its head's lines, whether they hold a Date, and its body.
    fn response(&self) -> (Bytes, bool, Body) {
        let body = match &self.body {
            FormBody::Whole(b) => Body::Full(b.clone()),
            FormBody::Pieces(c) => Body::Ready(c.clone()),
        };
        (self.lines.clone(), self.date, body)
    }
}

/// The `coding` form of a body whose identity head is `lines`.
fn make(
    policy: &Compression,
    coding: Coding,
    lines: &Bytes,
    date: bool,
    chunks: &[Bytes],
) -> Option<Form> {
    let mut head = ResponseHead::new(200);
    head.set_encoded(lines.clone(), date);
    let body = if coding == Coding::Identity {
        compress::add_vary(&mut head);
        FormBody::Pieces(Arc::from(chunks))
    } else {
        let pieces: Vec<&[u8]> = chunks.iter().map(|c| &c[..]).collect();
        let compressed = compress::compress(coding, policy.level(coding), &pieces).ok()?;
        compress::mark_encoded(&mut head, coding);
        FormBody::Whole(compressed)
    };
    tracing::debug!(coding = coding.token(), "compressed form made");
    let mut encoded = Vec::new();
    head.write_fields_h1(&mut encoded);
    Some(Form {
        lines: encoded.into(),
        date: head.has_date(),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Compression {
        compress::CompressionConfig::default()
            .build()
            .unwrap()
            .unwrap()
    }

    /// `variants.respond` for a client accepting `accept`, and whether a form was kept.
    fn respond(
        variants: &Variants,
        accept: Option<&[u8]>,
        lines: &Bytes,
        chunks: &[Bytes],
    ) -> (Option<(Bytes, bool, Body)>, bool) {
        let mut identity = ResponseHead::new(200);
        identity.set_encoded(lines.clone(), false);
        let mut grew = false;
        let answer = variants.respond(
            &policy(),
            Accepted::parse(accept),
            Identity {
                head: &identity,
                lines,
                date: false,
                chunks,
            },
            u64::MAX,
            || grew = true,
        );
        (answer, grew)
    }

    #[test]
    fn each_form_is_made_once_and_shared() {
        let lines = Bytes::from_static(b"Content-Type: text/html\r\nETag: \"e\"\r\n");
        let page: Vec<Bytes> = (0..50)
            .map(|i| Bytes::from(format!("<p>piece {i} of a page</p>\n")))
            .collect();
        let variants = Variants::counted_in(Arc::default());
        let (head, _, first) = respond(&variants, Some(b"gzip"), &lines, &page).0.unwrap();
        let text = String::from_utf8_lossy(&head).to_string();
        assert!(text.contains("Content-Encoding: gzip"), "{text}");
        assert!(text.contains("ETag: W/\"e\""), "{text}");
        assert!(text.contains("Vary: Accept-Encoding"), "{text}");
        let (_, _, again) = respond(&variants, Some(b"gzip"), &lines, &page).0.unwrap();
        match (first, again) {
            (Body::Full(a), Body::Full(b)) => assert_eq!(a.as_ptr(), b.as_ptr(), "not shared"),
            _ => panic!("not whole"),
        }
        let (head, _, body) = respond(&variants, None, &lines, &page).0.unwrap();
        assert!(String::from_utf8_lossy(&head).contains("Vary: Accept-Encoding"));
        assert!(matches!(body, Body::Ready(c) if c.len() == 50));
    }

    #[test]
    fn forms_count_in_their_object_until_dropped() {
        let lines = Bytes::from_static(b"Content-Type: text/html\r\n");
        let page = vec![Bytes::from("<p>some text to compress</p>\n".repeat(100))];
        let counted = Arc::<AtomicU64>::default();
        let variants = Variants::counted_in(counted.clone());
        let (answer, grew) = respond(&variants, Some(b"gzip"), &lines, &page);
        let Some((_, _, Body::Full(gzip))) = answer else {
            panic!("no gzip form")
        };
        assert!(grew);
        assert_eq!(counted.load(Ordering::Relaxed), gzip.len() as u64);
        // Served again, or the identity form (no bytes of its own): nothing grows.
        assert!(!respond(&variants, Some(b"gzip"), &lines, &page).1);
        assert!(!respond(&variants, None, &lines, &page).1);
        let (_, grew) = respond(&variants, Some(b"zstd"), &lines, &page);
        assert!(grew);
        assert!(counted.load(Ordering::Relaxed) > gzip.len() as u64);
        drop(variants);
        assert_eq!(counted.load(Ordering::Relaxed), 0);
    }
}
