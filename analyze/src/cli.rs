//! What both command lines (`analyze` and `collect`) do once their library call has returned:
//! write the result to stdout, or end on an error with one `error: ...` line on stderr (the error
//! and each cause it gives, every message said once) and exit status 2. A pipe closed by the
//! reader (`analyze stats ... | head`) is not an error: the binary ends quietly with status 0.
//! The binaries parse their arguments with clap; the whole numbers they take are read here, so
//! that a bad one is refused with a sentence saying what is expected.

use std::error::Error;
use std::io::Write;
use std::process::ExitCode;

/// Write `text` to stdout and flush it.
pub fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// The error and its causes, outermost first.
fn chain<'a>(err: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(err), |&e| e.source())
}

/// The one line an error prints: `error: ` and its messages from the outermost to the root
/// cause, joined by `: `, leaving out a cause whose text an outer message already contains.
pub fn error_line(err: &(dyn Error + 'static)) -> String {
    let mut line = format!("error: {err}");
    for cause in chain(err).skip(1) {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

/// Whether the error, or any of its causes, is a closed pipe.
pub fn is_broken_pipe(err: &(dyn Error + 'static)) -> bool {
    chain(err).any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// End a command that failed: status 0 for a closed pipe, else its [`error_line`] on stderr
/// and status 2.
pub fn exit_on_error(err: &(dyn Error + 'static)) -> ExitCode {
    if is_broken_pipe(err) {
        return ExitCode::SUCCESS;
    }
    let _ = writeln!(std::io::stderr(), "{}", error_line(err));
    ExitCode::from(2)
}

/// A whole-number argument (a count, a size, an id): `s` as a `T`, or a sentence saying what is
/// expected (`-1` for a count: "`-1` is below 0: give a whole number of 0 or more").
pub fn parse_whole<T: TryFrom<i128>>(s: &str) -> Result<T, String> {
    let v: i128 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number: give one of 0 or more"))?;
    if v < 0 {
        return Err(format!(
            "`{s}` is below 0: give a whole number of 0 or more"
        ));
    }
    T::try_from(v).map_err(|_| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("writing out.json")
        }
    }

    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn causes_join_into_one_line_each_said_once() {
        let e = Outer(std::io::Error::other("disk full"));
        assert_eq!(error_line(&e), "error: writing out.json: disk full");
        let plain = std::io::Error::other("x.sqlite: no such file");
        assert_eq!(error_line(&plain), "error: x.sqlite: no such file");
        assert!(!is_broken_pipe(&e));
    }

    #[test]
    fn a_closed_pipe_anywhere_in_the_chain_is_found() {
        let e = Outer(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(is_broken_pipe(&e));
    }

    #[test]
    fn whole_numbers_are_refused_with_a_sentence() {
        assert_eq!(parse_whole::<usize>(" 12"), Ok(12));
        assert_eq!(
            parse_whole::<usize>("-1").unwrap_err(),
            "`-1` is below 0: give a whole number of 0 or more"
        );
        assert!(parse_whole::<u32>("4294967296")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_whole::<u64>("1.5")
            .unwrap_err()
            .contains("not a whole number"));
    }
}
