//! What the binaries print when clap refuses their arguments: one `error: ...` line that ends
//! naming the help to read (`(see 'collect plan --help')`), exit status 2, as every other error of
//! theirs. clap's own report (the message, tips, the usage and a pointer to `--help`, over
//! several lines) is folded into that line; `--help`, `--version` and a missing subcommand
//! still print clap's help. Shared by `analyze` and `collect` (each includes this file), as clap
//! stays out of the libraries.

use std::process::ExitCode;

use clap::error::ErrorKind;

/// Prints `e` in one line and returns status 2, or lets clap print help or the version.
/// `command` is the binary's clap command, to name the subcommand whose help to read.
pub fn exit_on_parse_error(e: clap::Error, command: &clap::Command) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        _ => {
            let args: Vec<String> = std::env::args_os()
                .skip(1)
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            eprintln!(
                "{} (see '{} --help')",
                fold(&e.to_string()),
                path(command, &args)
            );
            ExitCode::from(2)
        }
    }
}

/// The binary and the subcommands `args` name, as in `collect plan`.
fn path(command: &clap::Command, args: &[String]) -> String {
    let mut words = vec![command.get_name().to_string()];
    let mut current = command;
    for arg in args {
        if let Some(sub) = current.find_subcommand(arg) {
            words.push(sub.get_name().to_string());
            current = sub;
        }
    }
    words.join(" ")
}

/// clap's plain-text report as `error: message (tip: ...)`: the message with its list (missing
/// arguments, possible values) and tips; the usage and the pointer to `--help` are left out.
fn fold(report: &str) -> String {
    let mut message = String::new();
    let mut tips = Vec::new();
    for paragraph in report.split("\n\n") {
        let lines: Vec<&str> = paragraph
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let Some(first) = lines.first() else { continue };
        if first.starts_with("Usage:") || first.starts_with("For more information") {
            continue;
        }
        if let Some(tip) = first.strip_prefix("tip:") {
            tips.push(format!("tip:{tip}"));
        } else if message.is_empty() {
            // The message, then its list (missing arguments, possible values) on the same line.
            message = first.to_string();
            if lines.len() > 1 {
                message.push(' ');
                message.push_str(&lines[1..].join(", "));
            }
        }
    }
    if !message.starts_with("error:") {
        message = format!("error: {message}");
    }
    if !tips.is_empty() {
        message = format!("{message} ({})", tips.join("; "));
    }
    message
}

#[cfg(test)]
mod tests {
    use super::{fold, path};

    #[test]
    fn a_report_folds_into_one_line() {
        let report = "error: invalid value 'z' for '--format <FORMAT>'\n  [possible values: \
                      table, csv]\n\n  tip: a similar value exists: 'csv'\n\nUsage: analyze \
                      stats [OPTIONS] <FILE>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            fold(report),
            "error: invalid value 'z' for '--format <FORMAT>' [possible values: table, csv] \
             (tip: a similar value exists: 'csv')"
        );
        let report = "error: the following required arguments were not provided:\n  --d-ff \
                      <D_FF>\n  --layers <LAYERS>\n\nUsage: collect plan --d-model <D_MODEL> \
                      --d-ff <D_FF>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            fold(report),
            "error: the following required arguments were not provided: --d-ff <D_FF>, \
             --layers <LAYERS>"
        );
    }

    #[test]
    fn the_help_to_read_is_the_subcommands() {
        let command = clap::Command::new("analyze").subcommand(clap::Command::new("stats"));
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            path(&command, &args(&["stats", "--format", "x"])),
            "analyze stats"
        );
        assert_eq!(path(&command, &args(&["--bogus"])), "analyze");
    }
}
