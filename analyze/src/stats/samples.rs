//! Integer samples (durations, sizes) as the stats reports keep them, in memory bounded by the
//! number of *distinct* values rather than the number of samples: new values go to a buffer
//! (`u32` where they fit), and once the buffer is as long as a threshold (at least
//! [`FOLD_AT`], else as many as the values already folded, so that a push costs a logarithm
//! amortised) it is sorted and folded into a sorted run-length histogram of (value, count).
//! A duration summary of a kernel name thus holds its distinct durations, however many times the
//! kernel ran. The summary is exact: count, total and the sums behind the standard deviation
//! from the runs' values times their counts, the median from the runs' cumulative counts.

use super::summary::{Sorted, Summary};

/// The fewest buffered values that are folded at once.
pub const FOLD_AT: usize = 256;

/// Integer samples, buffered and folded into runs of equal values.
#[derive(Clone, Debug)]
pub struct Samples {
    /// How many values there are, folded or not.
    count: u64,
    /// Values not folded yet: those in `0..=u32::MAX`, and the others.
    small: Vec<u32>,
    large: Vec<i64>,
    /// Folded values, ascending, each with how many times it occurs (one value may take several
    /// runs, side by side, when its count passes `u32::MAX`).
    small_runs: Vec<(u32, u32)>,
    large_runs: Vec<(i64, u32)>,
    /// The fewest buffered values folded at once ([`FOLD_AT`]; lower in tests).
    fold_at: usize,
}

impl Default for Samples {
    fn default() -> Samples {
        Samples::folding_at(FOLD_AT)
    }
}

impl Samples {
    /// Samples whose buffer is folded once it holds `fold_at` values (or as many as are folded).
    pub fn folding_at(fold_at: usize) -> Samples {
        Samples {
            count: 0,
            small: Vec::new(),
            large: Vec::new(),
            small_runs: Vec::new(),
            large_runs: Vec::new(),
            fold_at: fold_at.max(1),
        }
    }

    #[inline]
    pub fn push(&mut self, v: i64) {
        self.count += 1;
        match u32::try_from(v) {
            Ok(small) => {
                self.small.push(small);
                if self.small.len() >= self.fold_at.max(self.small_runs.len()) {
                    self.small_runs = fold(std::mem::take(&mut self.small_runs), &mut self.small);
                }
            }
            Err(_) => {
                self.large.push(v);
                if self.large.len() >= self.fold_at.max(self.large_runs.len()) {
                    self.large_runs = fold(std::mem::take(&mut self.large_runs), &mut self.large);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Every value folded into the runs.
    fn fold_all(&mut self) {
        if !self.small.is_empty() {
            self.small_runs = fold(std::mem::take(&mut self.small_runs), &mut self.small);
        }
        if !self.large.is_empty() {
            self.large_runs = fold(std::mem::take(&mut self.large_runs), &mut self.large);
        }
        self.small = Vec::new();
        self.large = Vec::new();
    }

    /// All of `parts` in one, merged in pairs, then pairs of pairs: each value is merged a
    /// logarithm of the parts' number of times, where merging one part after another would
    /// merge everything before it again for each (thousands of parts of one kernel name, one
    /// per launch context, took seconds).
    pub fn concat(parts: Vec<Samples>) -> Samples {
        let mut level = parts;
        while level.len() > 1 {
            let mut next = Vec::with_capacity(level.len().div_ceil(2));
            let mut pairs = level.into_iter();
            while let Some(mut a) = pairs.next() {
                if let Some(b) = pairs.next() {
                    a.extend_from(&b, 1);
                }
                next.push(a);
            }
            level = next;
        }
        let mut out = level.pop().unwrap_or_default();
        out.fold_all();
        out
    }

    /// The samples of `parts`, each taken its number of times, as [`Samples::concat`] merges.
    pub fn sum<'a>(parts: impl IntoIterator<Item = (&'a Samples, usize)>) -> Samples {
        let scaled = parts.into_iter().map(|(p, times)| {
            let mut s = Samples::default();
            s.extend_from(p, times);
            s
        });
        Samples::concat(scaled.collect())
    }

    /// Add `other`'s samples `times` times.
    pub fn extend_from(&mut self, other: &Samples, times: usize) {
        if times == 0 || other.is_empty() {
            return;
        }
        if !other.small.is_empty() || !other.large.is_empty() {
            let mut folded = other.clone();
            folded.fold_all();
            return self.extend_from(&folded, times);
        }
        self.fold_all();
        let times = times as u64;
        self.count += other.count * times;
        let scaled = other.small_runs.iter().map(|&(v, c)| (v, c as u64 * times));
        self.small_runs = merge(std::mem::take(&mut self.small_runs), scaled);
        let scaled = other.large_runs.iter().map(|&(v, c)| (v, c as u64 * times));
        self.large_runs = merge(std::mem::take(&mut self.large_runs), scaled);
    }

    /// The summary of the samples, as [`Summary::of`] gives it; `None` when there are none.
    pub fn summary(&self) -> Option<Summary> {
        if !self.small.is_empty() || !self.large.is_empty() {
            let mut folded = self.clone();
            folded.fold_all();
            return folded.summary();
        }
        let n = self.len();
        if n == 0 {
            return None;
        }
        let mut total: i128 = 0;
        // Squares are never negative: the sum overflows whatever the order of its terms.
        let mut squares: Option<i128> = Some(0);
        for &(v, c) in &self.large_runs {
            let (v, c) = (v as i128, c as i128);
            total += v * c;
            squares = squares.and_then(|s| s.checked_add(v.checked_mul(v)?.checked_mul(c)?));
        }
        let (mut sum, mut sum2) = (0u128, 0u128);
        for &(v, c) in &self.small_runs {
            let (v, c) = (v as u128, c as u128);
            sum += v * c;
            sum2 += v * v * c;
        }
        total += sum as i128;
        squares = squares.and_then(|s| s.checked_add(i128::try_from(sum2).ok()?));
        let runs = self.sorted();
        let (min, max) = (runs.at(0), runs.at(n - 1));
        let count = n as i128;
        let scaled = squares.and_then(|s2| {
            count
                .checked_mul(s2)?
                .checked_sub(total.checked_mul(total)?)
        });
        let std_dev = match (n, scaled) {
            (1, _) => 0.0,
            (_, Some(v)) => (v as f64 / (n as f64 * (n - 1) as f64)).sqrt(),
            // Only a damaged file's values overflow: then as the sorted samples give it.
            (_, None) => return Summary::of_sorted_values(&runs),
        };
        let median = if n % 2 == 1 {
            runs.at(n / 2) as f64
        } else {
            (runs.at(n / 2 - 1) as i128 + runs.at(n / 2) as i128) as f64 / 2.0
        };
        Some(Summary::of_parts(n, total, (min, max), median, std_dev))
    }

    /// The folded runs, in ascending order of value.
    fn sorted(&self) -> SortedRuns<'_> {
        let negative = self.large_runs.partition_point(|r| r.0 < 0);
        SortedRuns {
            negative: &self.large_runs[..negative],
            small: &self.small_runs,
            positive: &self.large_runs[negative..],
            count: self.len(),
        }
    }
}

/// `runs` with the values of `buffer` (emptied) folded in.
fn fold<V: Copy + Ord>(runs: Vec<(V, u32)>, buffer: &mut Vec<V>) -> Vec<(V, u32)> {
    buffer.sort_unstable();
    let folded = merge(runs, buffer.iter().map(|&v| (v, 1)));
    buffer.clear();
    folded
}

/// Two ascending lists of (value, count) merged into one, equal values added up.
fn merge<V: Copy + Ord>(
    runs: Vec<(V, u32)>,
    more: impl Iterator<Item = (V, u64)>,
) -> Vec<(V, u32)> {
    let mut out: Vec<(V, u32)> = Vec::with_capacity(runs.len() + more.size_hint().0.min(1024));
    let mut more = more.peekable();
    for (v, c) in runs {
        while let Some(&(m, k)) = more.peek() {
            if m > v {
                break;
            }
            add_run(&mut out, m, k);
            more.next();
        }
        add_run(&mut out, v, c as u64);
    }
    for (m, k) in more {
        add_run(&mut out, m, k);
    }
    out
}

/// `count` more of `v` at the end of `runs` (whose last value is at most `v`).
#[inline]
fn add_run<V: Copy + Ord>(runs: &mut Vec<(V, u32)>, v: V, mut count: u64) {
    if let Some(last) = runs.last_mut() {
        if last.0 == v {
            let room = (u32::MAX - last.1) as u64;
            let taken = room.min(count);
            last.1 += taken as u32;
            count -= taken;
        }
    }
    while count > 0 {
        let taken = count.min(u32::MAX as u64);
        runs.push((v, taken as u32));
        count -= taken;
    }
}

/// Folded samples in ascending order: the negative large ones, the small ones, the positive
/// large ones.
struct SortedRuns<'a> {
    negative: &'a [(i64, u32)],
    small: &'a [(u32, u32)],
    positive: &'a [(i64, u32)],
    count: usize,
}

impl SortedRuns<'_> {
    fn runs(&self) -> impl Iterator<Item = (i64, u32)> + '_ {
        self.negative
            .iter()
            .copied()
            .chain(self.small.iter().map(|&(v, c)| (v as i64, c)))
            .chain(self.positive.iter().copied())
    }
}

impl Sorted for SortedRuns<'_> {
    fn count(&self) -> usize {
        self.count
    }
    fn at(&self, i: usize) -> i64 {
        let mut seen = 0usize;
        for (v, c) in self.runs() {
            seen += c as usize;
            if i < seen {
                return v;
            }
        }
        panic!("sample {i} of {}", self.count)
    }
    fn values(&self) -> impl Iterator<Item = i64> + '_ {
        self.runs()
            .flat_map(|(v, c)| std::iter::repeat_n(v, c as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::Summary;

    /// A small generator of reproducible random numbers (xorshift).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Random samples: few distinct values or many, some beyond `u32`, some negative.
    fn random(rng: &mut Rng, n: usize) -> Vec<i64> {
        let spread = [1u64, 7, 100, 5_000, 1 << 40][(rng.next() % 5) as usize];
        (0..n)
            .map(|_| {
                let v = (rng.next() % spread) as i64;
                match rng.next() % 50 {
                    0 => -v,
                    1 => v + u32::MAX as i64,
                    _ => v,
                }
            })
            .collect()
    }

    #[test]
    fn folded_summary_is_that_of_the_sorted_values() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..400 {
            let n = 1 + (rng.next() % 3000) as usize;
            let values = random(&mut rng, n);
            let fold_at = 1 + (rng.next() % 40) as usize;
            let mut samples = Samples::folding_at(fold_at);
            for &v in &values {
                samples.push(v);
            }
            let expected = Summary::of(&mut values.clone());
            assert_eq!(
                samples.summary(),
                expected,
                "round {round}, fold at {fold_at}"
            );
            assert_eq!(samples.len(), n);
        }
    }

    #[test]
    fn merged_and_repeated_samples_summarise_as_their_values() {
        let mut rng = Rng(12345);
        for round in 0..100 {
            let (a, b) = (random(&mut rng, 700), random(&mut rng, 300));
            let times = 1 + (rng.next() % 4) as usize;
            let (mut x, mut y) = (Samples::folding_at(16), Samples::folding_at(3));
            a.iter().for_each(|&v| x.push(v));
            b.iter().for_each(|&v| y.push(v));
            let mut all = a.clone();
            for _ in 0..times {
                all.extend_from_slice(&b);
            }
            let mut merged = x.clone();
            merged.extend_from(&y, times);
            assert_eq!(merged.summary(), Summary::of(&mut all), "round {round}");
            assert_eq!(merged.len(), all.len());
            let mut both = a.clone();
            both.extend_from_slice(&b);
            assert_eq!(
                Samples::concat(vec![x, y]).summary(),
                Summary::of(&mut both)
            );
        }
    }

    #[test]
    fn many_parts_sum_as_their_values() {
        let mut rng = Rng(777);
        let mut parts = Vec::new();
        let mut all = Vec::new();
        for i in 0..1001 {
            let values = random(&mut rng, 1 + i % 13);
            let times = i % 3;
            let mut p = Samples::folding_at(4);
            values.iter().for_each(|&v| p.push(v));
            for _ in 0..times {
                all.extend_from_slice(&values);
            }
            parts.push((p, times));
        }
        let sum = Samples::sum(parts.iter().map(|(p, t)| (p, *t)));
        assert_eq!(sum.len(), all.len());
        assert_eq!(sum.summary(), Summary::of(&mut all));
        assert!(Samples::sum(std::iter::empty()).is_empty());
    }

    #[test]
    fn counts_past_u32_split_into_runs() {
        let mut one = Samples::default();
        one.push(5);
        one.push(7);
        let mut many = Samples::default();
        many.extend_from(&one, u32::MAX as usize);
        many.extend_from(&one, 3);
        assert_eq!(
            many.small_runs,
            vec![(5, u32::MAX), (5, 3), (7, u32::MAX), (7, 3)]
        );
        let s = many.summary().unwrap();
        assert_eq!(s.count, 2 * (u32::MAX as u64 + 3));
        assert_eq!((s.min, s.max, s.median), (5, 7, 6.0));
    }

    #[test]
    fn memory_follows_distinct_values() {
        let mut s = Samples::default();
        for i in 0..1_000_000i64 {
            s.push(1000 + i % 300);
        }
        assert_eq!(s.small_runs.len(), 300);
        assert!(s.small.len() < FOLD_AT.max(300));
    }
}
