//! The HPACK decoder (RFC 7541 sections 3, 4 and 6): one complete header block in,
//! borrowed `(name, value)` pairs out through a callback.

use super::error::HpackError;
use super::huffman;
use super::primitive::decode_integer;
use super::table::{
    DynamicTable, NameRef, DYNAMIC_BASE, ENTRY_OVERHEAD, MAX_TABLE_SIZE, STATIC_TABLE,
};

/// Scratch capacity kept between blocks. Huffman-decoded strings of a field live in the
/// scratch buffer while the callback sees them; a block with longer strings grows it for
/// that call and it is cut back to this afterwards, so an idle connection holds at most
/// this much. 8 KiB covers the requests of real browsers (long cookies included).
pub(crate) const SCRATCH_RETAINED: usize = 8 * 1024;

/// Decodes header blocks from one peer, keeping its dynamic table (RFC 7541 section
/// 2.3.2) in step with the peer's encoder.
///
/// Memory is bounded by the table size we allow, `T` (the SETTINGS_HEADER_TABLE_SIZE we
/// announced, at most 2^30), and by the block being decoded, never by how often a block
/// refers to an entry: the table's byte arena holds at most `2 * T` bytes plus one
/// 20-byte record per entry (at most `T / 32` entries); the scratch buffer holds the
/// Huffman-decoded name and value of one field, at most `8/5` of their encoded length
/// (so at most `8/5` of the block), and is cut back to 8 KiB after each block. Literal
/// strings that are not Huffman-coded are lent straight out of the block.
#[derive(Debug)]
pub struct Decoder {
    table: DynamicTable,
    /// The largest table size our setting allows the peer to choose.
    max_allowed: usize,
    /// Set when our setting went below the table's size: the next block must open with
    /// an update to at most this (the smallest setting since the last block).
    required_update: Option<usize>,
    scratch: Vec<u8>,
    /// The scratch buffer's capacity at the end of the last block, before it was cut
    /// back: its largest during that block (tests check the bound).
    #[cfg(test)]
    peak_scratch: usize,
}

/// What [`Decoder::decode`] found besides the fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decoded {
    /// The header list size of the whole block per RFC 9113 section 6.5.2 (each field's
    /// name and value lengths plus 32), saturating, counted even past the limit so that
    /// the caller can log it.
    pub list_size: usize,
    /// Whether `list_size` went past the caller's `max_list_size`. The callback was not
    /// called for the field that crossed the limit nor for any after it, but the block
    /// was decoded to its end, so the dynamic table is in step and the connection can go
    /// on: answer the stream 431 or reset it.
    pub list_too_large: bool,
}

/// Why [`Decoder::decode`] failed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError<E> {
    /// The block breaks HPACK: a connection error of type COMPRESSION_ERROR (RFC 9113
    /// section 4.3). The dynamic table is no longer in step with the peer's.
    #[error(transparent)]
    Compression(#[from] HpackError),
    /// The callback refused a field with this error. The rest of the block was still
    /// decoded (without further calls), so the dynamic table is in step and the caller
    /// may treat this as a stream error.
    #[error("header field refused: {0}")]
    Refused(E),
}

/// A string of the current field: a range of the block or of the scratch buffer.
#[derive(Debug, Clone, Copy)]
enum Span {
    Block(usize, usize),
    Scratch(usize, usize),
}

impl Span {
    fn get<'a>(self, block: &'a [u8], scratch: &'a [u8]) -> &'a [u8] {
        match self {
            Span::Block(start, end) => &block[start..end],
            Span::Scratch(start, end) => &scratch[start..end],
        }
    }
}

/// A literal field's name: a (checked) HPACK index or a string.
#[derive(Debug, Clone, Copy)]
enum Name {
    Indexed(usize),
    Literal(Span),
}

/// The header list size accounting and the callback's state for one block.
struct Sink<E> {
    max_list_size: usize,
    list_size: usize,
    too_large: bool,
    refused: Option<E>,
}

impl<E> Sink<E> {
    fn deliver(
        &mut self,
        name: &[u8],
        value: &[u8],
        field: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        self.list_size = self.list_size.saturating_add(size);
        self.too_large |= self.list_size > self.max_list_size;
        if !self.too_large && self.refused.is_none() {
            if let Err(error) = field(name, value) {
                self.refused = Some(error);
            }
        }
    }
}

impl Decoder {
    /// A decoder whose peer may use a dynamic table of up to `max_table_size` bytes: the
    /// SETTINGS_HEADER_TABLE_SIZE we announce (RFC 9113 section 6.5.2). The table starts
    /// at that size. Until the peer acknowledges our SETTINGS it may use the protocol's
    /// initial 4096 (RFC 9113 section 6.5.3), so a server that announces less should
    /// start with `new(4096)` and call [`set_max_table_size`](Self::set_max_table_size)
    /// with its value when the acknowledgement arrives. Allocates nothing until the
    /// first block that needs it.
    pub fn new(max_table_size: usize) -> Decoder {
        let max_table_size = max_table_size.min(MAX_TABLE_SIZE);
        Decoder {
            table: DynamicTable::new(max_table_size),
            max_allowed: max_table_size,
            required_update: None,
            scratch: Vec::new(),
            #[cfg(test)]
            peak_scratch: 0,
        }
    }

    /// Our SETTINGS_HEADER_TABLE_SIZE changed to `max_table_size` (call it when the peer
    /// acknowledges the SETTINGS frame). Later size updates may not exceed it. If it is
    /// below the table's current maximum, the next block must open with a size update to
    /// at most the smallest value set since the last block (RFC 7541 section 4.2),
    /// else [`HpackError::SizeUpdateMissing`].
    pub fn set_max_table_size(&mut self, max_table_size: usize) {
        let max_table_size = max_table_size.min(MAX_TABLE_SIZE);
        self.max_allowed = max_table_size;
        if max_table_size < self.table.max_size() {
            let smallest = self
                .required_update
                .map_or(max_table_size, |r| r.min(max_table_size));
            self.required_update = Some(smallest);
        }
    }

    /// The largest dynamic table size the peer may choose (our current setting).
    pub fn max_table_size(&self) -> usize {
        self.max_allowed
    }

    /// The dynamic table's current maximum size, as the peer last set it (or the
    /// initial setting).
    pub fn table_max_size(&self) -> usize {
        self.table.max_size()
    }

    /// The dynamic table's current size: its entries' sizes per RFC 7541 section 4.1.
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// Whether the next block must open with a dynamic table size update, because our
    /// setting went below the table's size (RFC 7541 section 4.2).
    pub fn size_update_required(&self) -> bool {
        self.required_update.is_some()
    }

    /// Decodes one complete header block (a HEADERS or PUSH_PROMISE fragment and all
    /// its CONTINUATION fragments, joined) and calls `field(name, value)` for each field
    /// in order.
    ///
    /// Why a callback with borrowed slices rather than a list or an iterator: names and
    /// values come from the static table, the dynamic table, the block itself or the
    /// decoder's scratch buffer, and they are only valid until the next field changes
    /// the table or the scratch buffer, so the caller copies what it keeps (into its own
    /// request head, where it validates the field anyway) and the decoder allocates
    /// nothing per field. The callback may refuse a field with its own error `E`: no
    /// more calls follow, the block is still decoded to its end so the dynamic table
    /// stays in step, and the error comes back as [`DecodeError::Refused`].
    ///
    /// Past `max_list_size` (the SETTINGS_MAX_HEADER_LIST_SIZE we announced; RFC 9113
    /// section 6.5.2 counts name + value + 32 per field) the callback is no longer
    /// called, the block is still decoded to its end, and [`Decoded::list_too_large`]
    /// says so. A block that refers to one large entry many times costs time in
    /// proportion to its length and no memory.
    ///
    /// Dynamic table size updates are accepted only at the start of the block, each at
    /// most [`max_table_size`](Self::max_table_size). Any [`HpackError`] leaves the
    /// table out of step: end the connection with COMPRESSION_ERROR. It wins over a
    /// refusal, which wins over [`Decoded::list_too_large`].
    ///
    /// Whether a literal was marked never indexed (section 6.2.3) is not passed on: it
    /// binds only an intermediary that encodes the field again with HPACK.
    pub fn decode<E>(
        &mut self,
        block: &[u8],
        max_list_size: usize,
        mut field: impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<Decoded, DecodeError<E>> {
        let mut sink = Sink {
            max_list_size,
            list_size: 0,
            too_large: false,
            refused: None,
        };
        let result = self.decode_block(block, &mut sink, &mut field);
        self.scratch.clear();
        #[cfg(test)]
        {
            self.peak_scratch = self.scratch.capacity();
        }
        if self.scratch.capacity() > SCRATCH_RETAINED {
            self.scratch.shrink_to(SCRATCH_RETAINED);
        }
        result?;
        match sink.refused {
            Some(error) => Err(DecodeError::Refused(error)),
            None => Ok(Decoded {
                list_size: sink.list_size,
                list_too_large: sink.too_large,
            }),
        }
    }

    fn decode_block<E>(
        &mut self,
        block: &[u8],
        sink: &mut Sink<E>,
        field: &mut impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), HpackError> {
        let mut pos = self.size_updates(block)?;
        while pos < block.len() {
            let first = block[pos];
            if first & 0x80 != 0 {
                // Indexed field (section 6.1).
                let index = decode_integer(block, &mut pos, 7)?;
                check_index(index, &self.table)?;
                let (name, value) = lookup(&self.table, index);
                sink.deliver(name, value, field);
                continue;
            }
            // Literal field (section 6.2): with incremental indexing (01), or without
            // indexing (0000) or never indexed (0001), which decode alike.
            let (prefix_bits, indexing) = match first >> 4 {
                4..=7 => (6, true),
                2 | 3 => return Err(HpackError::SizeUpdateAfterField),
                _ => (4, false),
            };
            self.scratch.clear();
            let index = decode_integer(block, &mut pos, prefix_bits)?;
            let name = if index == 0 {
                Name::Literal(read_string(block, &mut pos, &mut self.scratch)?)
            } else {
                check_index(index, &self.table)?;
                Name::Indexed(index)
            };
            let value = read_string(block, &mut pos, &mut self.scratch)?;
            let value = value.get(block, &self.scratch);
            let name_bytes = match name {
                Name::Indexed(index) => lookup(&self.table, index).0,
                Name::Literal(span) => span.get(block, &self.scratch),
            };
            sink.deliver(name_bytes, value, field);
            if indexing {
                let name = match name {
                    Name::Indexed(index) if index >= DYNAMIC_BASE => {
                        NameRef::Dynamic(index - DYNAMIC_BASE + 1)
                    }
                    Name::Indexed(index) => NameRef::Bytes(STATIC_TABLE[index - 1].0),
                    Name::Literal(span) => NameRef::Bytes(span.get(block, &self.scratch)),
                };
                self.table.insert(name, value, (0, 0), |_, _| {});
            }
        }
        Ok(())
    }

    /// Applies the size updates (section 6.3) that open `block` and checks the one our
    /// settings require; returns where the fields start.
    fn size_updates(&mut self, block: &[u8]) -> Result<usize, HpackError> {
        let mut pos = 0;
        let mut smallest: Option<usize> = None;
        while pos < block.len() && block[pos] & 0xe0 == 0x20 {
            let size = decode_integer(block, &mut pos, 5)?;
            if size > self.max_allowed {
                return Err(HpackError::SizeUpdateTooLarge {
                    size,
                    max: self.max_allowed,
                });
            }
            self.table.set_max_size(size, |_, _| {});
            smallest = Some(smallest.map_or(size, |s| s.min(size)));
        }
        if let Some(max) = self.required_update {
            match smallest {
                Some(size) if size <= max => self.required_update = None,
                _ => return Err(HpackError::SizeUpdateMissing { max }),
            }
        }
        Ok(pos)
    }

    /// The table, the scratch buffer and the scratch buffer's peak capacity during the
    /// last block (tests check the memory bounds).
    #[cfg(test)]
    pub(crate) fn parts(&self) -> (&DynamicTable, &Vec<u8>, usize) {
        (&self.table, &self.scratch, self.peak_scratch)
    }
}

/// Refuses index 0 and indices past the dynamic table's last entry (section 2.3.3).
fn check_index(index: usize, table: &DynamicTable) -> Result<(), HpackError> {
    if index == 0 {
        return Err(HpackError::IndexZero);
    }
    if index >= DYNAMIC_BASE + table.len() {
        return Err(HpackError::IndexOutOfRange {
            index,
            dynamic: table.len(),
        });
    }
    Ok(())
}

/// The field at a checked HPACK index.
fn lookup(table: &DynamicTable, index: usize) -> (&[u8], &[u8]) {
    if index < DYNAMIC_BASE {
        STATIC_TABLE[index - 1]
    } else {
        table
            .get(index - DYNAMIC_BASE + 1)
            .expect("check_index bounds the index")
    }
}

/// Reads a string literal (section 5.2) at `*pos`; Huffman-coded ones are decoded onto
/// the end of `scratch`.
fn read_string(block: &[u8], pos: &mut usize, scratch: &mut Vec<u8>) -> Result<Span, HpackError> {
    let Some(&first) = block.get(*pos) else {
        return Err(HpackError::Truncated);
    };
    let len = decode_integer(block, pos, 7)?;
    let left = block.len() - *pos;
    if len > left {
        return Err(HpackError::StringOverrun { len, left });
    }
    let start = *pos;
    *pos += len;
    if first & 0x80 == 0 {
        return Ok(Span::Block(start, *pos));
    }
    let decoded_start = scratch.len();
    huffman::decode(&block[start..*pos], scratch)?;
    Ok(Span::Scratch(decoded_start, scratch.len()))
}
