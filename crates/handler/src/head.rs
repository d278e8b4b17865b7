//! A response head as data: what every handler produces and every filter may change,
//! encoded per protocol only at the connection (nothing is written as bytes and parsed
//! back to change it).

/// A status and its fields, in one buffer that is reused from response to response.
/// Framing fields (`Content-Length`, `Transfer-Encoding`, `Connection`, `Keep-Alive`)
/// may be present (an upstream's), but the connection writes its own framing and skips
/// them ([`wire::is_framing_field`]).
#[derive(Debug, Clone, Default)]
pub struct ResponseHead {
    status: u16,
    /// Names and values back to back.
    bytes: Vec<u8>,
    /// Per field: where its name starts, where its value starts and where it ends.
    fields: Vec<(u32, u32, u32)>,
}

impl ResponseHead {
    pub fn new(status: u16) -> ResponseHead {
        ResponseHead {
            status,
            bytes: Vec::new(),
            fields: Vec::new(),
        }
    }

    /// A head with room for `fields` fields of `bytes` bytes of names and values in all,
    /// so that filling it does not reallocate.
    pub fn with_capacity(status: u16, fields: usize, bytes: usize) -> ResponseHead {
        ResponseHead {
            status,
            bytes: Vec::with_capacity(bytes),
            fields: Vec::with_capacity(fields),
        }
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
        self.bytes.clear();
        self.fields.clear();
    }

    /// Adds a field after the others (a repeated name adds another line).
    pub fn append(&mut self, name: &[u8], value: &[u8]) {
        let start = self.bytes.len() as u32;
        self.bytes.extend_from_slice(name);
        let value_at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(value);
        self.fields.push((start, value_at, self.bytes.len() as u32));
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
        let bytes = &self.bytes;
        self.fields
            .retain(|&(s, v, _)| !bytes[s as usize..v as usize].eq_ignore_ascii_case(name));
    }

    /// Removes every field but the framing ones (for a filter that replaces them all).
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) {
        let bytes = &self.bytes;
        self.fields.retain(|&(s, v, e)| {
            keep(
                &bytes[s as usize..v as usize],
                &bytes[v as usize..e as usize],
            )
        });
    }

    /// The fields in order, as (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields.iter().map(|&(s, v, e)| {
            (
                &self.bytes[s as usize..v as usize],
                &self.bytes[v as usize..e as usize],
            )
        })
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Writes the field lines an HTTP/1 head carries, without the framing fields (the
    /// connection writes those) and without the status line or the blank line.
    pub fn write_fields_h1(&self, buf: &mut Vec<u8>) {
        for (name, value) in self.iter() {
            if !wire::is_framing_field(name) {
                wire::write_field(buf, name, value);
            }
        }
    }
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
}
