//! What a Kineto trace records about its run ahead of its events, read from the head of the file
//! alone: the rank and world size of `distributedInfo`, which PyTorch writes among the keys
//! before `traceEvents`. A folder's per-rank traces are grouped into runs by it without being
//! read whole.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;
use serde_json::Value;

use super::event::as_u64;
use crate::error::{Error, Result};

/// How much of the (inflated) text is searched for the keys before `traceEvents`.
const HEAD_BYTES: u64 = 1 << 20;

/// The rank `distributedInfo` records, and the world size where it records one.
pub fn distributed(info: &Value) -> Option<(u32, Option<u32>)> {
    let number = |key: &str| as_u64(info.get(key)?).and_then(|v| u32::try_from(v).ok());
    Some((number("rank")?, number("world_size")))
}

/// The rank (and world size) the trace at `path` records, from its first MiB: `None` where no
/// `distributedInfo` comes before `traceEvents` there.
pub fn recorded_rank(path: &Path) -> Result<Option<(u32, Option<u32>)>> {
    let file = BufReader::new(File::open(path).map_err(Error::io(path))?);
    let reader: Box<dyn Read> = if crate::formats::gzip::is_gzip(path)? {
        Box::new(MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut head = Vec::new();
    // A file cut short or damaged past its head still says what its head says.
    let _ = reader.take(HEAD_BYTES).read_to_end(&mut head);
    let events = find(&head, b"\"traceEvents\"").unwrap_or(head.len());
    let key = b"\"distributedInfo\"";
    let Some(at) = find(&head[..events], key) else {
        return Ok(None);
    };
    let rest = &head[at + key.len()..];
    let Some(colon) = rest.iter().position(|b| !b.is_ascii_whitespace()) else {
        return Ok(None);
    };
    if rest[colon] != b':' {
        return Ok(None);
    }
    let value = serde_json::Deserializer::from_slice(&rest[colon + 1..])
        .into_iter::<Value>()
        .next();
    Ok(match value {
        Some(Ok(info)) => distributed(&info),
        _ => None,
    })
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
