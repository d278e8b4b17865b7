//! A list of header fields in one buffer: the fields of a [`ResponseHead`], and what a
//! module keeps of a head before it answers (the proxy's upstream heads and cached
//! objects), so that such a head becomes the response's without a copy per field.
//!
//! [`ResponseHead`]: crate::ResponseHead

use std::cell::RefCell;
use std::fmt;
use std::mem;

type Buffers = (Vec<u8>, Vec<(u32, u32, u32)>);

thread_local! {
    /// The buffers of lists dropped on this thread, for [`FieldList::with_capacity`].
    static SPARE_BUFFERS: RefCell<Vec<Buffers>> = const { RefCell::new(Vec::new()) };
}

/// Fields in order, repeats kept, names and values back to back in one buffer with an
/// index beside it. Names compare case-insensitively. Removing a field drops it from the
/// index only: its bytes stay in the buffer until the list is cleared (a clone holds
/// the remaining fields alone).
#[derive(Default)]
pub struct FieldList {
    /// Names and values back to back.
    bytes: Vec<u8>,
    /// Per field: where its name starts, where its value starts and where it ends.
    fields: Vec<(u32, u32, u32)>,
}

impl Drop for FieldList {
    /// Keeps the buffers for the thread's next list (not unusually large ones, and as
    /// many as a worker has responses in flight).
    fn drop(&mut self) {
        if self.bytes.capacity() == 0 || self.bytes.capacity() > 16 * 1024 {
            return;
        }
        let (mut b, mut f) = (mem::take(&mut self.bytes), mem::take(&mut self.fields));
        b.clear();
        f.clear();
        let _ = SPARE_BUFFERS.try_with(|s| {
            if let Ok(mut spares) = s.try_borrow_mut() {
                if spares.len() < 256 {
                    spares.push((b, f));
                }
            }
        });
    }
}

impl Clone for FieldList {
    /// A list of the same fields, in buffers of their exact size (what a cache keeps).
    fn clone(&self) -> FieldList {
        let mut copy = FieldList {
            bytes: Vec::with_capacity(self.names_and_values_len()),
            fields: Vec::with_capacity(self.fields.len()),
        };
        for (name, value) in self.iter() {
            copy.append(name, value);
        }
        copy
    }
}

impl PartialEq for FieldList {
    /// The same fields in the same order (names compared as written).
    fn eq(&self, other: &FieldList) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for FieldList {}

impl fmt::Debug for FieldList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.iter()
                    .map(|(n, v)| (String::from_utf8_lossy(n), String::from_utf8_lossy(v))),
            )
            .finish()
    }
}

impl FieldList {
    pub fn new() -> FieldList {
        FieldList::default()
    }

    /// A list with room for `fields` fields of `bytes` bytes of names and values in all,
    /// so that filling it does not reallocate. Its buffers are those of a list this
    /// thread dropped, when there is one: a handler making a head per response (the
    /// proxy) allocates none in the steady state.
    pub fn with_capacity(fields: usize, bytes: usize) -> FieldList {
        let (mut b, mut f) = SPARE_BUFFERS
            .try_with(|s| s.try_borrow_mut().ok()?.pop())
            .ok()
            .flatten()
            .unwrap_or_default();
        b.reserve(bytes);
        f.reserve(fields);
        FieldList {
            bytes: b,
            fields: f,
        }
    }

    /// Adds a field after the others (a repeated name adds another line).
    pub fn append(&mut self, name: &[u8], value: &[u8]) {
        self.append_with(name, |buf| buf.extend_from_slice(value));
    }

    /// [`FieldList::append`] with the name lower-cased, as HTTP/2 writes names and as
    /// the proxy passes an upstream's on.
    pub fn append_lowercase(&mut self, name: &[u8], value: &[u8]) {
        let start = self.bytes.len();
        self.append(name, value);
        self.bytes[start..start + name.len()].make_ascii_lowercase();
    }

    /// Adds a field whose value `write` appends to the buffer it is given (a value made
    /// of parts, or a number, written in place).
    pub fn append_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.bytes.len() as u32;
        self.bytes.extend_from_slice(name);
        let value_at = self.bytes.len() as u32;
        write(&mut self.bytes);
        self.fields.push((start, value_at, self.bytes.len() as u32));
    }

    /// Sets the field `name` to `value`: the first field of that name takes the value
    /// where it stands and the others go; without one, the field is added after the
    /// others.
    pub fn insert(&mut self, name: &[u8], value: &[u8]) {
        let Some(first) = self.position(name) else {
            self.append(name, value);
            return;
        };
        let (s, v, _) = self.fields[first];
        // The name as it was written, then the new value, at the end of the buffer.
        let start = self.bytes.len();
        self.bytes.extend_from_within(s as usize..v as usize);
        let value_at = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.fields[first] = (start as u32, value_at as u32, self.bytes.len() as u32);
        let bytes = &self.bytes;
        let mut at = 0;
        self.fields.retain(|&(s, v, _)| {
            at += 1;
            at <= first + 1 || !bytes[s as usize..v as usize].eq_ignore_ascii_case(name)
        });
    }

    fn position(&self, name: &[u8]) -> Option<usize> {
        self.iter().position(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// The first value of the field `name` (case-insensitive).
    pub fn get(&self, name: impl AsRef<[u8]>) -> Option<&[u8]> {
        let name = name.as_ref();
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Every value of the field `name` (case-insensitive), in order.
    pub fn get_all<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    pub fn contains(&self, name: impl AsRef<[u8]>) -> bool {
        self.get(name).is_some()
    }

    /// Removes every field named `name` (case-insensitive).
    pub fn remove(&mut self, name: &[u8]) {
        self.retain(|n, _| !n.eq_ignore_ascii_case(name));
    }

    /// Keeps only the fields for which `keep` says true.
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
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> + Clone {
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

    /// Forgets every field, keeping the buffers.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.fields.clear();
    }

    /// The bytes of the names and values of the fields, together.
    pub fn names_and_values_len(&self) -> usize {
        self.fields.iter().map(|&(s, _, e)| (e - s) as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pairs: &[(&str, &str)]) -> FieldList {
        let mut l = FieldList::new();
        for (n, v) in pairs {
            l.append(n.as_bytes(), v.as_bytes());
        }
        l
    }

    #[test]
    fn insert_replaces_the_first_in_place_and_drops_the_rest() {
        let mut l = list(&[("Via", "1.0 a"), ("Age", "1"), ("via", "1.1 b")]);
        l.insert(b"VIA", b"1.0 a, 1.1 b, 1.1 c");
        assert_eq!(l, list(&[("Via", "1.0 a, 1.1 b, 1.1 c"), ("Age", "1")]));
        l.insert(b"date", b"x");
        assert_eq!(l.iter().last(), Some((&b"date"[..], &b"x"[..])));
    }

    #[test]
    fn lookups_ignore_case_and_keep_repeats_in_order() {
        let mut l = list(&[("Set-Cookie", "a=1"), ("X", "y"), ("set-cookie", "b=2")]);
        assert_eq!(l.get("SET-COOKIE"), Some(&b"a=1"[..]));
        let all: Vec<&[u8]> = l.get_all(b"set-cookie").collect();
        assert_eq!(all, [&b"a=1"[..], b"b=2"]);
        l.remove(b"set-cookie");
        assert_eq!(l, list(&[("X", "y")]));
        assert_eq!(l.names_and_values_len(), 2);
        let copy = l.clone();
        assert_eq!(
            copy.bytes.len(),
            2,
            "a clone holds the remaining fields alone"
        );
        l.append_lowercase(b"Content-Type", b"Text/HTML");
        assert_eq!(
            l.iter().last(),
            Some((&b"content-type"[..], &b"Text/HTML"[..]))
        );
        l.append_with(b"age", |b| b.extend_from_slice(b"42"));
        assert_eq!(l.get(b"Age"), Some(&b"42"[..]));
    }
}
