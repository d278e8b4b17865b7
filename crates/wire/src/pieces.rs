//! What is left to write of a message written as a few pieces (a head, a chunk size, a
//! piece of body, a CRLF) once `done` bytes of them went out: the slices for the next
//! vectored write, on the caller's stack.

use std::io::IoSlice;

/// Fills `out` with what follows the first `done` bytes of `parts`, skipping the pieces
/// already written and the written part of the one under way; returns how many slices it
/// filled (an empty piece takes none). At most `out.len()` pieces are taken.
pub fn unsent<'a>(parts: &[&'a [u8]], done: usize, out: &mut [IoSlice<'a>]) -> usize {
    let (mut skip, mut k) = (done, 0);
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        if k == out.len() {
            break;
        }
        out[k] = IoSlice::new(&part[skip..]);
        skip = 0;
        k += 1;
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_what_was_written() {
        let parts: [&[u8]; 3] = [b"head", b"", b"body"];
        let mut out = [IoSlice::new(&[]); 4];
        // An empty piece takes no slice.
        let n = unsent(&parts, 0, &mut out);
        assert_eq!((n, &*out[0], &*out[1]), (2, &b"head"[..], &b"body"[..]));
        let n = unsent(&parts, 6, &mut out);
        assert_eq!((n, &*out[0]), (1, &b"dy"[..]));
        assert_eq!(unsent(&parts, 8, &mut out), 0);
    }
}
