//! [`Profile::document`]: a profile as tables (phases with where their GPU time goes, top
//! non-GEMM kernels, time by class, attention, and per device and process when a trace holds
//! several, and by operator with `--by op`), laid out like the tables of a profiling write-up:
//! milliseconds with three decimals, percentages with one; the longest idle gaps are notes under
//! the phases. The JSON view is the serialised [`Profile`] itself.

use crate::attribution::operators::OperatorSource;
use crate::kernels::class::KernelClass;
use crate::render::cells::{ms, opt_float, opt_ms, opt_pct, pct};
use crate::render::{Cell, Document, Section, Table};
use crate::roofline::Bound;
use crate::source::many::RankFrom;

use super::devices::DeviceProfile;
use super::mfu::Mfu;
use super::operators::OperatorView;
use super::summary::per_step;
use super::{PhaseProfile, Profile};

impl DeviceProfile {
    /// Device, process, steps, and kernel, compute, communication, exposed communication and
    /// idle time per step: the cells every per-device table starts with.
    pub fn step_cells(&self) -> [Cell; 8] {
        let s = self.per_step.as_ref();
        [
            Cell::Int(i64::from(self.device)),
            Cell::Int(i64::from(self.process)),
            Cell::Int(self.steps as i64),
            opt_ms(s.map(|s| s.kernel_ns)),
            opt_ms(s.map(|s| s.compute_ns)),
            opt_ms(s.map(|s| s.communication_ns)),
            opt_ms(s.map(|s| s.exposed_communication_ns)),
            opt_ms(s.map(|s| s.idle_ns)),
        ]
    }
}

impl Profile {
    /// The profile as tables: phases, top non-GEMM kernels, time by class, attention, devices.
    pub fn document(&self) -> Document {
        let rows: Vec<&PhaseProfile> = self
            .phases
            .iter()
            .chain(self.step.iter())
            .chain(std::iter::once(&self.whole_trace))
            .collect();

        // Steps whose spans overlap (the GPU behind the host) each count only their own ops.
        let other_work = rows.iter().any(|p| p.breakdown.other_work_ns > 0);
        let mut phases = Table::new([
            "Phase",
            "Steps",
            "Wall/step (ms)",
            "GPU proj/step (ms)",
            "Kernel/step (ms)",
            "Kernels/step",
            "Kernel total (ms)",
            "GEMM %",
            "Top kernel",
            "Top share %",
            "Top calls/step",
            "Compute %",
            "Exposed comm %",
            "Memcpy %",
            "Memset %",
            "Graph %",
            "Idle %",
        ]);
        if other_work {
            phases
                .columns
                .insert(phases.columns.len() - 1, "Other steps %".into());
        }
        for p in &rows {
            let top = p.top_kernel.as_ref();
            let mut row = vec![
                Cell::text(&p.name),
                if p.steps > 0 {
                    Cell::Int(p.steps as i64)
                } else {
                    Cell::Missing
                },
                opt_ms(p.wall_ns_per_step),
                opt_ms(p.gpu_proj_ns_per_step),
                opt_ms(p.kernel_ns_per_step),
                opt_float(
                    per_step(p.kernels as f64, p.steps).filter(|_| p.ranges > 0),
                    1,
                ),
                ms(p.kernel_ns as f64),
                opt_pct(p.gemm_fraction),
                top.map_or(Cell::Missing, |t| Cell::text(&t.display_name)),
                top.map_or(Cell::Missing, |t| pct(t.share)),
                opt_float(top.and_then(|t| t.instances_per_step), 1),
            ];
            let b = &p.breakdown;
            let parts = [
                b.compute_ns,
                b.exposed_communication_ns,
                b.memcpy_ns,
                b.memset_ns,
                b.graph_ns,
            ];
            let other = other_work.then_some(b.other_work_ns);
            for part in parts.into_iter().chain(other).chain([b.idle_ns]) {
                row.push(opt_pct(
                    (b.span_ns > 0).then(|| part as f64 / b.span_ns as f64),
                ));
            }
            phases.push(row);
        }
        let steps_text = if self.measured_steps > 0 {
            format!(
                "{} measured step{} (`{}`)",
                self.measured_steps,
                if self.measured_steps == 1 { "" } else { "s" },
                self.step_pattern
            )
        } else {
            "no step ranges".to_owned()
        };
        let mut notes = vec![format!(
            "Kernels attributed to NVTX ranges by their launch call ({} rule); {steps_text}. GEMM % and shares are of kernel time.",
            self.attribution.as_str()
        )];
        notes.extend(self.notes.iter().map(|n| format!("note: {n}")));
        notes.push("Compute % to Idle %: where GPU time goes in each instance's span on each device it ran work on (first GPU op start to last end; the whole trace: each device's first to last op), by what the device was running, by precedence compute ▸ graph ▸ communication ▸ memcpy ▸ memset ▸ idle; they add up to 100%.".to_owned());
        if other_work {
            notes.push("Other steps %: a step's span holds only its own ops' work; the time during which only other steps' ops (or ops of no step) ran there, when step spans overlap because the GPU runs behind the host.".to_owned());
        }
        notes.extend(self.idle_gaps.iter().take(3).map(|g| {
            let host = match (&g.api_call, &g.range) {
                (Some(c), Some(r)) => format!("host in {c} (range `{r}`)"),
                (Some(c), None) => format!("host in {c}"),
                (None, Some(r)) => format!("host in no CUDA call (range `{r}`)"),
                (None, None) => "host in no CUDA call".to_owned(),
            };
            format!(
                "idle gap: {:.3} ms on device {}{} at +{:.3} ms; {host}",
                g.idle_ns as f64 / 1e6,
                g.device,
                g.step
                    .as_ref()
                    .map_or(String::new(), |s| format!(" in {s}")),
                g.offset_ns as f64 / 1e6,
            )
        }));
        let mut sections = vec![Section {
            title: Some(format!(
                "Phases ({} attribution)",
                self.attribution.as_str()
            )),
            table: phases,
            notes,
        }];

        let mut top = Table::new([
            "Phase",
            "Kernel",
            "Class",
            "Share %",
            "Total (ms)",
            "Calls",
            "Calls/step",
        ]);
        for p in &rows {
            for k in &p.top_non_gemm {
                top.push(vec![
                    Cell::text(&p.name),
                    Cell::text(&k.display_name),
                    Cell::text(k.class.label()),
                    pct(k.share),
                    ms(k.total_ns as f64),
                    Cell::Int(k.instances as i64),
                    opt_float(k.instances_per_step, 1),
                ]);
            }
        }
        sections.push(Section {
            title: Some("Top non-GEMM kernels".into()),
            table: top,
            notes: Vec::new(),
        });

        let mut present: Vec<KernelClass> = rows
            .iter()
            .flat_map(|p| p.classes.iter().map(|c| c.class))
            .collect();
        present.sort();
        present.dedup();
        let mut columns = vec!["Phase".to_owned()];
        columns.extend(present.iter().map(|c| format!("{} %", c.label())));
        let mut classes = Table::new(columns);
        for p in &rows {
            let mut row = vec![Cell::text(&p.name)];
            for c in &present {
                let share = p.classes.iter().find(|s| s.class == *c).map(|s| s.share);
                row.push(pct(share.unwrap_or(0.0)));
            }
            classes.push(row);
        }
        sections.push(Section {
            title: Some("Kernel time by class".into()),
            table: classes,
            notes: Vec::new(),
        });

        if let Some(a) = &self.attention {
            let mut t = Table::new([
                "Range",
                "Instances",
                "Wall (ms)",
                "GPU proj (ms)",
                "Kernel (ms)",
                "Kernels",
            ]);
            for r in [&a.qk, &a.softmax, &a.v] {
                t.push(vec![
                    Cell::text(&r.name),
                    Cell::Int(r.ranges as i64),
                    ms(r.wall_ns as f64),
                    ms(r.gpu_proj_ns as f64),
                    ms(r.kernel_ns as f64),
                    Cell::Int(r.kernels as i64),
                ]);
            }
            let fmt_ratio = |r: Option<f64>| r.map_or("-".to_owned(), |v| format!("{v:.3}"));
            let flops = match (a.head_dim, a.flop_ratio) {
                (Some(d), Some(r)) => format!("FLOP ratio 5/(4·{d}) = {r:.4}"),
                _ => "FLOP ratio 5/(4·head_dim): pass --head-dim".to_owned(),
            };
            sections.push(Section {
                title: Some("Attention: softmax vs matmul".into()),
                table: t,
                notes: vec![format!(
                    "softmax/matmul kernel time {} (wall {}); {flops}",
                    fmt_ratio(a.ratio),
                    fmt_ratio(a.wall_ratio)
                )],
            });
        }
        if self.devices.len() > 1 {
            sections.push(self.devices_section());
        }
        if !self.clock_offsets_ns.is_empty() {
            sections.push(self.ranks_section());
        }
        if let Some(m) = &self.mfu {
            sections.push(mfu_section(m));
        }
        if let Some(v) = &self.by_operator {
            sections.extend(v.sections(self.measured_steps));
        }
        Document {
            sections,
            json: serde_json::to_value(self).ok(),
        }
    }

    /// One row per rank of a run read from one file per rank: its file, per-step figures, waits
    /// and the offset that put its file on the run's timeline.
    fn ranks_section(&self) -> Section {
        let mut t = Table::new([
            "Rank",
            "File",
            "Device",
            "Process",
            "Steps",
            "Step (ms)",
            "Compute/step (ms)",
            "Exposed comm/step (ms)",
            "Memcpy/step (ms)",
            "Idle/step (ms)",
            "Kernel total (ms)",
            "Waited (ms)",
            "Wait caused (ms)",
            "Clock offset (ms)",
        ]);
        for r in &self.ranks {
            t.push(vec![
                Cell::Int(i64::from(r.rank)),
                Cell::text(&r.source),
                Cell::Int(i64::from(r.device)),
                Cell::Int(i64::from(r.process)),
                Cell::Int(r.steps as i64),
                opt_ms(r.step_ns),
                opt_ms(r.compute_ns),
                opt_ms(r.exposed_communication_ns),
                opt_ms(r.memcpy_ns),
                opt_ms(r.idle_ns),
                ms(r.kernel_ns as f64),
                ms(r.waited_ns as f64),
                ms(r.wait_caused_ns as f64),
                ms(r.clock_offset_ns as f64),
            ]);
        }
        let from = self
            .ranks
            .first()
            .map_or(RankFrom::Order, |r| r.rank_from)
            .words();
        Section {
            title: Some("Per rank".into()),
            table: t,
            notes: vec![format!("Ranks from {from}. Clock offset: added to the file's times to put it on the lowest rank's timeline (each file's recorded clock origin, checked against the ends of the collectives).")],
        }
    }

    /// One row per process on each device: per-step time and totals, the slowest marked.
    fn devices_section(&self) -> Section {
        let mut t = Table::new([
            "Device",
            "Process",
            "Steps",
            "Kernel/step (ms)",
            "Compute/step (ms)",
            "Comm/step (ms)",
            "Exposed comm/step (ms)",
            "Idle/step (ms)",
            "Span/step (ms)",
            "Kernel total (ms)",
            "Comm total (ms)",
            "Graph total (ms)",
            "Waited (ms)",
            "Wait caused (ms)",
            "Slowest",
        ]);
        for d in &self.devices {
            let s = d.per_step.as_ref();
            let mut row = d.step_cells().to_vec();
            row.extend([
                opt_ms(s.map(|s| s.span_ns)),
                ms(d.kernel_ns as f64),
                ms(d.communication_ns as f64),
                ms(d.graph_ns as f64),
                ms(d.waited_ns as f64),
                ms(d.wait_caused_ns as f64),
                Cell::text(if d.slowest { "slowest" } else { "" }),
            ]);
            t.push(row);
        }
        let mut notes = vec!["Per step: means over the process's measured steps, each over the step's span on the device. Totals: every kernel the process ran on the device.".to_owned()];
        notes.push("Waited: time at collectives before the last rank arrived; wait caused: the others' waiting for this rank's late arrival.".to_owned());
        if let Some(s) = &self.straggler {
            let cost = match s.wait_caused_ns_per_step {
                Some(p) => format!("{:.3} ms per step", p / 1e6),
                None => format!("{:.3} ms in all", s.wait_caused_ns as f64 / 1e6),
            };
            notes.push(format!(
                "Slowest: device {} (process {}), the straggler: it arrives last at the collectives, and the others wait {cost} for it.",
                s.device, s.process
            ));
        }
        Section {
            title: Some("Per device and process".into()),
            table: t,
            notes,
        }
    }
}

impl OperatorView {
    /// The operators (time in all and per phase), the shapes they ran, their roofline, and the
    /// top-level operators, each a table; the unattributed kernels as a row of the first.
    pub fn sections(&self, steps: usize) -> Vec<Section> {
        let phases: Vec<&str> = self
            .operators
            .first()
            .map(|o| o.phases.iter().map(|p| p.phase.as_str()).collect())
            .unwrap_or_default();
        let mut columns = vec![
            "Operator".to_owned(),
            "Calls".into(),
            "Kernels".into(),
            "GPU (ms)".into(),
            "Share %".into(),
        ];
        columns.extend(phases.iter().map(|p| format!("{p} (ms)")));
        columns.push("Shapes".into());
        let mut ops = Table::new(columns);
        let kernel_ns = self
            .operators
            .iter()
            .fold(self.unattributed_ns, |a, o| a.saturating_add(o.gpu_ns));
        let share = |ns: i64| {
            pct(if kernel_ns > 0 {
                ns as f64 / kernel_ns as f64
            } else {
                0.0
            })
        };
        for o in &self.operators {
            let mut row = vec![
                Cell::text(&o.name),
                Cell::Int(o.calls as i64),
                Cell::Int(o.kernels as i64),
                ms(o.gpu_ns as f64),
                share(o.gpu_ns),
            ];
            row.extend(o.phases.iter().map(|p| ms(p.gpu_ns as f64)));
            row.push(Cell::Int(o.shapes.len() as i64));
            ops.push(row);
        }
        if self.unattributed_kernels > 0 {
            let mut row = vec![
                Cell::text("unattributed"),
                Cell::Missing,
                Cell::Int(self.unattributed_kernels as i64),
                ms(self.unattributed_ns as f64),
                share(self.unattributed_ns),
            ];
            row.extend(phases.iter().map(|_| Cell::Missing));
            row.push(Cell::Missing);
            ops.push(row);
        }
        let over = if steps > 0 {
            format!(
                "the {steps} measured step{}",
                if steps == 1 { "" } else { "s" }
            )
        } else {
            "the whole trace".to_owned()
        };
        let mut notes = vec![format!(
            "Kernels (and CUDA graphs traced whole) of {over} by the innermost PyTorch operator call around their launch call, on its thread ({}): {:.3} ms of kernel time in all. Calls: operator calls that launched GPU work; GPU (ms): their kernel time over all the steps, and per phase.",
            match self.operator_source {
                Some(OperatorSource::CpuOp) => "Kineto's cpu_op events",
                Some(OperatorSource::EmitNvtx) => "emit_nvtx ranges",
                None => "no operator calls",
            },
            kernel_ns as f64 / 1e6
        )];
        notes.extend(self.operator_notes.iter().map(|n| format!("note: {n}")));
        let mut sections = vec![Section {
            title: Some("Operators".into()),
            table: ops,
            notes,
        }];

        let mut shapes = Table::new(["Operator", "Sizes", "Calls", "Kernels", "GPU (ms)"]);
        for o in &self.operators {
            for sh in &o.shapes {
                shapes.push(vec![
                    Cell::text(&o.name),
                    Cell::text(&sh.sizes),
                    Cell::Int(sh.calls as i64),
                    Cell::Int(sh.kernels as i64),
                    ms(sh.gpu_ns as f64),
                ]);
            }
        }
        sections.push(Section {
            title: Some("Operator shapes".into()),
            table: shapes,
            notes: vec![
                "The inputs' sizes of each operator's calls as recorded, most time first.".into(),
            ],
        });

        let mut roof = Table::new([
            "Operator",
            "Type",
            "GFLOP",
            "GB",
            "TFLOP/s",
            "TB/s",
            "FLOP/B",
            "Bound",
            "Roof",
            "% of roof",
        ]);
        for o in &self.operators {
            let p = &o.placement;
            roof.push(vec![
                Cell::text(&o.name),
                o.dtype.map_or(Cell::Missing, Cell::text),
                opt_float(o.flops.map(|f| f as f64 / 1e9), 3),
                opt_float(o.bytes.map(|b| b as f64 / 1e9), 3),
                opt_float(p.achieved_tflops, 3),
                opt_float(p.achieved_tbps, 3),
                opt_float(p.intensity, 2),
                p.bound.map_or(Cell::Missing, |b| {
                    Cell::text(match b {
                        Bound::Compute => "compute",
                        Bound::Memory => "memory",
                    })
                }),
                o.roof.map_or(Cell::Missing, Cell::text),
                opt_pct(p.roof_fraction),
            ]);
        }
        let mut notes = vec!["FLOPs and bytes from each call's recorded shapes: matrix products 2·M·N·K, attention 4·B·H·L·S·E (halved when causal, ×2.5 backward), pointwise one FLOP per output element and reductions one per input element (floors), copies none; bytes are the inputs and the output. TFLOP/s and TB/s over the GPU time of the calls with shapes.".to_owned()];
        match &self.device_peak {
            Some(d) => {
                let rates: Vec<String> = d
                    .tflops
                    .iter()
                    .map(|(unit, v)| format!("{unit} {v}"))
                    .collect();
                let gpu = d
                    .gpu
                    .as_ref()
                    .map_or(String::new(), |g| format!(" (the trace's `{g}`)"));
                notes.push(format!(
                    "Roofs: {}{gpu}, from the {}: {} dense TFLOP/s, {} TB/s. Bound: compute when FLOP/B reaches the ridge (peak TFLOP/s over TB/s of the operator's roof), else memory; % of roof: TFLOP/s over the roof's peak (compute), TB/s over the bandwidth (memory).",
                    d.name,
                    d.from,
                    rates.join(", "),
                    d.tbps
                ));
            }
            None => notes.push("No roofs: the GPU is not in the table of peaks (--peak-tflops and --peak-tbps give them).".into()),
        }
        sections.push(Section {
            title: Some("Roofline by operator".into()),
            table: roof,
            notes,
        });

        let mut top = Table::new([
            "Top-level operator",
            "Calls",
            "Kernels",
            "GPU (ms)",
            "GPU/step (ms)",
            "Share %",
        ]);
        let per_step = |ns: i64| opt_ms(per_step(ns as f64, steps));
        for t in &self.top_level_operators {
            top.push(vec![
                Cell::text(&t.name),
                Cell::Int(t.calls as i64),
                Cell::Int(t.kernels as i64),
                ms(t.gpu_ns as f64),
                per_step(t.gpu_ns),
                pct(t.share),
            ]);
        }
        sections.push(Section {
            title: Some("Top-level operators".into()),
            table: top,
            notes: vec!["The outermost operator call of each chain that launched GPU work (aten::einsum over aten::bmm, an autograd node over its backward's operators).".into()],
        });
        sections
    }
}

/// The measured steps' model and hardware FLOP utilisation.
fn mfu_section(m: &Mfu) -> Section {
    let mut t = Table::new([
        "Model FLOPs/step",
        "Hardware FLOPs/step",
        "Step (ms)",
        "Achieved TFLOP/s",
        "Peak TFLOP/s",
        "MFU %",
        "HFU %",
    ]);
    let sci = |f: Option<f64>| f.map_or(Cell::Missing, |f| Cell::text(format!("{f:.4e}")));
    t.push(vec![
        sci(m.model_flops_per_step),
        sci(m.hardware_flops_per_step),
        ms(m.step_ns),
        opt_float(m.achieved_tflops, 1),
        opt_float(m.peak_tflops, 1),
        opt_pct(m.mfu),
        opt_pct(m.hfu),
    ]);
    let from = |what: &str, f: Option<&str>| f.map(|f| format!("{what} FLOPs from the {f}"));
    let mut parts: Vec<String> = [
        from("model", m.model_flops_from),
        from("hardware", m.hardware_flops_from),
    ]
    .into_iter()
    .flatten()
    .collect();
    parts.push("step time: the measured steps' mean wall time".into());
    parts.push(match &m.peak {
        Some(p) => format!("peak: {p}"),
        None => "the trace's GPU is not in the table of peaks: pass --peak-tflops".into(),
    });
    Section {
        title: Some("Model FLOP utilisation (per measured step)".into()),
        table: t,
        notes: vec![parts.join("; ")],
    }
}
