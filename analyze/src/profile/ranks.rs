//! The rank table: one row per rank of a distributed run (a process on a device), whether the
//! ranks came in one file or one file each ([`crate::source::many`]): per measured step its step
//! time, compute, communication (all of it and the part nothing hides), idle time; over the trace
//! its kernel time, and the waiting at collectives it did and caused ([`super::straggler`]).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::source::many::{RankFile, RankFrom};

use super::devices::DeviceProfile;
use super::Profile;

/// One rank.
#[derive(Clone, Debug, Serialize)]
pub struct RankRow {
    pub rank: u32,
    /// The file it came from.
    pub source: String,
    pub rank_from: RankFrom,
    pub device: u32,
    pub process: u32,
    pub steps: usize,
    /// Every kernel it ran on the device, graph executions traced as a whole included.
    pub kernel_ns: i64,
    /// Means per measured step (`None` without steps): the step's span on the device, and the
    /// parts of it.
    pub step_ns: Option<f64>,
    pub compute_ns: Option<f64>,
    pub communication_ns: Option<f64>,
    pub exposed_communication_ns: Option<f64>,
    pub memcpy_ns: Option<f64>,
    pub idle_ns: Option<f64>,
    /// Time it waited at collectives for a later rank, and the others' waiting for it.
    pub waited_ns: i64,
    pub wait_caused_ns: i64,
    /// Added to its file's times to put them on the run's timeline.
    pub clock_offset_ns: i64,
}

impl RankRow {
    fn of(d: &DeviceProfile, rank: u32, source: String, rank_from: RankFrom, offset: i64) -> Self {
        let s = d.per_step.as_ref();
        RankRow {
            rank,
            source,
            rank_from,
            device: d.device,
            process: d.process,
            steps: d.steps,
            kernel_ns: d.kernel_ns,
            step_ns: s.map(|s| s.span_ns),
            compute_ns: s.map(|s| s.compute_ns),
            communication_ns: s.map(|s| s.communication_ns),
            exposed_communication_ns: s.map(|s| s.exposed_communication_ns),
            memcpy_ns: s.map(|s| s.memcpy_ns),
            idle_ns: s.map(|s| s.idle_ns),
            waited_ns: d.waited_ns,
            wait_caused_ns: d.wait_caused_ns,
            clock_offset_ns: offset,
        }
    }
}

/// The ranks of one file that holds several: processes numbered in the order of the first device
/// each ran on (the file records no rank of its own for them). Empty for one process on one
/// device.
pub(super) fn in_one_file(devices: &[DeviceProfile], file: &str) -> Vec<RankRow> {
    let rank_of = ranks_in_one_file(devices.iter().map(|d| (d.device, d.process)).collect());
    if rank_of.is_empty() {
        return Vec::new();
    }
    devices
        .iter()
        .map(|d| RankRow::of(d, rank_of[&d.process], file.to_owned(), RankFrom::Order, 0))
        .collect()
}

/// The rank of each process of one file whose GPU work is on the (device, process) `pairs`:
/// processes numbered in the order of the first device each ran on. Empty for fewer than two
/// pairs (one process on one device has no rank table).
pub fn ranks_in_one_file(mut pairs: Vec<(u32, u32)>) -> BTreeMap<u32, u32> {
    let mut rank_of: BTreeMap<u32, u32> = BTreeMap::new();
    pairs.sort_unstable();
    pairs.dedup();
    if pairs.len() < 2 {
        return rank_of;
    }
    for (_, process) in pairs {
        let next = rank_of.len() as u32;
        rank_of.entry(process).or_insert(next);
    }
    rank_of
}

/// The ranks of a run read from one file per rank: each pair's rank is its file's.
pub(super) fn of_files(devices: &[DeviceProfile], files: &[RankFile]) -> Vec<RankRow> {
    devices
        .iter()
        .filter_map(|d| {
            let f = files.iter().find(|f| f.processes.contains(&d.process))?;
            let source = f.path.file_name().map_or_else(
                || f.path.display().to_string(),
                |n| n.to_string_lossy().into(),
            );
            Some(RankRow::of(d, f.rank, source, f.rank_from, f.offset_ns))
        })
        .collect()
}

impl Profile {
    /// Name the straggler's rank, from the rank table.
    pub(super) fn rank_the_straggler(&mut self) {
        if let Some(s) = &mut self.straggler {
            s.rank = self
                .ranks
                .iter()
                .find(|r| r.device == s.device && r.process == s.process)
                .map(|r| r.rank);
        }
    }
}
