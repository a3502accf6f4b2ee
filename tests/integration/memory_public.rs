//! The four public memory snapshots (an old layout without times, PyTorch 2.6 and 2.11) load and
//! give tables and plots. Counts are checked against `../shared/fixtures/public/MANIFEST.md`,
//! which was written from the pickles with Python, independently of this reader.
//! The files are not part of the project; the tests skip when they are absent.

use crate::common;

use std::collections::HashMap;
use std::path::PathBuf;

use analyze::formats;
use analyze::memory::categories::Rules;
use analyze::memory::charts::{categories_chart, timeline_chart};
use analyze::memory::summary::{analyze, MemoryOptions};
use analyze::memory::tables::report_document;
use analyze::model::snapshot::{Action, SegmentKind, Snapshot};
use analyze::render::plot::{write_chart, ImageFormat};
use analyze::render::{render_to_string, Format};

fn public(name: &str) -> Option<PathBuf> {
    common::shared(&format!("public/memsnap/{name}"))
}

fn actions(s: &Snapshot) -> HashMap<&'static str, usize> {
    let mut m = HashMap::new();
    for e in s.trace(0) {
        let k = match e.action {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            _ => "other",
        };
        *m.entry(k).or_default() += 1;
    }
    m
}

struct Manifest {
    file: &'static str,
    entries: usize,
    actions: &'static [(&'static str, usize)],
    large: usize,
    small: usize,
    reserved_mib: u64,
    blocks: usize,
    has_time: bool,
    annotations: Option<usize>,
}

const FILES: [Manifest; 4] = [
    Manifest {
        file: "ftcourse__memory_snapshot.pickle.gz",
        entries: 10307,
        actions: &[
            ("alloc", 3505),
            ("free_requested", 3325),
            ("free_completed", 3325),
            ("segment_alloc", 152),
        ],
        large: 164,
        small: 51,
        reserved_mib: 6172,
        blocks: 1079,
        has_time: false,
        annotations: None,
    },
    Manifest {
        file: "kkaitlyn-a2__memory_files_memory_ctx128_fullstep_.pickle.gz",
        entries: 19770,
        actions: &[
            ("segment_free", 430),
            ("segment_alloc", 782),
            ("alloc", 6770),
            ("free_requested", 5894),
            ("free_completed", 5894),
        ],
        large: 1000,
        small: 10,
        reserved_mib: 58280,
        blocks: 1525,
        has_time: true,
        annotations: Some(4),
    },
    Manifest {
        file: "wedsonlin-a2__medium_128_inference_memory_snapshot.pickle.gz",
        entries: 3840,
        actions: &[
            ("alloc", 1280),
            ("free_requested", 1280),
            ("free_completed", 1280),
        ],
        large: 95,
        small: 3,
        reserved_mib: 1682,
        blocks: 230,
        has_time: true,
        annotations: Some(0),
    },
    Manifest {
        file: "wedsonlin-a2__medium_128_training_memory_snapshot.pickle.gz",
        entries: 19136,
        actions: &[
            ("alloc", 6526),
            ("free_requested", 6305),
            ("free_completed", 6305),
        ],
        large: 373,
        small: 4,
        reserved_mib: 6900,
        blocks: 918,
        has_time: true,
        annotations: Some(2),
    },
];

#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn public_snapshots_load_with_the_manifest_counts() {
    for m in &FILES {
        let Some(path) = public(m.file) else { return };
        let s = formats::load_snapshot(&path).unwrap();
        assert_eq!(s.trace(0).len(), m.entries, "{}", m.file);
        let got = actions(&s);
        for (k, n) in m.actions {
            assert_eq!(got.get(k).copied().unwrap_or(0), *n, "{} {k}", m.file);
        }
        let kinds = |k| s.segments.iter().filter(|g| g.kind == k).count();
        assert_eq!(kinds(SegmentKind::Large), m.large, "{}", m.file);
        assert_eq!(kinds(SegmentKind::Small), m.small, "{}", m.file);
        let reserved: u64 = s.segments.iter().map(|g| g.total_size).sum();
        assert_eq!(reserved, m.reserved_mib << 20, "{}", m.file);
        let blocks: usize = s.segments.iter().map(|g| g.blocks.len()).sum();
        assert_eq!(blocks, m.blocks, "{}", m.file);
        assert_eq!(s.format.has_time, m.has_time, "{}", m.file);
        assert_eq!(s.format.layout, "dict");
        match m.annotations {
            Some(n) => {
                assert!(s.format.has_annotations, "{}", m.file);
                assert_eq!(s.annotations.len(), n, "{}", m.file);
            }
            None => assert!(!s.format.has_annotations && !s.format.has_allocator_settings),
        }
    }
}

#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn wedsonlin_training_carries_compile_context_and_optimizer_annotations() {
    let Some(path) = public("wedsonlin-a2__medium_128_training_memory_snapshot.pickle.gz") else {
        return;
    };
    let s = formats::load_snapshot(&path).unwrap();
    assert!(s
        .annotations
        .iter()
        .any(|a| a.name.contains("Optimizer.step") && a.stage == "START"));
    // `compile_context` is "N/A" throughout an eager run: read as absent.
    assert!(s.trace(0).iter().all(|e| e.compile_context.is_none()));
}

#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn public_snapshots_give_tables_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    for (i, m) in FILES.iter().enumerate() {
        let Some(path) = public(m.file) else { return };
        let s = formats::load_snapshot(&path).unwrap();
        let opts = MemoryOptions {
            label: m.file.trim_end_matches(".pickle.gz").to_owned(),
            ..MemoryOptions::default()
        };
        let a = analyze(&s, &Rules::builtin(), &opts);
        let r = &a.report;
        assert!(
            r.peak_allocated_bytes >= r.start_allocated_bytes,
            "{}",
            m.file
        );
        assert!(
            r.peak_allocated_bytes >= r.end_allocated_bytes,
            "{}",
            m.file
        );
        assert!(
            r.peak_reserved_bytes >= r.reserved_at_peak_bytes,
            "{}",
            m.file
        );
        assert_eq!(r.peak_time_us.is_some(), m.has_time, "{}", m.file);
        assert_eq!(r.top_allocations.len(), 10, "{}", m.file);
        assert_eq!(
            r.categories_at_peak.iter().map(|c| c.bytes).sum::<u64>(),
            r.peak_allocated_bytes,
            "{}",
            m.file
        );
        let doc = report_document(r);
        for f in [Format::Table, Format::Csv, Format::Markdown, Format::Json] {
            let text = render_to_string(f, &doc);
            assert!(text.len() > 500, "{} {f:?}", m.file);
        }
        // One format per file keeps the test quick; both are exercised across the four.
        let format = if i % 2 == 0 {
            ImageFormat::Png
        } else {
            ImageFormat::Svg
        };
        let p = dir.path().join(format!("t{i}.{}", format.extension()));
        write_chart(&timeline_chart(&a), &p, format).unwrap();
        let q = dir.path().join(format!("c{i}.{}", format.extension()));
        write_chart(&categories_chart(&[r]), &q, format).unwrap();
        let head = std::fs::read(&p).unwrap();
        match format {
            ImageFormat::Png => assert_eq!(&head[..4], b"\x89PNG"),
            ImageFormat::Svg => assert!(head.starts_with(b"<svg")),
        }
    }
}
