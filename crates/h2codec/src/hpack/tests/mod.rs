//! Tests of the decoder and the encoder together: RFC 7541 Appendix C, every error with
//! a hand-made block, the encoder's policy and size updates, and property tests.

mod encoder;
mod errors;
mod props;
mod rfc;

use std::convert::Infallible;

use super::{DecodeError, Decoded, Decoder, Encoder, HpackError};

/// A decoded header list, owned.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// Bytes from RFC-style hex ("8286 8441 ..."), whitespace ignored.
fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

fn fields(list: &[(&str, &str)]) -> Fields {
    list.iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// Decodes `block` with no list size limit and collects the fields.
fn decode(decoder: &mut Decoder, block: &[u8]) -> Result<Fields, HpackError> {
    let mut out = Fields::new();
    let result = decoder.decode(block, usize::MAX, |name, value| {
        out.push((name.to_vec(), value.to_vec()));
        Ok::<(), Infallible>(())
    });
    match result {
        Ok(Decoded {
            list_too_large: false,
            ..
        }) => Ok(out),
        Ok(decoded) => panic!("no limit, yet {decoded:?}"),
        Err(DecodeError::Compression(error)) => Err(error),
        Err(DecodeError::Refused(never)) => match never {},
    }
}

/// The decoder's dynamic table, newest first.
fn decoder_table(decoder: &Decoder) -> Fields {
    decoder.parts().0.fields()
}

/// The encoder's dynamic table, newest first.
fn encoder_table(encoder: &Encoder) -> Fields {
    encoder.parts().0.fields()
}

/// Encodes one block of `list` (pseudo-header fields included, as plain fields).
fn encode(encoder: &mut Encoder, list: &Fields) -> Vec<u8> {
    let mut out = Vec::new();
    let mut block = encoder.block(&mut out);
    for (name, value) in list {
        block.field(name, value);
    }
    block.finish();
    out
}

/// Checks that the encoder's hash index holds exactly one field key per entry and one
/// name key per distinct name, pointing at the newest entry with that name.
fn check_index(encoder: &Encoder) {
    let (table, index) = encoder.parts();
    let mut expected = Vec::new();
    let mut names_seen: Vec<&[u8]> = Vec::new();
    for i in 1..=table.len() {
        let entry = table.entry(i);
        let number = table.number_of(i);
        expected.push((entry.field_tag, number));
        let name = table.get(i).unwrap().0;
        if !names_seen.contains(&name) {
            names_seen.push(name);
            expected.push((entry.name_tag, number));
        }
    }
    expected.sort_unstable();
    assert_eq!(index.keys(), expected);
}
