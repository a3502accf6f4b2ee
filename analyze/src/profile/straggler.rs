//! The straggler: the rank the others wait for, by the arrival rule. A collective (an all-reduce,
//! a broadcast) ends together on every rank, so a rank that reaches it early waits there until
//! the last one arrives. For the k-th collective, each rank's arrival is the start of its k-th
//! communication kernel; every rank but the last waits from its own arrival to the last one's,
//! and that waiting is caused by the last rank. Summed over the collectives, the rank that
//! causes the most waiting is the straggler; how much it costs the others per measured step is
//! the figure to act on.
//!
//! A rank here is a (device, process) pair: one process per GPU in a DDP run, or each device of
//! a process that drives several. Collectives are matched by their order on each rank (the
//! trace names no communicator), inside the measured steps when the trace has them; when ranks
//! ran different numbers of them only the first of each, as many as the fewest, are matched,
//! and a note says so. A rank stands out only when it causes more than half of all the waiting
//! and at least twice as much as any other rank: ranks that take turns being last, as noise
//! makes them, name none; and, in a trace with measured steps, only when that waiting is at
//! least [`MIN_STEP_SHARE`] of a step: a rank a fraction of a millisecond late at every
//! collective of a 40 ms step is not what holds the run back.

use std::collections::BTreeMap;

use serde::Serialize;

/// The least share of a measured step (its mean span on a device) the waiting a rank causes per
/// step must reach for the rank to stand out.
pub const MIN_STEP_SHARE: f64 = 0.05;

/// The rank the others wait for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Straggler {
    /// Its rank, where the profile has a rank table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    pub device: u32,
    pub process: u32,
    /// The others' waiting it causes, summed over the collectives matched.
    pub wait_caused_ns: i64,
    /// The same per measured step (`None` without steps).
    pub wait_caused_ns_per_step: Option<f64>,
}

/// What the arrival rule found.
#[derive(Clone, Debug, Default)]
pub(super) struct Waits {
    /// Per rank: (waiting at collectives, waiting it caused the others).
    pub(super) ranks: BTreeMap<(u32, u32), (i64, i64)>,
    /// Collectives matched across the ranks.
    pub(super) collectives: usize,
    /// Whether the ranks ran different numbers of collectives.
    pub(super) uneven: bool,
}

/// The waits of the ranks whose collective arrivals (communication kernel starts, in order) are
/// `arrivals`.
pub(super) fn waits(arrivals: &BTreeMap<(u32, u32), Vec<i64>>) -> Waits {
    let mut w = Waits::default();
    if arrivals.len() < 2 {
        return w;
    }
    let counts = || arrivals.values().map(Vec::len);
    let n = counts().min().unwrap_or(0);
    w.uneven = counts().max() != Some(n);
    w.collectives = n;
    let ranks: Vec<(&(u32, u32), &Vec<i64>)> = arrivals.iter().collect();
    let mut sums = vec![(0i64, 0i64); ranks.len()];
    for k in 0..n {
        // The last to arrive; the first of equals, for a stable answer.
        let last = (0..ranks.len()).fold(0, |best, r| {
            if ranks[r].1[k] > ranks[best].1[k] {
                r
            } else {
                best
            }
        });
        let at = ranks[last].1[k];
        for (r, (_, starts)) in ranks.iter().enumerate() {
            let wait = at.saturating_sub(starts[k]);
            sums[r].0 = sums[r].0.saturating_add(wait);
            sums[last].1 = sums[last].1.saturating_add(wait);
        }
    }
    w.ranks = ranks.iter().map(|r| *r.0).zip(sums).collect();
    w
}

impl Waits {
    /// The rank that stands out as the one the others wait for, if any, over `steps` measured
    /// steps whose mean span on a device is `step_ns`.
    pub(super) fn straggler(&self, steps: usize, step_ns: Option<f64>) -> Option<Straggler> {
        let total: i64 = self.ranks.values().map(|r| r.1).sum();
        let (&(device, process), &(_, caused)) = self.ranks.iter().max_by_key(|r| r.1 .1)?;
        let next = self
            .ranks
            .iter()
            .filter(|r| *r.0 != (device, process))
            .map(|r| r.1 .1)
            .max()
            .unwrap_or(0);
        let per_step = (steps > 0).then(|| caused as f64 / steps as f64);
        let matters = match (per_step, step_ns) {
            (Some(p), Some(s)) => p >= MIN_STEP_SHARE * s,
            _ => true,
        };
        let stands_out =
            caused > 0 && caused * 2 > total && caused >= next.saturating_mul(2) && matters;
        stands_out.then_some(Straggler {
            rank: None,
            device,
            process,
            wait_caused_ns: caused,
            wait_caused_ns_per_step: per_step,
        })
    }

    /// The note that says what the rule found, for a trace of several ranks.
    pub(super) fn note(&self, straggler: Option<&Straggler>) -> String {
        let matched = if self.uneven {
            format!(
                "{} collectives matched in order (the ranks ran different numbers; the first of each matched)",
                self.collectives
            )
        } else {
            format!("{} collectives matched in order", self.collectives)
        };
        match straggler {
            _ if self.collectives == 0 => {
                "no collectives: no rank waits for another (no straggler)".to_owned()
            }
            Some(s) => format!(
                "straggler: device {} (process {}) arrives last at the collectives; the others wait {} for it ({matched})",
                s.device,
                s.process,
                match s.wait_caused_ns_per_step {
                    Some(p) => format!("{:.3} ms per step", p / 1e6),
                    None => format!("{:.3} ms in all", s.wait_caused_ns as f64 / 1e6),
                }
            ),
            None => format!(
                "no rank stands out as the one the others wait for: none causes more than half of the waiting at the collectives, twice any other's and a twentieth of a step ({matched})"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrivals(ranks: &[&[i64]]) -> BTreeMap<(u32, u32), Vec<i64>> {
        ranks
            .iter()
            .enumerate()
            .map(|(i, a)| ((i as u32, 100 + i as u32), a.to_vec()))
            .collect()
    }

    #[test]
    fn the_rank_that_arrives_last_causes_the_others_waiting() {
        // Rank 1 arrives 10 late at every collective; rank 2 on time but for once.
        let w = waits(&arrivals(&[
            &[0, 100, 200],
            &[10, 110, 210],
            &[0, 100, 205],
        ]));
        assert_eq!(w.collectives, 3);
        assert_eq!(w.ranks[&(0, 100)], (30, 0));
        assert_eq!(w.ranks[&(1, 101)], (0, 55));
        assert_eq!(w.ranks[&(2, 102)], (25, 0));
        let s = w.straggler(3, Some(100.0)).unwrap();
        assert_eq!((s.device, s.process, s.wait_caused_ns), (1, 101, 55));
        assert_eq!(s.wait_caused_ns_per_step, Some(55.0 / 3.0));
        // The same lateness in steps twenty times longer than a twentieth of the waiting: none.
        assert!(w.straggler(3, Some(20.0 * 55.0 / 3.0 + 1.0)).is_none());
    }

    #[test]
    fn ranks_taking_turns_name_none_and_no_collectives_say_so() {
        let w = waits(&arrivals(&[&[0, 105, 200, 305], &[5, 100, 205, 300]]));
        assert_eq!(w.ranks[&(0, 100)], (10, 10));
        assert!(w.straggler(4, None).is_none());
        assert!(w.note(None).starts_with("no rank stands out"));
        let none = waits(&arrivals(&[&[], &[]]));
        assert_eq!(none.collectives, 0);
        assert!(none.note(None).starts_with("no collectives"));
        // One rank alone has no one to wait for.
        assert!(waits(&arrivals(&[&[0, 1]])).ranks.is_empty());
    }
}
