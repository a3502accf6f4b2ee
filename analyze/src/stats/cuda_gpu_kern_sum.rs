//! `cuda_gpu_kern_sum` (and `:base`, `:mangled`): GPU kernel execution times grouped by kernel
//! name, heaviest first.
//!
//! As in nsys: one row per distinct name (demangled by default, the short base name with `:base`,
//! the mangled name with `:mangled` where the export has it); rows ordered by total time
//! descending, then by instance count ascending, then by name; `Time (%)` is a share of the sum of
//! all kernels' times, not of wall time. Kernels on every device and stream are pooled. The
//! `:nvtx-name` variant of nsys is not reproduced.

use crate::model::trace::{Kernel, StrId, Trace};
use crate::render::Table;

use super::attribution::FastMap;
use super::gather::{Gathered, KernelNames, Samples};
use super::{time_table, TimeRow};

/// Which of a kernel's names to group by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelName {
    /// The demangled name with template arguments (`void at::native::elementwise_kernel<...>`).
    Demangled,
    /// The base name (`elementwise_kernel`), nsys's `:base`.
    Short,
    /// The mangled name where the export has it, else the demangled one (`:mangled`).
    Mangled,
}

impl KernelName {
    pub fn of(self, k: &Kernel) -> StrId {
        match self {
            KernelName::Demangled => k.name,
            KernelName::Short => k.short_name,
            KernelName::Mangled => k.mangled_name.unwrap_or(k.name),
        }
    }

    /// The name of a kernel gathered with `names`.
    pub fn of_names(self, names: &KernelNames) -> StrId {
        match self {
            KernelName::Demangled => names.name,
            KernelName::Short => names.short,
            KernelName::Mangled => names.mangled.unwrap_or(names.name),
        }
    }
}

/// The rows of `cuda_gpu_kern_sum`.
pub fn rows(trace: &Trace, gathered: &Gathered, names: KernelName) -> Vec<TimeRow> {
    // The kernels of each name, gathered one name at a time.
    let mut groups: FastMap<StrId, Vec<usize>> = FastMap::default();
    for (i, (_, kid, _)) in gathered.kernels.iter().enumerate() {
        groups
            .entry(names.of_names(&gathered.kernel_names[*kid as usize]))
            .or_default()
            .push(i);
    }
    let mut rows = TimeRow::from_summaries(groups.into_iter().filter_map(|(name, parts)| {
        let d = Samples::sum(parts.iter().map(|&i| (&gathered.kernels[i].2, 1)));
        Some((trace.name(name).to_owned(), d.summary()?))
    }));
    rows.sort_by(|a, b| {
        b.summary
            .total
            .cmp(&a.summary.total)
            .then(a.summary.count.cmp(&b.summary.count))
            .then_with(|| a.name.cmp(&b.name))
    });
    rows
}

/// `cuda_gpu_kern_sum` as nsys prints it.
pub fn table(trace: &Trace, gathered: &Gathered, names: KernelName) -> Table {
    time_table(&rows(trace, gathered, names), "Instances", "Name")
}
