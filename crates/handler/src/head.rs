//! A response head as data: what every handler produces and every filter may change,
//! encoded per protocol only at the connection (nothing is written as bytes and parsed
//! back to change it).

use std::any::Any;
use std::sync::Arc;

use bytes::Bytes;

use crate::FieldList;

/// A status and its fields, in one buffer that is reused from response to response.
/// Framing fields (`Content-Length`, `Transfer-Encoding`, `Connection`, `Keep-Alive`)
/// may be present (an upstream's), but the connection writes its own framing and skips
/// them ([`wire::is_framing_field`]).
///
/// A head may also carry a block of fields already encoded as HTTP/1 lines (a cached
/// object's, made once when it was stored), so that serving it copies one block instead
/// of rebuilding every field per response. The block's fields come after the others.
/// Reading a field looks into the block too; changing one (a filter) first turns the
/// block into ordinary fields.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    status: u16,
    fields: FieldList,
    /// `Name: value\r\n` lines, with no framing field among them.
    encoded: Option<Bytes>,
    /// Whether those lines hold a Date field.
    encoded_date: bool,
    /// Sent without on-the-fly compression ([`ResponseHead::set_identity_only`]).
    identity_only: bool,
    /// Assembled from fragments ([`ResponseHead::set_assembled`]).
    assembled: bool,
    /// The compression policy of the route that made it, in place of its site's
    /// ([`ResponseHead::set_compression_policy`]).
    compression: Option<Arc<dyn Any + Send + Sync>>,
}

impl Default for ResponseHead {
    fn default() -> ResponseHead {
        ResponseHead::new(0)
    }
}

impl ResponseHead {
    pub fn new(status: u16) -> ResponseHead {
        ResponseHead::from_fields(status, FieldList::new())
    }

    /// A head with room for `fields` fields of `bytes` bytes of names and values in all,
    /// so that filling it does not reallocate. Its buffers are those of a head (or a
    /// [`FieldList`]) this thread dropped, when there is one: a handler making a head per
    /// response allocates none in the steady state.
    pub fn with_capacity(status: u16, fields: usize, bytes: usize) -> ResponseHead {
        ResponseHead::from_fields(status, FieldList::with_capacity(fields, bytes))
    }

    /// A head of `fields` as they are (a handler's list becomes the head's, not copied).
    pub fn from_fields(status: u16, fields: FieldList) -> ResponseHead {
        ResponseHead {
            status,
            fields,
            encoded: None,
            encoded_date: false,
            identity_only: false,
            assembled: false,
            compression: None,
        }
    }

    /// Adds fields already encoded as HTTP/1 lines (`Name: value\r\n` each, no framing
    /// field among them), after the others. `date` says whether they hold a Date field,
    /// so that the connection need not look (it adds its own when none is there).
    pub fn set_encoded(&mut self, lines: Bytes, date: bool) {
        self.encoded = Some(lines);
        self.encoded_date = date;
    }

    /// Whether the head has a Date field.
    pub fn has_date(&self) -> bool {
        self.encoded_date || self.fields.contains(b"date")
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    pub fn set_status(&mut self, status: u16) {
        self.status = status;
    }

    /// Forgets every field and sets the status, keeping the buffers.
    pub fn reset(&mut self, status: u16) {
        self.status = status;
        self.fields.clear();
        self.encoded = None;
        self.encoded_date = false;
        self.identity_only = false;
        self.assembled = false;
        self.compression = None;
    }

    /// Keeps the compression filter away from this response: a Lua handler's opt-out, or
    /// a response whose encoding its handler chose already (a cached variant).
    pub fn set_identity_only(&mut self, identity_only: bool) {
        self.identity_only = identity_only;
    }

    /// Whether the compression filter leaves this response alone.
    pub fn identity_only(&self) -> bool {
        self.identity_only
    }

    /// Has the compression filter use `policy` for this response rather than its site's
    /// `[compression]`: a `[[route]]` with a `[route.compression]` of its own. The policy's
    /// type is the `compress` crate's, which builds on this one, so the head carries it
    /// without knowing it; `compress::HeadPolicy` sets and reads it typed.
    pub fn set_compression_policy(&mut self, policy: Arc<dyn Any + Send + Sync>) {
        self.compression = Some(policy);
    }

    /// The policy set with [`ResponseHead::set_compression_policy`], if any.
    pub fn compression_policy(&self) -> Option<&Arc<dyn Any + Send + Sync>> {
        self.compression.as_ref()
    }

    /// Marks a page assembled from fragments (ESI), which request metrics count under
    /// its module's assembled kind (`KindLabels::assembled`, the proxy's `esi`) rather
    /// than under the kind it answers with.
    pub fn set_assembled(&mut self, assembled: bool) {
        self.assembled = assembled;
    }

    /// Whether the page was assembled from fragments.
    pub fn assembled(&self) -> bool {
        self.assembled
    }

    /// Adds a field after the others (a repeated name adds another line).
    pub fn append(&mut self, name: &[u8], value: &[u8]) {
        self.fields.append(name, value);
    }

    /// The first value of the field `name` (case-insensitive).
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    pub fn contains(&self, name: &[u8]) -> bool {
        self.get(name).is_some()
    }

    /// Removes every field named `name` (case-insensitive). The bytes stay in the buffer
    /// until the next [`ResponseHead::reset`].
    pub fn remove(&mut self, name: &[u8]) {
        self.retain(|n, _| !n.eq_ignore_ascii_case(name));
    }

    /// Keeps only the fields for which `keep` says true.
    pub fn retain(&mut self, keep: impl FnMut(&[u8], &[u8]) -> bool) {
        self.decode_block();
        self.fields.retain(keep);
    }

    /// The fields in order, as (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let block = self.encoded.as_deref().unwrap_or_default();
        self.fields.iter().chain(block_fields(block))
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty() && !matches!(&self.encoded, Some(b) if !b.is_empty())
    }

    /// Writes the field lines an HTTP/1 head carries, without the framing fields (the
    /// connection writes those) and without the status line or the blank line.
    pub fn write_fields_h1(&self, buf: &mut Vec<u8>) {
        for (name, value) in self.fields.iter() {
            if !wire::is_framing_field(name) {
                wire::write_field(buf, name, value);
            }
        }
        if let Some(block) = &self.encoded {
            buf.extend_from_slice(block);
        }
    }

    /// Turns the encoded block into ordinary fields (before a change).
    fn decode_block(&mut self) {
        self.encoded_date = false;
        if let Some(block) = self.encoded.take() {
            for (name, value) in block_fields(&block) {
                self.append(name, value);
            }
        }
    }
}

/// The fields of a block of `Name: value\r\n` lines.
fn block_fields(block: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    block
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.is_empty())
        .map(|line| {
            let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
            let value = line.get(colon + 1..).unwrap_or_default();
            (&line[..colon], wire::trim_ows(value))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_keep_order_and_repeats() {
        let mut head = ResponseHead::new(200);
        head.append(b"Content-Type", b"text/html");
        head.append(b"Set-Cookie", b"a=1");
        head.append(b"Set-Cookie", b"b=2");
        head.append(b"Content-Length", b"5");
        assert_eq!(head.get(b"content-type"), Some(&b"text/html"[..]));
        head.remove(b"SET-COOKIE");
        assert_eq!(head.len(), 2);
        let mut buf = Vec::new();
        head.write_fields_h1(&mut buf);
        assert_eq!(buf, b"Content-Type: text/html\r\n");
        head.reset(404);
        assert!(head.is_empty());
        assert_eq!(head.status(), 404);
    }

    #[test]
    fn an_encoded_block_reads_like_fields_and_decodes_before_a_change() {
        let mut head = ResponseHead::new(200);
        head.append(b"Age", b"3");
        head.set_encoded(
            Bytes::from_static(b"Content-Type: text/html\r\nETag: \"x\"\r\n"),
            false,
        );
        assert!(!head.has_date());
        assert_eq!(head.get(b"etag"), Some(&b"\"x\""[..]));
        assert_eq!(head.len(), 3);
        let mut buf = Vec::new();
        head.write_fields_h1(&mut buf);
        assert_eq!(buf, b"Age: 3\r\nContent-Type: text/html\r\nETag: \"x\"\r\n");
        head.remove(b"etag");
        buf.clear();
        head.write_fields_h1(&mut buf);
        assert_eq!(buf, b"Age: 3\r\nContent-Type: text/html\r\n");
    }
}
