//! The streamed tables against the renderers, and the encoders' numbers and text lines against
//! what they must print.

use super::encode::Lead;
use super::*;
use crate::render::csv::INT_ROOM;
use crate::render::{render_to_string, Document};

fn sample() -> Table {
    let mut t = Table::new(["Start (ns)", "Bytes (MB)", "Kind", "Name"]);
    t.push(vec![
        Cell::Int(-12),
        Cell::Float(0.0625, 3),
        Cell::Missing,
        Cell::text("void gemm<float, 128>(\"tn\")"),
    ]);
    t.push(vec![
        Cell::Int(1_795_323_492_837_158_010),
        Cell::Missing,
        Cell::text("Device"),
        Cell::text("a|b"),
    ]);
    t
}

fn cells(row: &[Cell], c: &mut dyn CellSink) {
    for cell in row {
        match cell {
            Cell::Int(v) => c.int(*v),
            Cell::Float(v, d) => c.float(*v, *d),
            Cell::Text(s) => c.text(s),
            Cell::Missing => c.missing(),
        }
    }
}

/// `table` written through a [`TableWriter`] in `format`, a row at a time.
fn streamed(table: &Table, format: Format, numeric: &[bool]) -> String {
    let mut out = Vec::new();
    let columns: Vec<&str> = table.columns.iter().map(String::as_str).collect();
    let mut w = TableWriter::begin(format, None, &columns, numeric, 0, &mut out).unwrap();
    for row in &table.rows {
        write_rows(
            &mut w,
            std::slice::from_ref(row),
            &mut Vec::new(),
            |r, c| cells(r, c),
        )
        .unwrap();
    }
    w.finish().unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn streamed_tables_print_as_the_renderers_print_them() {
    let t = sample();
    let doc = Document::single(t.clone());
    let numeric = [true, true, false, false];
    for format in [Format::Csv, Format::Markdown] {
        assert_eq!(
            streamed(&t, format, &numeric),
            render_to_string(format, &doc),
            "{format:?}"
        );
    }
    // The renderer ends the document's JSON with a line break; a table ends at its bracket.
    assert_eq!(
        streamed(&t, Format::Json, &numeric) + "\n",
        render_to_string(Format::Json, &doc)
    );
    let empty = Table::new(["A", "B"]);
    assert_eq!(streamed(&empty, Format::Json, &[true, true]), "[]");
    assert_eq!(streamed(&empty, Format::Csv, &[true, true]), "A,B\n");
}

#[test]
fn text_columns_take_their_widths_from_the_first_batch() {
    let t = sample();
    let mut out = Vec::new();
    let columns: Vec<&str> = t.columns.iter().map(String::as_str).collect();
    let numeric = [true, true, false, false];
    let mut w = TableWriter::begin(Format::Table, None, &columns, &numeric, 0, &mut out).unwrap();
    write_rows(&mut w, &t.rows, &mut Vec::new(), |r, c| cells(r, c)).unwrap();
    w.finish().unwrap();
    let s = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 4, "{s}");
    assert!(
        lines[0].starts_with("         Start (ns)  Bytes (MB)  Kind"),
        "{s}"
    );
    assert!(
        lines[2].starts_with("                -12       0.063  -"),
        "{s}"
    );
}

#[test]
fn numbers_keeping_their_leading_digits_print_whole() {
    let mut lead = Lead::default();
    // Timestamps a few nanoseconds to seconds apart, and numbers of every size, from a
    // fixed sequence.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut t: i64 = 1_795_323_492_837_158_010;
    for _ in 0..100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t += (x % (1 << (x % 34))) as i64;
        for v in [
            t,
            x as i64,
            (x >> (x % 64)) as i64,
            Lead::FROM - 1,
            Lead::FROM,
        ] {
            let mut room = [0u8; INT_ROOM];
            let n = lead.write(v, &mut room);
            assert_eq!(&room[..n], v.to_string().as_bytes());
        }
    }
}

#[test]
fn text_rows_after_the_first_are_aligned_as_they_are_encoded() {
    // The first write sets the widths; the rows encoded after it are lines already, a
    // wider text cut by its middle as in the first rows' table, a wider number whole, the end
    // of a line trimmed.
    let mut out = Vec::new();
    let columns = ["Start (ns)", "Size (MB)", "Kind", "Name"];
    let numeric = [true, true, false, false];
    let mut w =
        TableWriter::begin(Format::Table, Some(60), &columns, &numeric, 0, &mut out).unwrap();
    type Row<'a> = (i64, Option<f64>, &'a str, &'a str);
    let first: &[Row] = &[(1_795_323_492_837_158_010, Some(1.5), "a", "x")];
    let later: &[Row] = &[
        (1_795_323_492_837_158_011, None, "Device", "kernel  "),
        (-3, Some(123_456_789_012.0), "µs", "é"),
        (-1_795_323_492_837_158_010, Some(0.0625), "a", ""),
    ];
    let mut parts = Vec::new();
    let each = |r: &Row, c: &mut dyn CellSink| {
        c.int(r.0);
        c.opt_float(r.1, 3);
        c.group(&[r.2.len() as i64], &mut |c| c.text(r.2));
        c.named(r.3.len() as u64, r.3);
    };
    write_rows(&mut w, first, &mut parts, each).unwrap();
    write_rows(&mut w, later, &mut parts, each).unwrap();
    // Encoded twice, with what the parts kept of names and groups.
    write_rows(&mut w, later, &mut parts, each).unwrap();
    w.finish().unwrap();
    let s = String::from_utf8(out).unwrap();
    let later_lines = [
        "1795323492837158011          -  De…e  ke…",
        "                 -3  123456789012.000  µs    é",
        "-1795323492837158010      0.063  a",
    ];
    let mut expected = vec![
        "         Start (ns)  Size (MB)  Kind  Name",
        "-------------------  ---------  ----  ----",
        "1795323492837158010      1.500  a     x",
    ];
    expected.extend(later_lines);
    expected.extend(later_lines);
    assert_eq!(s, expected.join("\n") + "\n");
}

#[test]
fn rows_fill_a_table_in_memory() {
    let mut t = Table::new(["N", "Square"]);
    write_rows(&mut t, &[0i64, 1, 2], &mut Vec::new(), |&i, c| {
        c.int(i);
        c.opt_int((i > 0).then_some(i * i));
    })
    .unwrap();
    assert_eq!(
        t.rows,
        vec![
            vec![Cell::Int(0), Cell::Missing],
            vec![Cell::Int(1), Cell::Int(1)],
            vec![Cell::Int(2), Cell::Int(4)],
        ]
    );
}
