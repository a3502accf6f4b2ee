//! PyTorch CUDA memory snapshots (`torch.cuda.memory._dump_snapshot` pickles, plain or gzip).

use std::path::Path;

use crate::error::{Error, Result};
use crate::memory::Snapshot;

pub fn load(path: &Path) -> Result<Snapshot> {
    Err(Error::Malformed {
        path: path.to_owned(),
        message: "memory snapshots are not read yet".into(),
    })
}
