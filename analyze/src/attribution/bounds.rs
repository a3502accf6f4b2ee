//! Times out of the bounds a loaded trace keeps ([`crate::model::bounds`]), found in rows as a
//! source streams them, so that a streamed export is refused for what would refuse it loaded.

use crate::model::bounds::LIMIT;

/// Times out of bounds ([`crate::model::bounds`]), found while gathering: the first time out of
/// range, and the durations' total.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bounds {
    pub bad_time: Option<i64>,
    pub total: i128,
}

impl Bounds {
    /// Check a span and return its end, an end before the start read as the start.
    #[inline]
    pub fn span(&mut self, start: i64, end: i64) -> i64 {
        for t in [start, end] {
            if !(-LIMIT..=LIMIT).contains(&t) && self.bad_time.is_none() {
                self.bad_time = Some(t);
            }
        }
        let end = end.max(start);
        self.total += i128::from(end) - i128::from(start);
        end
    }

    pub fn add(&mut self, o: &Bounds) {
        if self.bad_time.is_none() {
            self.bad_time = o.bad_time;
        }
        self.total += o.total;
    }

    /// The error [`crate::model::bounds::check`] gives for spans of `what` out of bounds.
    pub fn error(&self, what: &str) -> Option<String> {
        if let Some(t) = self.bad_time {
            return Some(format!(
                "a time of its {what} ({t} ns) is out of range (more than 73 years from the trace's zero): the file is damaged"
            ));
        }
        (self.total > i128::from(LIMIT)).then(|| {
            format!("the durations of its {what} add up to more than 73 years: the file is damaged")
        })
    }
}
