//! Fuzzing the run of one file per rank and the Parquet dataset `analyze export` writes of it:
//! a folder of two to four rank files, each one of the nsys fuzzer's bases changed by its SQL
//! and byte mutations ([`crate::fuzz_nsys`]), now and then the same file twice, a file cut to
//! nothing, or a file that is no export at all. The folder is profiled as one run and exported;
//! every Parquet file the export leaves must then read back whole with the parquet crate's own
//! reader, row by row. Every case must load, or be refused with one error line naming the run's
//! folder or one of its files. Cases and seeds: [`crate::fuzz_engine`].

use std::path::Path;

use analyze::export::{export_files, ExportOptions};
use analyze::kernels::class::Classifier;
use analyze::profile::{self, ProfileOptions};
use analyze::render::{render_to_string, Format};
use parquet::file::reader::{FileReader, SerializedFileReader};
use rusqlite::Connection;

use crate::fuzz_engine::{outcome, Campaign, Outcome, Rng};
use crate::fuzz_nsys::{bases, damage, mutate};

/// Write the rank file `path`: a base, mutated like the nsys fuzzer's cases, or now and then
/// something no reader takes for an export.
fn rank_file(rng: &mut Rng, path: &Path) {
    match rng.below(24) {
        0 => std::fs::write(path, b"").unwrap(),
        1 => std::fs::write(path, rng.bytes(1, 4096)).unwrap(),
        _ => {
            std::fs::write(path, rng.pick(bases())).unwrap();
            // A few files stay as they are, so that runs of good ranks with one bad are common.
            if rng.one_in(3) {
                return;
            }
            {
                let conn = Connection::open(path).unwrap();
                let _ = conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF");
                for _ in 0..1 + rng.below(3) {
                    mutate(rng, &conn);
                }
            }
            if rng.one_in(8) {
                damage(rng, path);
            }
        }
    }
}

/// Every Parquet file under `dir`, read back row by row: a file the writer left that its own
/// format's reader refuses is a failure.
fn read_back(dir: &Path) -> usize {
    let mut rows = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rows += read_back(&path);
        } else if path.extension().is_some_and(|e| e == "parquet") {
            let file = std::fs::File::open(&path).unwrap();
            let reader = SerializedFileReader::new(file)
                .unwrap_or_else(|e| panic!("the export wrote {} unreadable: {e}", path.display()));
            for row in reader.get_row_iter(None).unwrap() {
                row.unwrap_or_else(|e| panic!("a row of {}: {e}", path.display()));
                rows += 1;
            }
        }
    }
    rows
}

fn case(rng: &mut Rng, scratch: &Path, classifier: &Classifier) -> Outcome {
    let run = scratch.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let ranks = 2 + rng.index(3);
    for r in 0..ranks {
        let path = run.join(format!("rank{r}.sqlite"));
        if r > 0 && rng.one_in(10) {
            // The same file as the rank before: two ranks claiming one process and device.
            std::fs::copy(run.join(format!("rank{}.sqlite", r - 1)), &path).unwrap();
        } else {
            rank_file(rng, &path);
        }
    }
    let inputs = [run.clone()];
    let opts = ProfileOptions::default();
    let profiled = profile::profile_files(&inputs, classifier, &opts).map(|p| {
        let _ = render_to_string(Format::Table, &p.document());
        let _ = render_to_string(Format::Json, &p.document());
    });
    let out = scratch.join("dataset");
    let exported = export_files(&inputs, &out, classifier, &opts, ExportOptions::default());
    match (&profiled, &exported) {
        (Ok(()), Ok(_)) => {
            read_back(&out);
        }
        // What `profile` takes, `export` takes too, and the other way round.
        (Ok(()), Err(e)) | (Err(e), Ok(_)) => panic!(
            "profile and export disagree on the run: one read it, the other refused it: {}",
            analyze::cli::error_line(e)
        ),
        (Err(_), Err(_)) => {}
    }
    outcome(&run, profiled)
}

#[test]
fn mutated_rank_files_profile_export_or_are_refused_in_one_line() {
    let classifier = Classifier::builtin();
    // Built before the clock starts, as the nsys fuzzer's are.
    bases();
    Campaign::from_env("many", 40).run(|rng, scratch| case(rng, scratch, &classifier));
}
