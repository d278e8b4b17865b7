//! The one error of HPACK decoding: a header block that breaks RFC 7541.

/// A header block that breaks RFC 7541. Each one is a connection error of type
/// COMPRESSION_ERROR (RFC 9113 section 4.3): the peer's dynamic table and ours can no
/// longer be trusted to agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HpackError {
    /// An indexed field (section 6.1) with index 0, which names no entry.
    #[error("HPACK index 0 is not a valid index")]
    IndexZero,
    /// An index beyond the static table plus the dynamic table's current entries
    /// (section 2.3.3).
    #[error("HPACK index {index} is beyond the tables (61 static + {dynamic} dynamic entries)")]
    IndexOutOfRange {
        /// The index in the block.
        index: usize,
        /// How many entries the dynamic table held at that point.
        dynamic: usize,
    },
    /// An integer (section 5.1) above `u32::MAX` or with more than five continuation
    /// bytes: no length, index or table size in a sane block needs more.
    #[error("HPACK integer overflows or has too many continuation bytes")]
    IntegerOverflow,
    /// A string literal (section 5.2) whose length runs past the end of the block.
    #[error("HPACK string of {len} bytes runs past the end of the block ({left} bytes left)")]
    StringOverrun {
        /// The length the string claims.
        len: usize,
        /// The bytes left in the block after its length.
        left: usize,
    },
    /// The block ends inside an integer or before a representation's string.
    #[error("HPACK block ends inside a field representation")]
    Truncated,
    /// A Huffman string that contains the EOS symbol (section 5.2).
    #[error("HPACK Huffman string contains the EOS symbol")]
    HuffmanEos,
    /// A Huffman string with padding longer than 7 bits (section 5.2).
    #[error("HPACK Huffman padding is longer than 7 bits")]
    HuffmanPaddingTooLong,
    /// A Huffman string whose padding is not the most significant bits of EOS, i.e. not
    /// all ones (section 5.2).
    #[error("HPACK Huffman padding is not all ones")]
    HuffmanPaddingNotOnes,
    /// A dynamic table size update above the SETTINGS_HEADER_TABLE_SIZE we allow
    /// (section 6.3).
    #[error("HPACK dynamic table size update to {size} exceeds the allowed {max}")]
    SizeUpdateTooLarge {
        /// The size the update asks for.
        size: usize,
        /// The largest size our setting allows.
        max: usize,
    },
    /// A dynamic table size update after the first field of the block; updates may only
    /// open a block (section 4.2).
    #[error("HPACK dynamic table size update after a field")]
    SizeUpdateAfterField,
    /// The first block after we lowered SETTINGS_HEADER_TABLE_SIZE below the table's
    /// size does not open with an update to at most the new limit (section 4.2).
    #[error("HPACK block lacks the dynamic table size update to at most {max} that our settings require")]
    SizeUpdateMissing {
        /// The smallest limit set since the last block.
        max: usize,
    },
}
