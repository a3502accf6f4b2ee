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

/// `00` to `99`, two bytes each.
const PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// `v` in decimal, two digits at a time and without the formatting machinery (a trace prints
/// millions of numbers).
pub(crate) fn push_int(buf: &mut Vec<u8>, v: i64) {
    let mut digits = [0u8; 21];
    buf.extend_from_slice(decimal(v, &mut digits));
}

/// `v` in decimal, written at the end of `digits`.
pub fn decimal(v: i64, digits: &mut [u8; 21]) -> &[u8] {
    let mut n = v.unsigned_abs();
    let mut i = digits.len();
    while n >= 100 {
        let d = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[d..d + 2]);
    }
    if n >= 10 {
        let d = n as usize * 2;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[d..d + 2]);
    } else {
        i -= 1;
        digits[i] = b'0' + n as u8;
    }
    if v < 0 {
        i -= 1;
        digits[i] = b'-';
    }
    &digits[i..]
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
            99,
            100,
            i64::MAX,
            i64::MIN,
            1_795_323_492_837_158_010,
        ] {
            let mut buf = Vec::new();
            push_int(&mut buf, v);
            assert_eq!(String::from_utf8(buf).unwrap(), v.to_string());
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
