//! The replay's maps of addresses (which blocks are occupied, where segments start), over the
//! addresses a device's trace and end state can name, all known before the replay starts.
//!
//! Each address is numbered by its rank among them ([`Addresses`]), so a map is a value per
//! rank and a set of the ranks in use, kept as bits in levels of 64 (a bit of one level says
//! whether the word below it has any bit set). The neighbour of an address, the question the
//! replay asks at every allocation, is then a few word scans instead of a walk down a tree,
//! and the answers are the ordered map's: rank order is address order. It does not take
//! addresses outside the universe it was built for.

/// The addresses a replay can meet, ascending, each once.
#[derive(Debug)]
pub(crate) struct Addresses {
    sorted: Vec<u64>,
}

impl Addresses {
    pub(crate) fn new(mut addresses: Vec<u64>) -> Self {
        addresses.sort_unstable();
        addresses.dedup();
        Addresses { sorted: addresses }
    }

    /// The rank of `addr`, which must be one of the addresses.
    pub(crate) fn rank(&self, addr: u64) -> usize {
        match self.sorted.binary_search(&addr) {
            Ok(r) => r,
            Err(_) => unreachable!("address {addr:#x} is outside the replay's universe"),
        }
    }

    /// The address of rank `rank`.
    pub(crate) fn addr(&self, rank: usize) -> u64 {
        self.sorted[rank]
    }

    pub(crate) fn len(&self) -> usize {
        self.sorted.len()
    }
}

/// A map from ranks of [`Addresses`] to `V`, ordered by rank.
#[derive(Debug)]
pub(crate) struct AddressMap<V> {
    values: Vec<V>,
    /// `levels[0]` has a bit per rank; each next level a bit per word of the one below, up to
    /// one word.
    levels: Vec<Vec<u64>>,
}

impl<V: Copy + Default> AddressMap<V> {
    pub(crate) fn new(universe: usize) -> Self {
        let mut levels = Vec::new();
        let mut bits = universe.max(1);
        loop {
            let words = bits.div_ceil(64);
            levels.push(vec![0u64; words]);
            if words == 1 {
                break;
            }
            bits = words;
        }
        AddressMap {
            values: vec![V::default(); universe],
            levels,
        }
    }

    pub(crate) fn contains(&self, rank: usize) -> bool {
        self.levels[0][rank / 64] & (1 << (rank % 64)) != 0
    }

    pub(crate) fn insert(&mut self, rank: usize, v: V) {
        self.values[rank] = v;
        let mut i = rank;
        for level in &mut self.levels {
            let word = &mut level[i / 64];
            let was_empty = *word == 0;
            *word |= 1 << (i % 64);
            if !was_empty {
                break;
            }
            i /= 64;
        }
    }

    /// Insert `v` at `rank` unless the rank holds a value already.
    pub(crate) fn insert_if_absent(&mut self, rank: usize, v: V) {
        if !self.contains(rank) {
            self.insert(rank, v);
        }
    }

    pub(crate) fn remove(&mut self, rank: usize) {
        let mut i = rank;
        for level in &mut self.levels {
            let word = &mut level[i / 64];
            *word &= !(1 << (i % 64));
            if *word != 0 {
                break;
            }
            i /= 64;
        }
    }

    /// The highest rank in use at or below `rank`, and its value.
    pub(crate) fn at_or_before(&self, rank: usize) -> Option<(usize, V)> {
        let mut i = rank;
        for level in 0..self.levels.len() {
            let (w, b) = (i / 64, i % 64);
            let below = self.levels[level][w] & (u64::MAX >> (63 - b));
            if below != 0 {
                let found = w * 64 + 63 - below.leading_zeros() as usize;
                let r = self.descend(level, found, |word| 63 - word.leading_zeros() as usize);
                return Some((r, self.values[r]));
            }
            if w == 0 {
                return None;
            }
            i = w - 1;
        }
        None
    }

    /// The lowest rank in use above `rank`.
    pub(crate) fn after(&self, rank: usize) -> Option<usize> {
        let mut i = rank + 1;
        for level in 0..self.levels.len() {
            let (w, b) = (i / 64, i % 64);
            let above = self.levels[level].get(w)? & (u64::MAX << b);
            if above != 0 {
                let found = w * 64 + above.trailing_zeros() as usize;
                return Some(self.descend(level, found, |word| word.trailing_zeros() as usize));
            }
            i = w + 1;
        }
        None
    }

    /// From bit `found` of level `level` down to its rank, taking in each word below the bit
    /// `pick` chooses.
    fn descend(&self, level: usize, mut found: usize, pick: impl Fn(u64) -> usize) -> usize {
        for below in self.levels[..level].iter().rev() {
            found = found * 64 + pick(below[found]);
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Against the ordered map it stands in for, over a universe of three levels: every
    /// neighbour query after each insert and remove of a long pseudo-random sequence.
    #[test]
    fn answers_as_an_ordered_map_does() {
        let universe = 64 * 64 + 300;
        let mut map: AddressMap<u64> = AddressMap::new(universe);
        assert_eq!(map.levels.len(), 3);
        let mut reference: BTreeMap<usize, u64> = BTreeMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Clustered ranks, so that words fill and empty.
            let rank = if step % 3 == 0 {
                (x % universe as u64) as usize
            } else {
                (x % 200) as usize * 17 % universe
            };
            if x & (1 << 40) != 0 {
                map.insert(rank, step);
                reference.insert(rank, step);
            } else {
                map.remove(rank);
                reference.remove(&rank);
            }
            let probe = ((x >> 20) % universe as u64) as usize;
            let expected = reference.range(..=probe).next_back().map(|(&r, &v)| (r, v));
            assert_eq!(map.at_or_before(probe), expected, "step {step}");
            let expected = reference.range(probe + 1..).next().map(|(&r, _)| r);
            assert_eq!(map.after(probe), expected, "step {step}");
            assert_eq!(map.contains(probe), reference.contains_key(&probe));
        }
        assert_eq!(map.after(universe - 1), None);
    }

    #[test]
    fn ranks_are_address_order() {
        let a = Addresses::new(vec![1 << 40, 4096, 1 << 40, 0]);
        assert_eq!(a.len(), 3);
        assert_eq!((a.rank(0), a.rank(4096), a.rank(1 << 40)), (0, 1, 2));
        assert_eq!(a.addr(2), 1 << 40);
    }
}
