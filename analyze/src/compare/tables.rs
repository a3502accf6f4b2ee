//! The comparisons as tables: a trace comparison ([`document`]: summary, passes per step,
//! families, classes, kernels, ranges) and a snapshot comparison ([`memory_document`]: summary,
//! categories and allocation sites at the peak), each with its JSON shape, which has every row
//! whatever the options; and what a `--fail-if-slower` check prints ([`check_passed`],
//! [`check_failed`]). Rows come sorted from the analyses; here they are only cut and laid out.

use serde_json::json;

use crate::kernels::name::short_name;
use crate::model::trace::{Nanos, SourceFormat};
use crate::render::cells::{change_pct, mib, mib_delta, opt_float, opt_ms, opt_pct, truncate};
use crate::render::{Cell, Document, Section, Table};

use super::memory::{byte_delta, HeldDelta, MemoryComparison};
use super::passes::PassDelta;
use super::{pct, Comparison, Delta, Presence, Regression, Side};

/// Kernel names are cut to this many characters in tables for people.
pub const NAME_WIDTH: usize = 100;

/// Slowed kernels a failed check names.
const SLOWED_SHOWN: usize = 10;

/// How much of a comparison a document shows.
#[derive(Clone, Copy, Debug)]
pub struct DocumentOptions {
    /// Rows per kernel/family table; `None` for all.
    pub limit: Option<usize>,
    /// Kernel names longer than this are cut (with `…`); `None` for full names.
    pub name_width: Option<usize>,
}

impl DocumentOptions {
    /// The rows a table shows under [`DocumentOptions::limit`], and the note that says how many
    /// more there are when some are cut.
    fn cut<'a, T>(&self, rows: &'a [T]) -> (&'a [T], Vec<String>) {
        let shown = self.limit.map_or(rows.len(), |l| l.min(rows.len()));
        let mut notes = Vec::new();
        if shown < rows.len() {
            notes.push(format!(
                "{} more rows not shown (--limit 0 shows all).",
                rows.len() - shown
            ));
        }
        (&rows[..shown], notes)
    }
}

fn avg_cell(s: &Side) -> Cell {
    opt_float(s.average(), 1)
}

const DELTA_COLUMNS: &[&str] = &[
    "Δ Time (ns)",
    "Δ %",
    "A Time (ns)",
    "B Time (ns)",
    "A Inst",
    "B Inst",
    "A Avg (ns)",
    "B Avg (ns)",
    "Status",
];

fn delta_section(
    title: &str,
    rows: &[Delta],
    name_column: &str,
    with_class: bool,
    opts: &DocumentOptions,
) -> Section {
    let mut columns: Vec<&str> = DELTA_COLUMNS.to_vec();
    if with_class {
        columns.push("Class");
    }
    columns.push(name_column);
    let mut table = Table::new(columns);
    let (shown, notes) = opts.cut(rows);
    for d in shown {
        let mut row = vec![
            Cell::Int(d.time_delta().0),
            opt_float(d.time_delta_pct(), 1),
            Cell::Int(d.a.total.0),
            Cell::Int(d.b.total.0),
            Cell::Int(d.a.instances as i64),
            Cell::Int(d.b.instances as i64),
            avg_cell(&d.a),
            avg_cell(&d.b),
            Cell::text(d.presence().label()),
        ];
        if with_class {
            row.push(Cell::text(&d.class));
        }
        row.push(Cell::text(truncate(&d.name, opts.name_width)));
        table.push(row);
    }
    Section {
        title: Some(title.to_owned()),
        table,
        notes,
    }
}

/// The comparison as tables: summary, families, classes, kernels, phases. Its JSON is the whole
/// [`Comparison`] with every row, whatever the options.
pub fn document(c: &Comparison, opts: &DocumentOptions) -> Document {
    let mut summary = Table::new(["Metric", "A", "B", "Δ", "Δ %"]);
    let count = |p: Presence| c.kernels.iter().filter(|d| d.presence() == p).count() as i64;
    let headline = c.headline();
    if headline.figure != "GPU kernel time" {
        summary.push(vec![
            Cell::text(format!("{} (ns)", headline.figure)),
            Cell::Float(headline.a_ns, 0),
            Cell::Float(headline.b_ns, 0),
            Cell::Float(headline.b_ns - headline.a_ns, 0),
            opt_float(headline.change_pct, 1),
        ]);
    }
    summary.push(vec![
        Cell::text("GPU kernel time (ns)"),
        Cell::Int(c.a.kernel_time.0),
        Cell::Int(c.b.kernel_time.0),
        Cell::Int(c.kernel_time_delta().0),
        opt_float(c.kernel_time_delta_pct(), 1),
    ]);
    summary.push(vec![
        Cell::text("Kernel instances"),
        Cell::Int(c.a.kernel_instances as i64),
        Cell::Int(c.b.kernel_instances as i64),
        Cell::Int(c.b.kernel_instances as i64 - c.a.kernel_instances as i64),
        opt_float(
            pct(
                Nanos(c.a.kernel_instances as i64),
                Nanos(c.b.kernel_instances as i64),
            ),
            1,
        ),
    ]);
    summary.push(vec![
        Cell::text("Distinct kernels"),
        Cell::Int(c.a.distinct_kernels as i64),
        Cell::Int(c.b.distinct_kernels as i64),
        Cell::Int(c.b.distinct_kernels as i64 - c.a.distinct_kernels as i64),
        Cell::Missing,
    ]);
    summary.push(vec![
        Cell::text("Kernels only in this trace (distinct)"),
        Cell::Int(count(Presence::OnlyA)),
        Cell::Int(count(Presence::OnlyB)),
        Cell::Missing,
        Cell::Missing,
    ]);
    if let Some(g) = &c.gemm_fraction {
        summary.push(vec![
            Cell::text("GEMM % of kernel time"),
            opt_pct(g.a),
            opt_pct(g.b),
            opt_float(g.delta_points(), 1),
            Cell::Missing,
        ]);
    }
    let summary = Section {
        title: Some("Summary".to_owned()),
        table: summary,
        notes: vec![
            format!("A: {} ({})", c.a.path, format_name(c.a.format)),
            format!("B: {} ({})", c.b.path, format_name(c.b.format)),
        ],
    };

    // Ranges have no averages or status: the delta columns up to the instances, then the label.
    let mut phases = Table::new(DELTA_COLUMNS[..6].iter().chain(&["Range"]).copied());
    for p in &c.phases {
        phases.push(vec![
            Cell::Int(p.time_delta().0),
            opt_float(p.time_delta_pct(), 1),
            Cell::Int(p.a.total.0),
            Cell::Int(p.b.total.0),
            Cell::Int(p.a.instances as i64),
            Cell::Int(p.b.instances as i64),
            Cell::text(&p.range),
        ]);
    }
    let phase_notes = if c.phases.is_empty() {
        vec!["No range label is in both traces.".to_owned()]
    } else {
        Vec::new()
    };

    let mut sections = vec![summary];
    if !c.passes.is_empty() {
        sections.push(passes_section(&c.passes));
    }
    sections.extend([
        delta_section(
            "Kernel families (tile-size, precision and split-K variants folded)",
            &c.families,
            "Family",
            true,
            opts,
        ),
        delta_section("Kernel classes", &c.classes, "Class", false, opts),
        delta_section("Kernels", &c.kernels, "Kernel", true, opts),
        Section {
            title: Some("Ranges in both traces".to_owned()),
            table: phases,
            notes: phase_notes,
        },
    ]);
    Document {
        sections,
        json: Some(comparison_json(c)),
    }
}

fn passes_section(rows: &[PassDelta]) -> Section {
    let mut t = Table::new([
        "Δ Kernel/step (ms)",
        "Δ %",
        "A Kernel/step (ms)",
        "B Kernel/step (ms)",
        "A Wall/step (ms)",
        "B Wall/step (ms)",
        "A GEMM %",
        "B GEMM %",
        "Δ GEMM (points)",
        "Pass",
    ]);
    for p in rows {
        t.push(vec![
            opt_ms(p.kernel_delta_ns()),
            opt_float(p.kernel_delta_pct(), 1),
            opt_ms(p.a.kernel_ns_per_step),
            opt_ms(p.b.kernel_ns_per_step),
            opt_ms(p.a.wall_ns_per_step),
            opt_ms(p.b.wall_ns_per_step),
            opt_pct(p.a.gemm_fraction),
            opt_pct(p.b.gemm_fraction),
            opt_float(p.gemm_delta_points(), 1),
            Cell::text(&p.name),
        ]);
    }
    Section {
        title: Some("Passes per step".to_owned()),
        table: t,
        notes: vec![
            "Per measured step (`step_N` ranges), as `analyze profile` reports each trace: GPU kernel time, NVTX wall time and GEMM share of each pass.".to_owned(),
        ],
    }
}

fn format_name(f: SourceFormat) -> &'static str {
    match f {
        SourceFormat::NsysSqlite => "Nsight Systems export",
        SourceFormat::Kineto => "Kineto trace",
    }
}

fn delta_json(d: &Delta) -> serde_json::Value {
    json!({
        "name": d.name,
        "short_name": short_name(&d.name),
        "class": d.class,
        "status": d.presence(),
        "time_delta_ns": d.time_delta(),
        "time_delta_pct": d.time_delta_pct(),
        "a": {"instances": d.a.instances, "total_ns": d.a.total, "avg_ns": d.a.average()},
        "b": {"instances": d.b.instances, "total_ns": d.b.total, "avg_ns": d.b.average()},
    })
}

/// The JSON shape of a comparison.
pub fn comparison_json(c: &Comparison) -> serde_json::Value {
    json!({
        "kind": "traces",
        "a": c.a,
        "b": c.b,
        "gemm_fraction": c.gemm_fraction.map(|g| json!({
            "a": g.a,
            "b": g.b,
            "delta_points": g.delta_points(),
        })),
        "passes": c.passes.iter().map(|p| json!({
            "name": p.name,
            "a": p.a,
            "b": p.b,
            "kernel_delta_ns_per_step": p.kernel_delta_ns(),
            "kernel_delta_pct": p.kernel_delta_pct(),
            "wall_delta_ns_per_step": p.wall_delta_ns(),
            "gemm_delta_points": p.gemm_delta_points(),
        })).collect::<Vec<_>>(),
        "headline": c.headline(),
        "kernel_time_delta_ns": c.kernel_time_delta(),
        "kernel_time_delta_pct": c.kernel_time_delta_pct(),
        "families": c.families.iter().map(delta_json).collect::<Vec<_>>(),
        "classes": c.classes.iter().map(delta_json).collect::<Vec<_>>(),
        "kernels": c.kernels.iter().map(delta_json).collect::<Vec<_>>(),
        "phases": c.phases.iter().map(|p| json!({
            "range": p.range,
            "time_delta_ns": p.time_delta(),
            "time_delta_pct": p.time_delta_pct(),
            "a": {"instances": p.a.instances, "total_ns": p.a.total},
            "b": {"instances": p.b.instances, "total_ns": p.b.total},
            "raw_labels": p.raw_labels,
            "raw_label_count": p.raw_label_count,
        })).collect::<Vec<_>>(),
    })
}

fn held_table(
    rows: &[HeldDelta],
    with_frame: bool,
    opts: &DocumentOptions,
) -> (Table, Vec<String>) {
    let mut columns = vec![
        "Δ MiB", "Δ %", "A MiB", "B MiB", "A count", "B count", "category",
    ];
    if with_frame {
        columns.push("frame");
    }
    let mut t = Table::new(columns);
    let (shown, notes) = opts.cut(rows);
    for r in shown {
        let mut row = vec![
            mib_delta(r.delta_bytes()),
            change_pct(r.a.bytes, r.b.bytes),
            mib(r.a.bytes),
            mib(r.b.bytes),
            Cell::Int(r.a.count as i64),
            Cell::Int(r.b.count as i64),
            Cell::text(&r.category),
        ];
        if with_frame {
            row.push(Cell::text(truncate(&r.frame, opts.name_width)));
        }
        t.push(row);
    }
    (t, notes)
}

/// A snapshot comparison as tables: summary, categories at the peak, allocation sites at the
/// peak. Its JSON is the whole [`MemoryComparison`].
pub fn memory_document(c: &MemoryComparison, opts: &DocumentOptions) -> Document {
    let mut summary = Table::new([
        "Metric", "A MiB", "B MiB", "Δ MiB", "Δ %", "A bytes", "B bytes",
    ]);
    let mut row = |name: &str, a: u64, b: u64| {
        summary.push(vec![
            Cell::text(name),
            mib(a),
            mib(b),
            mib_delta(byte_delta(a, b)),
            change_pct(a, b),
            Cell::Int(a as i64),
            Cell::Int(b as i64),
        ]);
    };
    row(
        "peak allocated",
        c.a.peak_allocated_bytes,
        c.b.peak_allocated_bytes,
    );
    row(
        "peak reserved",
        c.a.peak_reserved_bytes,
        c.b.peak_reserved_bytes,
    );
    row(
        "reserved at the peak",
        c.a.reserved_at_peak_bytes,
        c.b.reserved_at_peak_bytes,
    );
    if let (Some(a), Some(b)) = (c.a.forward_peak_bytes, c.b.forward_peak_bytes) {
        row("forward peak allocated", a, b);
    }
    row(
        "allocated before recording",
        c.a.start_allocated_bytes,
        c.b.start_allocated_bytes,
    );
    let mut notes = vec![format!("A: {}", c.a.label), format!("B: {}", c.b.label)];
    for (name, side) in [("A", &c.a), ("B", &c.b)] {
        if side.oom_events > 0 {
            notes.push(format!(
                "{name} has {} out-of-memory events in its trace",
                side.oom_events
            ));
        }
    }
    let (cats, cat_notes) = held_table(&c.categories, false, opts);
    let (sites, site_notes) = held_table(&c.sites, true, opts);
    Document {
        sections: vec![
            Section {
                title: Some("Summary".into()),
                table: summary,
                notes,
            },
            Section {
                title: Some("Categories at the peak".into()),
                table: cats,
                notes: cat_notes,
            },
            Section {
                title: Some("Allocations at the peak by category and frame".into()),
                table: sites,
                notes: site_notes,
            },
        ],
        json: Some(memory_comparison_json(c)),
    }
}

/// The JSON shape of a memory comparison.
pub fn memory_comparison_json(c: &MemoryComparison) -> serde_json::Value {
    let rows = |rows: &[HeldDelta]| -> Vec<serde_json::Value> {
        rows.iter()
            .map(|r| {
                json!({
                    "category": r.category,
                    "frame": r.frame,
                    "delta_bytes": r.delta_bytes(),
                    "a": r.a,
                    "b": r.b,
                })
            })
            .collect()
    };
    json!({
        "kind": "memory",
        "a": c.a,
        "b": c.b,
        "peak_allocated_delta_bytes": c.peak_allocated_delta(),
        "peak_reserved_delta_bytes": c.peak_reserved_delta(),
        "categories": rows(&c.categories),
        "sites": rows(&c.sites),
    })
}

/// The change in kernel time, in words (`rose 3.20%`).
fn describe_change(pct: Option<f64>) -> String {
    match pct {
        Some(p) if p >= 0.0 => format!("rose {p:.2}%"),
        Some(p) => format!("fell {:.2}%", -p),
        None => "went from none to some".to_owned(),
    }
}

/// The line a passed `--fail-if-slower` check prints.
pub fn check_passed(c: &Comparison, threshold_pct: f64) -> String {
    let h = c.headline();
    format!(
        "check passed: {} {} (allowed: +{threshold_pct}%)\n",
        h.figure,
        describe_change(h.change_pct)
    )
}

/// What a failed `--fail-if-slower` check prints: the change, then the kernels that slowed,
/// largest rise first, their names cut to [`NAME_WIDTH`].
pub fn check_failed(c: &Comparison, r: &Regression) -> String {
    let threshold = r.threshold_pct;
    let h = c.headline();
    let mut msg = format!(
        "check failed: {} {} ({:.0} ns -> {:.0} ns), more than the allowed +{threshold}%\n",
        h.figure,
        describe_change(r.change_pct),
        h.a_ns,
        h.b_ns,
    );
    msg.push_str("slowed kernels, largest rise first:\n");
    for d in r.slowed.iter().take(SLOWED_SHOWN) {
        let pct = d
            .time_delta_pct()
            .map_or("new".to_owned(), |p| format!("{p:+.1}%"));
        msg.push_str(&format!(
            "  {:+} ns ({pct})  {}\n",
            d.time_delta().0,
            truncate(&d.name, NAME_WIDTH)
        ));
    }
    if r.slowed.len() > SLOWED_SHOWN {
        msg.push_str(&format!(
            "  ... and {} more\n",
            r.slowed.len() - SLOWED_SHOWN
        ));
    }
    msg
}
