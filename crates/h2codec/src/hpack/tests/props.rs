//! Property tests: encoder to decoder round trips with table size changes, the decoder
//! against a plain model of RFC 7541 on random representations, and arbitrary bytes.

use std::collections::VecDeque;

use proptest::prelude::*;

use super::super::decoder::SCRATCH_RETAINED;
use super::super::table::Entry;
use super::super::{huffman, primitive::encode_integer};
use super::*;

/// The decoder's heap bound for a table of `max` bytes (see `Decoder`'s docs): the
/// arena plus the record queue, which may have grown to twice the most entries.
fn table_bound(max: usize) -> usize {
    2 * max + (2 * (max / 32) + 8) * std::mem::size_of::<Entry>()
}

const NAMES: &[&str] = &[
    "content-type",
    "content-length",
    "cache-control",
    "date",
    "etag",
    "server",
    "set-cookie",
    "cookie",
    "authorization",
    "vary",
    "x-request-id",
    ":path",
    "accept-encoding",
];

const VALUES: &[&str] = &[
    "",
    "text/html",
    "gzip, deflate",
    "no-cache",
    "tessera",
    "1234",
    "\"abc\"",
];

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(NAMES).prop_map(|n| n.as_bytes().to_vec()),
        2 => "[a-z0-9-]{1,12}".prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..8)
            .prop_map(|n| n.to_ascii_lowercase()),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(VALUES).prop_map(|v| v.as_bytes().to_vec()),
        4 => prop::collection::vec(any::<u8>(), 0..40),
        1 => prop::collection::vec(any::<u8>(), 0..5000),
    ]
}

#[derive(Debug, Clone)]
enum Step {
    /// A block: an optional status (a response), then fields, each maybe sensitive.
    Block(Option<u16>, Vec<(Vec<u8>, Vec<u8>, bool)>),
    /// Our decoder's setting changes, and the encoder hears of it.
    Resize(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let status = prop_oneof![
        Just(None),
        prop::sample::select(vec![200u16, 204, 301, 302, 304, 403, 404, 500, 503]).prop_map(Some),
    ];
    let field = (name(), value(), prop::bool::weighted(0.1));
    prop_oneof![
        6 => (status, prop::collection::vec(field, 0..12)).prop_map(|(s, f)| Step::Block(s, f)),
        1 => prop::sample::select(vec![0usize, 1, 40, 100, 256, 1000, 4096, 8192, 65536])
            .prop_map(Step::Resize),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn encoder_to_decoder_round_trips(steps in prop::collection::vec(step(), 1..24)) {
        let mut encoder = Encoder::new();
        let mut decoder = Decoder::new(4096);
        for step in steps {
            match step {
                Step::Resize(size) => {
                    decoder.set_max_table_size(size);
                    encoder.set_max_table_size(size);
                }
                Step::Block(status, list) => {
                    let mut out = Vec::new();
                    let mut expected = Fields::new();
                    let mut block = match status {
                        Some(code) => {
                            expected.push((b":status".to_vec(), code.to_string().into_bytes()));
                            encoder.response(code, &mut out)
                        }
                        None => encoder.block(&mut out),
                    };
                    for (name, value, sensitive) in &list {
                        if *sensitive {
                            block.field_never_indexed(name, value);
                        } else {
                            block.field(name, value);
                        }
                        expected.push((name.clone(), value.clone()));
                    }
                    block.finish();
                    prop_assert_eq!(decode(&mut decoder, &out).unwrap(), expected);
                    prop_assert_eq!(encoder_table(&encoder), decoder_table(&decoder));
                    prop_assert_eq!(encoder.table_size(), decoder.table_size());
                    prop_assert!(encoder.table_size() <= encoder.table_max_size());
                    check_index(&encoder);
                }
            }
        }
    }
}

/// An index as generated: static, one of the dynamic entries present when it is
/// written (a static one if there are none), or any number (0 and out of range
/// included).
#[derive(Debug, Clone, Copy)]
enum Index {
    Static(usize),
    Dynamic(usize),
    Raw(usize),
}

fn index() -> impl Strategy<Value = Index> {
    prop_oneof![
        8 => (1usize..62).prop_map(Index::Static),
        8 => (0usize..64).prop_map(Index::Dynamic),
        1 => (0usize..100).prop_map(Index::Raw),
    ]
}

/// One representation of section 6, for the model test.
#[derive(Debug, Clone)]
enum Rep {
    Indexed(Index),
    /// Kind 0: with incremental indexing; 1: without indexing; 2: never indexed. No
    /// name index means a literal name.
    Literal {
        kind: u8,
        name_index: Option<Index>,
        name: (Vec<u8>, bool),
        value: (Vec<u8>, bool),
    },
    SizeUpdate(usize),
}

fn string() -> impl Strategy<Value = (Vec<u8>, bool)> {
    (
        prop_oneof![
            3 => prop::collection::vec(prop::sample::select(b"abc-0".to_vec()), 0..6),
            1 => prop::collection::vec(any::<u8>(), 0..120),
        ],
        any::<bool>(),
    )
}

fn rep() -> impl Strategy<Value = Rep> {
    prop_oneof![
        10 => index().prop_map(Rep::Indexed),
        16 => (0u8..3, prop::option::of(index()), string(), string()).prop_map(
            |(kind, name_index, name, value)| Rep::Literal { kind, name_index, name, value }
        ),
        1 => size_update(),
    ]
}

fn size_update() -> impl Strategy<Value = Rep> {
    prop_oneof![
        12 => prop::sample::select(vec![0usize, 40, 100, 256, 1000, 4096]),
        1 => Just(4097usize),
    ]
    .prop_map(Rep::SizeUpdate)
}

/// A block: usually a few size updates (allowed only here), then representations.
fn block() -> impl Strategy<Value = Vec<Rep>> {
    (
        prop::collection::vec(size_update(), 0..2),
        prop::collection::vec(rep(), 0..12),
    )
        .prop_map(|(mut updates, reps)| {
            updates.extend(reps);
            updates
        })
}

fn write_string(out: &mut Vec<u8>, (bytes, huffman_coded): &(Vec<u8>, bool)) {
    if *huffman_coded {
        let mut code = Vec::new();
        huffman::encode(bytes, &mut code);
        encode_integer(out, 0x80, 7, code.len());
        out.extend_from_slice(&code);
    } else {
        encode_integer(out, 0, 7, bytes.len());
        out.extend_from_slice(bytes);
    }
}

/// RFC 7541 decoding written as plainly as possible, on a list of owned entries; it also
/// writes the block it decodes, choosing dynamic indices among the entries present.
struct Model {
    entries: VecDeque<(Vec<u8>, Vec<u8>)>,
    max: usize,
}

impl Model {
    fn size(&self) -> usize {
        self.entries
            .iter()
            .map(|(n, v)| n.len() + v.len() + 32)
            .sum()
    }

    fn evict(&mut self) {
        while self.size() > self.max {
            self.entries.pop_back();
        }
    }

    fn resolve(&self, index: Index) -> usize {
        match index {
            Index::Static(i) | Index::Raw(i) => i,
            Index::Dynamic(k) if self.entries.is_empty() => 1 + k % 61,
            Index::Dynamic(k) => 62 + k % self.entries.len(),
        }
    }

    fn get(&self, index: usize) -> Result<(Vec<u8>, Vec<u8>), HpackError> {
        let dynamic = self.entries.len();
        match index {
            0 => Err(HpackError::IndexZero),
            1..=61 => {
                let (n, v) = super::super::table::STATIC_TABLE[index - 1];
                Ok((n.to_vec(), v.to_vec()))
            }
            _ => self
                .entries
                .get(index - 62)
                .cloned()
                .ok_or(HpackError::IndexOutOfRange { index, dynamic }),
        }
    }

    /// Writes and decodes `reps`; the block ends at the first error.
    fn run(&mut self, reps: &[Rep]) -> (Vec<u8>, Result<Fields, HpackError>) {
        let mut out = Vec::new();
        let mut fields = Fields::new();
        let mut seen_field = false;
        for rep in reps {
            let step = match rep {
                Rep::SizeUpdate(size) => {
                    encode_integer(&mut out, 0x20, 5, *size);
                    if seen_field {
                        Err(HpackError::SizeUpdateAfterField)
                    } else if *size > 4096 {
                        Err(HpackError::SizeUpdateTooLarge {
                            size: *size,
                            max: 4096,
                        })
                    } else {
                        self.max = *size;
                        self.evict();
                        Ok(())
                    }
                }
                Rep::Indexed(index) => {
                    seen_field = true;
                    let index = self.resolve(*index);
                    encode_integer(&mut out, 0x80, 7, index);
                    self.get(index).map(|field| fields.push(field))
                }
                Rep::Literal {
                    kind,
                    name_index,
                    name,
                    value,
                } => {
                    seen_field = true;
                    let (flags, prefix_bits) =
                        [(0x40, 6), (0x00, 4), (0x10, 4)][usize::from(*kind)];
                    let index = name_index.map_or(0, |i| self.resolve(i));
                    encode_integer(&mut out, flags, prefix_bits, index);
                    if index == 0 {
                        write_string(&mut out, name);
                    }
                    write_string(&mut out, value);
                    let name = match index {
                        0 => Ok(name.0.clone()),
                        i => self.get(i).map(|(n, _)| n),
                    };
                    name.map(|name| {
                        fields.push((name.clone(), value.0.clone()));
                        if *kind == 0 {
                            self.entries.push_front((name, value.0.clone()));
                            self.evict();
                        }
                    })
                }
            };
            if let Err(error) = step {
                return (out, Err(error));
            }
        }
        (out, Ok(fields))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decoder_matches_a_plain_model(blocks in prop::collection::vec(block(), 1..10)) {
        let mut decoder = Decoder::new(4096);
        let mut model = Model { entries: VecDeque::new(), max: 4096 };
        for reps in blocks {
            let (block, expected) = model.run(&reps);
            let got = decode(&mut decoder, &block);
            prop_assert_eq!(&got, &expected);
            if expected.is_err() {
                break;
            }
            let model_table: Fields = model.entries.iter().cloned().collect();
            prop_assert_eq!(decoder_table(&decoder), model_table);
            prop_assert_eq!(decoder.table_size(), model.size());
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_nor_grow_memory_past_the_bound(
        table_size in prop::sample::select(vec![0usize, 64, 256, 4096]),
        blocks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..400), 1..8),
    ) {
        let mut decoder = Decoder::new(table_size);
        for block in blocks {
            let result = decoder.decode(&block, 1 << 20, |_, _| Ok::<(), ()>(()));
            let (table, scratch, peak) = decoder.parts();
            prop_assert!(table.heap_bytes() <= table_bound(table_size));
            prop_assert!(peak <= SCRATCH_RETAINED.max(huffman::max_decoded_len(block.len())));
            prop_assert!(scratch.capacity() <= SCRATCH_RETAINED);
            prop_assert!(decoder.table_size() <= table_size);
            if result.is_err() {
                break;
            }
        }
    }

    #[test]
    fn arbitrary_huffman_strings_decode_or_are_refused_and_round_trip(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut decoded = Vec::new();
        if huffman::decode(&bytes, &mut decoded).is_ok() {
            // Whatever decodes re-encodes to the same bytes: codes are unique and the
            // padding is forced to be ones.
            let mut again = Vec::new();
            huffman::encode(&decoded, &mut again);
            prop_assert_eq!(again, bytes.clone());
        }
        prop_assert!(decoded.len() <= huffman::max_decoded_len(bytes.len()));
    }
}
