//! The HPACK encoder (RFC 7541 sections 4, 6 and 7) for the blocks a server sends:
//! responses and trailers.
//!
//! Indexing policy, per field, in order:
//!
//! 1. Sensitive fields are literals never indexed (section 6.2.3), with an indexed name
//!    when there is one, and are not looked up in the dynamic table: `authorization`,
//!    `proxy-authorization`, `cookie`, `set-cookie`, and whatever the caller passes to
//!    [`Block::field_never_indexed`]. `set-cookie` is among them because its value is
//!    usually a session secret, and a response can also carry values an attacker
//!    chooses (a reflected header), which is the setting for guessing a secret from the
//!    compressed size (section 7.1); never indexed also tells an HTTP/2 intermediary not
//!    to index it either.
//! 2. Values that differ in almost every response are literals without indexing with
//!    the static name: `content-length`, `content-range`, `age`. Indexing them would only
//!    push out entries that do repeat.
//! 3. Otherwise a field in the static table (`:status: 200`, ...) or in the dynamic table
//!    is one indexed byte (two past index 126). The dynamic table is searched through a
//!    hash index (`index.rs`), not by scanning.
//! 4. Otherwise a literal with incremental indexing, so that the next response's same
//!    field is one byte: always for `:status` (a repeated 301 or 403), and for other
//!    names when the entry takes at most 3/4 of the table and either no entry with this
//!    name is in the table or the newest one has been reused since it was inserted.
//!    That last test keeps per-response values (request ids, per-file `etag`s, a `date`
//!    on a connection with one response per second) from churning the table: the first
//!    value of a name is indexed; a second, different value is indexed only if the
//!    first one paid off. `date` on a busy connection is indexed once per second and
//!    then hit by every response in that second.
//!
//! Names come from the static table when they are in it, else from the dynamic table,
//! else as a literal. Strings are Huffman-coded only when that is shorter.

use super::index::Index;
use super::names;
use super::primitive::{encode_integer, encode_string};
use super::table::{self, DynamicTable, Entry, NameRef, DYNAMIC_BASE, ENTRY_OVERHEAD, NAME_SEED};

/// The protocol's initial table size (RFC 9113 section 6.5.2), and the default cap.
const DEFAULT_TABLE_SIZE: usize = 4096;

/// The largest cap [`Encoder::with_limit`] takes: 64 KiB, at most 2048 entries, which
/// the index's 16-bit tags and entry numbers address comfortably. Larger tables buy
/// little for responses.
const MAX_LIMIT: usize = 1 << 16;

// Static table indices of names with a fixed policy.
const STATUS: usize = 8;
const AGE: usize = 21;
const AUTHORIZATION: usize = 23;
const CONTENT_LENGTH: usize = 28;
const CONTENT_RANGE: usize = 30;
const COOKIE: usize = 32;
const PROXY_AUTHORIZATION: usize = 49;
const SET_COOKIE: usize = 55;

/// Encodes header blocks for one peer, keeping a dynamic table that mirrors the peer's
/// decoder.
///
/// The table's size is the peer's SETTINGS_HEADER_TABLE_SIZE capped at the encoder's
/// limit (4096 by default: the size every peer starts with, and enough for the fields
/// that repeat across responses). Memory is fixed by that limit `L`: a byte arena of at
/// most `2 * L`, one 20-byte record per entry (at most `L / 32`), and a hash index of
/// 4-byte slots, at most four per possible entry (2 KiB for 4096), which starts at 64
/// bytes and doubles as the table fills (`index.rs`). Once the arena and the index have
/// grown, encoding allocates nothing beyond what `out` needs.
#[derive(Debug)]
pub struct Encoder {
    table: DynamicTable,
    index: Index,
    limit: usize,
    /// The smallest table size set since the last block, if it changed: the next block
    /// opens with it and, if larger, the current size (section 4.2).
    pending_min: Option<usize>,
    /// Scratch for lower-casing a name [`Block::field_any_case`] does not recognise.
    lower: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder::new()
    }
}

/// Whether to index a literal, and how to write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    /// Look it up; if new, insert it.
    Index,
    /// Look it up; if new, insert it when the heuristic in the module docs says so.
    Auto,
    /// A literal without indexing, not looked up.
    NoIndex,
    /// A literal never indexed, not looked up.
    Never,
}

impl Encoder {
    /// An encoder with the initial 4096-byte dynamic table (RFC 7541 section 4.2 via
    /// RFC 9113 section 6.5.2) and a cap of 4096 on what the peer may later allow.
    pub fn new() -> Encoder {
        Encoder::with_limit(DEFAULT_TABLE_SIZE)
    }

    /// An encoder that never uses a dynamic table larger than `limit` bytes, however
    /// large the peer allows (at most 64 KiB). The table starts at `min(limit, 4096)`,
    /// and if `limit` is below 4096 the first block tells the peer so.
    pub fn with_limit(limit: usize) -> Encoder {
        let limit = limit.min(MAX_LIMIT);
        let initial = limit.min(DEFAULT_TABLE_SIZE);
        Encoder {
            table: DynamicTable::new(initial),
            index: Index::new(limit),
            limit,
            pending_min: (initial < DEFAULT_TABLE_SIZE).then_some(initial),
            lower: Vec::new(),
        }
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE took effect (call it when the peer's
    /// SETTINGS frame arrives, before acknowledging it). The table's size becomes
    /// `min(size, limit)`; entries that no longer fit are evicted now, and the next
    /// block opens with the size update(s) RFC 7541 section 4.2 requires: the smallest
    /// size since the last block, then the final one if larger.
    pub fn set_max_table_size(&mut self, size: usize) {
        let size = size.min(self.limit);
        if size == self.table.max_size() && self.pending_min.is_none() {
            return;
        }
        let smallest = self.pending_min.map_or(size, |m| m.min(size));
        self.pending_min = Some(smallest);
        let index = &mut self.index;
        self.table
            .set_max_size(size, |number, entry| forget(index, number, entry));
    }

    /// The dynamic table's current maximum size.
    pub fn table_max_size(&self) -> usize {
        self.table.max_size()
    }

    /// The dynamic table's current size: its entries' sizes per RFC 7541 section 4.1.
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// Starts a response's header block: any pending size updates, then `:status`
    /// (one byte for 200, 204, 206, 304, 400, 404 and 500, and for other codes once
    /// they are in the dynamic table). Add the other fields with [`Block::field`].
    /// Pseudo-header fields come first in HTTP/2 (RFC 9113 section 8.3), so `:status` is
    /// written here and nowhere else.
    pub fn response<'a>(&'a mut self, status: u16, out: &'a mut Vec<u8>) -> Block<'a> {
        debug_assert!(
            (100..=999).contains(&status),
            "status {status} is not three digits"
        );
        let mut block = self.block(out);
        let index = match status {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => 0,
        };
        if index != 0 {
            block.out.push(0x80 | index);
        } else {
            let digits = [
                b'0' + (status / 100 % 10) as u8,
                b'0' + (status / 10 % 10) as u8,
                b'0' + (status % 10) as u8,
            ];
            block.encode(b":status", &digits, Some(STATUS), Policy::Index);
        }
        block
    }

    /// Starts a header block with no pseudo-header fields (trailers), or one whose
    /// pseudo-header fields the caller writes with [`Block::field`] (a request, in
    /// tests). Writes any pending size updates first, as section 4.2 requires.
    pub fn block<'a>(&'a mut self, out: &'a mut Vec<u8>) -> Block<'a> {
        let start = out.len();
        if let Some(smallest) = self.pending_min.take() {
            if smallest < self.table.max_size() {
                encode_integer(out, 0x20, 5, smallest);
            }
            encode_integer(out, 0x20, 5, self.table.max_size());
        }
        Block {
            encoder: self,
            out,
            start,
        }
    }

    /// The table's entries newest first, and the index's keys (tests check that the
    /// table mirrors the decoder's and that the index matches the table).
    #[cfg(test)]
    pub(crate) fn parts(&self) -> (&DynamicTable, &Index) {
        (&self.table, &self.index)
    }
}

/// The indexing policy of a name, from its static table index (module docs).
fn policy(static_name: Option<usize>) -> Policy {
    match static_name {
        Some(STATUS) => Policy::Index,
        Some(AUTHORIZATION | PROXY_AUTHORIZATION | COOKIE | SET_COOKIE) => Policy::Never,
        Some(CONTENT_LENGTH | CONTENT_RANGE | AGE) => Policy::NoIndex,
        _ => Policy::Auto,
    }
}

/// Removes an evicted entry's keys from the index.
fn forget(index: &mut Index, number: u16, entry: &Entry) {
    index.remove(entry.field_tag, number);
    // Only present if no newer entry with the same name took the name key over.
    index.remove(entry.name_tag, number);
}

/// One header block being written: borrows the encoder, so that no settings change can
/// fall between its fields, and the output, to which it appends. Made by
/// [`Encoder::response`] or [`Encoder::block`]; the block ends with
/// [`finish`](Block::finish) or when it is dropped.
#[derive(Debug)]
pub struct Block<'a> {
    encoder: &'a mut Encoder,
    out: &'a mut Vec<u8>,
    /// `out.len()` when the block began.
    start: usize,
}

impl Block<'_> {
    /// Ends the block; returns its length in bytes (what the HEADERS frame and its
    /// CONTINUATIONs carry).
    pub fn finish(self) -> usize {
        self.out.len() - self.start
    }

    /// Adds a field. `name` must be lower case (RFC 9113 section 8.2.1); the caller
    /// validates names and values. Indexing follows the policy in the module docs.
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        debug_assert!(
            !name.iter().any(u8::is_ascii_uppercase),
            "upper case in a field name"
        );
        let name_hash = table::hash(NAME_SEED, name);
        let static_name = table::static_name(name, name_hash);
        self.encode_hashed(name, name_hash, value, static_name, policy(static_name));
    }

    /// [`field`](Block::field) for a name in any case, as an HTTP/1 head spells it
    /// (`Content-Type`): sent in lower case. The names most responses carry are
    /// recognised without lower-casing or hashing them (`names.rs`).
    pub fn field_any_case(&mut self, name: &[u8], value: &[u8]) {
        if let Some(known) = names::recognize(name) {
            let policy = policy(known.static_index);
            self.encode_hashed(known.lower, known.hash, value, known.static_index, policy);
        } else if name.iter().any(u8::is_ascii_uppercase) {
            let mut lower = std::mem::take(&mut self.encoder.lower);
            lower.clear();
            lower.extend(name.iter().map(u8::to_ascii_lowercase));
            self.field(&lower, value);
            self.encoder.lower = lower;
        } else {
            self.field(name, value);
        }
    }

    /// Adds a field as a literal never indexed (RFC 7541 section 6.2.3): for values that
    /// must not be recoverable from the compression context, such as credentials and
    /// tokens, and which an intermediary must not index either.
    pub fn field_never_indexed(&mut self, name: &[u8], value: &[u8]) {
        let name_hash = table::hash(NAME_SEED, name);
        let static_name = table::static_name(name, name_hash);
        self.encode_hashed(name, name_hash, value, static_name, Policy::Never);
    }

    fn encode(&mut self, name: &[u8], value: &[u8], static_name: Option<usize>, policy: Policy) {
        let name_hash = table::hash(NAME_SEED, name);
        self.encode_hashed(name, name_hash, value, static_name, policy);
    }

    fn encode_hashed(
        &mut self,
        name: &[u8],
        name_hash: u64,
        value: &[u8],
        static_name: Option<usize>,
        policy: Policy,
    ) {
        let encoder = &mut *self.encoder;
        let out = &mut *self.out;
        let lookup = matches!(policy, Policy::Index | Policy::Auto);
        let mut field_tag = 0;
        if lookup {
            if let Some(index) = static_name.and_then(|n| table::static_field(n, value)) {
                encode_integer(out, 0x80, 7, index);
                return;
            }
            if encoder.table.len() > 0 {
                field_tag = table::field_tag(table::hash(name_hash, value));
                let table = &encoder.table;
                let found = encoder.index.find(field_tag, |number| {
                    table
                        .index_of(number)
                        .and_then(|i| table.get(i))
                        .is_some_and(|(n, v)| table::same(v, value) && table::same(n, name))
                });
                if let Some(index) = found.and_then(|number| table.index_of(number)) {
                    encoder.table.entry_mut(index).reused = true;
                    encode_integer(out, 0x80, 7, DYNAMIC_BASE - 1 + index);
                    return;
                }
            }
        }

        // A literal. The newest entry with this name gives the name's index when it is
        // not in the static table, and tells the heuristic whether the name's values
        // repeat.
        let name_tag = table::name_tag(name_hash);
        let newest_same_name = match (static_name, policy) {
            (Some(_), Policy::Index | Policy::NoIndex | Policy::Never) => None,
            _ if encoder.table.len() == 0 => None,
            _ => find_name(encoder, name_tag, name),
        };
        let name_index = static_name.or(newest_same_name.map(|i| DYNAMIC_BASE - 1 + i));
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        let fits = size <= encoder.table.max_size() / 4 * 3;
        let indexing = match policy {
            Policy::Index => fits,
            Policy::Auto => {
                fits && match newest_same_name {
                    Some(index) => encoder.table.entry(index).reused,
                    None => true,
                }
            }
            Policy::NoIndex | Policy::Never => false,
        };
        let (flags, prefix_bits) = match (indexing, policy) {
            (true, _) => (0x40, 6),
            (false, Policy::Never) => (0x10, 4),
            (false, _) => (0x00, 4),
        };
        match name_index {
            Some(index) => encode_integer(out, flags, prefix_bits, index),
            None => {
                out.push(flags);
                encode_string(out, name);
            }
        }
        encode_string(out, value);
        if indexing {
            if field_tag == 0 {
                field_tag = table::field_tag(table::hash(name_hash, value));
            }
            let index = &mut encoder.index;
            let inserted = encoder.table.insert(
                NameRef::Bytes(name),
                value,
                (name_tag, field_tag),
                |number, entry| forget(index, number, entry),
            );
            debug_assert!(inserted, "only entries that fit are indexed");
            let number = encoder.table.number_of(1);
            let table = &encoder.table;
            index.insert(field_tag, number, |_| false);
            index.insert(name_tag, number, |old| {
                table
                    .index_of(old)
                    .and_then(|i| table.get(i))
                    .is_some_and(|(n, _)| table::same(n, name))
            });
        }
    }
}

/// The dynamic index (1 = newest) of the newest entry named `name`.
fn find_name(encoder: &Encoder, name_tag: u16, name: &[u8]) -> Option<usize> {
    let table = &encoder.table;
    let number = encoder.index.find(name_tag, |number| {
        table
            .index_of(number)
            .and_then(|i| table.get(i))
            .is_some_and(|(n, _)| table::same(n, name))
    })?;
    table.index_of(number)
}
