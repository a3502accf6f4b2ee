//! RFC 4180 CSV, as `nsys stats --format csv` prints it: a header of column names, one line per
//! row, numbers with the decimals their cells carry; titles and notes are left out. The same
//! fields written straight into bytes (`push_csv_field`, `push_int`) serve the tables that
//! are written as their rows come ([`super::stream`]).

use std::io::{self, Write};

use super::{write_sections, Document, Renderer, Sectioned, Table};

/// RFC 4180 CSV; several sections are separated by a blank line.
pub struct CsvRenderer;

/// `s` as one CSV field: quoted when it holds a comma, a quote or a line break.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

impl Renderer for CsvRenderer {
    fn render(&self, doc: &Document, out: &mut dyn Write) -> io::Result<()> {
        write_sections(self, doc, out)
    }
}

impl Sectioned for CsvRenderer {
    fn title(&self, _title: &str, _out: &mut dyn Write) -> io::Result<()> {
        Ok(())
    }

    fn table(&self, table: &Table, out: &mut dyn Write) -> io::Result<()> {
        let header: Vec<String> = table.columns.iter().map(|c| csv_field(c)).collect();
        writeln!(out, "{}", header.join(","))?;
        for row in &table.rows {
            let fields: Vec<String> = row.iter().map(|c| csv_field(&c.display())).collect();
            writeln!(out, "{}", fields.join(","))?;
        }
        Ok(())
    }

    fn notes(&self, _notes: &[String], _out: &mut dyn Write) -> io::Result<()> {
        Ok(())
    }
}

/// `v` in decimal, without the formatting machinery (a trace prints millions of numbers).
#[inline]
pub(crate) fn push_int(buf: &mut Vec<u8>, v: i64) {
    // Made in place, in room cut to the number's length: made on the stack, its words would be
    // read back whole before their stores had landed, a stall on every cell.
    let at = buf.len();
    buf.resize(at + INT_ROOM, 0);
    let len = match buf[at..].first_chunk_mut::<INT_ROOM>() {
        Some(out) => write_int(v, out),
        None => 0,
    };
    buf.truncate(at + len);
}

/// `v` in decimal, written at the start of `out`.
pub fn decimal(v: i64, out: &mut [u8; 24]) -> &[u8] {
    let len = write_int(v, out);
    &out[..len]
}

/// The room [`write_int`] writes in: the 20 characters of the longest number, and the rest of
/// the last word it writes.
pub(crate) const INT_ROOM: usize = 24;

/// `v` in decimal at the start of `out`; its length. Eight digits at a time, each eight made at
/// once ([`eight_digits`]) and written as one word.
#[inline(always)]
pub(crate) fn write_int(v: i64, out: &mut [u8; INT_ROOM]) -> usize {
    const E8: u64 = 100_000_000;
    const ZEROS: u64 = u64::from_le_bytes([b'0'; 8]);
    let n = v.unsigned_abs();
    out[0] = b'-';
    let mut at = usize::from(v < 0);
    // The first block of eight digits, and the full blocks after it.
    let (first, full) = match n {
        n if n < E8 => (n, [None, None]),
        n if n < E8 * E8 => (n / E8, [Some(n % E8), None]),
        n => (n / (E8 * E8), [Some(n / E8 % E8), Some(n % E8)]),
    };
    // The first block without its leading zeros (the low bytes that are zero), one digit at least.
    let digits = eight_digits(first as u32);
    let zeros = (digits.trailing_zeros() / 8).min(7) as usize;
    out[at..at + 8].copy_from_slice(&((digits | ZEROS) >> (8 * zeros)).to_le_bytes());
    at += 8 - zeros;
    for block in full.into_iter().flatten() {
        out[at..at + 8].copy_from_slice(&(eight_digits(block as u32) | ZEROS).to_le_bytes());
        at += 8;
    }
    at
}

/// The eight decimal digits of `x` (below 10^8) as the bytes of a word, the first digit in the
/// lowest byte: split into lanes of four digits, of two, then of one, every lane of a step in
/// one multiplication (`(y * 10486) >> 20` is `y / 100` below 10^4, `(z * 103) >> 10` is `z / 10`
/// below 100).
#[inline(always)]
pub(crate) fn eight_digits(x: u32) -> u64 {
    let v = u64::from(x / 10_000) | u64::from(x % 10_000) << 32;
    let hundreds = ((v * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let v = hundreds | (v - hundreds * 100) << 16;
    let tens = ((v * 103) >> 10) & 0x000f_000f_000f_000f;
    tens | (v - tens * 10) << 8
}

/// `s` as one CSV field, as [`csv_field`] writes it, into `buf`, with no string made: quoted,
/// its quotes doubled, when it holds a comma, a quote or a line break.
pub(crate) fn push_csv_field(buf: &mut Vec<u8>, s: &str) {
    // Byte searches a word at a time: a kernel name is hundreds of bytes, on every row.
    let b = s.as_bytes();
    let quote = b.contains(&b'"');
    if !(quote || b.contains(&b',') || b.contains(&b'\n') || b.contains(&b'\r')) {
        buf.extend_from_slice(b);
        return;
    }
    buf.push(b'"');
    if quote {
        for (i, part) in s.split('"').enumerate() {
            if i > 0 {
                buf.extend_from_slice(b"\"\"");
            }
            buf.extend_from_slice(part.as_bytes());
        }
    } else {
        buf.extend_from_slice(b);
    }
    buf.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_fields_print_as_the_csv_renderer_prints_them() {
        for v in [
            0,
            7,
            -7,
            10,
            -10,
            99,
            -99,
            100,
            -100,
            999_999,
            1_000_000,
            -1_000_001,
            99_999_999,
            100_000_000,
            -100_000_001,
            4_340_964_397,
            1_000_000_000_000_000,
            9_999_999_999_999_999,
            1_795_323_492_837_158_010,
            -1_795_323_492_837_158_010,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
            1_795_323_492_837_158_010,
        ] {
            let mut buf = Vec::new();
            push_int(&mut buf, v);
            assert_eq!(String::from_utf8(buf).unwrap(), v.to_string());
            let mut after = b"x,".to_vec();
            push_int(&mut after, v);
            assert_eq!(String::from_utf8(after).unwrap(), format!("x,{v}"));
        }
        // Numbers of every size, from a fixed sequence.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            for v in [x as i64, (x >> (x % 64)) as i64] {
                let mut buf = Vec::new();
                push_int(&mut buf, v);
                assert_eq!(String::from_utf8(buf).unwrap(), v.to_string());
            }
        }
        // Every length of number, at its edges, both signs.
        for p in 0..19 {
            for v in [10i64.pow(p) - 1, 10i64.pow(p), 10i64.pow(p) + 1] {
                for v in [v, -v] {
                    let mut buf = b"x".to_vec();
                    push_int(&mut buf, v);
                    assert_eq!(String::from_utf8(buf).unwrap(), format!("x{v}"));
                    let mut digits = [b' '; 24];
                    assert_eq!(decimal(v, &mut digits), v.to_string().as_bytes());
                }
            }
        }
        for s in [
            "plain",
            "a,b",
            "say \"hi\"",
            "\"",
            "line\nbreak",
            "cr\r",
            "",
        ] {
            let mut buf = Vec::new();
            push_csv_field(&mut buf, s);
            assert_eq!(String::from_utf8(buf).unwrap(), csv_field(s), "{s:?}");
        }
    }
}
