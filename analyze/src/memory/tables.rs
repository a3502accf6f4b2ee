//! Tables of memory reports: what `analyze memory` prints ([`document`]): the peak report of one
//! snapshot, or across several the peak table, the categories per run, and baseline against
//! compared run (fp32 against autocast, or pairs given in order) with deltas; and what
//! `analyze memory --by module` prints ([`modules_document`]). Sizes are MiB with two decimals in
//! text, exact bytes beside them; JSON keeps the full values.

use std::collections::BTreeMap;

use super::modules::{self, top_and_rest, ModuleShare};
use super::summary::{category_order, MemoryReport, SegmentStats};
use crate::render::cells::{
    bytes_to_mib, change_pct, mib, opt_int, opt_mib, opt_ms_of_us, opt_text, pct,
};
use crate::render::{Cell, Document, Section, Table};

/// What `analyze memory` prints for `reports`: one snapshot's peak report (its JSON the whole
/// [`MemoryReport`]), or the tables across several. `in_pairs` says the reports come as
/// baseline, compared, baseline, compared, ...; otherwise fp32 runs are paired with the autocast
/// runs of the same model, context length and mode ([`precision_pairs`]).
pub fn document(reports: &[MemoryReport], in_pairs: bool) -> Document {
    if let ([r], false) = (reports, in_pairs) {
        let mut doc = report_document(r);
        doc.json = serde_json::to_value(r).ok();
        return doc;
    }
    let pairs: Vec<(usize, usize)> = if in_pairs {
        (0..reports.len() / 2).map(|i| (2 * i, 2 * i + 1)).collect()
    } else {
        precision_pairs(reports)
    };
    let mut sections = vec![
        Section {
            title: Some("Peak memory per snapshot".into()),
            table: peak_table(reports),
            notes: vec![
                "forward peak: highest allocated bytes in forward phases; step peak: the whole recorded step (train runs)".into(),
            ],
        },
        Section {
            title: Some("Categories at the peak".into()),
            table: categories_table(reports),
            notes: Vec::new(),
        },
    ];
    let comparison = precision_table(reports, &pairs);
    if !pairs.is_empty() {
        sections.push(Section {
            title: Some(if in_pairs {
                "Baseline against compared run".into()
            } else {
                "Baseline (fp32) against autocast".into()
            }),
            table: comparison.clone(),
            notes: vec![
                "Δ = compared - baseline; negative means the compared run needs less memory".into(),
            ],
        });
    }
    let json = serde_json::json!({
        "snapshots": reports,
        "peak_table": peak_table(reports).to_json(),
        "categories_table": categories_table(reports).to_json(),
        "comparisons": comparison.to_json(),
    });
    Document {
        sections,
        json: Some(json),
    }
}

/// Categories at the peak, one row per snapshot, one column per category (MiB), the columns in
/// the categories' display order.
pub fn categories_table(reports: &[MemoryReport]) -> Table {
    let names = category_order(reports);
    let mut columns = vec!["run".to_owned()];
    columns.extend(names.iter().map(|n| format!("{n} MiB")));
    let mut t = Table::new(columns);
    for r in reports {
        let mut row = vec![Cell::text(&r.label)];
        for n in &names {
            row.push(
                r.categories_at_peak
                    .iter()
                    .find(|c| &c.category == n)
                    .map_or(Cell::Float(0.0, 2), |c| mib(c.bytes)),
            );
        }
        t.push(row);
    }
    t
}

/// The peak report of one snapshot: headline numbers, top allocations, categories, segments.
pub fn report_document(r: &MemoryReport) -> Document {
    let mut head = Table::new(["quantity", "MiB", "bytes", "at (ms)", "entry"]);
    let mut row = |name: &str, bytes: u64, at: Option<f64>, entry: Option<usize>| {
        head.push(vec![
            Cell::text(name),
            mib(bytes),
            Cell::Int(bytes as i64),
            opt_ms_of_us(at),
            entry.map_or(Cell::Missing, |e| Cell::Int(e as i64)),
        ]);
    };
    row(
        "peak allocated",
        r.peak_allocated_bytes,
        r.peak_time_us,
        r.peak_entry,
    );
    if let Some(f) = r.forward_peak_bytes {
        row("forward peak allocated", f, None, None);
    }
    row(
        "reserved at the peak",
        r.reserved_at_peak_bytes,
        r.peak_time_us,
        r.peak_entry,
    );
    row("peak reserved", r.peak_reserved_bytes, None, None);
    row(
        "allocated before recording",
        r.start_allocated_bytes,
        None,
        None,
    );
    row(
        "allocated at the end",
        r.end_allocated_bytes,
        r.window_us,
        None,
    );
    row(
        "reserved at the end",
        r.end_reserved_bytes,
        r.window_us,
        None,
    );
    let mut notes = vec![format!(
        "{} trace entries on device {}{}{}",
        r.trace_entries,
        r.device,
        r.window_us
            .map(|w| format!(" over {:.3} ms", w / 1000.0))
            .unwrap_or_default(),
        r.peak_phase
            .map(|p| format!("; the peak falls in the {} phase", p.name()))
            .unwrap_or_default(),
    )];
    if !r.phases.is_empty() {
        let phases: Vec<String> = r
            .phases
            .iter()
            .map(|p| match (p.start_us, p.end_us) {
                (Some(s), Some(e)) => {
                    format!("{} {:.1}-{:.1} ms", p.phase.name(), s / 1000.0, e / 1000.0)
                }
                _ => format!(
                    "{} entries {}-{}",
                    p.phase.name(),
                    p.first_entry,
                    p.last_entry
                ),
            })
            .collect();
        notes.push(format!("phases: {}", phases.join(", ")));
    }
    if r.trace_entries == 0 {
        notes.push("no allocator trace in this snapshot: the numbers are the end state".into());
    }
    if r.oom_events > 0 {
        notes.push(format!(
            "{} out-of-memory events in the trace",
            r.oom_events
        ));
    }
    if r.checks.unmatched_frees > 0 || r.checks.size_fallbacks > 0 {
        notes.push(format!(
            "replay: {} frees of unknown addresses, {} sizes taken as rounded requests",
            r.checks.unmatched_frees, r.checks.size_fallbacks
        ));
    }

    let mut top = Table::new([
        "#",
        "MiB",
        "bytes",
        "requested",
        "stream",
        "category",
        "frame",
        "stack",
    ]);
    for (i, a) in r.top_allocations.iter().enumerate() {
        top.push(vec![
            Cell::Int(i as i64 + 1),
            mib(a.size),
            Cell::Int(a.size as i64),
            Cell::Int(a.requested_size as i64),
            Cell::Int(a.stream as i64),
            Cell::text(&a.category),
            Cell::text(&a.frame),
            Cell::text(a.stack.join(" < ")),
        ]);
    }

    let mut cats = Table::new(["category", "MiB", "bytes", "count", "share %"]);
    for c in &r.categories_at_peak {
        cats.push(vec![
            Cell::text(&c.category),
            mib(c.bytes),
            Cell::Int(c.bytes as i64),
            Cell::Int(c.count as i64),
            pct(c.share),
        ]);
    }

    let mut sections = vec![
        Section {
            title: Some(format!("Peak memory: {}", r.label)),
            table: head,
            notes,
        },
        Section {
            title: Some("Largest allocations live at the peak".into()),
            table: top,
            notes: Vec::new(),
        },
        Section {
            title: Some("Categories at the peak".into()),
            table: cats,
            notes: Vec::new(),
        },
    ];
    if r.streams_at_peak.len() > 1 {
        let mut t = Table::new(["stream", "MiB", "bytes", "count"]);
        for s in &r.streams_at_peak {
            t.push(vec![
                Cell::text(format!("0x{:x}", s.stream)),
                mib(s.bytes),
                Cell::Int(s.bytes as i64),
                Cell::Int(s.count as i64),
            ]);
        }
        sections.push(Section {
            title: Some("Streams at the peak".into()),
            table: t,
            notes: Vec::new(),
        });
    }
    sections.push(stats_section(&r.label, &r.stats));
    Document {
        sections,
        json: None,
    }
}

/// What `analyze memory --by module` prints: per snapshot, the `top` modules by bytes at the
/// peak ([`modules_table`]). Its JSON holds every module: one object for one snapshot
/// (`label`, `peak_allocated_bytes`, `modules`), `{"snapshots": [...]}` for several.
pub fn modules_document(reports: &[MemoryReport], top: usize) -> Document {
    let sections = reports
        .iter()
        .map(|r| Section {
            title: Some(format!("Memory by module: {}", r.label)),
            table: modules_table(r, top),
            notes: vec![modules_note(r)],
        })
        .collect();
    let json_of = |r: &MemoryReport| {
        serde_json::json!({
            "label": r.label,
            "peak_allocated_bytes": r.peak_allocated_bytes,
            "peak_entry": r.peak_entry,
            "modules": r.modules,
        })
    };
    let json = match reports {
        [r] => json_of(r),
        _ => serde_json::json!({ "snapshots": reports.iter().map(json_of).collect::<Vec<_>>() }),
    };
    Document {
        sections,
        json: Some(json),
    }
}

/// The `top` modules of one snapshot by bytes live at the peak, and one row for the rest, so
/// that the column adds up to the peak.
pub fn modules_table(r: &MemoryReport, top: usize) -> Table {
    let mut t = Table::new([
        "#",
        "module",
        "MiB at peak",
        "bytes at peak",
        "% peak",
        "blocks",
        "allocations",
        "MiB allocated",
    ]);
    let mut row = |rank: Cell, m: &ModuleShare| {
        t.push(vec![
            rank,
            Cell::text(&m.name),
            mib(m.bytes_at_peak),
            Cell::Int(m.bytes_at_peak as i64),
            share_of_peak(r, m.bytes_at_peak),
            Cell::Int(m.blocks_at_peak as i64),
            Cell::Int(m.allocations as i64),
            mib(m.bytes_allocated),
        ]);
    };
    let (shown, rest) = top_and_rest(&r.modules, top);
    for (i, m) in shown.iter().enumerate() {
        row(Cell::Int(i as i64 + 1), m);
    }
    if let Some(rest) = &rest {
        row(Cell::Missing, rest);
    }
    t
}

/// `bytes` as a percentage of the snapshot's peak allocated bytes (`-` for a peak of 0).
pub fn share_of_peak(r: &MemoryReport, bytes: u64) -> Cell {
    if r.peak_allocated_bytes > 0 {
        pct(bytes as f64 / r.peak_allocated_bytes as f64)
    } else {
        Cell::Missing
    }
}

/// What a module table's rows are and what they add up to.
pub fn modules_note(r: &MemoryReport) -> String {
    format!(
        "module: the module path, or the innermost frame of the model's code (file.py:line function), on each block's stack; {}, {} and {} hold the blocks whose stack names neither. Bytes at the peak add up to the peak allocated, {} bytes; blocks: how many are live at the peak; allocations: those made over the recorded window",
        modules::BEFORE_RECORDING,
        modules::NO_STACK,
        modules::NO_MODULE_FRAME,
        r.peak_allocated_bytes
    )
}

/// `memory_viz`-like segment summary.
pub fn stats_section(label: &str, s: &SegmentStats) -> Section {
    let mut t = Table::new(["quantity", "value", "MiB"]);
    let count = |t: &mut Table, n: &str, v: usize| {
        t.push(vec![Cell::text(n), Cell::Int(v as i64), Cell::Missing])
    };
    let bytes =
        |t: &mut Table, n: &str, v: u64| t.push(vec![Cell::text(n), Cell::Int(v as i64), mib(v)]);
    count(&mut t, "segments", s.segments);
    count(&mut t, "large segments", s.large_segments);
    count(&mut t, "small segments", s.small_segments);
    bytes(&mut t, "reserved", s.reserved_bytes);
    bytes(&mut t, "allocated", s.allocated_bytes);
    bytes(&mut t, "requested", s.requested_bytes);
    bytes(&mut t, "free", s.free_bytes);
    bytes(&mut t, "internal free (rounding)", s.internal_free_bytes);
    bytes(&mut t, "largest free block", s.largest_free_block_bytes);
    t.push(vec![
        Cell::text("fragmentation %"),
        pct(s.fragmentation),
        Cell::Missing,
    ]);
    Section {
        title: Some(format!("Allocator segments at the end of the window: {label}")),
        table: t,
        notes: vec![
            "fragmentation = free / reserved: cached bytes no tensor holds; the largest free block is the biggest request served without a new cudaMalloc".into(),
        ],
    }
}

/// One row per snapshot: forward peak beside the full-step peak.
pub fn peak_table(reports: &[MemoryReport]) -> Table {
    let mut columns = vec![
        "run",
        "model",
        "ctx",
        "mode",
        "precision",
        "forward peak MiB",
        "step peak MiB",
        "peak reserved MiB",
        "before recording MiB",
    ];
    // The `OOM` mark, in a column of its own where any snapshot has out-of-memory events: the
    // peaks of such a run are where it stopped, not what it needed.
    let any_oom = reports.iter().any(|r| r.oom_events > 0);
    if any_oom {
        columns.push("out of memory");
    }
    let mut t = Table::new(columns);
    for r in reports {
        let train = r.run.mode.as_deref() != Some("forward");
        let mut row = vec![
            Cell::text(&r.label),
            opt_text(r.run.model.as_deref()),
            opt_int(r.run.ctx),
            opt_text(r.run.mode.as_deref()),
            opt_text(r.run.precision.as_deref()),
            opt_mib(r.forward_peak_bytes.or(if train {
                None
            } else {
                Some(r.peak_allocated_bytes)
            })),
            if train {
                mib(r.peak_allocated_bytes)
            } else {
                Cell::Missing
            },
            mib(r.peak_reserved_bytes),
            mib(r.start_allocated_bytes),
        ];
        if any_oom {
            row.push(if r.oom_events > 0 {
                Cell::text("OOM")
            } else {
                Cell::Missing
            });
        }
        t.push(row);
    }
    t
}

/// Pairs (baseline, autocast) of runs with the same model, ctx and mode: fp32 against each of
/// bf16/fp16/amp. Indices into `reports`.
pub fn precision_pairs(reports: &[MemoryReport]) -> Vec<(usize, usize)> {
    // (model, ctx, mode) -> runs
    type Key = (Option<String>, Option<u32>, Option<String>);
    let mut groups: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for (i, r) in reports.iter().enumerate() {
        if r.run.precision.is_some() {
            groups
                .entry((r.run.model.clone(), r.run.ctx, r.run.mode.clone()))
                .or_default()
                .push(i);
        }
    }
    let mut pairs = Vec::new();
    for members in groups.values() {
        let Some(&base) = members
            .iter()
            .find(|&&i| reports[i].run.precision.as_deref() == Some("fp32"))
        else {
            continue;
        };
        for &other in members {
            if other != base {
                pairs.push((base, other));
            }
        }
    }
    pairs
}

fn delta_cells(base: Option<u64>, other: Option<u64>) -> [Cell; 4] {
    match (base, other) {
        (Some(b), Some(o)) => [
            mib(b),
            mib(o),
            Cell::Float(bytes_to_mib(o) - bytes_to_mib(b), 2),
            change_pct(b, o),
        ],
        _ => [opt_mib(base), opt_mib(other), Cell::Missing, Cell::Missing],
    }
}

/// Baseline against autocast: forward and step peaks with their differences.
pub fn precision_table(reports: &[MemoryReport], pairs: &[(usize, usize)]) -> Table {
    let mut t = Table::new([
        "baseline",
        "compared",
        "forward base MiB",
        "forward compared MiB",
        "forward Δ MiB",
        "forward Δ %",
        "step base MiB",
        "step compared MiB",
        "step Δ MiB",
        "step Δ %",
    ]);
    for &(b, o) in pairs {
        let (rb, ro) = (&reports[b], &reports[o]);
        let step = |r: &MemoryReport| {
            (r.run.mode.as_deref() != Some("forward")).then_some(r.peak_allocated_bytes)
        };
        let fwd = |r: &MemoryReport| {
            r.forward_peak_bytes.or_else(|| {
                (r.run.mode.as_deref() == Some("forward")).then_some(r.peak_allocated_bytes)
            })
        };
        let mut row = vec![Cell::text(&rb.label), Cell::text(&ro.label)];
        row.extend(delta_cells(fwd(rb), fwd(ro)));
        row.extend(delta_cells(step(rb), step(ro)));
        t.push(row);
    }
    t
}
