//! The bounds every loaded [`Trace`] keeps, so that the analyses may add and subtract its times
//! in `i64` without overflowing, whatever the file held:
//!
//! - every time lies within ±2^61 ns (73 years) of the trace's zero; a time beyond that is no
//!   clock reading but damage, and the file is refused;
//! - no span ends before it starts: an end earlier than its start (never written by the
//!   profilers, so damage too) is read as the start, a span of zero;
//! - the durations of each kind of span (kernels, API calls, ranges, memory operations) add up to
//!   at most 2^61 ns, so a sum of any of them, or of a few kinds, fits in `i64`.

use crate::model::trace::{Nanos, Trace};

/// The largest distance of a time from zero, and the largest sum of one kind's durations.
pub const LIMIT: i64 = 1 << 61;

/// Why a trace is out of bounds: one line for the user.
pub fn check(trace: &mut Trace) -> Result<(), String> {
    fn spans<'a>(
        what: &str,
        items: impl Iterator<Item = (&'a mut Nanos, &'a mut Nanos)>,
    ) -> Result<(), String> {
        let mut total: i128 = 0;
        for (start, end) in items {
            for t in [&*start, &*end] {
                if !(-LIMIT..=LIMIT).contains(&t.0) {
                    return Err(format!(
                        "a time of its {what} ({} ns) is out of range (more than 73 years from the trace's zero): the file is damaged",
                        t.0
                    ));
                }
            }
            if end.0 < start.0 {
                *end = *start;
            }
            total += i128::from(end.0 - start.0);
        }
        if total > i128::from(LIMIT) {
            return Err(format!(
                "the durations of its {what} add up to more than 73 years: the file is damaged"
            ));
        }
        Ok(())
    }
    spans(
        "kernels",
        trace
            .kernels
            .iter_mut()
            .map(|k| (&mut k.span.start, &mut k.span.end)),
    )?;
    spans(
        "CUDA API calls",
        trace
            .api_calls
            .iter_mut()
            .map(|c| (&mut c.start, &mut c.end)),
    )?;
    spans(
        "ranges",
        trace
            .ranges
            .iter_mut()
            .chain(trace.open_ranges.iter_mut())
            .map(|r| (&mut r.start, &mut r.end)),
    )?;
    spans(
        "operator calls",
        trace.ops.iter_mut().map(|o| (&mut o.start, &mut o.end)),
    )?;
    spans(
        "memory operations",
        trace
            .mem_ops
            .iter_mut()
            .map(|m| (&mut m.span.start, &mut m.span.end)),
    )?;
    if let Some(m) = trace
        .marks
        .iter()
        .find(|m| !(-LIMIT..=LIMIT).contains(&m.time.0))
    {
        return Err(format!(
            "the time of an NVTX mark ({} ns) is out of range: the file is damaged",
            m.time.0
        ));
    }
    Ok(())
}
