//! Progress bars on stderr for the library's long work (inflating, reading rows, a report's
//! files), drawn with indicatif only when stderr is a terminal and only once the work has gone
//! on for a second: a quick command, a pipe or a log file sees nothing. Every bar is cleared when
//! its task ends, and [`clear`] wipes any left when the command ends, on success or error; `-q`
//! installs no bars at all.
//!
//! And the end of the process on Ctrl-C or a termination signal: temporary files removed, bars
//! cleared, exit status 130.

use std::io::IsTerminal;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use analyze::progress::{self, Reporter, Unit};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Work shorter than this shows no bar.
const QUIET_FOR: Duration = Duration::from_secs(1);

struct Bars {
    multi: MultiProgress,
    /// The running tasks, outermost first, with when each began.
    stack: Mutex<Vec<(ProgressBar, Instant)>>,
    shown: Mutex<bool>,
}

static BARS: OnceLock<&'static Bars> = OnceLock::new();

fn style(unit: Unit, known_total: bool) -> ProgressStyle {
    let template = match (unit, known_total) {
        (Unit::Bytes, true) => "{msg} [{bar:30}] {bytes}/{total_bytes} ({eta})",
        (Unit::Rows, true) => "{msg} [{bar:30}] {human_pos}/{human_len} rows ({eta})",
        (Unit::Files, true) => "{msg} [{bar:30}] {pos}/{len} files",
        (Unit::Bytes, false) => "{spinner} {msg} {bytes}",
        (Unit::Rows, false) => "{spinner} {msg} {human_pos} rows",
        (Unit::Files, false) => "{spinner} {msg} {pos} files",
    };
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

impl Bars {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(ProgressBar, Instant)>> {
        self.stack.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start drawing once the outermost task has run past [`QUIET_FOR`].
    fn show_if_long(&self) {
        let long = self
            .lock()
            .first()
            .is_some_and(|(_, t)| t.elapsed() >= QUIET_FOR);
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        if long && !*shown {
            self.multi.set_draw_target(ProgressDrawTarget::stderr());
            *shown = true;
        }
    }
}

impl Reporter for Bars {
    fn begin(&self, label: String, total: Option<u64>, unit: Unit) {
        // Hidden until it joins the bars: a bar made with its own stderr target would draw
        // itself once on `set_message`, a line nothing ever clears.
        let bar = self.multi.add(ProgressBar::with_draw_target(
            total,
            ProgressDrawTarget::hidden(),
        ));
        bar.set_style(style(unit, total.is_some()));
        bar.set_message(label);
        bar.enable_steady_tick(Duration::from_millis(200));
        self.lock().push((bar, Instant::now()));
    }

    fn advance(&self, n: u64) {
        if let Some((bar, _)) = self.lock().last() {
            bar.inc(n);
        }
    }

    fn end(&self) {
        let bar = self.lock().pop();
        if let Some((bar, _)) = bar {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
    }
}

/// Draw progress bars when stderr is a terminal; otherwise install nothing.
pub fn install() {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let bars: &'static Bars = Box::leak(Box::new(Bars {
        multi: MultiProgress::with_draw_target(ProgressDrawTarget::hidden()),
        stack: Mutex::new(Vec::new()),
        shown: Mutex::new(false),
    }));
    if BARS.set(bars).is_err() {
        return;
    }
    progress::install(Box::new(Forward(bars)));
    // Bars appear a second into a task, whether or not it has counted anything yet.
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(100));
        bars.show_if_long();
    });
}

/// The reporter handed to the library: the leaked bars, shared with [`println`].
struct Forward(&'static Bars);

impl Reporter for Forward {
    fn begin(&self, label: String, total: Option<u64>, unit: Unit) {
        self.0.begin(label, total, unit)
    }
    fn advance(&self, n: u64) {
        self.0.advance(n)
    }
    fn end(&self) {
        self.0.end()
    }
}

/// Print a line on stderr above the bars (or plainly when there are none).
pub fn println(line: &str) {
    match BARS.get() {
        // Bars not drawn yet have a hidden target, which would swallow the line.
        Some(bars) if *bars.shown.lock().unwrap_or_else(|e| e.into_inner()) => {
            let _ = bars.multi.println(line);
        }
        _ => eprintln!("{line}"),
    }
}

/// Clear whatever bars are on screen: a command ends (well or not) with none left.
pub fn clear() {
    if let Some(bars) = BARS.get() {
        for (bar, _) in bars.lock().drain(..).rev() {
            bar.finish_and_clear();
            bars.multi.remove(&bar);
        }
        let _ = bars.multi.clear();
    }
}

/// On Ctrl-C, SIGTERM or SIGHUP: remove the temporary files, clear the bars, exit 130.
pub fn exit_cleanly_on_signals() {
    let _ = ctrlc::set_handler(|| {
        analyze::formats::temp_file::remove_all();
        if let Some(bars) = BARS.get() {
            let _ = bars.multi.clear();
        }
        std::process::exit(130);
    });
}
