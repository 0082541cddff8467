//! The core's modules form layers: no module reaches (through `crate::` paths) a module
//! that reaches it back. A cycle here is what made the old core hard to split. The
//! workspace's crates too: no cycle, and the CSR and COO layouts are siblings over the
//! sparse lane engine.

use std::collections::{BTreeMap, BTreeSet};

/// The `.rs` files below `dir`, at any depth.
fn rs_files(dir: std::path::PathBuf) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out
}

/// The core's modules (file stems, in any room) and their files.
fn modules() -> BTreeMap<String, std::path::PathBuf> {
    let mut out = BTreeMap::new();
    for p in rs_files(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")) {
        let n = p.file_stem().unwrap().to_string_lossy().into_owned();
        if n != "lib" && n != "mod" {
            assert!(out.insert(n.clone(), p).is_none(), "two modules named {n}");
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let files = modules();
    let names: Vec<String> = files.keys().cloned().collect();
    assert!(names.len() >= 18, "found only {} modules", names.len());
    let mut g = BTreeMap::new();
    for n in &names {
        let text = std::fs::read_to_string(&files[n]).unwrap();
        // code only: the tests module may use anything
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let deps: BTreeSet<String> = names
            .iter()
            .filter(|m| *m != n)
            .filter(|m| {
                code.lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .any(|l| {
                        l.contains(&format!("crate::{m}::")) || l.contains(&format!("crate::{m};"))
                    })
            })
            .cloned()
            .collect();
        g.insert(n.clone(), deps);
    }
    g
}

#[test]
fn core_modules_have_no_import_cycle() {
    let g = graph();
    assert_acyclic(&g, "import cycle");
    // the layering the architecture doc describes: the layout contract and the registry
    // sit on top; no op or dtype module reaches them
    for low in [
        "element", "mask", "dims", "error", "fold", "ops", "stats", "lane", "math", "unary",
        "cast", "grad",
    ] {
        for high in ["registry", "layout"] {
            assert!(!g[low].contains(high), "{low} reaches up to {high}");
        }
    }
}

/// The normal (not dev) dependencies of each workspace crate on the others, read from
/// the crates' `Cargo.toml` files: crate directory name -> package names it depends on.
fn crate_graph() -> BTreeMap<String, BTreeSet<String>> {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut g = BTreeMap::new();
    for e in std::fs::read_dir(&crates).unwrap() {
        let dir = e.unwrap().path();
        let Ok(toml) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = toml
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .map(|l| l.trim_end_matches('"').to_string())
            .unwrap();
        let mut deps = BTreeSet::new();
        let mut section = String::new();
        for l in toml.lines() {
            let l = l.trim();
            if l.starts_with('[') {
                section = l.to_string();
            } else if section == "[dependencies]" {
                let dep = l.split(['.', ' ', '=']).next().unwrap_or("");
                if dep.starts_with("masked") || dep.starts_with("layout-") {
                    deps.insert(dep.to_string());
                }
            }
        }
        g.insert(name, deps);
    }
    g
}

#[test]
fn layouts_are_siblings_over_the_sparse_lane_engine() {
    let g = crate_graph();
    assert!(g.len() >= 10, "read only {} crates", g.len());
    let deps = |c: &str| g.get(c).unwrap_or_else(|| panic!("no crate {c}"));
    // CSR and COO drive the sparse lane engine; neither imports the other
    for (a, b) in [("layout-csr", "layout-coo"), ("layout-coo", "layout-csr")] {
        assert!(!deps(a).contains(b), "{a} depends on {b}");
        assert!(
            deps(a).contains("masked-sparse"),
            "{a} does not drive masked-sparse"
        );
    }
    // the lane engine and the dense layout sit on the core alone
    for low in ["masked-sparse", "layout-dense"] {
        let up: Vec<_> = deps(low)
            .iter()
            .filter(|d| !["masked-core", "masked-kernels"].contains(&d.as_str()))
            .collect();
        assert!(up.is_empty(), "{low} depends on {up:?}");
    }
    assert!(deps("masked-core").iter().all(|d| d == "masked-kernels"));
    // the files sit on the core alone: they compile beside the engine, not after it
    assert!(
        deps("masked-io").iter().all(|d| d == "masked-core"),
        "masked-io depends on {:?}",
        deps("masked-io")
    );
    // and the source agrees with the manifests (no path through a re-export)
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (dir, banned) in [
        ("layout-coo", "layout_csr"),
        ("layout-csr", "layout_coo"),
        ("sparse", "layout_"),
    ] {
        for p in rs_files(crates.join(dir).join("src")) {
            let text = std::fs::read_to_string(&p).unwrap();
            let hit = text
                .lines()
                .find(|l| !l.trim_start().starts_with("//") && l.contains(banned));
            assert!(hit.is_none(), "{}: {}", p.display(), hit.unwrap());
        }
    }
}

#[test]
fn the_crate_graph_has_no_cycle() {
    assert_acyclic(&crate_graph(), "crate cycle");
}

/// Panics naming the first cycle of `g` (a depth-first search with colours).
fn assert_acyclic(g: &BTreeMap<String, BTreeSet<String>>, what: &str) {
    fn visit(
        n: &str, g: &BTreeMap<String, BTreeSet<String>>, state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>, what: &str,
    ) {
        match state.get(n) {
            Some(2) => return,
            Some(1) => panic!("{what}: {} -> {n}", path.join(" -> ")),
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for d in g.get(n).into_iter().flatten() {
            visit(d, g, state, path, what);
        }
        path.pop();
        state.insert(n.to_string(), 2);
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        visit(n, g, &mut state, &mut Vec::new(), what);
    }
}
