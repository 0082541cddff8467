//! Replays the fuzz corpora as ordinary tests: every committed input of
//! `fuzz/corpus/TARGET/` (the minimised corpus of a fuzzing run) and of
//! `fuzz/regressions/TARGET/` (inputs that crashed before their fix) goes through the
//! target's own body (`masked_tests::fuzz`), so CI keeps the findings without running
//! a fuzzer. A panic names the target and the file.
//!
//! A counting allocator also bounds the memory each input may take: the readers run
//! under a 64 MiB ceiling (`masked_tests::fuzz::CEILING`), so an input that makes one
//! allocate far more (a header length or a size trusted before it was checked: the
//! fuzzer's out-of-memory findings) fails here, as it would abort the CLI.

use masked_tests::fuzz::TARGETS;
use std::path::Path;

// the CLI's counting allocator (the one `masked bench` reports peaks with)
#[path = "../../crates/cli/src/alloc.rs"]
#[allow(dead_code)]
mod alloc;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// The most an input may allocate at once: four times the readers' 64 MiB ceiling
/// (the array, a copy in row-major order, the output) plus 64 bytes per input byte.
fn budget(input: usize) -> usize {
    4 * (64 << 20) + 64 * input
}

fn inputs(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn replay(target: &str, run: fn(&[u8]), dir: &Path) -> usize {
    let files = inputs(&dir.join(target));
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let peak = alloc::measure_peak(|| std::panic::catch_unwind(|| run(&data)).map_err(|_| ()));
        let peak =
            peak.unwrap_or_else(|()| panic!("fuzz target {target} panics on {}", f.display()));
        assert!(
            peak <= budget(data.len()),
            "fuzz target {target} allocates {peak} bytes on {} ({} bytes)",
            f.display(),
            data.len()
        );
    }
    files.len()
}

#[test]
fn every_corpus_input_is_handled() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    for &(target, run) in TARGETS {
        let n = replay(target, run, &root.join("corpus"));
        assert!(
            n > 0,
            "fuzz/corpus/{target} is empty: commit the minimised corpus"
        );
        replay(target, run, &root.join("regressions"));
    }
}
