//! `cuda_api_sum`: host-side CUDA API calls (runtime and driver) grouped by function, heaviest
//! first.
//!
//! As in nsys: one row per function name as the export interns it, so `cudaLaunchKernel_v7000`
//! and `cuLaunchKernel` are separate rows; a name ending in a six-character version suffix
//! `_vNNNN` is printed without it (`cudaLaunchKernel`), while longer or shorter suffixes stay
//! (`cudaLaunchKernelExC_v11060`, `cuGetProcAddress_v2`). Rows are ordered by total time
//! descending; equal totals keep the order in which the names first occur in the export (nsys
//! keeps its string-id order, which we cannot see). Call durations are host time, not GPU time.

use crate::model::trace::Trace;
use crate::render::Table;

use super::gather::Gathered;
use super::{time_table, TimeRow};

/// A function name as nsys prints it: a trailing `_vNNNN` (exactly six characters starting with
/// `_v`) removed.
pub fn display_name(name: &str) -> &str {
    // The sixth character from the end, without walking the whole name (the trace reports ask
    // this of every call).
    match name.char_indices().nth_back(5) {
        Some((i, '_')) if name[i + 1..].starts_with('v') => &name[..i],
        _ => name,
    }
}

/// The rows of `cuda_api_sum`, from the calls' durations gathered per function in the order the
/// functions first occur.
pub fn rows(trace: &Trace, gathered: &Gathered) -> Vec<TimeRow> {
    let mut rows =
        TimeRow::from_summaries(gathered.functions.iter().filter_map(|(name, d)| {
            Some((display_name(trace.name(*name)).to_owned(), d.summary()?))
        }));
    // Equal totals keep the order of first occurrence.
    rows.sort_by_key(|r| std::cmp::Reverse(r.summary.total));
    rows
}

/// `cuda_api_sum` as nsys prints it.
pub fn table(trace: &Trace, gathered: &Gathered) -> Table {
    time_table(&rows(trace, gathered), "Num Calls", "Name")
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
