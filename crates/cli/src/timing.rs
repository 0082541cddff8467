//! The timing loop of `masked bench` and `masked sweep`: a warm-up, timed runs, the
//! median, and the peak bytes a run allocates (counted by [`crate::alloc::Counting`]
//! when the binary installs it), and their line-at-a-time output.

use crate::error::CliError;
use std::time::Instant;

/// Writes one line of results to stdout; a closed pipe (`masked bench | head`) is an
/// error with a message, not a panic.
pub fn emit(line: String) -> Result<(), CliError> {
    use std::io::Write;
    writeln!(std::io::stdout().lock(), "{line}")
        .map_err(|e| CliError::Usage(format!("cannot write the results to stdout: {e}")))
}

/// Parses a comma list of `--what` values.
pub fn parse_list<T: std::str::FromStr>(s: &str, what: &str) -> Result<Vec<T>, CliError> {
    s.split(',')
        .map(|p| p.trim().parse::<T>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| CliError::Usage(format!("invalid --{what} value '{s}'")))
}

/// How a measurement runs: a warm-up, then timed runs until both `min_reps` and the time
/// `budget` are reached (or `max_reps`); the median is reported.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Seconds of warm-up runs (at least one run, at most 50).
    pub warmup: f64,
    /// Timed runs at least.
    pub min_reps: usize,
    /// Timed runs at most.
    pub max_reps: usize,
    /// Seconds of timed runs to reach before stopping past `min_reps`.
    pub budget: f64,
}

impl Timing {
    /// `masked bench`: a 0.2 s warm-up (caches, clocks, thread pool), then exactly
    /// `repeat` timed runs.
    pub fn fixed(repeat: usize) -> Self {
        Timing {
            warmup: 0.2,
            min_reps: repeat,
            max_reps: repeat,
            budget: 0.0,
        }
    }
}

/// The median seconds of the timed runs of `f` and the peak bytes one run allocates.
pub fn measure(
    f: impl Fn() -> Result<(), masked::MaskedError>, t: &Timing,
) -> Result<(f64, usize), CliError> {
    let warm = Instant::now();
    let mut runs = 0;
    while runs < 1 || (warm.elapsed().as_secs_f64() < t.warmup && runs < 50) {
        f()?;
        runs += 1;
    }
    let peak = crate::alloc::measure_peak(&f)?;
    let mut times = Vec::with_capacity(t.min_reps.max(1));
    let start = Instant::now();
    while times.len() < t.min_reps.max(1)
        || (times.len() < t.max_reps && start.elapsed().as_secs_f64() < t.budget)
    {
        let s = Instant::now();
        f()?;
        times.push(s.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], peak))
}
