//! The summary of a run's step times (milliseconds), defined once for both crates: `collect`'s
//! bench harness prints and stores it, and [`super::run_metadata`] records its median and mean in
//! a trace. Mean and sample standard deviation in the order the steps ran, median as the middle
//! value or the mean of the two middle values. The `nsys stats` reports summarise integer
//! nanoseconds their own way (`stats::summary`, exact in 128-bit sums); this is for steps timed
//! as floats.

/// Summary of a list of step times (milliseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepTimes {
    pub mean: f64,
    /// Sample standard deviation (n − 1); 0 for a single step.
    pub std: f64,
    pub min: f64,
    pub max: f64,
    /// Middle value (mean of the two middle values for an even count).
    pub median: f64,
    /// Coefficient of variation, std / mean.
    pub cv: f64,
    /// The first timed step on its own.
    pub first: f64,
}

impl StepTimes {
    /// The summary of `ms`, the step times in the order they ran; `None` for an empty list.
    pub fn of(ms: &[f64]) -> Option<StepTimes> {
        let n = ms.len();
        if n == 0 {
            return None;
        }
        let mean = ms.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            ms.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        let mut sorted = ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let std = var.sqrt();
        Some(StepTimes {
            mean,
            std,
            min: sorted[0],
            max: sorted[n - 1],
            median,
            cv: if mean > 0.0 { std / mean } else { 0.0 },
            first: ms[0],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_times_match_hand_computation() {
        let s = StepTimes::of(&[12.0, 10.0, 11.0, 13.0]).unwrap();
        assert_eq!(s.mean, 11.5);
        assert_eq!(s.median, 11.5);
        assert_eq!((s.min, s.max, s.first), (10.0, 13.0, 12.0));
        // Sample variance: (0.25 + 2.25 + 0.25 + 2.25) / 3.
        assert!((s.std - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert!((s.cv - s.std / 11.5).abs() < 1e-12);
        let one = StepTimes::of(&[7.0]).unwrap();
        assert_eq!((one.std, one.median, one.cv), (0.0, 7.0, 0.0));
        assert!(StepTimes::of(&[]).is_none());
    }
}
