//! The static table (RFC 7541 Appendix A), a name lookup into it built at compile time,
//! and the dynamic table (section 2.3.2 and 4) that both the decoder and the encoder use.
//!
//! The dynamic table keeps its entries' bytes in one arena and one record per entry, so
//! inserting copies the bytes once and allocates nothing once the arena has grown to its
//! bound, and every entry is one contiguous name and value that can be lent out as
//! slices. Evicting drops records only; the arena is compacted (the live bytes moved to
//! its front) when appending would take it past twice the table's maximum size, which
//! moves each byte at most once per insertion of as many bytes: amortised O(1).

use std::collections::VecDeque;

/// The static table, RFC 7541 Appendix A; HPACK index `i` is `STATIC_TABLE[i - 1]`.
pub(crate) const STATIC_TABLE: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// Index of the first dynamic table entry in the HPACK index space (section 2.3.3).
pub(crate) const DYNAMIC_BASE: usize = STATIC_TABLE.len() + 1;

/// The overhead RFC 7541 section 4.1 adds to each entry's name and value lengths.
pub(crate) const ENTRY_OVERHEAD: usize = 32;

const HASH_MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// Seed of name hashes; a field's hash is seeded with its name's hash.
pub(crate) const NAME_SEED: u64 = 0x243f_6a88_85a3_08d3;

/// A fast multiplicative hash, eight bytes at a time. Its quality only decides how
/// long probes are: every hit is confirmed by comparing bytes.
#[inline]
pub(crate) fn hash(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed ^ (bytes.len() as u64).wrapping_mul(HASH_MULTIPLIER);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        h = (h ^ word).wrapping_mul(HASH_MULTIPLIER).rotate_left(29);
    }
    // The last 0 to 7 bytes, little-endian, read as two overlapping halves (bytes read
    // twice land on the same bits).
    let rest = words.remainder();
    let n = rest.len();
    let tail = if n >= 4 {
        let low = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes"));
        let high = u32::from_le_bytes(rest[n - 4..].try_into().expect("4 bytes"));
        u64::from(low) | u64::from(high) << ((n - 4) * 8)
    } else if n > 0 {
        u64::from(rest[0])
            | u64::from(rest[n / 2]) << (n / 2 * 8)
            | u64::from(rest[n - 1]) << ((n - 1) * 8)
    } else {
        0
    };
    (h ^ tail).wrapping_mul(HASH_MULTIPLIER)
}

/// [`hash`] as a `const fn`, byte by byte, to build the static name lookup at compile
/// time; a test checks that the two agree.
pub(crate) const fn const_hash(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed ^ (bytes.len() as u64).wrapping_mul(HASH_MULTIPLIER);
    let mut i = 0;
    while i + 8 <= bytes.len() {
        let mut word = 0u64;
        let mut j = 0;
        while j < 8 {
            word |= (bytes[i + j] as u64) << (8 * j);
            j += 1;
        }
        h = (h ^ word).wrapping_mul(HASH_MULTIPLIER).rotate_left(29);
        i += 8;
    }
    let mut tail = 0u64;
    let mut shift = 0;
    while i < bytes.len() {
        tail |= (bytes[i] as u64) << shift;
        shift += 8;
        i += 1;
    }
    (h ^ tail).wrapping_mul(HASH_MULTIPLIER)
}

/// The 16-bit tag of a name's hash that the hash indexes store: the best-mixed (top)
/// bits, odd, so never 0 (an empty slot) nor a field's tag.
pub(crate) const fn name_tag(hash: u64) -> u16 {
    (hash >> 48) as u16 | 1
}

/// The 16-bit tag of a field's hash: even and never 0, so never a name's tag and a name
/// key is never mistaken for a field key.
pub(crate) const fn field_tag(hash: u64) -> u16 {
    let tag = (hash >> 48) as u16 & !1;
    if tag == 0 {
        2
    } else {
        tag
    }
}

const STATIC_SLOTS: usize = 128;

/// Open addressing over the static table's distinct names (52 of them in 128 slots):
/// each slot holds the lowest HPACK index with that name, 0 if empty.
const STATIC_NAMES: [u8; STATIC_SLOTS] = static_names();

const fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn static_names() -> [u8; STATIC_SLOTS] {
    let mut slots = [0u8; STATIC_SLOTS];
    let mut i = 0;
    while i < STATIC_TABLE.len() {
        let name = STATIC_TABLE[i].0;
        if i == 0 || !bytes_eq(STATIC_TABLE[i - 1].0, name) {
            let mut slot = (name_tag(const_hash(NAME_SEED, name)) >> 1) as usize % STATIC_SLOTS;
            while slots[slot] != 0 {
                slot = (slot + 1) % STATIC_SLOTS;
            }
            slots[slot] = (i + 1) as u8;
        }
        i += 1;
    }
    slots
}

/// [`static_name`] as a `const fn`, by scanning: the lowest HPACK index whose name is
/// `name`, 0 if none.
pub(crate) const fn const_static_name(name: &[u8]) -> usize {
    let mut i = 0;
    while i < STATIC_TABLE.len() {
        if bytes_eq(STATIC_TABLE[i].0, name) {
            return i + 1;
        }
        i += 1;
    }
    0
}

/// The lowest HPACK index whose name is `name`, whose hash (seed [`NAME_SEED`]) is
/// `name_hash`.
pub(crate) fn static_name(name: &[u8], name_hash: u64) -> Option<usize> {
    let mut slot = usize::from(name_tag(name_hash) >> 1) % STATIC_SLOTS;
    loop {
        let index = usize::from(STATIC_NAMES[slot]);
        if index == 0 {
            return None;
        }
        if same(STATIC_TABLE[index - 1].0, name) {
            return Some(index);
        }
        slot = (slot + 1) % STATIC_SLOTS;
    }
}

/// For each HPACK index (position `i - 1`), the lowest index with the same name.
const NAME_GROUPS: [u8; STATIC_TABLE.len()] = name_groups();

const fn name_groups() -> [u8; STATIC_TABLE.len()] {
    let mut groups = [0u8; STATIC_TABLE.len()];
    let mut i = 0;
    while i < STATIC_TABLE.len() {
        groups[i] = if i > 0 && bytes_eq(STATIC_TABLE[i - 1].0, STATIC_TABLE[i].0) {
            groups[i - 1]
        } else {
            (i + 1) as u8
        };
        i += 1;
    }
    groups
}

/// The HPACK index of `(name, value)` in the static table, given `name_index`, the
/// lowest index with that name.
#[inline]
pub(crate) fn static_field(name_index: usize, value: &[u8]) -> Option<usize> {
    (name_index..=STATIC_TABLE.len())
        .take_while(|&i| usize::from(NAME_GROUPS[i - 1]) == name_index)
        .find(|&i| same(STATIC_TABLE[i - 1].1, value))
}

/// Whether two byte strings are equal: inline, for the short names and values of header
/// fields, where a call to `memcmp` costs more than the comparison (the encoder makes
/// several per field).
#[inline]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8"));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("4"));
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        8..=32 => {
            // Whole words, the last one overlapping the one before when `n` is not a
            // multiple of 8.
            let mut at = 0;
            while at + 8 < n {
                if word(a, at) != word(b, at) {
                    return false;
                }
                at += 8;
            }
            word(a, n - 8) == word(b, n - 8)
        }
        _ => a == b,
    }
}

/// One dynamic table entry: where its bytes are in the arena, and what the encoder's
/// index needs to find it again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    start: u32,
    name_len: u32,
    value_len: u32,
    /// Tag of the name's hash (encoder only; 0 in the decoder).
    pub(crate) name_tag: u16,
    /// Tag of the field's hash (encoder only; 0 in the decoder).
    pub(crate) field_tag: u16,
    /// Whether the encoder has referred to this whole field since inserting it.
    pub(crate) reused: bool,
}

impl Entry {
    /// The entry's size per RFC 7541 section 4.1.
    fn size(&self) -> usize {
        self.name_len as usize + self.value_len as usize + ENTRY_OVERHEAD
    }
}

/// Where a new entry's name comes from: bytes outside the table, or the name of an
/// entry already in it (which may be evicted by this very insertion; section 4.4).
pub(crate) enum NameRef<'a> {
    Bytes(&'a [u8]),
    Dynamic(usize),
}

/// The largest maximum size a table accepts; larger settings are clamped to it so that
/// arena offsets fit in `u32` with room for the 2x arena.
pub(crate) const MAX_TABLE_SIZE: usize = 1 << 30;

/// The dynamic table: entries newest first by index (index 1 is the newest), FIFO
/// eviction (section 4.4).
///
/// Memory: the arena never holds more than `2 * max_size` bytes and there is one
/// 20-byte record per entry, at most `max_size / 32` entries (the record queue may keep
/// up to twice that capacity after growing).
#[derive(Debug)]
pub(crate) struct DynamicTable {
    /// Oldest at the front.
    entries: VecDeque<Entry>,
    /// The entries' names and values, back to back in insertion order, from the oldest
    /// entry (or an evicted one not yet compacted away) to the newest.
    arena: Vec<u8>,
    size: usize,
    max_size: usize,
    /// Insertions ever made, wrapping: the newest entry is number `inserted - 1`.
    inserted: u32,
}

impl DynamicTable {
    pub(crate) fn new(max_size: usize) -> DynamicTable {
        DynamicTable {
            entries: VecDeque::new(),
            arena: Vec::new(),
            size: 0,
            max_size: max_size.min(MAX_TABLE_SIZE),
            inserted: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The sum of the entries' sizes (section 4.1).
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    pub(crate) fn max_size(&self) -> usize {
        self.max_size
    }

    /// Entry `index`, 1 being the newest.
    pub(crate) fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        let entry = self
            .entries
            .len()
            .checked_sub(index)
            .and_then(|i| self.entries.get(i))?;
        Some(self.bytes(entry))
    }

    fn bytes(&self, entry: &Entry) -> (&[u8], &[u8]) {
        let start = entry.start as usize;
        let middle = start + entry.name_len as usize;
        let end = middle + entry.value_len as usize;
        (&self.arena[start..middle], &self.arena[middle..end])
    }

    /// The record of entry `index`, 1 being the newest; `index` must be in range.
    pub(crate) fn entry(&self, index: usize) -> &Entry {
        &self.entries[self.entries.len() - index]
    }

    /// The record of entry `index`, 1 being the newest; `index` must be in range.
    pub(crate) fn entry_mut(&mut self, index: usize) -> &mut Entry {
        let i = self.entries.len() - index;
        &mut self.entries[i]
    }

    /// The index of entry `number` (its insertion number, truncated to 16 bits), if it
    /// is still in the table. Correct while the table holds fewer than 2^16 entries.
    pub(crate) fn index_of(&self, number: u16) -> Option<usize> {
        let index = usize::from((self.inserted as u16).wrapping_sub(number));
        (1..=self.entries.len()).contains(&index).then_some(index)
    }

    /// The insertion number (truncated to 16 bits) of entry `index`.
    pub(crate) fn number_of(&self, index: usize) -> u16 {
        (self.inserted as u16).wrapping_sub(index as u16)
    }

    /// Changes the maximum size, evicting the oldest entries until the table fits
    /// (section 4.3). `evicted` sees each evicted entry with its insertion number.
    pub(crate) fn set_max_size(&mut self, max_size: usize, evicted: impl FnMut(u16, &Entry)) {
        self.max_size = max_size.min(MAX_TABLE_SIZE);
        self.evict_to(self.max_size, evicted);
        if self.arena.len() > 2 * self.max_size || self.arena.capacity() > 2 * self.max_size {
            self.compact(usize::MAX);
            self.arena.shrink_to(2 * self.max_size);
            self.entries.shrink_to(self.max_size / ENTRY_OVERHEAD);
        }
    }

    fn evict_to(&mut self, target: usize, mut evicted: impl FnMut(u16, &Entry)) {
        while self.size > target {
            let number = self.number_of(self.entries.len());
            let entry = self.entries.pop_front().expect("size > 0 means an entry");
            self.size -= entry.size();
            evicted(number, &entry);
        }
    }

    /// Drops the arena's bytes before the oldest entry and before `keep_from`, moving
    /// the rest to the front; returns how far they moved.
    fn compact(&mut self, keep_from: usize) -> usize {
        let oldest = self
            .entries
            .front()
            .map_or(self.arena.len(), |e| e.start as usize);
        let drop = oldest.min(keep_from);
        if drop > 0 {
            self.arena.copy_within(drop.., 0);
            self.arena.truncate(self.arena.len() - drop);
            for entry in &mut self.entries {
                entry.start -= drop as u32;
            }
        }
        drop
    }

    /// Adds `(name, value)` as the newest entry (section 4.4), evicting the oldest ones
    /// to make room. An entry larger than the maximum size empties the table and is not
    /// added; returns whether it was.
    pub(crate) fn insert(
        &mut self,
        name: NameRef<'_>,
        value: &[u8],
        tags: (u16, u16),
        evicted: impl FnMut(u16, &Entry),
    ) -> bool {
        let (name_len, mut table_name) = match name {
            NameRef::Bytes(bytes) => (bytes.len(), None),
            NameRef::Dynamic(index) => {
                let entry = &self.entries[self.entries.len() - index];
                (entry.name_len as usize, Some(entry.start as usize))
            }
        };
        let size = name_len + value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            self.evict_to(0, evicted);
            self.arena.clear();
            return false;
        }
        // Evicting drops records only: a name referenced from an evicted entry is still
        // in the arena, and the compaction below keeps it.
        self.evict_to(self.max_size - size, evicted);
        let bytes = name_len + value.len();
        let limit = 2 * self.max_size;
        if self.arena.len() + bytes > limit {
            // The bytes from the name's (possibly evicted) entry onwards were all in the
            // table at once before this insertion, so they are at most `max_size` and the
            // new entry fits in the other half.
            let moved = self.compact(table_name.unwrap_or(usize::MAX));
            table_name = table_name.map(|start| start - moved);
        }
        let needed = self.arena.len() + bytes;
        if needed > self.arena.capacity() {
            let grown = needed.max(2 * self.arena.capacity()).min(limit);
            self.arena.reserve_exact(grown - self.arena.len());
        }
        let start = self.arena.len();
        match (name, table_name) {
            (NameRef::Bytes(bytes), _) => self.arena.extend_from_slice(bytes),
            (NameRef::Dynamic(_), Some(from)) => {
                self.arena.extend_from_within(from..from + name_len)
            }
            (NameRef::Dynamic(_), None) => unreachable!("a dynamic name has a start"),
        }
        self.arena.extend_from_slice(value);
        self.entries.push_back(Entry {
            start: start as u32,
            name_len: name_len as u32,
            value_len: value.len() as u32,
            name_tag: tags.0,
            field_tag: tags.1,
            reused: false,
        });
        self.size += size;
        self.inserted = self.inserted.wrapping_add(1);
        true
    }

    /// The entries, newest first (tests compare the two sides' tables).
    #[cfg(test)]
    pub(crate) fn fields(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.entries
            .iter()
            .rev()
            .map(|e| {
                let (name, value) = self.bytes(e);
                (name.to_vec(), value.to_vec())
            })
            .collect()
    }

    /// Heap bytes held (tests check the bounds).
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.arena.capacity() + self.entries.capacity() * std::mem::size_of::<Entry>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn same_is_equality(
            a in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            at in proptest::num::usize::ANY,
            flip in 1u8..=255,
            shorter in proptest::bool::ANY,
        ) {
            proptest::prop_assert!(same(&a, &a.clone()));
            if !a.is_empty() {
                // One byte differs, anywhere: at every length's branch.
                let mut b = a.clone();
                b[at % a.len()] ^= flip;
                proptest::prop_assert!(!same(&a, &b));
                if shorter {
                    proptest::prop_assert!(!same(&a, &a[..a.len() - 1]));
                }
            }
        }
    }

    #[test]
    fn static_name_finds_every_name_at_its_lowest_index() {
        for (i, (name, _)) in STATIC_TABLE.iter().enumerate() {
            let lowest = STATIC_TABLE.iter().position(|(n, _)| n == name).unwrap() + 1;
            assert_eq!(
                static_name(name, hash(NAME_SEED, name)),
                Some(lowest),
                "index {}",
                i + 1
            );
        }
        for name in [
            &b"x-powered-by"[..],
            b"",
            b":statu",
            b"content-type2",
            b"Content-Type",
        ] {
            assert_eq!(static_name(name, hash(NAME_SEED, name)), None);
        }
    }

    #[test]
    fn the_runtime_hash_matches_the_compile_time_one() {
        let bytes: Vec<u8> = (0..200u32).map(|i| (i * 37 + 11) as u8).collect();
        for start in 0..9 {
            for end in start..bytes.len() {
                let slice = &bytes[start..end];
                assert_eq!(hash(NAME_SEED, slice), const_hash(NAME_SEED, slice));
            }
        }
    }

    #[test]
    fn static_field_finds_exact_pairs_only() {
        assert_eq!(static_field(8, b"304"), Some(11));
        assert_eq!(static_field(8, b"302"), None);
        assert_eq!(static_field(2, b"POST"), Some(3));
        assert_eq!(static_field(16, b"gzip, deflate"), Some(16));
        assert_eq!(static_field(16, b"gzip"), None);
        assert_eq!(static_field(21, b""), Some(21));
    }

    fn insert(table: &mut DynamicTable, name: &[u8], value: &[u8]) -> bool {
        table.insert(NameRef::Bytes(name), value, (0, 0), |_, _| {})
    }

    #[test]
    fn evicts_oldest_first_and_refuses_oversized_entries() {
        let mut table = DynamicTable::new(100);
        assert!(insert(&mut table, b"a", b"1")); // 34
        assert!(insert(&mut table, b"b", b"2")); // 68
        assert!(insert(&mut table, b"c", b"3")); // 102 > 100: "a" goes
        assert_eq!(table.size(), 68);
        assert_eq!(table.get(1), Some((&b"c"[..], &b"3"[..])));
        assert_eq!(table.get(2), Some((&b"b"[..], &b"2"[..])));
        assert_eq!(table.get(3), None);
        assert!(!insert(&mut table, b"big", &[b'x'; 70]));
        assert_eq!((table.len(), table.size()), (0, 0));
    }

    #[test]
    fn a_name_from_an_entry_evicted_by_the_insertion_survives() {
        // RFC 7541 section 4.4: the new entry names the entry its insertion evicts.
        let mut table = DynamicTable::new(80);
        assert!(insert(&mut table, b"x-name", b"first-value"));
        for i in 0..50 {
            let value = format!("value-{i:04}-{}", "z".repeat(i % 7));
            let evicted = std::cell::Cell::new(0);
            assert!(
                table.insert(NameRef::Dynamic(1), value.as_bytes(), (0, 0), |_, _| {
                    evicted.set(evicted.get() + 1)
                })
            );
            assert_eq!(evicted.get(), 1);
            assert_eq!(
                table.fields(),
                vec![(b"x-name".to_vec(), value.into_bytes())]
            );
            assert!(table.arena.capacity() <= 160);
        }
    }

    #[test]
    fn arena_stays_within_twice_the_maximum() {
        let mut table = DynamicTable::new(4096);
        for i in 0..10_000usize {
            let value = vec![b'v'; i % 300];
            insert(&mut table, format!("n{}", i % 13).as_bytes(), &value);
            assert!(table.arena.len() <= 2 * 4096 && table.arena.capacity() <= 2 * 4096);
            assert!(table.size() <= 4096);
        }
        table.set_max_size(100, |_, _| {});
        assert!(table.arena.capacity() <= 200 && table.size() <= 100);
        table.set_max_size(0, |_, _| {});
        assert_eq!((table.len(), table.heap_bytes()), (0, 0));
    }

    #[test]
    fn numbers_map_back_to_indices() {
        let mut table = DynamicTable::new(1000);
        for i in 0..5u8 {
            insert(&mut table, &[b'a' + i], b"");
        }
        for index in 1..=5 {
            assert_eq!(table.index_of(table.number_of(index)), Some(index));
        }
        assert_eq!(table.index_of(table.number_of(6)), None);
        assert_eq!(table.index_of(table.number_of(0)), None);
    }
}
