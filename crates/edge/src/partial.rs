//! Conditional and range requests answered from a stored object (RFC 9110 sections 13
//! and 14): 304 for `If-None-Match` / `If-Modified-Since` against the object's `ETag`
//! and `Last-Modified`, 412 for `If-Match` / `If-Unmodified-Since`, and 206 (one range,
//! or multipart/byteranges) or 416 for `Range`, with `If-Range`. A body left on disk
//! (`Entry::on_disk`) gives one range as it is read, and the whole object for several. The evaluation and the
//! range parsing are `wire`'s, the same code the server's static files use.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use handler::FieldList;
use http::{Method, StatusCode};
use wire::conditional::{self, Conditions, Outcome, Validators};
use wire::range::{self, Ranges};

use crate::body::Body;
use crate::cache::Entry;
use crate::exchange::{ProxyRequest, ProxyResponse};

/// The request fields that make an answer from `entry` conditional or partial, in one
/// pass over the request's fields (a hit without any is answered as it was: `None`).
fn conditions(req: &ProxyRequest) -> Option<Conditions<'_>> {
    let mut c = Conditions::default();
    let mut any = false;
    for (name, value) in &req.headers {
        let slot = match name.as_str() {
            "range" => &mut c.range,
            "if-match" => &mut c.if_match,
            "if-range" => &mut c.if_range,
            "if-none-match" => &mut c.if_none_match,
            "if-modified-since" => &mut c.if_modified_since,
            "if-unmodified-since" => &mut c.if_unmodified_since,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(value.as_bytes());
            any = true;
        }
    }
    any.then_some(c)
}

/// The answer to `req` from the stored whole response `entry` when the request is
/// conditional or asks for ranges and the answer is not the stored 200 itself: 304, 412,
/// 206 or 416. `lines` and `date` are the object's encoded head (a 304 carries its
/// fields), `token` the device token and `age` its Age in seconds.
pub(crate) fn answer(
    entry: &Arc<Entry>,
    req: &ProxyRequest,
    (lines, date): (&Bytes, bool),
    (token, age): (&str, u64),
    sliced: &dyn Fn(Option<(u64, u64)>) -> Option<Body>,
) -> Option<ProxyResponse> {
    let c = conditions(req)?;
    let stored = &entry.headers;
    let validators = Validators::of_fields(stored.get(b"etag"), stored.get(b"last-modified"));
    let now = crate::clock::now_ms() as i64 / 1000;
    match conditional::evaluate(&c, validators, now) {
        Outcome::NotModified => {
            return Some(ProxyResponse {
                status: StatusCode::NOT_MODIFIED,
                head_h1: Some((lines.clone(), date, None)),
                headers: only_age(age),
                body: Body::ready(Vec::new()),
            })
        }
        Outcome::PreconditionFailed => {
            return Some(ProxyResponse {
                status: StatusCode::PRECONDITION_FAILED,
                head_h1: None,
                headers: FieldList::new(),
                body: Body::ready(Vec::new()),
            })
        }
        Outcome::Proceed => {}
    }
    // Range is defined for GET only (RFC 9110 section 14.2), and only for a 200.
    let range = c
        .range
        .filter(|_| req.method == Method::GET && entry.status == StatusCode::OK)?;
    if c.if_range
        .is_some_and(|v| !conditional::if_range_holds(v, validators))
    {
        return None;
    }
    let body = &entry.body;
    let len = entry.body_len();
    let set = match range::parse(range, len) {
        Ranges::Ignore => return None,
        Ranges::Unsatisfiable => {
            let mut headers = FieldList::new();
            headers.insert(b"content-range", format!("bytes */{len}").as_bytes());
            return Some(ProxyResponse {
                status: StatusCode::RANGE_NOT_SATISFIABLE,
                head_h1: None,
                headers,
                body: Body::ready(Vec::new()),
            });
        }
        Ranges::Satisfiable(set) => set,
    };
    let mut headers = entry.response_headers(token).clone();
    headers.insert(b"age", itoa::Buffer::new().format(age).as_bytes());
    let mut room = [0u8; range::CONTENT_RANGE_MAX];
    let body = match set.as_slice() {
        &[(first, last)] => {
            headers.insert(
                b"content-range",
                range::content_range(&mut room, first, last, len),
            );
            match &entry.on_disk {
                Some(on_disk) => Body::disk(on_disk.stream(Some((first, last)))),
                None if entry.sliced.is_some() => sliced(Some((first, last)))?,
                None => Body::whole(body.slice(first as usize..=last as usize)),
            }
        }
        // Several ranges of a body left on disk (or in slices): the whole 200 (RFC 9110
        // 14.2 lets a server ignore Range), as it is read.
        _ if entry.on_disk.is_some() || entry.sliced.is_some() => return None,
        ranges => {
            let content_type = stored
                .get(b"content-type")
                .unwrap_or(b"application/octet-stream");
            let content_type = content_type.to_vec();
            let boundary = range::boundary();
            let length = range::multipart_length(ranges, &boundary, &content_type, len);
            let mut out = BytesMut::with_capacity(length as usize);
            for &(first, last) in ranges {
                range::part_head(&mut out, &boundary, &content_type, (first, last), len);
                out.extend_from_slice(&body[first as usize..=last as usize]);
            }
            range::closing(&mut out, &boundary);
            let mut room = [0u8; 64];
            headers.insert(b"content-type", range::multipart_type(&mut room, &boundary));
            Body::whole(out.freeze())
        }
    };
    Some(ProxyResponse {
        status: StatusCode::PARTIAL_CONTENT,
        head_h1: None,
        headers,
        body,
    })
}

/// The fields of an answer whose other fields are the object's encoded head.
fn only_age(age: u64) -> FieldList {
    let mut fields = FieldList::with_capacity(1, 24);
    fields.append_with(b"age", |b| wire::write_decimal(b, age));
    fields
}
