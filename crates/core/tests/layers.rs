//! The core's modules form layers: no module reaches (through `crate::` paths) a module
//! that reaches it back. A cycle here is what made the old core hard to split.

use std::collections::{BTreeMap, BTreeSet};

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut names = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            names.push(p.file_stem().unwrap().to_string_lossy().into_owned());
        }
    }
    let mut g = BTreeMap::new();
    for n in &names {
        if n == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(dir.join(format!("{n}.rs"))).unwrap();
        // code only: the tests module may use anything
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let deps: BTreeSet<String> = names
            .iter()
            .filter(|m| *m != n && *m != "lib")
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
    // depth-first search with colours
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) {
        match state.get(n) {
            Some(2) => return,
            Some(1) => panic!("import cycle: {} -> {n}", path.join(" -> ")),
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for d in &g[n] {
            visit(d, g, state, path);
        }
        path.pop();
        state.insert(n.to_string(), 2);
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        visit(n, &g, &mut state, &mut Vec::new());
    }
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
