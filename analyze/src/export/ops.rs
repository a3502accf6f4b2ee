//! The `ops` table: every piece of GPU work as the profile engine attributed it, received as a
//! [`ClaimSink`] and written as it comes, one Parquet file per rank (`ops/rank=N/part-0.parquet`).
//!
//! Batches of claims arrive from the engine's chunks side by side; their rows wait per rank until
//! a rank has a row group's worth ([`ROW_GROUP`]), which is then sorted by start and written.
//! Rows waiting over all ranks never pass [`PENDING`]: past it the rank with the most is written
//! early. So memory holds at most that many rows (about 56 bytes each) however many ops the run
//! has. Names are kept once each; a row holds their ids.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use parquet::data_type::ByteArray;

use super::parquet::{bytes, Field, Kind, ParquetFile};
use crate::error::{Error, Result};
use crate::kernels::class::KernelClass;
use crate::model::trace::MemOpKind;
use crate::profile::claims::{Claim, ClaimNames, ClaimSink, Claimed};
use crate::progress;

/// The columns of the ops table.
pub const OPS: &[Field] = &[
    Field::new("rank", Kind::Int),
    Field::new("device", Kind::Int),
    Field::new("process", Kind::Int),
    Field::new("stream", Kind::Int),
    Field::new("kind", Kind::Text),
    Field::optional("step", Kind::Text),
    Field::optional("phase", Kind::Text),
    Field::new("class", Kind::Text),
    Field::new("name", Kind::Text),
    Field::new("short_name", Kind::Text),
    Field::new("start_ns", Kind::Int),
    Field::new("end_ns", Kind::Int),
    Field::new("duration_ns", Kind::Int),
    Field::new("correlation", Kind::Int),
];

/// The `kind` of an op.
const KINDS: [&str; 4] = ["kernel", "memcpy", "memset", "graph"];

/// Rows of one rank written together.
pub const ROW_GROUP: usize = 1 << 17;
/// The most rows waiting, over all ranks.
pub const PENDING: usize = 1 << 21;

/// No step or phase.
const NONE: u32 = u32::MAX;

/// One op, its names by id.
#[derive(Clone, Copy)]
struct Row {
    start: i64,
    end: i64,
    correlation: u64,
    device: u32,
    stream: u32,
    pid: u32,
    name: u32,
    step: u32,
    phase: u32,
    kind: u8,
    class: u8,
}

/// Which rank each process is.
#[derive(Clone, Debug, Default)]
pub struct Ranks {
    pub of_process: HashMap<u32, u32>,
    /// The rank of a process the map lacks.
    pub default: u32,
}

impl Ranks {
    pub fn rank(&self, pid: u32) -> u32 {
        self.of_process.get(&pid).copied().unwrap_or(self.default)
    }
}

/// Names of ops, each kept once: (name, short name) and its id.
#[derive(Default)]
struct Names {
    index: HashMap<(String, String), u32>,
    list: Vec<(ByteArray, ByteArray)>,
}

impl Names {
    fn id(&mut self, name: &str, short: &str) -> u32 {
        if let Some(&id) = self.index.get(&(name.to_owned(), short.to_owned())) {
            return id;
        }
        let id = self.list.len() as u32;
        self.list.push((bytes(name), bytes(short)));
        self.index.insert((name.to_owned(), short.to_owned()), id);
        id
    }
}

/// Rows waiting, per rank.
#[derive(Default)]
struct Pending {
    rows: BTreeMap<u32, Vec<Row>>,
    count: usize,
}

/// The ops table being written.
pub struct OpsSink {
    dir: PathBuf,
    ranks: Ranks,
    /// Added to every time.
    shift: i64,
    names: Mutex<Names>,
    /// Step and phase names, from [`ClaimSink::begin`].
    labels: Mutex<(Vec<ByteArray>, Vec<ByteArray>)>,
    /// The ranges that are measured steps.
    step_ranges: Mutex<HashSet<usize>>,
    pending: Mutex<Pending>,
    files: Mutex<BTreeMap<u32, Arc<Mutex<ParquetFile>>>>,
    error: Mutex<Option<Error>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl OpsSink {
    /// A sink writing into `dir` (the table's folder), ranks by `ranks`, `shift` added to every
    /// time.
    pub fn new(dir: &Path, ranks: Ranks, shift: i64) -> OpsSink {
        OpsSink {
            dir: dir.to_owned(),
            ranks,
            shift,
            names: Mutex::default(),
            labels: Mutex::default(),
            step_ranges: Mutex::default(),
            pending: Mutex::default(),
            files: Mutex::default(),
            error: Mutex::default(),
        }
    }

    fn fail(&self, e: Error) {
        lock(&self.error).get_or_insert(e);
    }

    fn failed(&self) -> bool {
        lock(&self.error).is_some()
    }

    /// Add rows; write a rank's once it has a row group's worth, or the largest once too many
    /// wait.
    fn add(&self, by_rank: BTreeMap<u32, Vec<Row>>) {
        let mut ready = Vec::new();
        {
            let mut p = lock(&self.pending);
            for (rank, mut rows) in by_rank {
                let waiting = p.rows.entry(rank).or_default();
                waiting.append(&mut rows);
                if waiting.len() >= ROW_GROUP {
                    ready.push((rank, std::mem::take(waiting)));
                }
            }
            p.count = p.rows.values().map(Vec::len).sum();
            while p.count > PENDING {
                let Some((&rank, _)) = p.rows.iter().max_by_key(|r| r.1.len()) else {
                    break;
                };
                let rows = std::mem::take(p.rows.get_mut(&rank).expect("found above"));
                p.count -= rows.len();
                ready.push((rank, rows));
            }
        }
        for (rank, rows) in ready {
            if let Err(e) = self.write(rank, rows) {
                self.fail(e);
            }
        }
    }

    /// Write `rows` of `rank` as one row group, sorted by start.
    fn write(&self, rank: u32, mut rows: Vec<Row>) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let file = {
            let mut files = lock(&self.files);
            match files.get(&rank) {
                Some(f) => f.clone(),
                None => {
                    let f = ParquetFile::create(&part(&self.dir, rank)?, OPS)?;
                    let f = Arc::new(Mutex::new(f));
                    files.insert(rank, f.clone());
                    f
                }
            }
        };
        rows.sort_unstable_by_key(|r| (r.start, r.device, r.stream));
        let mut file = lock(&file);
        let mut cols = file.columns(rows.len());
        {
            let names = lock(&self.names);
            let labels = lock(&self.labels);
            let kinds: Vec<ByteArray> = KINDS.iter().map(|k| bytes(k)).collect();
            let classes: Vec<ByteArray> =
                KernelClass::ALL.iter().map(|c| bytes(c.as_str())).collect();
            let label = |list: &[ByteArray], i: u32| list.get(i as usize).cloned();
            for r in &rows {
                let (name, short) = &names.list[r.name as usize];
                cols[0].int(Some(rank as i64));
                cols[1].int(Some(r.device as i64));
                cols[2].int(Some(r.pid as i64));
                cols[3].int(Some(r.stream as i64));
                cols[4].text(Some(kinds[r.kind as usize].clone()));
                cols[5].text(label(&labels.0, r.step));
                cols[6].text(label(&labels.1, r.phase));
                cols[7].text(Some(classes[r.class as usize].clone()));
                cols[8].text(Some(name.clone()));
                cols[9].text(Some(short.clone()));
                cols[10].int(Some(r.start.saturating_add(self.shift)));
                cols[11].int(Some(r.end.saturating_add(self.shift)));
                cols[12].int(Some(r.end - r.start));
                cols[13].int(Some(r.correlation as i64));
            }
        }
        file.write(cols, rows.len())?;
        progress::advance(rows.len() as u64);
        Ok(())
    }

    /// The ranges (indices into the trace's) that are measured steps.
    pub fn step_ranges(&self) -> HashSet<usize> {
        lock(&self.step_ranges).clone()
    }

    /// Write what still waits and close every file, with an empty one for each of `ranks` that
    /// ran no op (every rank has each table); the rows written per rank.
    pub fn finish(self, ranks: &BTreeSet<u32>) -> Result<BTreeMap<u32, u64>> {
        let waiting = std::mem::take(&mut lock(&self.pending).rows);
        for (rank, rows) in waiting {
            if self.failed() {
                break;
            }
            if let Err(e) = self.write(rank, rows) {
                self.fail(e);
            }
        }
        if let Some(e) = lock(&self.error).take() {
            return Err(e);
        }
        for &rank in ranks {
            if !lock(&self.files).contains_key(&rank) {
                let file = ParquetFile::create(&part(&self.dir, rank)?, OPS)?;
                lock(&self.files).insert(rank, Arc::new(Mutex::new(file)));
            }
        }
        let files = std::mem::take(&mut *lock(&self.files));
        let mut rows = BTreeMap::new();
        for (rank, file) in files {
            let file = Arc::try_unwrap(file)
                .ok()
                .expect("no writer left")
                .into_inner()
                .unwrap_or_else(|e| e.into_inner());
            rows.insert(rank, file.finish()?);
        }
        Ok(rows)
    }
}

/// The file of `rank` in the table folder `dir`, `dir/rank=N/part-0.parquet`, its folder made.
pub fn part(dir: &Path, rank: u32) -> Result<PathBuf> {
    let dir = dir.join(format!("rank={rank}"));
    std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
    Ok(dir.join("part-0.parquet"))
}

/// The class's place in [`KernelClass::ALL`].
fn class_index(class: KernelClass) -> u8 {
    KernelClass::ALL
        .iter()
        .position(|&c| c == class)
        .unwrap_or(KernelClass::ALL.len() - 1) as u8
}

impl ClaimSink for OpsSink {
    fn begin(&self, names: &ClaimNames) {
        let steps = names.steps.iter().map(|s| bytes(&s.name)).collect();
        *lock(&self.step_ranges) = names.steps.iter().map(|s| s.range).collect();
        let phases = names.phases.iter().map(|n| bytes(n)).collect();
        *lock(&self.labels) = (steps, phases);
    }

    fn claims<'n>(&self, claims: &[Claim], kernel: &dyn Fn(u32) -> (Cow<'n, str>, Cow<'n, str>)) {
        if self.failed() {
            return;
        }
        let mut by_rank: BTreeMap<u32, Vec<Row>> = BTreeMap::new();
        {
            // Each kernel id, memory operation kind and graph of the batch named once.
            let mut seen: HashMap<(u8, u64), u32> = HashMap::new();
            let mut names = lock(&self.names);
            for c in claims {
                let (kind, key, class) = match c.what {
                    Claimed::Kernel(kid, class) => (0u8, kid as u64, class),
                    Claimed::MemOp(MemOpKind::Memset) => (2, 0, KernelClass::Memset),
                    Claimed::MemOp(kind) => (1, mem_op_key(kind), KernelClass::Memcpy),
                    Claimed::Graph(id) => (3, id, KernelClass::CudaGraph),
                };
                let name = *seen.entry((kind, key)).or_insert_with(|| match c.what {
                    Claimed::Kernel(kid, _) => {
                        let (name, short) = kernel(kid);
                        names.id(&name, &short)
                    }
                    Claimed::MemOp(kind) => {
                        let label = kind.label();
                        names.id(&label, &label)
                    }
                    Claimed::Graph(id) => {
                        let label = format!("[CUDA graph {id}]");
                        names.id(&label, &label)
                    }
                });
                let rank = self.ranks.rank(c.pid);
                by_rank.entry(rank).or_default().push(Row {
                    start: c.start,
                    end: c.end,
                    correlation: c.correlation_id,
                    device: c.device,
                    stream: c.stream,
                    pid: c.pid,
                    name,
                    step: c.step.unwrap_or(NONE),
                    phase: c.phase.unwrap_or(NONE),
                    kind,
                    class: class_index(class),
                });
            }
        }
        self.add(by_rank);
    }
}

/// A copy kind as a key of its own.
fn mem_op_key(kind: MemOpKind) -> u64 {
    match kind {
        MemOpKind::HostToDevice => 1,
        MemOpKind::DeviceToHost => 2,
        MemOpKind::HostToHost => 3,
        MemOpKind::DeviceToDevice => 4,
        MemOpKind::PeerToPeer => 5,
        MemOpKind::OtherCopy(k) => 16 + k as u64,
        MemOpKind::Memset => 0,
    }
}
