//! Fuzzing the Nsight Systems export reader, and the stats and profile behind it, with real
//! exports changed the way a damaged, foreign or hostile file differs from a good one: at the SQL
//! level (columns dropped, renamed, added; tables dropped, emptied, renamed or made views; NULLs;
//! values of the wrong type; reversed, negative and extreme times; dangling string ids; ids out
//! of range; duplicated rows; tables of junk rows, now and then huge), and at the byte level
//! (damaged pages, cut files).
//!
//! The bases are three small exports cut from the fixtures (one of `collect`'s own traces, a
//! plain nsys capture, a CUDA-graph capture), a few hundred kernels each. Every case must load
//! and analyse, or be refused with one error line. Cases and seeds: [`crate::fuzz_engine`].

use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

use analyze::formats::nsys_sqlite;
use analyze::kernels::class::Classifier;
use analyze::profile::{self, ProfileOptions};
use analyze::render::{render_to_string, Format};
use analyze::stats::{self, Report};
use rusqlite::Connection;

use crate::common;
use crate::fuzz_engine::{outcome, Campaign, Outcome, Rng};

/// The tables the reader reads, which mutations aim at most.
const READ_TABLES: &[&str] = &[
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "StringIds",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "TARGET_INFO_GPU",
    "META_DATA_EXPORT",
    "ThreadNames",
    "RUN_METADATA",
];

/// Tables kept in the bases besides [`READ_TABLES`]; the rest are dropped to keep each case
/// small.
const ALSO_KEPT_TABLES: &[&str] = &["CUPTI_ACTIVITY_KIND_DRIVER", "PROCESSES"];

/// A fixture cut down to about a few hundred kernels: its tables of work keep one correlation
/// id in `keep_one_in`, so launches still meet their kernels; NVTX and strings stay whole.
fn cut(fixture: &str, keep_one_in: u32) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("base.sqlite");
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(common::fixture(fixture)).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    std::fs::write(&db, &bytes).unwrap();
    let conn = Connection::open(&db).unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for t in &tables {
        if !READ_TABLES.contains(&t.as_str()) && !ALSO_KEPT_TABLES.contains(&t.as_str()) {
            conn.execute_batch(&format!("DROP TABLE [{t}]")).unwrap();
        } else if t.starts_with("CUPTI_ACTIVITY_KIND_") {
            conn.execute_batch(&format!(
                "DELETE FROM [{t}] WHERE correlationId % {keep_one_in} != 0"
            ))
            .unwrap();
        }
    }
    conn.execute_batch("VACUUM").unwrap();
    drop(conn);
    std::fs::read(&db).unwrap()
}

pub(crate) fn bases() -> &'static [Vec<u8>] {
    static BASES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    BASES.get_or_init(|| {
        vec![
            cut("collect/collect_small_ctx128_train_fp32.sqlite.gz", 8),
            cut("nsys/torch_small_ctx128_fwd_fp32.sqlite.gz", 12),
            cut(
                "captures/torch_graphs_node_small_l4_ctx128_train_fp32.sqlite.gz",
                8,
            ),
        ]
    })
}

fn tables(conn: &Connection) -> Vec<String> {
    conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .unwrap_or_default()
}

fn columns(conn: &Connection, table: &str) -> Vec<String> {
    conn.prepare(&format!("PRAGMA table_info([{table}])"))
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(1))?
                .collect::<Result<Vec<_>, _>>()
        })
        .unwrap_or_default()
}

/// A table to change: mostly one the reader reads.
fn pick_table(rng: &mut Rng, conn: &Connection) -> Option<String> {
    let all = tables(conn);
    let read: Vec<&String> = all
        .iter()
        .filter(|t| READ_TABLES.contains(&t.as_str()))
        .collect();
    if !read.is_empty() && !rng.one_in(6) {
        return Some(rng.pick(&read).to_string());
    }
    (!all.is_empty()).then(|| rng.pick(&all).clone())
}

/// A column of `table`: the times and ids the reader leans on most often.
fn pick_column(rng: &mut Rng, cols: &[String]) -> Option<String> {
    const HOT: &[&str] = &[
        "start",
        "end",
        "correlationId",
        "nameId",
        "demangledName",
        "shortName",
        "textId",
        "text",
        "eventType",
        "globalTid",
        "globalPid",
        "id",
        "value",
        "deviceId",
        "streamId",
        "domainId",
        "bytes",
        "copyKind",
    ];
    if cols.is_empty() {
        return None;
    }
    let hot: Vec<&String> = cols.iter().filter(|c| HOT.contains(&c.as_str())).collect();
    if !hot.is_empty() && rng.below(3) != 0 {
        Some(rng.pick(&hot).to_string())
    } else {
        Some(rng.pick(cols).clone())
    }
}

/// A SQL literal of any type: edgy integers, odd reals, texts (numeric-looking or not, empty,
/// long), blobs, NULL.
fn junk_literal(rng: &mut Rng) -> String {
    match rng.below(9) {
        0 => "NULL".into(),
        1 | 2 => rng.edgy_i64().to_string(),
        3 => rng
            .pick(&[
                "1e308", "-1e308", "0.5", "-0.0", "3.75", "9.3e18", "-9.3e18", "1e-300", "123.0",
            ])
            .to_string(),
        4 => format!(
            "'{}'",
            rng.pick(&[
                "",
                "abc",
                "12",
                "-5",
                " 7 ",
                "0x10",
                "nan",
                "NaN",
                "inf",
                "1e999",
                "é",
                "\u{1F600}"
            ])
        ),
        5 => format!("x'{}'", hex(&rng.bytes(0, 8))),
        6 => rng.below(12).to_string(),
        7 => format!("replace(hex(zeroblob({})), '00', 'x')", rng.below(20_000)),
        _ => format!("'{}'", "\u{0}a"),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A SQL expression of the row counter `i` for junk rows, one style per column.
fn junk_expr(rng: &mut Rng) -> String {
    let (a, m) = (rng.below(1_000_003) + 1, rng.below(1 << 40) + 1);
    match rng.below(8) {
        0 => format!("(i * {a}) % {m}"),
        1 => format!("(i * {a}) % {m} - {}", m / 2),
        2 => "i".into(),
        3 => format!(
            "CASE WHEN i % {} = 0 THEN NULL ELSE i END",
            rng.below(5) + 2
        ),
        4 => format!("'t' || (i % {})", rng.below(50) + 1),
        5 => format!("i * {}.5", rng.below(1000)),
        6 => junk_literal(rng),
        _ => format!("{} - i * {a}", rng.edgy_i64()),
    }
}

/// A predicate choosing some rows, from the rowid (never SQLite's `random()`, so a case is
/// repeatable).
fn some_rows(rng: &mut Rng) -> String {
    match rng.below(4) {
        0 => "1".into(),
        1 => format!("rowid % {} = {}", rng.below(7) + 2, rng.below(2)),
        2 => format!("rowid = (SELECT min(rowid) FROM t_) + {}", rng.below(50)),
        _ => format!("rowid > {}", rng.below(400)),
    }
}

/// Make `table` a plain copy without constraints (NOT NULL, keys), so any value fits.
fn relax(conn: &Connection, table: &str) {
    let _ = conn.execute_batch(&format!(
        "CREATE TABLE [relax_tmp] AS SELECT * FROM [{table}]; DROP TABLE [{table}]; \
         ALTER TABLE [relax_tmp] RENAME TO [{table}];"
    ));
}

pub(crate) fn mutate(rng: &mut Rng, conn: &Connection) {
    let Some(table) = pick_table(rng, conn) else {
        return;
    };
    let cols = columns(conn, &table);
    if rng.one_in(2) {
        relax(conn, &table);
    }
    let col = pick_column(rng, &cols).unwrap_or_else(|| "start".into());
    let rows = some_rows(rng).replace("t_", &format!("[{table}]"));
    let sql = match rng.below(20) {
        0 => format!("ALTER TABLE [{table}] DROP COLUMN [{col}]"),
        1 => format!(
            "ALTER TABLE [{table}] RENAME COLUMN [{col}] TO [{}]",
            rng.pick(&[
                "x",
                "START",
                "end_",
                "Start",
                "correlationid",
                "nameId",
                "value"
            ])
        ),
        2 => format!(
            "ALTER TABLE [{table}] ADD COLUMN [{}] {} DEFAULT {}",
            rng.pick(&["extra", "mangledName", "text", "domainId", "greenContextId"]),
            rng.pick(&["INTEGER", "TEXT", "REAL", "BLOB", ""]),
            junk_literal(rng)
        ),
        3 => format!("DROP TABLE [{table}]"),
        4 => format!(
            "ALTER TABLE [{table}] RENAME TO [{}]",
            rng.pick(&[
                "renamed",
                "StringIds",
                "NVTX_EVENTS",
                "cupti_activity_kind_kernel"
            ])
        ),
        5 => format!("DELETE FROM [{table}]"),
        6 => format!("UPDATE [{table}] SET [{col}] = NULL WHERE {rows}"),
        7 | 8 => format!(
            "UPDATE [{table}] SET [{col}] = {} WHERE {rows}",
            junk_literal(rng)
        ),
        9 => format!("UPDATE [{table}] SET start = end, end = start WHERE {rows}"),
        10 => format!("UPDATE [{table}] SET start = -start, end = -end WHERE {rows}"),
        11 => format!(
            "UPDATE [{table}] SET start = {}, end = {} WHERE {rows}",
            rng.edgy_i64(),
            rng.edgy_i64()
        ),
        12 => format!(
            "UPDATE [{table}] SET [{col}] = [{col}] + {} WHERE {rows}",
            rng.edgy_i64()
        ),
        // Names that point nowhere: string ids past the table, or strings deleted.
        13 => {
            if rng.one_in(2) {
                format!(
                    "DELETE FROM StringIds WHERE {}",
                    some_rows(rng).replace("t_", "StringIds")
                )
            } else {
                format!(
                    "UPDATE [{table}] SET [{}] = {} WHERE {rows}",
                    rng.pick(&[
                        "nameId",
                        "demangledName",
                        "shortName",
                        "textId",
                        "mangledName"
                    ]),
                    rng.edgy_i64()
                )
            }
        }
        14 => format!(
            "UPDATE [{table}] SET [{}] = {} WHERE {rows}",
            rng.pick(&[
                "deviceId",
                "streamId",
                "globalPid",
                "globalTid",
                "gridX",
                "blockZ",
                "registersPerThread",
                "copyKind",
                "bytes",
                "domainId",
                "endGlobalTid",
                "smCount",
                "computeMajor",
                "totalMemory"
            ]),
            rng.edgy_i64()
        ),
        15 => format!(
            "UPDATE [{table}] SET eventType = {} WHERE {rows}",
            rng.pick(&[34, 59, 60, 65, 70, 71, 75, -1, 0, 9999, i64::MAX])
        ),
        16 => format!("INSERT INTO [{table}] SELECT * FROM [{table}]"),
        17 | 18 => {
            let n = if rng.one_in(5000) {
                200_000 + rng.below(200_000)
            } else if rng.one_in(50) {
                1_000 + rng.below(20_000)
            } else {
                1 + rng.below(300)
            };
            let exprs: Vec<String> = cols.iter().map(|_| junk_expr(rng)).collect();
            if exprs.is_empty() {
                return;
            }
            format!(
                "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {n}) \
                 INSERT INTO [{table}] SELECT {} FROM c",
                exprs.join(", ")
            )
        }
        _ => format!("DROP TABLE [{table}]; CREATE VIEW [{table}] AS SELECT 1 AS start, 2 AS end"),
    };
    // A statement that SQLite refuses (a NOT NULL column, a dropped key) changes nothing.
    let _ = conn.execute_batch(&sql);
}

/// Damage the file itself: bytes changed in a page, or the file cut short.
pub(crate) fn damage(rng: &mut Rng, path: &Path) {
    let Ok(mut data) = std::fs::read(path) else {
        return;
    };
    if data.is_empty() {
        return;
    }
    match rng.below(3) {
        0 => data.truncate(rng.index(data.len())),
        1 => {
            let page = 4096.min(data.len());
            let n = (data.len() / page).max(1);
            data.truncate(page * (1 + rng.index(n)).min(data.len() / page).max(1));
        }
        _ => {
            for _ in 0..1 + rng.below(8) {
                // The header (first 100 bytes) now and then, else anywhere.
                let i = if rng.one_in(4) {
                    rng.index(100.min(data.len()))
                } else {
                    rng.index(data.len())
                };
                data[i] = rng.byte();
            }
        }
    }
    let _ = std::fs::write(path, data);
}

fn case(rng: &mut Rng, scratch: &Path, classifier: &Classifier) -> Outcome {
    let path = scratch.join("fuzz.sqlite");
    let base = rng.pick(bases());
    std::fs::write(&path, base).unwrap();
    {
        let conn = Connection::open(&path).unwrap();
        let _ = conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF");
        for _ in 0..1 + rng.below(4) {
            mutate(rng, &conn);
        }
    }
    if rng.one_in(8) {
        damage(rng, &path);
    }
    let result = nsys_sqlite::read::load(&path).map(|trace| analyse(&trace, classifier));
    // The streaming readers read the same file: they too load it or refuse it.
    let reports = Report::parse_list("all").unwrap();
    let _ = stats::document_file(&path, &reports);
    let _ = profile::profile_file(&path, classifier, &ProfileOptions::default());
    outcome(&path, result)
}

/// Everything `analyze stats --report all` and `analyze profile` do with a trace.
pub fn analyse(trace: &analyze::Trace, classifier: &Classifier) {
    let reports = Report::parse_list("all").unwrap();
    let (doc, _) = stats::document(trace, &reports);
    let _ = render_to_string(Format::Table, &doc);
    let _ = render_to_string(Format::Json, &doc);
    if profile::check_profilable(trace).is_ok() {
        let p = profile::profile(trace, classifier, &ProfileOptions::default());
        let _ = render_to_string(Format::Table, &p.document());
    }
}

#[test]
fn mutated_exports_load_or_are_refused_in_one_line() {
    let classifier = Classifier::builtin();
    // Built before the clock starts: the first cases would be timed building them (several
    // seconds where the disk is busy: each base is cut down and vacuumed in a temporary file).
    bases();
    Campaign::from_env("nsys", 150).run(|rng, scratch| case(rng, scratch, &classifier));
}

/// The hang of the first nsys campaign (case 60 of seed 1): a kernel from time 95 to
/// 8,680,832,624,474,097,475 ns, past the bounds a loaded trace keeps. The streamed source counts
/// the row, and the file is refused after the scan in one line, but no sink is handed the row:
/// the profile's timeline once cut it into 2^31 pieces before the refusal.
#[test]
fn a_kernel_out_of_bounds_is_refused_and_reaches_no_sink() {
    use analyze::source::{self, TraceSource};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("far.sqlite");
    std::fs::write(&path, &bases()[0]).unwrap();
    let conn = Connection::open(&path).unwrap();
    let kernels: usize = conn
        .query_row("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL", [], |r| {
            r.get(0)
        })
        .unwrap();
    conn.execute_batch(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 95, end = 8680832624474097475 \
         WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)",
    )
    .unwrap();
    drop(conn);

    let source::Opened::Export(mut export) = source::open(&path, 0, 0).unwrap() else {
        panic!("an export streams");
    };
    export.small_tables(false, false).unwrap();
    let spans: Vec<(i64, i64)> = export
        .scan_kernels(false, false, Vec::new, |v, k| v.push((k.start, k.end)))
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    assert!(kernels > 100, "{kernels} kernels in the base");
    assert_eq!(spans.len(), kernels - 1);
    let limit = analyze::model::bounds::LIMIT;
    assert!(spans
        .iter()
        .all(|&(s, e)| s.abs() <= limit && e.abs() <= limit));
    let expected = format!(
        "error: {}: a time of its kernels (8680832624474097475 ns) is out of range (more than 73 \
         years from the trace's zero): the file is damaged",
        path.display()
    );
    let line = |e: Option<analyze::Error>| analyze::cli::error_line(&e.expect("refused"));
    assert_eq!(line(export.check_bounds().err()), expected);
    let classifier = Classifier::builtin();
    let profiled = profile::profile_file(&path, &classifier, &ProfileOptions::default());
    assert_eq!(line(profiled.err()), expected);
    let reports = Report::parse_list("all").unwrap();
    assert_eq!(line(stats::document_file(&path, &reports).err()), expected);
}
