//! Summary statistics of integer samples (durations in ns, sizes in bytes) computed the way
//! `nsys stats` computes them: mean as a double of the exact sum, median as the middle value or
//! the mean of the two middle values, *sample* standard deviation (n - 1 in the denominator, 0 for
//! a single value), and percentages as `part * 100.0 / whole`.
//!
//! Nothing here rounds: values keep full precision and are rounded only when printed
//! ([`crate::render::format_fixed`] rounds like SQLite's `round()`, which nsys applies). Use
//! [`round_half_away`] when a rounded number is needed in code. The population standard deviation
//! is here too for analyses that want it; no nsys report prints it.

use serde::Serialize;

use crate::render::format_fixed;

/// Count, total, extremes, mean, median and sample standard deviation of some samples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub count: u64,
    pub total: i64,
    pub min: i64,
    pub max: i64,
    pub mean: f64,
    pub median: f64,
    /// Sample standard deviation (Bessel-corrected); 0 for a single sample, as nsys prints it.
    pub std_dev: f64,
}

/// Samples in ascending order, however they are stored.
pub trait Sorted {
    fn count(&self) -> usize;
    /// The `i`-th smallest.
    fn at(&self, i: usize) -> i64;
    fn values(&self) -> impl Iterator<Item = i64> + '_;
}

impl Sorted for [i64] {
    fn count(&self) -> usize {
        self.len()
    }
    fn at(&self, i: usize) -> i64 {
        self[i]
    }
    fn values(&self) -> impl Iterator<Item = i64> + '_ {
        self.iter().copied()
    }
}

impl Summary {
    /// The summary of `values`, which are sorted in place; `None` when there are none.
    pub fn of(values: &mut [i64]) -> Option<Summary> {
        values.sort_unstable();
        Summary::of_sorted(values)
    }

    /// The summary of values already sorted in ascending order.
    pub fn of_sorted(sorted: &[i64]) -> Option<Summary> {
        Summary::of_sorted_values(sorted)
    }

    /// The summary of sorted values however they are stored.
    pub fn of_sorted_values<S: Sorted + ?Sized>(sorted: &S) -> Option<Summary> {
        let n = sorted.count();
        if n == 0 {
            return None;
        }
        let (min, max) = (sorted.at(0), sorted.at(n - 1));
        let total: i128 = sorted.values().map(|v| v as i128).sum();
        let median = median_of(sorted)?;
        let std_dev = std_dev_of(sorted, n, (n - 1) as f64)?;
        Some(Summary::of_parts(n, total, (min, max), median, std_dev))
    }

    /// The summary of `n` values adding up to `total`, from their extremes, median and standard
    /// deviation: the total clamped to `i64`, the mean exact in the 128-bit total.
    pub fn of_parts(
        n: usize,
        total: i128,
        (min, max): (i64, i64),
        median: f64,
        std_dev: f64,
    ) -> Summary {
        Summary {
            count: n as u64,
            total: total.clamp(i64::MIN.into(), i64::MAX.into()) as i64,
            min,
            max,
            mean: total as f64 / n as f64,
            median,
            std_dev,
        }
    }
}

fn median_of<S: Sorted + ?Sized>(sorted: &S) -> Option<f64> {
    let n = sorted.count();
    if n == 0 {
        return None;
    }
    Some(if n % 2 == 1 {
        sorted.at(n / 2) as f64
    } else {
        // The sum of two i64 may overflow i64; i128 holds it exactly.
        (sorted.at(n / 2 - 1) as i128 + sorted.at(n / 2) as i128) as f64 / 2.0
    })
}

/// The standard deviation with `n * others` in the denominator of the variance (`others`:
/// n - 1 for the sample's, n for the population's); 0 for a sample of one value.
fn std_dev_of<S: Sorted + ?Sized>(values: &S, n: usize, others: f64) -> Option<f64> {
    match n {
        0 => None,
        1 if others == 0.0 => Some(0.0),
        _ => Some((scaled_variance(values) / (n as f64 * others)).sqrt()),
    }
}

fn sum(values: &[i64]) -> i128 {
    values.iter().map(|&v| v as i128).sum()
}

/// The arithmetic mean, `None` for no values.
pub fn mean(values: &[i64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    Some(sum(values) as f64 / values.len() as f64)
}

/// The median of sorted values: the middle one, or the mean of the two middle ones.
pub fn median_sorted(sorted: &[i64]) -> Option<f64> {
    median_of(sorted)
}

/// The median of unsorted values (sorts a copy).
pub fn median(values: &[i64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_unstable();
    median_sorted(&v)
}

/// `n * sum(x^2) - sum(x)^2`: n^2 times the population variance. Exact in 128-bit integers; for
/// values so far apart that those overflow (only a damaged file has them), from the deviations
/// from the mean in floating point.
fn scaled_variance<S: Sorted + ?Sized>(values: &S) -> f64 {
    let exact = || {
        let n = values.count() as i128;
        let s: i128 = values.values().map(|v| v as i128).sum();
        let s2 = values.values().try_fold(0i128, |acc, v| {
            acc.checked_add((v as i128).checked_mul(v as i128)?)
        })?;
        n.checked_mul(s2)?.checked_sub(s.checked_mul(s)?)
    };
    match exact() {
        Some(v) => v as f64,
        None => {
            let n = values.count() as f64;
            let mean = values.values().map(|v| v as f64).sum::<f64>() / n;
            n * values
                .values()
                .map(|v| (v as f64 - mean).powi(2))
                .sum::<f64>()
        }
    }
}

/// The sample standard deviation (denominator n - 1), as nsys's `stdev()` computes it: 0 for a
/// single value, `None` for none. Computed from exact integer sums, so it does not lose digits to
/// cancellation when the values are large and close together.
pub fn sample_std_dev(values: &[i64]) -> Option<f64> {
    std_dev_of(values, values.len(), values.len().saturating_sub(1) as f64)
}

/// The population standard deviation (denominator n), `None` for no values.
pub fn population_std_dev(values: &[i64]) -> Option<f64> {
    std_dev_of(values, values.len(), values.len() as f64)
}

/// `part` as a percentage of `whole`, computed as nsys's SQL does (`part * 100.0 / whole`);
/// `None` when `whole` is 0.
pub fn percent(part: i64, whole: i64) -> Option<f64> {
    if whole == 0 {
        return None;
    }
    Some(part as f64 * 100.0 / whole as f64)
}

/// `v` rounded to `decimals` decimals like SQLite's `round(v, decimals)`: to the nearest, exact
/// ties away from zero.
pub fn round_half_away(v: f64, decimals: usize) -> f64 {
    format_fixed(v, decimals).parse().unwrap_or(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_matches_nsys_on_a_real_row() {
        // cuda_api_sum of torch_small_ctx128_train_fp32: cudaFree, 2 calls.
        let s = Summary::of(&mut [37714, 2529]).unwrap();
        assert_eq!((s.count, s.total, s.min, s.max), (2, 40243, 2529, 37714));
        assert_eq!(format_fixed(s.mean, 1), "20121.5");
        assert_eq!(format_fixed(s.median, 1), "20121.5");
        assert_eq!(format_fixed(s.std_dev, 1), "24879.6");
    }

    #[test]
    fn single_value_has_zero_std_dev() {
        let s = Summary::of(&mut [320800]).unwrap();
        assert_eq!(s.std_dev, 0.0);
        assert_eq!(s.median, 320800.0);
        assert_eq!(population_std_dev(&[5]), Some(0.0));
        assert!(Summary::of(&mut []).is_none());
    }

    #[test]
    fn median_of_even_count_is_mean_of_middle_pair() {
        assert_eq!(median(&[4, 1, 3, 2]), Some(2.5));
        assert_eq!(median(&[i64::MAX, i64::MAX]), Some(i64::MAX as f64));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn sample_and_population_std_dev() {
        let v = [2, 4, 4, 4, 5, 5, 7, 9];
        assert_eq!(population_std_dev(&v), Some(2.0));
        let sample = sample_std_dev(&v).unwrap();
        assert!((sample - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn std_dev_keeps_precision_for_large_close_values() {
        let base = 4_000_000_000_000i64;
        let v = [base + 1, base + 2, base + 3];
        assert_eq!(sample_std_dev(&v), Some(1.0));
    }

    #[test]
    fn percent_and_rounding() {
        // cuda_gpu_kern_sum of torch_small_ctx128_train_fp32: the first kernel's 10882460 ns of
        // all kernels' 76438466 ns print as 14.2%.
        let p = percent(10882460, 76438466).unwrap();
        assert_eq!(format_fixed(p, 1), "14.2");
        assert_eq!(percent(1, 0), None);
        assert_eq!(round_half_away(1518104.25, 1), 1518104.3);
        assert_eq!(round_half_away(-0.25, 1), -0.3);
    }
}
