//! The sweep's plumbing: the grid, the same data in every layout, the crossover
//! arithmetic, the report's fields and well-formed SVGs. Never a timed assertion.

use super::data::{Logical, Structure};
use super::report::{crossing, crossovers, interpolate, Cross, PeerRecord, Record};
use super::*;
use masked::{MaskedOps, SparseArray};

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs().max(1e-300)
}

#[test]
fn grid_is_log_spaced_with_both_ends() {
    assert_eq!(
        parse_grid("1e-5:1:1").unwrap(),
        vec![1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]
    );
    let g = parse_grid("1e-3:1e-1:2").unwrap();
    assert_eq!(g.len(), 5);
    assert_eq!((g[0], g[2], g[4]), (1e-3, 1e-2, 1e-1));
    assert!(close(g[1], 3.16e-3, 1e-9), "{}", g[1]);
    let full = parse_grid("1e-5:1:4").unwrap();
    assert_eq!(full.len(), 21);
    assert!(full.contains(&1e-3) && full.contains(&1e-2));
    assert_eq!(parse_grid("0.5, 0.01,0.5").unwrap(), vec![0.01, 0.5]);
    for bad in ["0:1:1", "1e-3:1e-4:1", "1e-3:1:0", "2", "a,b", "1e-3:1"] {
        assert!(parse_grid(bad).is_err(), "{bad} accepted");
    }
}

#[test]
fn tick_labels_are_plain_numbers() {
    let t = super::plot::tick;
    assert_eq!(
        [
            t(200.0),
            t(90.0),
            t(10.0),
            t(1.0),
            t(0.1),
            t(0.03),
            t(1e-5),
            t(1234.0)
        ],
        ["200", "90", "10", "1", "0.1", "0.03", "0.00001", "1234"]
    );
}

#[test]
fn series_and_sizes_parse() {
    let s = Series::parse("mask:lengths").unwrap();
    assert_eq!((s.vary, s.structure), (Vary::Mask, Structure::Lengths));
    assert_eq!(s.name(), "mask-lengths");
    assert!(Series::parse("mask:causal").is_err());
    assert!(Series::parse("mask:pattern").is_err());
    assert!(Series::parse("stored").is_err());
    assert!(Series::parse("both:random").is_err());
    assert_eq!(shape_for_size(1 << 30, 4), [16384, 16384]);
    assert_eq!(scaling_counts(2), vec![1, 2]);
    assert_eq!(scaling_counts(6), vec![1, 2, 4, 6]);
    assert_eq!(scaling_counts(1), vec![1]);
}

/// The valid outputs of a dense reduction as (flat index, value).
fn dense_valid(r: &masked::MaskedArrayD<f64>) -> Vec<(usize, f64)> {
    r.values()
        .iter()
        .zip(r.mask_vec())
        .enumerate()
        .filter(|(_, (_, m))| *m)
        .map(|(i, (&v, _))| (i, v))
        .collect()
}

fn sparse_valid(r: &SparseArray<f64>) -> Vec<(usize, f64)> {
    r.indices()
        .iter()
        .copied()
        .zip(r.values().iter().copied())
        .collect()
}

#[test]
fn every_layout_holds_the_same_data_and_computes_the_same() {
    for structure in Structure::ALL {
        for &(d, p) in &[(0.05, 0.3), (0.6, 0.8), (0.0, 0.5)] {
            let l = Logical::<f64>::generate([37, 29], d, structure, p, 11);
            let b = Built::new(&l, true, &[]).unwrap();
            let dense = b.dense().unwrap();
            let csr = b.csr().unwrap();
            let coo = b.coo();
            // the data: every layout densified equals the dense layout, mask included
            let from_csr = masked::csr_to_dense(&csr).unwrap();
            let from_coo = MaskedArrayD::try_from(coo).unwrap();
            for other in [&from_csr, &from_coo] {
                assert_eq!(other.values(), dense.values(), "{structure:?} d {d}");
                assert_eq!(other.mask_vec(), dense.mask_vec(), "{structure:?} d {d}");
            }
            assert_eq!(
                dense.values().iter().filter(|v| **v != 0.0).count(),
                l.stored.len()
            );
            assert_eq!(
                dense.mask_vec().iter().filter(|v| **v).count(),
                l.valid().len()
            );
            // the work: the ops of the sweep give the same valid outputs
            for dim in [0usize, 1] {
                // sums: the same outputs, equal up to the association order (dense adds
                // the zeros in vector blocks, the sparse layouts only the entries)
                let ds = dense_valid(&dense.sum(dim, false).unwrap());
                for sp in [csr.sum(dim, false).unwrap(), coo.sum(dim, false).unwrap()] {
                    let sv = sparse_valid(&sp);
                    assert_eq!(sv.len(), ds.len(), "{structure:?} d {d} dim {dim}");
                    for ((i, a), (j, b)) in sv.iter().zip(&ds) {
                        assert_eq!(i, j);
                        assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{a} vs {b}");
                    }
                }
                let da = dense_valid(&dense.amax(dim, false).unwrap());
                assert_eq!(sparse_valid(&csr.amax(dim, false).unwrap()), da);
                assert_eq!(sparse_valid(&coo.amax(dim, false).unwrap()), da);
                let dm = dense_valid(&dense.median(dim, false, masked::MedianMode::Avg).unwrap());
                assert_eq!(
                    sparse_valid(&csr.median(dim, false, masked::MedianMode::Avg).unwrap()),
                    dm
                );
            }
        }
    }
}

#[test]
fn ideal_bytes_follow_the_byte_model() {
    let mut l = Logical::<f32>::generate([10, 20], 0.0, Structure::Pattern, 0.0, 1);
    l.stored = vec![0, 5, 199];
    l.values = vec![1.0, 2.0, 3.0];
    assert_eq!(l.ideal_bytes("dense"), 200.0 * 4.0 + 25.0);
    assert_eq!(l.ideal_bytes("csr"), 3.0 * 8.0 + 11.0 * 8.0);
    assert_eq!(l.ideal_bytes("coo"), 3.0 * 20.0);
    l.mask = Some(vec![1, 2]);
    assert_eq!(
        l.ideal_bytes("csr"),
        3.0 * 8.0 + 11.0 * 8.0 + 2.0 * 4.0 + 11.0 * 8.0
    );
    assert_eq!(l.ideal_bytes("coo"), 3.0 * 20.0 + 2.0 * 16.0);
}

#[test]
fn crossings_interpolate_between_grid_points() {
    let xs = [1e-3, 1e-2, 1e-1];
    // times: ratio 0.5 at 1e-2 and 2 at 1e-1 cross halfway in log: 10^-1.5
    match crossing(&xs, &[0.1, 0.5, 2.0], true).unwrap() {
        Cross::At(x) => assert!(close(x, 10f64.powf(-1.5), 1e-12), "{x}"),
        c => panic!("{c:?}"),
    }
    // bytes, affine in x: 0.6 at 0.01 and 1.4 at 0.1 reach 1 at 0.055
    match crossing(&xs, &[0.2, 0.6, 1.4], false).unwrap() {
        Cross::At(x) => assert!(close(x, 0.055, 1e-12), "{x}"),
        c => panic!("{c:?}"),
    }
    assert_eq!(
        crossing(&xs, &[0.1, 0.2, 0.3], true),
        Some(Cross::Above(1e-1))
    );
    assert_eq!(
        crossing(&xs, &[1.5, 2.0, 3.0], true),
        Some(Cross::Below(1e-3))
    );
    assert_eq!(crossing(&[], &[], true), None);
    assert_eq!(interpolate(&xs, &[1.0, 10.0, 100.0], 1e-2), Some(10.0));
    assert!(close(
        interpolate(&xs, &[1.0, 10.0, 100.0], 10f64.powf(-2.5)).unwrap(),
        10f64.powf(0.5),
        1e-12
    ));
    assert_eq!(interpolate(&xs, &[1.0, 10.0, 100.0], 1e-4), None);
    assert_eq!(interpolate(&xs, &[1.0, 10.0, 100.0], 1.0), None);
}

/// Records of a made-up sweep: dense takes 10 ms everywhere; CSR 100 ms x density, so it
/// crosses dense at 0.1; its bytes are 8 / 4.125 of dense's per unit density.
fn synthetic() -> (Vec<Record>, Meta) {
    let grid = [1e-3, 1e-2, 1e-1, 1.0];
    let mut rs = Vec::new();
    for &x in &grid {
        for (layout, secs, bytes) in [
            ("dense", 0.010, 4.125e6),
            ("csr", 0.100 * x, 8e6 * x + 8e3),
            ("coo", 0.300 * x, 20e6 * x),
        ] {
            rs.push(Record {
                series: "stored-pattern".into(),
                vary: Vary::Stored,
                structure: "pattern".into(),
                x,
                density: x,
                mask_density: x,
                op: "sum".into(),
                layout: layout.into(),
                shape: vec![1000, 1000],
                nnz: (x * 1e6) as usize,
                mask_nnz: (x * 1e6) as usize,
                threads: 2,
                seconds: secs,
                gbps: bytes / secs / 1e9,
                ideal_bytes: bytes,
                peak_bytes: 0,
            });
        }
        for (from, to) in CONVERSIONS {
            let mut r = rs[rs.len() - 1].clone();
            r.op = "convert".into();
            r.layout = format!("{from}->{to}");
            r.seconds = 0.05;
            rs.push(r);
        }
    }
    let meta = Meta {
        shape: vec![1000, 1000],
        dtype: "f32".into(),
        dim: 1,
        ops: vec!["sum".into()],
        layouts: vec!["dense".into(), "csr".into(), "coo".into()],
        series: vec!["stored-pattern".into()],
        grid: grid.to_vec(),
        threads: vec![2],
        density: 0.01,
        mask_density: 0.5,
        machine: "test".into(),
        seed: 0,
    };
    (rs, meta)
}

#[test]
fn crossovers_are_measured_and_modelled() {
    let (rs, _) = synthetic();
    let cs = crossovers(&rs, 2);
    assert_eq!(cs.len(), 2);
    let csr = &cs[0];
    assert_eq!((csr.op.as_str(), csr.layout.as_str()), ("sum", "csr"));
    assert!(matches!(csr.measured, Cross::At(x) if close(x, 0.1, 1e-9)));
    // model: 8e6 x + 8e3 = 4.125e6 between 0.1 (0.196) and 1 (1.94): x = 0.5146...
    let expect = 0.1 + 0.9 * (1.0 - (0.808e6 / 4.125e6)) / ((8.008e6 - 0.808e6) / 4.125e6);
    assert!(
        matches!(csr.model, Cross::At(x) if close(x, expect, 1e-9)),
        "{:?}",
        csr.model
    );
    // dense / CSR time: 10 ms / 0.1 ms at 1e-3, 10 / 1 at 1e-2
    assert!(close(csr.speedup[0].unwrap(), 100.0, 1e-9));
    assert!(close(csr.speedup[1].unwrap(), 10.0, 1e-9));
    let coo = &cs[1];
    assert!(matches!(coo.measured, Cross::At(x) if close(x, 1.0 / 30.0, 1e-9)));
    // 1 thread is not in the records: nothing
    assert!(crossovers(&rs, 1).is_empty());
}

#[test]
fn report_has_its_fields_and_well_formed_svgs() {
    let dir = tempfile::tempdir().unwrap();
    let (rs, meta) = synthetic();
    let lines: Vec<String> = rs
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    std::fs::write(dir.path().join("results.jsonl"), lines.join("\n")).unwrap();
    let peers = [1e-3, 1e-2, 1e-1, 1.0].map(|x| PeerRecord {
        series: "stored-pattern".into(),
        x,
        op: "sum".into(),
        peer: "torch.masked".into(),
        layout: "csr".into(),
        seconds: 0.5 * x + 1e-3,
        threads: 2,
    });
    let plines: Vec<String> = peers
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    std::fs::write(dir.path().join("peers.jsonl"), plines.join("\n")).unwrap();
    let text = report::write_all(dir.path(), Some(&meta)).unwrap();
    assert!(text.contains("stored-pattern"), "{text}");
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    for needle in [
        "## Crossovers",
        "| sum | stored-pattern | csr | 1.00e-1 |",
        "![sum along dim 1",
        "(sum-stored-pattern.svg)",
        "(convert-stored-pattern.svg)",
        "## Conversions",
        "## Peers",
        "| stored-pattern | sum | 1e-3 | torch.masked | csr | 1.500 | 0.100 | 15.0 |",
    ] {
        assert!(md.contains(needle), "report lacks {needle:?}:\n{md}");
    }
    // dense -> CSR at 1e-2 costs 50 ms and saves 9 ms a sum: pays off after 6 sums
    assert!(md.contains("| 1e-2 |"), "{md}");
    for svg in ["sum-stored-pattern.svg", "convert-stored-pattern.svg"] {
        let text = std::fs::read_to_string(dir.path().join(svg)).unwrap();
        let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{svg}: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text().map(str::to_string))
            .collect();
        let all = texts.join("|");
        assert!(all.contains("density"), "{svg}: no x label in {all}");
        if svg.starts_with("sum") {
            for needle in [
                "time per op, ms",
                "masked dense",
                "masked csr",
                "torch.masked csr",
                "CSR crossover 1.0e-1",
            ] {
                assert!(all.contains(needle), "{svg}: no {needle:?} in {all}");
            }
        } else {
            assert!(all.contains("dense → csr"), "{svg}: {all}");
        }
    }
}

#[test]
fn attention_section_names_the_crossover_of_dense_and_sparse() {
    use super::report::{attention_section, AttnRecord};
    let rec = |density: f64, dense: f64, sparse: f64| AttnRecord {
        n: 1024,
        d: 64,
        density,
        nnz: (density * 1024.0 * 1024.0) as usize,
        threads: 2,
        dense_seconds: dense,
        sparse_seconds: sparse,
        dense_peak: 1,
        sparse_peak: 1,
        max_diff: 0.0,
    };
    // sparse/dense time 0.1 at p = 0.01, 10 at p = 1: log-log through 1 at p = 0.1
    let md = attention_section(&[rec(0.01, 1.0, 0.1), rec(1.0, 1.0, 10.0)]);
    assert!(
        md.contains("| 1e-2 | 10485 | 1.00000 | 0.10000 | 10.00 |"),
        "{md}"
    );
    assert!(md.contains("faster below p ≈ 1.00e-1"), "{md}");
    assert!(attention_section(&[rec(0.5, 1.0, 0.5)]).contains("over the whole grid"));
    assert!(attention_section(&[]).is_empty());
}
