//! The events of a window read in pieces side by side: the window's text cut where an event seems
//! to end, each piece read into a reader of its own on the rayon pool, and those readers taken in
//! order into the trace's. A cut is a guess (a `}`, a `,`, a `{`, which a string or an `args`
//! list may hold too): a piece counts only once the piece before it, read from a point known to
//! lie between two events, ends exactly where it starts. So what is read is what reading the
//! events one by one reads, errors included, and a wrong guess costs the pieces after it, which
//! are read again from where the last good one ended.

use rayon::prelude::*;

use super::event::event;
use super::reader::Reader;
use crate::formats::json_scan::{Cursor, Scan, Stop};

/// The text a piece is given, at least: a window shorter than two is read in one piece.
const PIECE: usize = 1 << 20;

/// Pieces per thread of the pool, for the threads that finish early.
const PIECES_PER_THREAD: usize = 4;

/// Where reading the events of a window stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Events {
    /// The window ends inside an event; the events before `end` were read.
    More { end: usize },
    /// The list of events ends: `end` is the position after its `]`.
    Closed { end: usize },
}

/// How reading one piece ended.
enum End {
    /// At or past the piece's limit, after an event.
    Limit,
    /// At the `]` that ends the list, before the position given.
    Close(usize),
    /// Inside an event, at the end of the window.
    More,
    /// At something malformed.
    Bad(Stop),
}

/// One piece as read: from `start` to the end of its last whole event, `end`.
struct Piece {
    reader: Reader,
    start: usize,
    end: usize,
    how: End,
}

/// Read the events of `bytes` (a window of the list of events, `eof` when the text ends with
/// it) into `reader`, from its start, which lies before the list's first event when `first`, else
/// just after an event. With whether the list is still before its first event.
pub fn read_events(
    bytes: &[u8],
    eof: bool,
    first: bool,
    reader: &mut Reader,
) -> Scan<(Events, bool)> {
    read_in_pieces(bytes, eof, first, reader, PIECE)
}

/// [`read_events`], in pieces of at least `piece` bytes.
fn read_in_pieces(
    bytes: &[u8],
    eof: bool,
    mut first: bool,
    reader: &mut Reader,
    piece: usize,
) -> Scan<(Events, bool)> {
    let mut at = 0;
    loop {
        let starts = cuts(bytes, at, piece);
        let limit = |i: usize| starts.get(i + 1).copied().unwrap_or(usize::MAX);
        let mut pieces: Vec<Piece> = if starts.len() == 1 {
            // One piece: read straight into the trace's reader.
            let (end, how) = read_piece(bytes, eof, at, usize::MAX, first, reader);
            vec![Piece {
                reader: Reader::default(),
                start: at,
                end,
                how,
            }]
        } else {
            (0..starts.len())
                .into_par_iter()
                .map(|i| {
                    let mut own = Reader::default();
                    let start = starts[i];
                    let (end, how) =
                        read_piece(bytes, eof, start, limit(i), first && i == 0, &mut own);
                    Piece {
                        reader: own,
                        start,
                        end,
                        how,
                    }
                })
                .collect()
        };
        let mut next = None;
        for (i, p) in pieces.iter_mut().enumerate() {
            if let Some(from) = next {
                if p.start != from {
                    // The cut was not between two events: read on from the last good piece.
                    break;
                }
            }
            let reader_before = first && i == 0;
            if starts.len() > 1 {
                if p.reader.made_up_ids() {
                    // Made-up ids count on from the ids given before: read it again here.
                    (p.end, p.how) =
                        read_piece(bytes, eof, p.start, limit(i), reader_before, reader);
                } else {
                    reader.append(std::mem::take(&mut p.reader));
                }
            }
            if p.end != p.start {
                first = false;
            }
            at = p.end;
            match std::mem::replace(&mut p.how, End::Limit) {
                End::Limit => next = Some(p.end),
                End::Close(end) => return Ok((Events::Closed { end }, first)),
                End::More => return Ok((Events::More { end: p.end }, first)),
                End::Bad(stop) => return Err(stop),
            }
        }
    }
}

/// Read the events of `bytes` from `start` into `reader` until one ends at or past `limit`.
fn read_piece(
    bytes: &[u8],
    eof: bool,
    start: usize,
    limit: usize,
    mut first: bool,
    reader: &mut Reader,
) -> (usize, End) {
    let mut c = Cursor::new(bytes, eof);
    c.set_pos(start);
    let mut end = start;
    loop {
        if end >= limit {
            return (end, End::Limit);
        }
        let stopped = |stop| match stop {
            Stop::More => End::More,
            bad => End::Bad(bad),
        };
        match c.more(first, b']') {
            Ok(true) => {}
            Ok(false) => return (end, End::Close(c.pos())),
            Err(stop) => return (end, stopped(stop)),
        }
        match event(&mut c) {
            Ok(e) => reader.event(&e),
            Err(stop) => return (end, stopped(stop)),
        }
        end = c.pos();
        first = false;
    }
}

/// Where the pieces of `bytes[at..]` start: at `at`, then at the guessed end of an event past
/// each further `piece` bytes, as many as the pool has use for.
fn cuts(bytes: &[u8], at: usize, piece: usize) -> Vec<usize> {
    let rest = bytes.len() - at;
    let wanted = (rest / piece).min(PIECES_PER_THREAD * rayon::current_num_threads());
    let mut starts = vec![at];
    if wanted < 2 {
        return starts;
    }
    for i in 1..wanted {
        let from = at + i * (rest / wanted);
        match cut(bytes, from.max(starts[starts.len() - 1])) {
            Some(c) if c > starts[starts.len() - 1] => starts.push(c),
            _ => break,
        }
    }
    starts
}

/// The first point from `from` that looks like the end of an event: after a `}` that whitespace,
/// a `,`, whitespace and a `{` follow.
fn cut(bytes: &[u8], from: usize) -> Option<usize> {
    let ws = |mut j: usize| {
        while matches!(bytes.get(j), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            j += 1;
        }
        j
    };
    let mut i = from;
    while let Some(k) = bytes[i..].iter().position(|&b| b == b'}') {
        let after = i + k + 1;
        let comma = ws(after);
        if bytes.get(comma) == Some(&b',') && bytes.get(ws(comma + 1)) == Some(&b'{') {
            return Some(after);
        }
        i = after;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The model's fields, written out in an order that does not depend on hashing.
    fn written(reader: Reader) -> String {
        let t = reader.finish(Path::new("t.json"), &Default::default());
        let names: Vec<&str> = (0..t.strings.len())
            .map(|i| t.name(crate::model::trace::StrId(i as u32)))
            .collect();
        let mut threads: Vec<_> = t.thread_names.iter().collect();
        threads.sort();
        format!(
            "{names:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{threads:?}",
            t.kernels, t.api_calls, t.ranges, t.mem_ops, *t.ops
        )
    }

    /// Events of every kind the reader keeps, some with text that looks like a cut.
    fn events(n: usize) -> String {
        let mut text = String::new();
        for i in 0..n {
            let e = match i % 7 {
                0 => format!(
                    r#"{{"ph": "X", "cat": "kernel", "name": "k{}}}, {{x", "pid": 0, "tid": 7, "ts": {i}, "dur": 1, "args": {{"correlation": {i}, "grid": [1, 2, 3]}}}}"#,
                    i % 5
                ),
                1 => format!(
                    r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 3, "tid": 4, "ts": {i}, "dur": 1, "args": {{"correlation": {}}}}}"#,
                    i - 1
                ),
                2 => format!(
                    r#"{{"ph": "X", "cat": "cpu_op", "name": "aten::op{}", "pid": 3, "tid": 4, "ts": {i}.5, "dur": 2, "args": {{"Input Dims": [[{i}], []], "x": [{{"a": 1}}, {{"b": 2}}]}}}}"#,
                    i % 3
                ),
                3 => format!(
                    r#"{{"ph": "M", "name": "thread_name", "pid": 3, "tid": {}, "args": {{"name": "t{i}"}}}}"#,
                    i % 4
                ),
                4 => format!(
                    r#"{{"ph": "X", "cat": "user_annotation", "name": "step_{i}", "pid": 3, "tid": 4, "ts": {i}, "dur": 9, "args": {{"External id": {i}}}}}"#
                ),
                5 if i % 3 == 0 => format!(
                    r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpy", "pid": "proc {}x", "tid": 1, "ts": {i}, "dur": 1}}"#,
                    i % 4
                ),
                5 => format!(
                    r#"{{"ph": "X", "cat": "gpu_user_annotation", "name": "step_{}", "pid": 0, "tid": 7, "ts": {i}, "dur": 3, "args": {{"External id": {}}}}}"#,
                    i - 1,
                    i - 1
                ),
                _ => format!(
                    r#"{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": {i}, "dur": 1, "args": {{"correlation": {}, "bytes": 64}}}}"#,
                    i - 5
                ),
            };
            text.push_str(if i == 0 { "\n  " } else { ",\n  " });
            text.push_str(&e);
        }
        text.push_str("\n] ");
        text
    }

    #[test]
    fn pieces_read_what_one_reader_reads() {
        let text = events(3000);
        let mut whole = Reader::default();
        let ended = read_in_pieces(text.as_bytes(), true, true, &mut whole, usize::MAX);
        let closed = Events::Closed {
            end: text.len() - 1,
        };
        assert_eq!(ended, Ok((closed, false)));
        let expected = written(whole);
        for piece in [64, 1000, 7777] {
            let mut pieces = Reader::default();
            let ended = read_in_pieces(text.as_bytes(), true, true, &mut pieces, piece);
            let closed = Events::Closed {
                end: text.len() - 1,
            };
            assert_eq!(ended, Ok((closed, false)), "{piece}");
            assert_eq!(written(pieces), expected, "{piece}");
        }
    }

    #[test]
    fn a_window_read_in_pieces_stops_where_one_reader_stops() {
        let text = events(2000);
        let cut = text.len() / 2;
        let mut whole = Reader::default();
        let one = read_in_pieces(&text.as_bytes()[..cut], false, true, &mut whole, usize::MAX);
        let mut pieces = Reader::default();
        let many = read_in_pieces(&text.as_bytes()[..cut], false, true, &mut pieces, 100);
        assert!(matches!(one, Ok((Events::More { .. }, false))));
        assert_eq!(one, many);
        assert_eq!(written(pieces), written(whole));

        let bad = text.replacen("\"dur\": 1}", "\"dur\": 1,}", 700);
        let mut whole = Reader::default();
        let one = read_in_pieces(bad.as_bytes(), true, true, &mut whole, usize::MAX);
        let mut pieces = Reader::default();
        let many = read_in_pieces(bad.as_bytes(), true, true, &mut pieces, 100);
        assert!(matches!(one, Err(Stop::Bad { .. })));
        assert_eq!(one, many, "the first error in the text");
    }

    #[test]
    fn cuts_fall_after_a_closing_brace() {
        let text = br#"{"a": "}, {"}, {"b": [{"c": 1}, {"d": 2}]} ,  {"e": 3}"#;
        assert_eq!(cut(text, 0), Some(8), "a guess: inside a string");
        assert_eq!(cut(text, 9), Some(13));
        assert_eq!(cut(text, 14), Some(30), "a guess: inside a list");
        assert_eq!(cut(text, 31), Some(42));
        assert_eq!(cut(text, 43), None);
    }
}
