//! PyTorch profiler (Kineto) Chrome traces, `.json` or `.json.gz`.

use std::path::Path;

use crate::error::{Error, Result};
use crate::model::Trace;

pub fn load(path: &Path) -> Result<Trace> {
    Err(Error::Malformed {
        path: path.to_owned(),
        message: "Kineto traces are not read yet".into(),
    })
}
