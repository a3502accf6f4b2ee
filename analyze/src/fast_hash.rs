//! One fast hash map for the readers and analyses: [`FastMap`], a `HashMap` with the FxHash mix
//! ([`FastHasher`]). The default SipHash costs more than the rest of a lookup on the small
//! integer keys these maps hold (string ids, correlation ids, lists of frame ids), and the keys
//! come from one file, not from an adversary. Nothing here depends on the iteration order of a
//! map, which differs from SipHash's.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The FxHash mix (as in rustc): rotate, xor in the next word, multiply.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// What builds a [`FastHasher`], for `HashMap::with_hasher` and `HashSet`s.
pub type FastBuild = BuildHasherDefault<FastHasher>;

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, FastBuild>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn equal_keys_hash_alike_and_near_keys_apart() {
        let build = FastBuild::default();
        assert_eq!(build.hash_one(7u32), build.hash_one(7u32));
        assert_ne!(build.hash_one(7u32), build.hash_one(8u32));
        // Bytes past a multiple of eight still count.
        assert_ne!(build.hash_one("abcdefgh1"), build.hash_one("abcdefgh2"));
        let mut m: FastMap<Vec<u32>, u32> = FastMap::default();
        m.insert(vec![1, 2], 3);
        assert_eq!(m.get(&vec![1, 2][..]), Some(&3));
    }
}
