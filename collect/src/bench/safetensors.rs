//! A minimal safetensors writer (the format `safetensors.torch.load_file` reads): an 8-byte
//! little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
//! then the raw little-endian data. Tensors are streamed to a temporary file that is renamed over
//! the target, so multi-gigabyte weights need no second copy in memory. Writing only.

use std::io::{BufWriter, Write};
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};

/// One tensor to write: its name, safetensors dtype (`F32`, `I32`), shape and bytes.
pub struct Entry<'a> {
    pub name: String,
    pub dtype: &'static str,
    pub shape: Vec<usize>,
    pub data: &'a [u8],
}

/// The bytes of an f32 slice, little-endian.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The header JSON, padded with spaces to a multiple of 8 bytes.
pub fn header(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut map = Map::new();
    let mut offset = 0usize;
    for e in entries {
        map.insert(
            e.name.clone(),
            json!({"dtype": e.dtype, "shape": e.shape, "data_offsets": [offset, offset + e.data.len()]}),
        );
        offset += e.data.len();
    }
    let mut h = serde_json::to_vec(&Value::Object(map)).expect("a JSON map serialises");
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    h
}

/// Write `entries` to `path` as a safetensors file, atomically ([`analyze::atomic_file`]).
pub fn write(path: &Path, entries: &[Entry<'_>]) -> Result<()> {
    analyze::atomic_file::write_with(path, |f| {
        let mut w = BufWriter::with_capacity(1 << 22, f);
        let h = header(entries);
        w.write_all(&(h.len() as u64).to_le_bytes())?;
        w.write_all(&h)?;
        for e in entries {
            w.write_all(e.data)?;
        }
        w.flush()
    })
    .map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_length_header_then_data() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.safetensors");
        let a = f32_bytes(&[1.0, -2.0]);
        let b = i32_bytes(&[7]);
        write(
            &p,
            &[
                Entry {
                    name: "a".into(),
                    dtype: "F32",
                    shape: vec![2],
                    data: &a,
                },
                Entry {
                    name: "b".into(),
                    dtype: "I32",
                    shape: vec![1],
                    data: &b,
                },
            ],
        )
        .unwrap();
        let bytes = std::fs::read(&p).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(n % 8, 0);
        let h: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
        assert_eq!(h["a"]["data_offsets"], json!([0, 8]));
        assert_eq!(h["b"]["shape"], json!([1]));
        let data = &bytes[8 + n..];
        assert_eq!(f32::from_le_bytes(data[4..8].try_into().unwrap()), -2.0);
        assert_eq!(i32::from_le_bytes(data[8..12].try_into().unwrap()), 7);
    }
}
