//! The memory ceiling of one command: `--max-memory BYTES` (suffixes K, M, G, T), else
//! the environment variable `MASKED_MAX_MEMORY`, else 80% of physical memory. Sizes a
//! file declares are checked against the bytes it holds and then against this ceiling
//! before anything is allocated from them, so a hostile header is an error, not an
//! abort.

use crate::error::IoError;
use std::sync::OnceLock;

static LIMIT: OnceLock<u64> = OnceLock::new();

/// The environment variable of the ceiling.
pub const ENV: &str = "MASKED_MAX_MEMORY";

/// Parses a byte count: digits with an optional K, M, G or T suffix (powers of 1024,
/// an optional trailing `B` or `iB`).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.chars().last()?.to_ascii_uppercase() {
        'K' => (&t[..t.len() - 1], 10),
        'M' => (&t[..t.len() - 1], 20),
        'G' => (&t[..t.len() - 1], 30),
        'T' => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = num.trim().parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// Physical memory from `/proc/meminfo` (`None` where it cannot be read).
fn physical() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Sets the ceiling from the flag, else the environment, else 80% of physical memory.
///
/// # Errors
/// An unparsable flag or environment value.
pub fn init(flag: Option<&str>) -> Result<(), IoError> {
    let bad = |from: &str, v: &str| {
        IoError::Setting(format!(
            "invalid {from} '{v}': expected a byte count such as 512M, 8G or 1000000"
        ))
    };
    let limit = match flag {
        Some(v) => parse_bytes(v).ok_or_else(|| bad("--max-memory", v))?,
        None => match std::env::var(ENV) {
            Ok(v) => parse_bytes(&v).ok_or_else(|| bad(ENV, &v))?,
            Err(_) => physical().map_or(u64::MAX, |p| p / 5 * 4),
        },
    };
    let _ = LIMIT.set(limit);
    Ok(())
}

/// The ceiling in force (no ceiling before [`init`]).
pub fn limit() -> u64 {
    LIMIT.get().copied().unwrap_or(u64::MAX)
}

/// A byte count for people: `4.0 GiB`, `512 B`.
pub fn human(bytes: u128) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Refuses `bytes` for `what` above the ceiling, before anything is allocated.
///
/// # Errors
/// [`IoError::TooLarge`] naming the size and the ceiling.
pub fn check(what: impl Into<String>, bytes: u128) -> Result<(), IoError> {
    let limit = limit();
    if bytes > u128::from(limit) {
        return Err(IoError::TooLarge {
            what: what.into(),
            size: human(bytes),
            limit: human(u128::from(limit)),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("1000"), Some(1000));
        assert_eq!(parse_bytes("512M"), Some(512 << 20));
        assert_eq!(parse_bytes("8G"), Some(8 << 30));
        assert_eq!(parse_bytes("2GiB"), Some(2 << 30));
        assert_eq!(parse_bytes("3kB"), Some(3 << 10));
        assert_eq!(parse_bytes("1T"), Some(1 << 40));
        assert_eq!(parse_bytes("x"), None);
        assert_eq!(parse_bytes(""), None);
        assert_eq!(parse_bytes("99999999999999999999G"), None);
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 30), "3.0 GiB");
    }
}
