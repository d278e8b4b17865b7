//! The disk tier's admission policy, TinyLFU's (Einziger, Friedman and Manes, "TinyLFU: A
//! Highly Efficient Cache Admission Policy", 2017), as Caffeine and Ristretto use it:
//! how often each key was asked for lately (as it missed memory) is counted in a count-min
//! sketch (four rows of one-byte counters, a few per object the tier can hold), and a
//! new object that would evict others is written only when it was asked for at least as
//! often as each object it would evict. One pass over cold objects (each asked for
//! once) then does not flush objects asked for again and again; it evicts only objects
//! asked for as seldom. Every counter is halved once the sketch has counted ten times
//! as many requests as it has counters per row, so that what was asked for long ago
//! fades.

use std::hash::BuildHasher;

/// Rows of the sketch: a key's count is the least of its four counters.
const ROWS: usize = 4;

pub(crate) struct Sketch {
    /// `ROWS` rows of `width` counters.
    counters: Vec<u8>,
    /// A power of two.
    width: usize,
    /// Requests counted since the last halving.
    counted: usize,
    hasher: std::collections::hash_map::RandomState,
}

impl Sketch {
    /// A sketch for about `objects` objects (counters per row: the next power of two,
    /// between 4,096 and 4,194,304: at most 16 MiB).
    pub(crate) fn new(objects: usize) -> Sketch {
        let width = objects.clamp(1 << 12, 1 << 22).next_power_of_two();
        Sketch {
            counters: vec![0; ROWS * width],
            width,
            counted: 0,
            hasher: Default::default(),
        }
    }

    /// The counter of `key` in each row.
    fn slots(&self, key: &str) -> [usize; ROWS] {
        let hash = self.hasher.hash_one(key);
        // Double hashing: row i uses h1 + i * h2 (h2 odd, so the rows differ).
        let (h1, h2) = (hash as usize, ((hash >> 32) as usize) | 1);
        std::array::from_fn(|i| {
            i * self.width + (h1.wrapping_add(i.wrapping_mul(h2)) & (self.width - 1))
        })
    }

    /// Counts a request for `key`.
    pub(crate) fn count(&mut self, key: &str) {
        for slot in self.slots(key) {
            self.counters[slot] = self.counters[slot].saturating_add(1);
        }
        self.counted += 1;
        if self.counted >= 10 * self.width {
            self.counted /= 2;
            for c in &mut self.counters {
                *c /= 2;
            }
        }
    }

    /// About how often `key` was asked for lately (never less than it was).
    pub(crate) fn frequency(&self, key: &str) -> u8 {
        self.slots(key)
            .into_iter()
            .map(|slot| self.counters[slot])
            .min()
            .unwrap_or(0)
    }
}

impl Default for Sketch {
    fn default() -> Sketch {
        Sketch::new(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_keys_apart_and_halves_with_age() {
        let mut sketch = Sketch::new(4096);
        for _ in 0..20 {
            sketch.count("hot");
        }
        sketch.count("cold");
        assert!(sketch.frequency("hot") >= 20);
        assert!(sketch.frequency("cold") >= 1 && sketch.frequency("cold") < 20);
        assert_eq!(sketch.frequency("never"), 0);
        // Ten times a row's width of requests in all: every count is halved.
        for _ in 0..10 * 4096 - 21 {
            sketch.count("other");
        }
        assert_eq!(sketch.frequency("hot"), 10);
    }
}
