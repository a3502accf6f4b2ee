//! Which file of a run is which rank, and which files make a run: the folders named replaced by
//! the traces in them ([`expand`]), each file's rank by the first rule that tells every file
//! apart ([`ranks`]), and the per-rank files of one run found among a folder's ([`rank_runs`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};

/// How a run's ranks were told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RankFrom {
    Metadata,
    FileName,
    Order,
}

impl RankFrom {
    /// Where the ranks came from, in words ("ranks from ...").
    pub fn words(self) -> &'static str {
        match self {
            RankFrom::Metadata => "the files' own records",
            RankFrom::FileName => "the file names",
            RankFrom::Order => "the order of the file names",
        }
    }
}

/// The files named, folders replaced by the traces they hold (nsys exports and reports, Kineto
/// traces), in name order.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in paths {
        if !path.is_dir() {
            out.push(path.clone());
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(Error::io(path))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && is_trace_name(p))
            .collect();
        found.sort();
        if found.is_empty() {
            return Err(Error::Malformed {
                path: path.clone(),
                message: "holds no nsys export (.sqlite, .nsys-rep) or Kineto trace (.json)".into(),
            });
        }
        out.extend(found);
    }
    Ok(out)
}

fn is_trace_name(p: &Path) -> bool {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let name = name.strip_suffix(".gz").unwrap_or(&name);
    name.ends_with(".sqlite") || name.ends_with(".nsys-rep") || name.ends_with(".json")
}

/// Each file's rank, by the first rule that tells every file apart: the rank each file records
/// (`recorded`), the rank its name gives, the order of the names.
pub(super) fn ranks(paths: &[PathBuf], recorded: &[Option<u32>]) -> (Vec<u32>, RankFrom) {
    let distinct = |r: &[Option<u32>]| {
        r.iter().all(Option::is_some) && r.iter().collect::<BTreeSet<_>>().len() == r.len()
    };
    if distinct(recorded) {
        return (
            recorded.iter().flatten().copied().collect(),
            RankFrom::Metadata,
        );
    }
    let named: Vec<Option<u32>> = paths.iter().map(|p| rank_in_name(p)).collect();
    if distinct(&named) {
        return (named.into_iter().flatten().collect(), RankFrom::FileName);
    }
    let mut by_name: Vec<usize> = (0..paths.len()).collect();
    by_name.sort_by(|&a, &b| paths[a].cmp(&paths[b]));
    let mut ranks = vec![0; paths.len()];
    for (rank, i) in by_name.into_iter().enumerate() {
        ranks[i] = rank as u32;
    }
    (ranks, RankFrom::Order)
}

/// The rank a file's name gives: `rank3`, `rank_3`, `rank-3` (any case), else a last `_3.`.
pub fn rank_in_name(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_string_lossy().to_lowercase();
    let digits = |s: &str| -> Option<u32> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().ok()
    };
    if let Some(i) = name.rfind("rank") {
        let rest = &name[i + 4..];
        let rest = rest.strip_prefix(['_', '-']).unwrap_or(rest);
        if let Some(r) = digits(rest) {
            return Some(r);
        }
    }
    let dot = name.find('.')?;
    let stem = &name[..dot];
    let under = stem.rfind('_')?;
    let tail = &stem[under + 1..];
    (!tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()))
        .then(|| tail.parse().ok())
        .flatten()
}

/// `path`'s rank where its name says `rank` before it (`rank3`, `rank_3`, `rank-3`), with the
/// name the number leaves (`run_rank.sqlite`), which the other ranks' files share.
fn rank_word(path: &Path) -> Option<(String, u32)> {
    let name = path.file_name()?.to_string_lossy().to_lowercase();
    let i = name.rfind("rank")? + 4;
    let sep = usize::from(name[i..].starts_with(['_', '-']));
    let digits = name[i + sep..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    let rank = name[i + sep..i + sep + digits].parse().ok()?;
    Some((
        format!("{}{}", &name[..i + sep], &name[i + sep + digits..]),
        rank,
    ))
}

/// `files` (in order) cut into runs, in two ways, the first applying first:
/// - by name: the files of one folder whose names differ only in a rank number after the word
///   `rank`, ranks 0 to n − 1 with n ≥ 2, make one run;
/// - by record: among the rest, the files of one folder that record (`recorded`) the same world
///   size, or none, and ranks 0 to n − 1 with n ≥ 2, each rank the same number m of times, make m
///   runs, the j-th file of each rank (in name order) in the j-th run (a scheduled profiler's
///   cycles, each rank's files named by time).
///
/// A run comes in rank order, at the place of its first file; every other file is a run of its
/// own. Stricter than the rule `profile` uses for the files it is given as one run, so that a
/// folder of a sweep's files (`ctx_128.sqlite`, `ctx_256.sqlite`) is never taken for ranks.
pub fn rank_runs(
    files: Vec<PathBuf>,
    recorded: impl Fn(&Path) -> Option<(u32, Option<u32>)>,
) -> Vec<Vec<PathBuf>> {
    // The folder and the name without its rank number.
    let key = |p: &PathBuf| rank_word(p).map(|(name, rank)| (p.with_file_name(name), rank));
    let mut sets: HashMap<PathBuf, Vec<(u32, PathBuf)>> = HashMap::new();
    for f in &files {
        if let Some((k, rank)) = key(f) {
            sets.entry(k).or_default().push((rank, f.clone()));
        }
    }
    sets.retain(|_, set| {
        set.sort();
        set.len() >= 2 && set.iter().map(|s| s.0).eq(0..set.len() as u32)
    });
    let by_name: BTreeSet<&PathBuf> = sets.values().flatten().map(|s| &s.1).collect();
    // The rest by folder and recorded world size: (rank, file) in name order.
    type Folder<'a> = (Option<&'a Path>, Option<u32>);
    let mut by_record: BTreeMap<Folder, Vec<(u32, PathBuf)>> = BTreeMap::new();
    for f in files.iter().filter(|f| !by_name.contains(f)) {
        if let Some((rank, world)) = recorded(f) {
            by_record
                .entry((f.parent(), world))
                .or_default()
                .push((rank, f.clone()));
        }
    }
    // The recorded runs, and the run each of their files is in.
    let mut recorded_runs: Vec<Option<Vec<PathBuf>>> = Vec::new();
    let mut run_of: HashMap<PathBuf, usize> = HashMap::new();
    for ((_, world), mut set) in by_record {
        set.sort();
        let n = set.iter().map(|s| s.0).collect::<BTreeSet<_>>().len();
        let m = set.len() / n;
        let whole = n >= 2
            && world.is_none_or(|w| w as usize == n)
            && set.len() == n * m
            && (0..set.len()).all(|i| set[i].0 as usize == i / m);
        if !whole {
            continue;
        }
        for j in 0..m {
            let run: Vec<PathBuf> = (0..n).map(|r| set[r * m + j].1.clone()).collect();
            for f in &run {
                run_of.insert(f.clone(), recorded_runs.len());
            }
            recorded_runs.push(Some(run));
        }
    }
    let mut out = Vec::new();
    let mut placed: BTreeSet<PathBuf> = BTreeSet::new();
    for f in files {
        if placed.contains(&f) {
            continue;
        }
        let run = match key(&f).and_then(|(k, _)| sets.remove(&k)) {
            Some(set) => set.into_iter().map(|s| s.1).collect(),
            None => match run_of.get(&f) {
                Some(&i) => recorded_runs[i].take().expect("a run is placed once"),
                None => vec![f],
            },
        };
        placed.extend(run.iter().cloned());
        out.push(run);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_in_names() {
        let r = |s: &str| rank_in_name(Path::new(s));
        assert_eq!(r("run_rank3.sqlite"), Some(3));
        assert_eq!(r("dir/Rank_12.pt.trace.json.gz"), Some(12));
        assert_eq!(r("trace-rank-0.json"), Some(0));
        assert_eq!(r("worker_7.sqlite.gz"), Some(7));
        assert_eq!(r("torch_small_ctx128.sqlite"), None);
        assert_eq!(r("ranks.json"), None);
    }

    #[test]
    fn a_folders_rank_files_make_one_run_and_a_sweeps_files_do_not() {
        let paths = |names: &[&str]| -> Vec<PathBuf> { names.iter().map(PathBuf::from).collect() };
        let runs = rank_runs(
            paths(&[
                "a/ctx_128.sqlite",
                "a/ctx_256.sqlite",
                "a/job_rank1.sqlite",
                "a/job_rank0.sqlite",
                "a/job_rank1.nsys-rep",
                "a/other_rank0.json",
                "a/other_rank2.json",
                "b/job_rank0.sqlite",
            ]),
            |_| None,
        );
        assert_eq!(
            runs,
            [
                paths(&["a/ctx_128.sqlite"]),
                paths(&["a/ctx_256.sqlite"]),
                paths(&["a/job_rank0.sqlite", "a/job_rank1.sqlite"]),
                paths(&["a/job_rank1.nsys-rep"]),
                paths(&["a/other_rank0.json"]),
                paths(&["a/other_rank2.json"]),
                paths(&["b/job_rank0.sqlite"]),
            ]
        );
    }

    /// Files whose names give no rank make runs by the ranks they record: a scheduled profiler's
    /// two cycles on two ranks are two runs; a lone rank, a world size the files do not fill and
    /// ranks that do not start at 0 are not.
    #[test]
    fn files_make_runs_by_the_ranks_they_record() {
        let records: HashMap<&str, (u32, Option<u32>)> = HashMap::from([
            ("a/host1_11.100.pt.trace.json", (0, Some(2))),
            ("a/host1_11.200.pt.trace.json", (0, Some(2))),
            ("a/host2_22.101.pt.trace.json", (1, Some(2))),
            ("a/host2_22.201.pt.trace.json", (1, Some(2))),
            ("a/single.sqlite", (0, Some(1))),
            ("b/x.json", (0, Some(4))),
            ("b/y.json", (1, Some(4))),
            ("c/x.json", (1, None)),
            ("c/y.json", (2, None)),
            ("d/job_rank0.json", (1, Some(2))),
            ("d/job_rank1.json", (0, Some(2))),
        ]);
        let mut names: Vec<&str> = records.keys().copied().collect();
        names.push("a/notes.csv");
        names.sort();
        let files: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
        let runs = rank_runs(files, |p| records.get(p.to_str()?).copied());
        let run = |names: &[&str]| -> Vec<PathBuf> { names.iter().map(PathBuf::from).collect() };
        assert_eq!(
            runs,
            [
                run(&[
                    "a/host1_11.100.pt.trace.json",
                    "a/host2_22.101.pt.trace.json"
                ]),
                run(&[
                    "a/host1_11.200.pt.trace.json",
                    "a/host2_22.201.pt.trace.json"
                ]),
                run(&["a/notes.csv"]),
                run(&["a/single.sqlite"]),
                run(&["b/x.json"]),
                run(&["b/y.json"]),
                run(&["c/x.json"]),
                run(&["c/y.json"]),
                // The names' ranks come first: the records' are not asked.
                run(&["d/job_rank0.json", "d/job_rank1.json"]),
            ]
        );
    }
}
