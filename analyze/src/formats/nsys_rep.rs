//! `.nsys-rep` reports: the binary capture of Nsight Systems, which only `nsys` itself can read.
//!
//! Given a report, we use the `.sqlite` export beside it when that is newer than the report;
//! otherwise we run `nsys export --type sqlite` when `nsys` is on `PATH` (or named by the `NSYS`
//! environment variable); otherwise we say which command would make the export. The report itself
//! is never written to.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// The SQLite export that belongs to `rep`, made if need be.
pub fn sqlite_for(rep: &Path) -> Result<PathBuf> {
    let sqlite = rep.with_extension("sqlite");
    if is_newer(&sqlite, rep) {
        return Ok(sqlite);
    }
    let Some(nsys) = find_nsys() else {
        return Err(Error::NsysReport {
            path: rep.to_owned(),
            message: format!(
                "a .nsys-rep needs its SQLite export, and no `nsys` was found on PATH or in NSYS; run: nsys export --type sqlite -o {} {}",
                sqlite.display(),
                rep.display()
            ),
        });
    };
    let output = Command::new(&nsys)
        .args([
            "export",
            "--type",
            "sqlite",
            "--force-overwrite",
            "true",
            "-o",
        ])
        .arg(&sqlite)
        .arg(rep)
        .output()
        .map_err(|e| Error::NsysReport {
            path: rep.to_owned(),
            message: format!("could not run {}: {e}", nsys.display()),
        })?;
    if !output.status.success() || !sqlite.is_file() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(Error::NsysReport {
            path: rep.to_owned(),
            message: format!(
                "`{} export --type sqlite` failed ({}){}{}",
                nsys.display(),
                output.status,
                if last.is_empty() { "" } else { ": " },
                last.trim()
            ),
        });
    }
    Ok(sqlite)
}

fn is_newer(a: &Path, b: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(a), modified(b)) {
        (Some(a), Some(b)) => a >= b,
        _ => false,
    }
}

/// `$NSYS` if set, else the first `nsys` on `PATH`.
fn find_nsys() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NSYS").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("nsys"))
        .find(|p| p.is_file())
}
