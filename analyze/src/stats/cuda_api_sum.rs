//! `cuda_api_sum`: host-side CUDA API calls (runtime and driver) grouped by function, heaviest
//! first.
//!
//! As in nsys: one row per function name as the export interns it, so `cudaLaunchKernel_v7000`
//! and `cuLaunchKernel` are separate rows; a name ending in a six-character version suffix
//! `_vNNNN` is printed without it (`cudaLaunchKernel`), while longer or shorter suffixes stay
//! (`cudaLaunchKernelExC_v11060`, `cuGetProcAddress_v2`). Rows are ordered by total time
//! descending; equal totals keep the order in which the names first occur in the export (nsys
//! keeps its string-id order, which we cannot see). Call durations are host time, not GPU time.

use crate::model::trace::{StrId, Trace};
use crate::render::Table;

use super::attribution::FastMap;
use super::{time_table, TimeRow};

/// A function name as nsys prints it: a trailing `_vNNNN` (exactly six characters starting with
/// `_v`) removed.
pub fn display_name(name: &str) -> &str {
    let chars: Vec<(usize, char)> = name.char_indices().collect();
    let n = chars.len();
    if n >= 6 && chars[n - 6].1 == '_' && chars[n - 5].1 == 'v' {
        &name[..chars[n - 6].0]
    } else {
        name
    }
}

/// The rows of `cuda_api_sum`.
pub fn rows(trace: &Trace) -> Vec<TimeRow> {
    let mut groups: FastMap<StrId, Vec<i64>> = FastMap::default();
    for c in &trace.api_calls {
        groups.entry(c.name).or_default().push(c.duration().0);
    }
    let mut groups: Vec<(StrId, Vec<i64>)> = groups.into_iter().collect();
    // Interned ids follow first occurrence in the export: the stable sort below keeps that order
    // among equal totals.
    groups.sort_unstable_by_key(|g| g.0);
    let mut rows = TimeRow::from_groups(
        groups
            .into_iter()
            .map(|(name, d)| (display_name(trace.name(name)).to_owned(), d)),
    );
    rows.sort_by_key(|r| std::cmp::Reverse(r.summary.total));
    rows
}

/// `cuda_api_sum` as nsys prints it.
pub fn table(trace: &Trace) -> Table {
    time_table(&rows(trace), "Num Calls", "Name")
}

#[cfg(test)]
mod tests {
    use super::display_name;

    #[test]
    fn version_suffixes_as_nsys_strips_them() {
        // Names from torch_small_ctx128_train_fp32 and how its cuda_api_sum CSV prints them.
        assert_eq!(display_name("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
        assert_eq!(display_name("cudaMemcpyAsync_v3020"), "cudaMemcpyAsync");
        assert_eq!(
            display_name("cudaLaunchKernelExC_v11060"),
            "cudaLaunchKernelExC_v11060"
        );
        assert_eq!(display_name("cuGetProcAddress_v2"), "cuGetProcAddress_v2");
        assert_eq!(display_name("cuLibraryLoadData"), "cuLibraryLoadData");
        assert_eq!(display_name("_v1234"), "");
        assert_eq!(display_name("é_v1234"), "é");
    }
}
