//! A decoded request head: the buffer its fields are kept in, and the view the server
//! reads it through. Filled by `request.rs`.

/// Where a request field sits in [`Conn`]'s head buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) name: (u32, u32),
    pub(super) value: (u32, u32),
}

/// The request head last decoded.
#[derive(Debug, Default, Clone)]
pub(super) struct Head {
    pub(super) bytes: Vec<u8>,
    pub(super) fields: Vec<Span>,
    pub(super) method: Option<(u32, u32)>,
    pub(super) scheme: Option<(u32, u32)>,
    pub(super) authority: Option<(u32, u32)>,
    pub(super) path: Option<(u32, u32)>,
    pub(super) oversize: bool,
}

impl Head {
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.fields.clear();
        self.method = None;
        self.scheme = None;
        self.authority = None;
        self.path = None;
        self.oversize = false;
    }

    pub(super) fn push(&mut self, bytes: &[u8]) -> (u32, u32) {
        let start = self.bytes.len() as u32;
        self.bytes.extend_from_slice(bytes);
        (start, self.bytes.len() as u32)
    }

    pub(super) fn get(&self, span: (u32, u32)) -> &[u8] {
        &self.bytes[span.0 as usize..span.1 as usize]
    }
}

/// A request head, as [`Event::Request`](super::Event::Request) announced it. Field names are lower case (an
/// upper-case name makes the request malformed, section 8.2.1); cookies are as the
/// client split them.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub(super) head: &'a Head,
}

impl<'a> Request<'a> {
    pub fn method(&self) -> &'a [u8] {
        self.head.method.map_or(&[], |s| self.head.get(s))
    }

    pub fn scheme(&self) -> Option<&'a [u8]> {
        self.head.scheme.map(|s| self.head.get(s))
    }

    pub fn authority(&self) -> Option<&'a [u8]> {
        self.head.authority.map(|s| self.head.get(s))
    }

    /// `:path`; absent only for CONNECT.
    pub fn path(&self) -> Option<&'a [u8]> {
        self.head.path.map(|s| self.head.get(s))
    }

    /// The regular fields, in order.
    pub fn fields(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let head = self.head;
        head.fields
            .iter()
            .map(move |f| (head.get(f.name), head.get(f.value)))
    }

    pub fn field_count(&self) -> usize {
        self.head.fields.len()
    }

    /// The decoded head was larger than `max_header_list_size`: its fields are cut
    /// short, and the server answers 431.
    pub fn oversize(&self) -> bool {
        self.head.oversize
    }

    /// A copy that outlives the next event (for a stream answered later).
    pub fn to_owned(&self) -> OwnedRequest {
        OwnedRequest {
            head: self.head.clone(),
        }
    }
}

/// A request head of its own (see [`Request::to_owned`]).
#[derive(Debug, Clone)]
pub struct OwnedRequest {
    head: Head,
}

impl OwnedRequest {
    pub fn view(&self) -> Request<'_> {
        Request { head: &self.head }
    }
}
