//! [`Profile::document`]: a profile as tables (phases with where their GPU time goes, top
//! non-GEMM kernels, time by class, attention, and per device and process when a trace holds
//! several), laid out like the tables of a profiling write-up: milliseconds with three decimals,
//! percentages with one; the longest idle gaps are notes under the phases. The JSON view is the
//! serialised [`Profile`] itself.

use crate::kernels::class::KernelClass;
use crate::render::cells::{ms, opt_float, opt_ms, opt_pct, pct};
use crate::render::{Cell, Document, Section, Table};

use super::devices::DeviceProfile;
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
            for part in [
                b.compute_ns,
                b.exposed_communication_ns,
                b.memcpy_ns,
                b.memset_ns,
                b.graph_ns,
                b.idle_ns,
            ] {
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
                opt_ms(r.idle_ns),
                ms(r.kernel_ns as f64),
                ms(r.waited_ns as f64),
                ms(r.wait_caused_ns as f64),
                ms(r.clock_offset_ns as f64),
            ]);
        }
        let from = match self.ranks.first().map(|r| r.rank_from) {
            Some(crate::source::many::RankFrom::Metadata) => "the files' own records",
            Some(crate::source::many::RankFrom::FileName) => "the file names",
            _ => "the order of the file names",
        };
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
