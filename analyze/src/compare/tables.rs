//! The comparisons as tables: a trace comparison ([`document`]: summary, passes per step,
//! families, classes, kernels, ranges; led by the per-call figures and a warning when the two
//! traces ran different amounts of work) and a snapshot comparison ([`memory_document`]: summary,
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
use super::per_call::{PerCall, Work, WORK_TOLERANCE_PCT};
use super::{pct, Basis, Comparison, Delta, Presence, Regression, Side};

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
    if let Some(per_step) = c.per_step() {
        summary.push(vec![
            Cell::text(format!("{} (ns)", per_step.figure)),
            Cell::Float(per_step.a_ns, 0),
            Cell::Float(per_step.b_ns, 0),
            Cell::Float(per_step.b_ns - per_step.a_ns, 0),
            opt_float(per_step.change_pct, 1),
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
    let unseen = c.unseen();
    if let Some(g) = &c.gemm_fraction {
        summary.push(vec![
            Cell::text("GEMM % of kernel time"),
            gemm_cell(g.a, unseen.a),
            gemm_cell(g.b, unseen.b),
            opt_float(g.delta_points(), 1),
            Cell::Missing,
        ]);
    }
    let mut summary_notes = vec![
        format!("A: {} ({})", c.a.path, format_name(c.a.format)),
        format!("B: {} ({})", c.b.path, format_name(c.b.format)),
    ];
    let work = c.work();
    if work.differs() && !work.counts_measure_work() {
        summary_notes.push(format!(
            "Kernel instance counts differ ({} in A, {} in B), but {} CUDA graph executions ran without per-kernel detail (each one instance, however many kernels it ran), so the counts do not measure the work: {} leads, not time per call.",
            work.a_instances, work.b_instances, work.untraced_graph_executions, headline.figure
        ));
    }
    if let Some(note) = graphs_note(c) {
        summary_notes.push(note);
    }
    if !c.judgeable() {
        summary_notes.push(UNJUDGED.to_owned());
    }
    let summary = Section {
        title: Some("Summary".to_owned()),
        table: summary,
        notes: summary_notes,
    };

    // Ranges have no averages or status: the delta columns up to the instances, then the label.
    let mut phases = Table::new(DELTA_COLUMNS[..6].iter().chain(&["Range"]).copied());
    let (shown_phases, mut phase_notes) = opts.cut(&c.phases);
    for p in shown_phases {
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
    if c.phases.is_empty() {
        phase_notes.push("No range label is in both traces.".to_owned());
    }

    // Different amounts of work: the per-call figures lead, with the warning.
    let mut sections = if headline.basis == Basis::PerCall {
        per_call_sections(c, &c.per_call(), opts)
    } else {
        Vec::new()
    };
    sections.push(summary);
    if !c.passes.is_empty() {
        sections.push(passes_section(&c.passes, opts));
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

/// One line saying that the traces ran different amounts of work, with the counts that say so.
pub fn work_warning(c: &Comparison, work: &Work) -> String {
    let mut why = format!(
        "kernel instances {} in A, {} in B ({})",
        work.a_instances,
        work.b_instances,
        work.instances_delta_pct()
            .map_or("new".to_owned(), |p| format!("{p:+.1}%"))
    );
    if work.kernels_differing > 0 {
        why.push_str(&format!(
            "; {} of the {} kernels both ran differ in count by more than {WORK_TOLERANCE_PCT}%",
            work.kernels_differing, work.kernels_in_both
        ));
    }
    format!(
        "warning: the two traces ran different amounts of work ({why}), so total kernel time ({}) measures the work, not the speed: the per-call figures, B's average time per call at A's instance counts, lead.",
        describe_change(c.kernel_time_delta_pct())
    )
}

/// The per-call headline and the kernels both traces ran, largest per-call rise first.
fn per_call_sections(c: &Comparison, p: &PerCall, opts: &DocumentOptions) -> Vec<Section> {
    let mut headline = Table::new(["Metric", "A", "B", "Δ", "Δ %"]);
    headline.push(vec![
        Cell::text("GPU kernel time per call at A's instance counts (ns)"),
        Cell::Float(p.a_ns, 0),
        Cell::Float(p.b_ns, 0),
        Cell::Float(p.delta_ns(), 0),
        opt_float(p.delta_pct(), 1),
    ]);
    let mut notes = vec![work_warning(c, &c.work())];
    if let Some(cov) = p.coverage {
        notes.push(format!(
            "Over the {} kernels both traces ran, {:.1}% of A's kernel time; kernels only one ran have no per-call change (see Kernels).",
            p.kernels.len(),
            cov * 100.0
        ));
    }
    let mut t = Table::new([
        "Δ at A's count (ns)",
        "Δ avg %",
        "A Avg (ns)",
        "B Avg (ns)",
        "A Inst",
        "B Inst",
        "Class",
        "Kernel",
    ]);
    let (shown, cut_notes) = opts.cut(&p.kernels);
    for d in shown {
        t.push(vec![
            opt_float(d.per_call_delta_ns(), 0),
            opt_float(d.per_call_delta_pct(), 1),
            avg_cell(&d.a),
            avg_cell(&d.b),
            Cell::Int(d.a.instances as i64),
            Cell::Int(d.b.instances as i64),
            Cell::text(&d.class),
            Cell::text(truncate(&d.name, opts.name_width)),
        ]);
    }
    vec![
        Section {
            title: Some("Per call (the traces ran different amounts of work)".to_owned()),
            table: headline,
            notes,
        },
        Section {
            title: Some("Per-call change by kernel, largest rise first".to_owned()),
            table: t,
            notes: cut_notes,
        },
    ]
}

fn passes_section(rows: &[PassDelta], opts: &DocumentOptions) -> Section {
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
    let (shown, mut notes) = opts.cut(rows);
    for p in shown {
        t.push(vec![
            opt_ms(p.kernel_delta_ns()),
            opt_float(p.kernel_delta_pct(), 1),
            opt_ms(p.a.kernel_ns_per_step),
            opt_ms(p.b.kernel_ns_per_step),
            opt_ms(p.a.wall_ns_per_step),
            opt_ms(p.b.wall_ns_per_step),
            gemm_cell(p.a.gemm_fraction, p.a.mostly_untraced()),
            gemm_cell(p.b.gemm_fraction, p.b.mostly_untraced()),
            opt_float(p.gemm_delta_points(), 1),
            Cell::text(&p.name),
        ]);
    }
    notes.insert(0,
            "Per measured step (`step_N` ranges), as `analyze profile` reports each trace: GPU kernel time, NVTX wall time and GEMM share of each pass.".to_owned(),
    );
    Section {
        title: Some("Passes per step".to_owned()),
        table: t,
        notes,
    }
}

/// A GEMM share, or `n/a` where the side's time is mostly CUDA graphs without per-kernel
/// detail (its GEMMs are inside them, unseen).
fn gemm_cell(fraction: Option<f64>, unseen: bool) -> Cell {
    if unseen {
        Cell::text("n/a")
    } else {
        opt_pct(fraction)
    }
}

/// What `--fail-if-slower` says, and the summary notes, when a comparison cannot be judged.
const UNJUDGED: &str = "Not judged by --fail-if-slower: CUDA graphs ran without per-kernel detail and neither trace has measured steps, so only whole-trace totals are left, and they hold whatever else each trace ran (compilation, autotuning, warm-up).";

/// The note for a comparison where CUDA graphs ran without per-kernel detail: what each side
/// cannot see, and how the totals are compared.
fn graphs_note(c: &Comparison) -> Option<String> {
    let unseen = c.unseen();
    let mut parts = Vec::new();
    for (name, side, mostly) in [("A", &c.a, unseen.a), ("B", &c.b, unseen.b)] {
        if side.untraced_graph_executions == 0 {
            continue;
        }
        let share = c
            .passes
            .iter()
            .find(|p| p.name == "measured steps")
            .and_then(|p| {
                if name == "A" {
                    p.a.untraced_graph_fraction
                } else {
                    p.b.untraced_graph_fraction
                }
            })
            .map_or_else(
                || format!("{:.0}% of its kernel time", side.untraced_share() * 100.0),
                |u| format!("{:.0}% of its GPU time per measured step", u * 100.0),
            );
        let gemm = if mostly {
            ", so its GEMM share is n/a"
        } else {
            ""
        };
        parts.push(format!(
            "{name} ran {} CUDA graph executions without per-kernel detail ({share}): their kernels are unknown (class `cuda_graph`){gemm}",
            side.untraced_graph_executions
        ));
    }
    if parts.is_empty() {
        return None;
    }
    let basis = if c.per_step().is_some() {
        "Totals are compared per measured step and per pass, with graph time counted as GPU time; whole-trace kernel time and per-kernel rows also hold work outside the steps (compilation, autotuning) and cannot show the kernels inside the graphs."
    } else {
        "Per-kernel rows cannot show the kernels inside the graphs."
    };
    Some(format!("{}. {basis}", parts.join("; ")))
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

fn work_json(w: &Work) -> serde_json::Value {
    json!({
        "a_instances": w.a_instances,
        "b_instances": w.b_instances,
        "instances_delta_pct": w.instances_delta_pct(),
        "kernels_in_both": w.kernels_in_both,
        "kernels_differing": w.kernels_differing,
        "differs": w.differs(),
        "untraced_graph_executions": w.untraced_graph_executions,
        "counts_measure_work": w.counts_measure_work(),
    })
}

fn per_call_json(p: &PerCall) -> serde_json::Value {
    json!({
        "a_ns": p.a_ns,
        "b_ns": p.b_ns,
        "delta_ns": p.delta_ns(),
        "delta_pct": p.delta_pct(),
        "coverage": p.coverage,
        "kernels": p.kernels.iter().map(|d| {
            let mut v = delta_json(d);
            v["per_call_delta_ns"] = json!(d.per_call_delta_ns());
            v["per_call_delta_pct"] = json!(d.per_call_delta_pct());
            v
        }).collect::<Vec<_>>(),
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
        "unseen": c.unseen(),
        "judgeable": c.judgeable(),
        "kernel_time_delta_ns": c.kernel_time_delta(),
        "kernel_time_delta_pct": c.kernel_time_delta_pct(),
        "work": work_json(&c.work()),
        "per_call": per_call_json(&c.per_call()),
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

/// What a passed `--fail-if-slower` check prints: the change judged, and the warning when the
/// traces ran different amounts of work.
pub fn check_passed(c: &Comparison, threshold_pct: f64) -> String {
    if !c.judgeable() {
        return format!("check skipped: {UNJUDGED}\n");
    }
    let h = c.headline();
    let mut msg = format!(
        "check passed: {} {} (allowed: +{threshold_pct}%)\n",
        h.figure,
        describe_change(h.change_pct)
    );
    if h.basis == Basis::PerCall {
        msg.push_str(&work_warning(c, &c.work()));
        msg.push('\n');
    }
    msg
}

/// What a failed `--fail-if-slower` check prints: the change, then the kernels that slowed,
/// largest rise first (per call when the traces ran different amounts of work), their names cut
/// to [`NAME_WIDTH`].
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
    if r.basis == Basis::PerCall {
        msg.push_str(&work_warning(c, &r.work));
        msg.push_str("\nkernels slower per call, largest rise first (at A's instance counts):\n");
    } else {
        msg.push_str("slowed kernels, largest rise first:\n");
    }
    for d in r.slowed.iter().take(SLOWED_SHOWN) {
        let line = match r.basis {
            Basis::PerCall => format!(
                "  {:+.0} ns ({:+.1}% per call)",
                d.per_call_delta_ns().unwrap_or(0.0),
                d.per_call_delta_pct().unwrap_or(0.0)
            ),
            Basis::PerStep | Basis::Total => {
                let pct = d
                    .time_delta_pct()
                    .map_or("new".to_owned(), |p| format!("{p:+.1}%"));
                format!("  {:+} ns ({pct})", d.time_delta().0)
            }
        };
        msg.push_str(&format!("{line}  {}\n", truncate(&d.name, NAME_WIDTH)));
    }
    if r.slowed.len() > SLOWED_SHOWN {
        msg.push_str(&format!(
            "  ... and {} more\n",
            r.slowed.len() - SLOWED_SHOWN
        ));
    }
    msg
}
