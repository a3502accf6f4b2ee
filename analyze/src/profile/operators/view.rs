//! The operator view laid out: per operator its calls, kernels and time (per phase and per shape
//! list), its cost and its place under the GPU's roofs; the top-level operators; the roofs
//! themselves; and the roofline chart of the operators.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::attribution::operators::OperatorSource;
use crate::error::Result;
use crate::formats::run_metadata;
use crate::model::trace::{StrId, Trace};
use crate::render::plot::{write_chart_files, Frame, ImageFormat};
use crate::roofline::chart::{Ceiling, Point, RooflineChart};
use crate::roofline::flops::{cost, Cost, Formula, Recorded};
use crate::roofline::peaks::{self, Peaks};
use crate::roofline::{place, Dtype, Placement, Unit};
use crate::run_name::parse_run_name;

use super::{OpPlan, OpTotals, Sum};

/// The device's roofs, as used.
#[derive(Clone, Debug, Serialize)]
pub struct DevicePeak {
    /// The table's entry (`NVIDIA H200 SXM`), or `given` for roofs from the options alone.
    pub name: String,
    /// The GPU's name as the trace records it.
    pub gpu: Option<String>,
    /// Peak dense TFLOP/s per unit: `bf16`, `fp16` and `tf32` tensor, `fp32_matrix` (AMD),
    /// `fp32` vector.
    pub tflops: BTreeMap<&'static str, f64>,
    pub tbps: f64,
    /// Where the figures came from: `table`, `options` or both.
    pub from: &'static str,
}

/// The work of one operator for one shape list.
#[derive(Clone, Debug, Serialize)]
pub struct ShapeRow {
    pub sizes: String,
    pub calls: usize,
    pub kernels: usize,
    pub gpu_ns: i64,
}

/// An operator's work in one phase.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseOps {
    pub phase: String,
    pub calls: usize,
    pub kernels: usize,
    pub gpu_ns: i64,
}

/// One operator (the innermost operator calls of one name) over the measured steps.
#[derive(Clone, Debug, Serialize)]
pub struct OperatorRow {
    pub name: String,
    /// Calls that launched GPU work.
    pub calls: usize,
    pub kernels: usize,
    pub gpu_ns: i64,
    pub gpu_ns_per_step: Option<f64>,
    /// Of the measured steps' kernel time (0..1).
    pub share: f64,
    /// FLOPs and bytes of its calls whose shapes tell them; `None` when none do.
    pub flops: Option<u64>,
    pub bytes: Option<u64>,
    /// GPU time of the calls with a cost: what the achieved rates divide by.
    pub costed_ns: i64,
    #[serde(flatten)]
    pub placement: Placement,
    /// The element type of its inputs.
    pub dtype: Option<&'static str>,
    /// Which peak is its compute roof, and that peak in TFLOP/s.
    pub roof: Option<&'static str>,
    pub roof_tflops: Option<f64>,
    pub formula: Option<Formula>,
    /// Whether its FLOPs are the profiler's own count (`with_flops`).
    pub counted_flops: bool,
    /// Its calls by shape list, most time first.
    pub shapes: Vec<ShapeRow>,
    /// Its work per phase, in the phases' order.
    pub phases: Vec<PhaseOps>,
}

/// One top-level operator: the outermost calls of the chains that launched work.
#[derive(Clone, Debug, Serialize)]
pub struct TopLevelRow {
    pub name: String,
    pub calls: usize,
    pub kernels: usize,
    pub gpu_ns: i64,
    pub share: f64,
}

/// The operator view of a profile.
#[derive(Clone, Debug, Serialize)]
pub struct OperatorView {
    /// Where the operator calls came from: Kineto's `cpu_op` events or `emit_nvtx` ranges.
    pub operator_source: Option<OperatorSource>,
    /// Innermost operators, most GPU time first.
    pub operators: Vec<OperatorRow>,
    pub top_level_operators: Vec<TopLevelRow>,
    /// Kernels (and graphs) of the measured steps launched outside any operator call.
    pub unattributed_ns: i64,
    pub unattributed_kernels: usize,
    /// The roofs the operators are placed under; `None` for a GPU the table does not know,
    /// without `--peak-tflops` and `--peak-tbps`.
    pub device_peak: Option<DevicePeak>,
    pub operator_notes: Vec<String>,
}

/// What the operator view is laid out from besides the sums.
pub(in crate::profile) struct ViewInputs<'a> {
    pub(in crate::profile) trace: &'a Trace,
    /// The phases of views 1.., in order.
    pub(in crate::profile) phases: Vec<String>,
    /// Measured steps per process (0 without steps).
    pub(in crate::profile) steps: usize,
    pub(in crate::profile) peak_tflops: Option<f64>,
    pub(in crate::profile) peak_tbps: Option<f64>,
}

/// The element type of tensors whose type was not recorded, and what says so.
pub(in crate::profile) fn default_dtype(trace: &Trace) -> (Dtype, String) {
    if let Some(d) = trace
        .source
        .run
        .get(run_metadata::keys::PRECISION)
        .and_then(|p| Dtype::of_precision(p))
    {
        return (d, "the run metadata's precision".into());
    }
    let name = trace.source.path.display().to_string();
    if let Some(d) = parse_run_name(&name)
        .precision
        .as_deref()
        .and_then(Dtype::of_precision)
    {
        return (d, "the precision in the file's name".into());
    }
    (Dtype::F32, "assumed".into())
}

/// The roofs: the table's entry for the trace's GPU, with the options' figures over it.
fn device_peak(
    trace: &Trace,
    tflops: Option<f64>,
    tbps: Option<f64>,
    notes: &mut Vec<String>,
) -> Option<(DevicePeak, Peaks)> {
    let gpu = trace
        .gpus
        .iter()
        .map(|g| g.name.trim())
        .find(|n| !n.is_empty())
        .map(str::to_owned);
    let entry = gpu.as_deref().and_then(peaks::for_gpu);
    let mut p = match (entry, tflops, tbps) {
        (Some(e), _, _) => e.peaks,
        (None, Some(f), Some(b)) => Peaks {
            bf16: f,
            fp16: f,
            tf32: Some(f),
            fp32_matrix: None,
            fp32: f,
            tbps: b,
        },
        (None, _, _) => {
            notes.push(match &gpu {
                Some(g) => format!("GPU `{g}` is not in the table of peaks: pass --peak-tflops and --peak-tbps to place the operators under its roofs"),
                None => "the trace names no GPU: pass --peak-tflops and --peak-tbps to place the operators under its roofs".into(),
            });
            return None;
        }
    };
    if let Some(f) = tflops {
        p = Peaks {
            bf16: f,
            fp16: f,
            tf32: Some(f),
            fp32_matrix: p.fp32_matrix.map(|_| f),
            fp32: f,
            tbps: p.tbps,
        };
    }
    if let Some(b) = tbps {
        p.tbps = b;
    }
    let mut rates = BTreeMap::new();
    rates.insert("bf16", p.bf16);
    rates.insert("fp16", p.fp16);
    if let Some(t) = p.tf32 {
        rates.insert("tf32", t);
    }
    if let Some(m) = p.fp32_matrix {
        rates.insert("fp32_matrix", m);
    }
    rates.insert("fp32", p.fp32);
    let from = match (entry.is_some(), tflops.is_some() || tbps.is_some()) {
        (true, false) => "table",
        (true, true) => "table and options",
        _ => "options",
    };
    Some((
        DevicePeak {
            name: entry.map_or("given".into(), |e| e.name.to_owned()),
            gpu,
            tflops: rates,
            tbps: p.tbps,
            from,
        },
        p,
    ))
}

/// An operator's figures as they are summed over its signatures.
#[derive(Default)]
struct Acc {
    calls: usize,
    sum: Sum,
    flops: Option<u64>,
    bytes: Option<u64>,
    costed_ns: i64,
    counted: bool,
    /// The cost of the signature with the most costed time: the operator's type and formula.
    main: Option<(i64, Cost)>,
    shapes: BTreeMap<Option<StrId>, (usize, Sum)>,
}

impl OpPlan {
    /// The operator view from the sums.
    pub(in crate::profile) fn view(
        &self,
        totals: OpTotals,
        inputs: &ViewInputs<'_>,
    ) -> OperatorView {
        let trace = inputs.trace;
        let ops = &self.ops;
        let mut notes = Vec::new();
        let (default, why) = default_dtype(trace);
        let roofs = device_peak(trace, inputs.peak_tflops, inputs.peak_tbps, &mut notes);
        let main = &totals.views[0];
        // The cost of each signature whose calls ran kernels in the measured steps.
        let costs: Vec<Option<Cost>> = (ops.signatures.iter().zip(&main.by_signature))
            .map(|(s, sum)| {
                if sum.kernels == 0 {
                    return None;
                }
                let recorded = Recorded {
                    name: trace.name(ops.names[s.name as usize]),
                    shapes: trace.name(s.shapes?),
                    types: s.types.map(|t| trace.name(t)),
                    concrete: s.concrete.map(|t| trace.name(t)),
                    flops: s.flops,
                };
                cost(&recorded, default)
            })
            .collect();
        // Calls per signature, per view.
        let calls_per: Vec<Vec<usize>> = totals
            .views
            .iter()
            .map(|v| {
                let mut n = vec![0usize; ops.signatures.len()];
                for (w, &word) in v.calls.iter().enumerate() {
                    let mut bits = word;
                    while bits != 0 {
                        let call = w * 64 + bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        n[ops.calls[call].signature as usize] += 1;
                    }
                }
                n
            })
            .collect();
        let kernel_ns: i64 = main
            .by_signature
            .iter()
            .fold(main.unattributed.ns, |a, s| a.saturating_add(s.ns));
        let share = |ns: i64| {
            if kernel_ns > 0 {
                ns as f64 / kernel_ns as f64
            } else {
                0.0
            }
        };
        let per_step = |ns: i64| (inputs.steps > 0).then(|| ns as f64 / inputs.steps as f64);

        // Per operator name, over its signatures.
        let mut by_name: BTreeMap<u32, Acc> = BTreeMap::new();
        for (s, sig) in ops.signatures.iter().enumerate() {
            let sum = main.by_signature[s];
            if sum.kernels == 0 {
                continue;
            }
            let calls = calls_per[0][s];
            let acc = by_name.entry(sig.name).or_default();
            acc.calls += calls;
            acc.sum.merge(&sum);
            let shape = acc.shapes.entry(sig.shapes).or_default();
            shape.0 += calls;
            shape.1.merge(&sum);
            if let Some(c) = costs[s] {
                let times = calls as u64;
                acc.flops = Some(
                    acc.flops
                        .unwrap_or(0)
                        .saturating_add(c.flops.saturating_mul(times)),
                );
                acc.bytes = Some(
                    acc.bytes
                        .unwrap_or(0)
                        .saturating_add(c.bytes.saturating_mul(times)),
                );
                acc.costed_ns = acc.costed_ns.saturating_add(sum.ns);
                acc.counted |= c.counted;
                if acc.main.is_none_or(|(ns, _)| sum.ns > ns) {
                    acc.main = Some((sum.ns, c));
                }
            }
        }
        let mut operators: Vec<OperatorRow> = by_name
            .into_iter()
            .map(|(name, acc)| {
                let cost = acc.main.map(|m| m.1);
                let matrix =
                    cost.is_some_and(|c| matches!(c.formula, Formula::Matmul | Formula::Attention));
                let dtype = cost.map_or(default, |c| c.dtype);
                let tf32 = acc.sum.tf32_ns.saturating_mul(2) > acc.sum.ns;
                let unit = roofs
                    .as_ref()
                    .map(|(_, p)| Unit::of(dtype, matrix, tf32, p));
                let placement = place(
                    acc.flops,
                    acc.bytes,
                    acc.costed_ns,
                    roofs.as_ref().zip(unit).map(|((_, p), u)| u.peak(p)),
                    roofs.as_ref().map(|(_, p)| p.tbps),
                );
                let mut shapes: Vec<ShapeRow> = acc
                    .shapes
                    .into_iter()
                    .map(|(sizes, (calls, sum))| ShapeRow {
                        sizes: sizes.map_or(String::new(), |s| trace.name(s).to_owned()),
                        calls,
                        kernels: sum.kernels,
                        gpu_ns: sum.ns,
                    })
                    .collect();
                shapes.sort_by(|a, b| b.gpu_ns.cmp(&a.gpu_ns).then_with(|| a.sizes.cmp(&b.sizes)));
                let phases = inputs
                    .phases
                    .iter()
                    .enumerate()
                    .map(|(p, phase)| {
                        let v = &totals.views[p + 1];
                        let mut out = PhaseOps {
                            phase: phase.clone(),
                            calls: 0,
                            kernels: 0,
                            gpu_ns: 0,
                        };
                        for (s, sig) in ops.signatures.iter().enumerate() {
                            if sig.name == name {
                                out.calls += calls_per[p + 1][s];
                                out.kernels += v.by_signature[s].kernels;
                                out.gpu_ns = out.gpu_ns.saturating_add(v.by_signature[s].ns);
                            }
                        }
                        out
                    })
                    .collect();
                OperatorRow {
                    name: trace.name(ops.names[name as usize]).to_owned(),
                    calls: acc.calls,
                    kernels: acc.sum.kernels,
                    gpu_ns: acc.sum.ns,
                    gpu_ns_per_step: per_step(acc.sum.ns),
                    share: share(acc.sum.ns),
                    flops: acc.flops,
                    bytes: acc.bytes,
                    costed_ns: acc.costed_ns,
                    placement,
                    dtype: cost.map(|c| c.dtype.label()),
                    roof: unit.filter(|_| cost.is_some()).map(Unit::label),
                    roof_tflops: (roofs.as_ref().zip(unit))
                        .filter(|_| cost.is_some())
                        .map(|((_, p), u)| u.peak(p)),
                    formula: cost.map(|c| c.formula),
                    counted_flops: acc.counted,
                    shapes,
                    phases,
                }
            })
            .collect();
        operators.sort_by(|a, b| b.gpu_ns.cmp(&a.gpu_ns).then_with(|| a.name.cmp(&b.name)));

        // Top-level operators: the outermost calls of the calls met.
        let mut top_calls = vec![0usize; ops.names.len()];
        let mut seen_top = vec![0u64; main.calls.len()];
        for (w, &word) in main.calls.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let call = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let top = ops.calls[call].top as usize;
                if seen_top[top / 64] & (1 << (top % 64)) == 0 {
                    seen_top[top / 64] |= 1 << (top % 64);
                    top_calls[ops.signatures[ops.calls[top].signature as usize].name as usize] += 1;
                }
            }
        }
        let mut top_level_operators: Vec<TopLevelRow> = totals
            .top
            .iter()
            .enumerate()
            .filter(|(_, s)| s.kernels > 0)
            .map(|(n, s)| TopLevelRow {
                name: trace.name(ops.names[n]).to_owned(),
                calls: top_calls[n],
                kernels: s.kernels,
                gpu_ns: s.ns,
                share: share(s.ns),
            })
            .collect();
        top_level_operators
            .sort_by(|a, b| b.gpu_ns.cmp(&a.gpu_ns).then_with(|| a.name.cmp(&b.name)));

        let un = main.unattributed;
        let over = if inputs.steps > 0 {
            "the measured steps"
        } else {
            "the whole trace (no step ranges)"
        };
        notes.insert(
            0,
            if un.kernels > 0 {
                format!(
                    "{} of the kernels of {over} ({:.3} ms, {:.1}% of their time) were launched outside any operator call: the `unattributed` row",
                    un.kernels,
                    un.ns as f64 / 1e6,
                    share(un.ns) * 100.0
                )
            } else {
                format!("every kernel of {over} was launched inside an operator call")
            },
        );
        if ops.source == OperatorSource::EmitNvtx {
            notes.push(format!(
                "emit_nvtx labels record sizes, not types: every tensor is taken as {} ({why})",
                default.label()
            ));
        }
        if ops.signatures.iter().all(|s| s.shapes.is_none()) {
            notes.push("no shapes were recorded (record_shapes=False): no FLOPs or bytes".into());
        }
        OperatorView {
            operator_source: Some(ops.source),
            operators,
            top_level_operators,
            unattributed_ns: un.ns,
            unattributed_kernels: un.kernels,
            device_peak: roofs.map(|r| r.0),
            operator_notes: notes,
        }
    }
}

/// The operator view of a trace without operator calls: everything unattributed.
pub(in crate::profile) fn without_operators(
    trace: &Trace,
    kernels: usize,
    kernel_ns: i64,
    tflops: Option<f64>,
    tbps: Option<f64>,
) -> OperatorView {
    let mut notes = vec![format!(
        "the trace holds no operator calls (Kineto's `cpu_op` events, or NVTX ranges from `torch.autograd.profiler.emit_nvtx`): all {kernels} kernels are unattributed"
    )];
    let roofs = device_peak(trace, tflops, tbps, &mut notes);
    OperatorView {
        operator_source: None,
        operators: Vec::new(),
        top_level_operators: Vec::new(),
        unattributed_ns: kernel_ns,
        unattributed_kernels: kernels,
        device_peak: roofs.map(|r| r.0),
        operator_notes: notes,
    }
}

impl OperatorView {
    /// The roofline chart of the operators with FLOPs and time, titled after `run`; `None`
    /// without roofs or without such operators.
    pub fn roofline_chart(&self, run: &str) -> Option<RooflineChart> {
        let peak = self.device_peak.as_ref()?;
        let points: Vec<Point> = self
            .operators
            .iter()
            .filter_map(|o| {
                let p = &o.placement;
                Some(Point {
                    label: o.name.clone(),
                    intensity: p.intensity.filter(|i| *i > 0.0)?,
                    tflops: p.achieved_tflops.filter(|t| *t > 0.0)?,
                    ns: o.costed_ns,
                })
            })
            .collect();
        if points.is_empty() {
            return None;
        }
        let mut ceilings: Vec<Ceiling> = Vec::new();
        for o in &self.operators {
            if let (Some(label), Some(tflops)) = (o.roof, o.roof_tflops) {
                if !ceilings.iter().any(|c| c.label == label) {
                    ceilings.push(Ceiling {
                        label: label.to_owned(),
                        tflops,
                    });
                }
            }
        }
        ceilings.sort_by(|a, b| a.tflops.total_cmp(&b.tflops));
        Some(RooflineChart {
            frame: Frame {
                title: format!("Roofline by operator: {run}"),
                subtitle: Some(format!(
                    "{}, {} TB/s; one point per operator, its area its GPU time",
                    peak.name, peak.tbps
                )),
                width: 1200,
                height: 760,
            },
            tbps: peak.tbps,
            ceilings,
            points,
            labelled: 10,
            total_ns: (self.operators.iter())
                .fold(self.unattributed_ns, |a, o| a.saturating_add(o.gpu_ns)),
        })
    }

    /// Write the roofline chart into `dir` as `<stem>.roofline.<ext>` in each format; the paths
    /// written (none without a chart to draw).
    pub fn write_roofline(
        &self,
        dir: &Path,
        stem: &str,
        formats: &[ImageFormat],
    ) -> Result<Vec<PathBuf>> {
        let Some(chart) = self.roofline_chart(stem) else {
            return Ok(Vec::new());
        };
        let mut written = Vec::new();
        write_chart_files(
            &chart,
            dir,
            &format!("{stem}.roofline"),
            formats,
            &mut written,
        )?;
        Ok(written)
    }
}
