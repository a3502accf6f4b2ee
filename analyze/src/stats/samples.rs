//! Integer samples (durations, sizes) as the stats reports keep them: `u32` where they fit, so
//! that the durations of an export's largest tables take 4 bytes each; sorted in place for the
//! summaries' medians.

use super::summary::{Sorted, Summary};

/// Integer samples (durations, sizes), kept as `u32` where they fit.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    small: Vec<u32>,
    /// Values below 0 or above `u32::MAX`.
    large: Vec<i64>,
}

impl Samples {
    #[inline]
    pub fn push(&mut self, v: i64) {
        match u32::try_from(v) {
            Ok(small) => self.small.push(small),
            Err(_) => self.large.push(v),
        }
    }

    pub fn len(&self) -> usize {
        self.small.len() + self.large.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All of `parts` in one, allocated once at its size.
    pub fn concat(parts: Vec<Samples>) -> Samples {
        if parts.len() == 1 {
            return parts.into_iter().next().unwrap_or_default();
        }
        let mut out = Samples {
            small: Vec::with_capacity(parts.iter().map(|p| p.small.len()).sum()),
            large: Vec::with_capacity(parts.iter().map(|p| p.large.len()).sum()),
        };
        for p in parts {
            out.small.extend_from_slice(&p.small);
            out.large.extend_from_slice(&p.large);
        }
        out
    }

    /// Add `other`'s samples `times` times.
    pub fn extend_from(&mut self, other: &Samples, times: usize) {
        for _ in 0..times {
            self.small.extend_from_slice(&other.small);
            self.large.extend_from_slice(&other.large);
        }
    }

    /// The summary of the samples, as [`Summary::of`] gives it, without sorting them all: the
    /// median is selected (the samples are reordered); `None` when there are none.
    pub fn summary(&mut self) -> Option<Summary> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        self.large.sort_unstable();
        let negative = self.large.partition_point(|&v| v < 0);
        let mut total: i128 = self.large.iter().map(|&v| v as i128).sum();
        // Squares are never negative: the sum overflows whatever the order of its terms.
        let mut squares: Option<i128> = self.large.iter().try_fold(0i128, |a, &v| {
            a.checked_add((v as i128).checked_mul(v as i128)?)
        });
        let (mut lo, mut hi) = (u32::MAX, 0u32);
        let (mut sum, mut sum2) = (0u64, 0u128);
        for &v in &self.small {
            lo = lo.min(v);
            hi = hi.max(v);
            sum += v as u64;
            sum2 += (v as u64 * v as u64) as u128;
        }
        total += sum as i128;
        squares = squares.and_then(|s| s.checked_add(i128::try_from(sum2).ok()?));
        let min = match (negative, self.small.is_empty()) {
            (0, false) => lo as i64,
            _ => self.large[0],
        };
        let max = match (negative == self.large.len(), self.small.is_empty()) {
            (true, false) => hi as i64,
            _ => self.large[self.large.len() - 1],
        };
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
            (_, None) => {
                self.sort();
                return self.summary_sorted();
            }
        };
        let median = if n % 2 == 1 {
            self.nth(n / 2, negative) as f64
        } else {
            (self.nth(n / 2 - 1, negative) as i128 + self.nth(n / 2, negative) as i128) as f64 / 2.0
        };
        Some(Summary::of_parts(n, total, (min, max), median, std_dev))
    }

    /// The `k`-th smallest sample (`large` sorted, `negative` of them below 0).
    fn nth(&mut self, k: usize, negative: usize) -> i64 {
        if k < negative {
            self.large[k]
        } else if k - negative < self.small.len() {
            *self.small.select_nth_unstable(k - negative).1 as i64
        } else {
            self.large[k - self.small.len()]
        }
    }

    pub fn sort(&mut self) {
        self.small.sort_unstable();
        self.large.sort_unstable();
    }

    /// The summary of samples already sorted ([`Samples::sort`]).
    pub fn summary_sorted(&self) -> Option<Summary> {
        let negative = self.large.partition_point(|&v| v < 0);
        Summary::of_sorted_values(&SortedSamples {
            negative: &self.large[..negative],
            small: &self.small,
            positive: &self.large[negative..],
        })
    }
}

/// Sorted samples: the negative large ones, the small ones, the positive large ones.
struct SortedSamples<'a> {
    negative: &'a [i64],
    small: &'a [u32],
    positive: &'a [i64],
}

impl Sorted for SortedSamples<'_> {
    fn count(&self) -> usize {
        self.negative.len() + self.small.len() + self.positive.len()
    }
    fn at(&self, i: usize) -> i64 {
        let (a, b) = (self.negative.len(), self.small.len());
        if i < a {
            self.negative[i]
        } else if i < a + b {
            self.small[i - a] as i64
        } else {
            self.positive[i - a - b]
        }
    }
    fn values(&self) -> impl Iterator<Item = i64> + '_ {
        self.negative
            .iter()
            .copied()
            .chain(self.small.iter().map(|&v| v as i64))
            .chain(self.positive.iter().copied())
    }
}
