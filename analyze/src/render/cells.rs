//! The cell formatters every table uses, one of each: milliseconds with three decimals,
//! percentages with one, MiB with two, a relative change, a missing value as [`Cell::Missing`];
//! and the text helpers beside them ([`truncate`], [`truncate_middle`], [`format_bytes`]). A cell keeps its full
//! value for JSON; the decimals say how text, CSV and Markdown print it.

use super::Cell;

/// Nanoseconds as milliseconds with three decimals.
pub fn ms(ns: f64) -> Cell {
    Cell::Float(ns / 1e6, 3)
}

/// [`ms`], or missing.
pub fn opt_ms(ns: Option<f64>) -> Cell {
    ns.map_or(Cell::Missing, ms)
}

/// Microseconds (a memory snapshot's clock) as milliseconds with three decimals, or missing.
pub fn opt_ms_of_us(us: Option<f64>) -> Cell {
    us.map_or(Cell::Missing, |u| Cell::Float(u / 1000.0, 3))
}

/// A fraction (0..1) as a percentage with one decimal.
pub fn pct(fraction: f64) -> Cell {
    Cell::Float(fraction * 100.0, 1)
}

/// [`pct`], or missing.
pub fn opt_pct(fraction: Option<f64>) -> Cell {
    fraction.map_or(Cell::Missing, pct)
}

/// A number with `decimals` decimals, or missing.
pub fn opt_float(v: Option<f64>, decimals: usize) -> Cell {
    v.map_or(Cell::Missing, |v| Cell::Float(v, decimals))
}

/// Bytes as MiB (2^20 bytes).
pub fn bytes_to_mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// Bytes as MiB with two decimals, the unit of the memory tables.
pub fn mib(b: u64) -> Cell {
    Cell::Float(bytes_to_mib(b), 2)
}

/// [`mib`], or missing.
pub fn opt_mib(b: Option<u64>) -> Cell {
    b.map_or(Cell::Missing, mib)
}

/// A difference in bytes as MiB with two decimals.
pub fn mib_delta(d: i64) -> Cell {
    Cell::Float(d as f64 / (1024.0 * 1024.0), 2)
}

/// `other` against `base` as a percentage change with one decimal; missing when `base` is 0.
pub fn change_pct(base: u64, other: u64) -> Cell {
    if base == 0 {
        Cell::Missing
    } else {
        Cell::Float((other as f64 - base as f64) / base as f64 * 100.0, 1)
    }
}

/// Text, or missing.
pub fn opt_text(s: Option<&str>) -> Cell {
    s.map_or(Cell::Missing, Cell::text)
}

/// A count, or missing.
pub fn opt_int(v: Option<u32>) -> Cell {
    v.map_or(Cell::Missing, |v| Cell::Int(i64::from(v)))
}

/// `s` cut to at most `width` characters, an ellipsis marking a cut; `None` keeps it whole.
pub fn truncate(s: &str, width: impl Into<Option<usize>>) -> String {
    match width.into() {
        Some(w) if s.chars().count() > w => {
            let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
            out.push('…');
            out
        }
        _ => s.to_owned(),
    }
}

/// `s` cut to at most `width` characters by its middle: the start and the end kept, `…`
/// between, so that both a kernel's family and its template tail stay readable.
pub fn truncate_middle(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let keep = width - 1;
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut out: String = s.chars().take(head).collect();
    out.push('…');
    out.extend(s.chars().skip(n - tail));
    out
}

/// Bytes shown in binary units with one decimal, as PyTorch's `memory_viz` prints them
/// (`1.5 GiB`), for tables and labels.
pub fn format_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_bytes_uses_binary_units() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(8_765_334_528), "8.2 GiB");
    }

    #[test]
    fn long_names_are_cut_with_an_ellipsis() {
        assert_eq!(truncate("abcdef", Some(4)), "abc…");
        assert_eq!(truncate("abc", Some(4)), "abc");
        assert_eq!(truncate("abcdef", None), "abcdef");
    }

    #[test]
    fn middle_truncation_keeps_both_ends() {
        assert_eq!(truncate_middle("abcdefghij", 5), "ab…ij");
        assert_eq!(truncate_middle("abcdefghij", 6), "abc…ij");
        assert_eq!(truncate_middle("abc", 5), "abc");
        assert_eq!(truncate_middle("abcdef", 1), "…");
    }
}
