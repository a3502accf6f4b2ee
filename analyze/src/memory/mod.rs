//! PyTorch CUDA memory snapshots: the model of allocations and segments, and the analyses over it
//! (timeline, peak, categories, plots).

/// A loaded `torch.cuda.memory._dump_snapshot` file.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {}
