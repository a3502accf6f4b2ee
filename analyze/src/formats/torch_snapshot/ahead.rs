//! A compressed snapshot's bytes inflated on a thread of their own, a few chunks ahead of the
//! pickle reader, so that inflating and parsing overlap. Memory stays bounded: at most
//! [`DEPTH`] chunks of [`CHUNK`] bytes wait for the reader. It adds nothing for a plain file,
//! whose bytes cost the reader no more to read than to take from another thread.

use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// The bytes read at a time on the reading thread.
const CHUNK: usize = 1 << 20;
/// The chunks read and not yet taken, at most.
const DEPTH: usize = 4;

/// `parse` of `input`'s bytes, read on another thread. When `parse` returns, the thread stops
/// reading (having read at most [`DEPTH`] chunks more than `parse` took) and `input` is left
/// where it stopped, for a caller that reads the rest to find out why a parse failed.
pub(super) fn read_ahead<T>(
    input: &mut (dyn Read + Send),
    parse: impl FnOnce(&mut dyn Read) -> T,
) -> T {
    std::thread::scope(|scope| {
        let (full_tx, full_rx) = sync_channel(DEPTH);
        let (empty_tx, empty_rx) = sync_channel(DEPTH + 2);
        let reader = scope.spawn(move || fill(input, &full_tx, &empty_rx));
        let mut ahead = Ahead {
            full: full_rx,
            empty: empty_tx,
            current: Vec::new(),
            pos: 0,
            done: false,
        };
        let out = parse(&mut ahead);
        // The reading thread's next hand-over fails, and it stops.
        drop(ahead);
        if let Err(panic) = reader.join() {
            std::panic::resume_unwind(panic);
        }
        out
    })
}

/// Read `input` in chunks into `full` until its end, an error (handed over after the bytes
/// read before it), or until nobody takes them; chunks come back through `empty` for reuse.
fn fill(
    input: &mut (dyn Read + Send),
    full: &SyncSender<io::Result<Vec<u8>>>,
    empty: &Receiver<Vec<u8>>,
) {
    loop {
        let mut buf = empty
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(CHUNK));
        buf.clear();
        // `read_to_end` keeps what it read before an error.
        let read = (&mut *input).take(CHUNK as u64).read_to_end(&mut buf);
        let at_end = buf.is_empty();
        if !at_end && full.send(Ok(buf)).is_err() {
            return;
        }
        if let Err(e) = read {
            let _ = full.send(Err(e));
            return;
        }
        if at_end {
            return;
        }
    }
}

/// The reader's side: the chunks as they arrive, as one stream.
struct Ahead {
    full: Receiver<io::Result<Vec<u8>>>,
    empty: SyncSender<Vec<u8>>,
    current: Vec<u8>,
    pos: usize,
    done: bool,
}

impl Read for Ahead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.current.len() {
            if self.done {
                return Ok(0);
            }
            match self.full.recv() {
                Ok(Ok(chunk)) => {
                    let used = std::mem::replace(&mut self.current, chunk);
                    self.pos = 0;
                    let _ = self.empty.try_send(used);
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                // The input ended.
                Err(_) => self.done = true,
            }
        }
        let n = out.len().min(self.current.len() - self.pos);
        out[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that fails after `good` bytes, as a damaged gzip member does.
    struct FailsAfter {
        good: Vec<u8>,
        pos: usize,
    }

    impl Read for FailsAfter {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.pos == self.good.len() {
                return Err(io::Error::other("damaged"));
            }
            let n = out.len().min(self.good.len() - self.pos).min(1000);
            out[..n].copy_from_slice(&self.good[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    #[test]
    fn hands_over_every_byte_in_order_then_the_error() {
        let good: Vec<u8> = (0..3 * CHUNK + 12_345)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut input = FailsAfter {
            good: good.clone(),
            pos: 0,
        };
        let (bytes, error) = read_ahead(&mut input, |r| {
            let mut bytes = Vec::new();
            let e = r.read_to_end(&mut bytes).unwrap_err();
            (bytes, e.to_string())
        });
        assert!(bytes == good, "{} bytes of {}", bytes.len(), good.len());
        assert_eq!(error, "damaged");
    }

    #[test]
    fn a_reader_that_stops_early_stops_the_thread() {
        let data = vec![5u8; 50 * CHUNK];
        let mut input = &data[..];
        let first = read_ahead(&mut input, |r| {
            let mut b = [0u8; 10];
            r.read_exact(&mut b).map(|()| b[9])
        });
        assert_eq!(first.unwrap(), 5);
        assert!(
            input.len() >= 50 * CHUNK - (DEPTH + 3) * CHUNK,
            "read no more than ahead"
        );
    }
}
