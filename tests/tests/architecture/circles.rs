//! The modules of each crate import one another in one direction: a circle of
//! modules is a house whose rooms cannot be understood one at a time. The circles that
//! stay are named, each with why.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's root, and the directory of each library's and binary's root file
/// (`lib.rs`, `main.rs`): the directories whose entries are a crate's top-level
/// modules.
fn crate_roots() -> (PathBuf, BTreeSet<PathBuf>) {
    let metadata = super::workspace_metadata();
    let root = PathBuf::from(metadata["workspace_root"].as_str().expect("a root"));
    let roots = metadata["packages"]
        .as_array()
        .expect("the packages")
        .iter()
        .flat_map(|package| package["targets"].as_array().expect("targets").iter())
        .filter_map(|target| {
            let path = Path::new(target["src_path"].as_str()?);
            let name = path.file_name()?.to_str()?;
            (name == "lib.rs" || name == "main.rs").then(|| path.parent().map(Path::to_owned))?
        })
        .collect();
    (root, roots)
}

/// The import circles among a crate's top-level modules that stay, each with why.
/// Every other crate's modules import one another in one direction only.
const CIRCLES_THAT_STAY: [(&str, &[&str], &str); 1] = [(
    "shared/domain/src",
    &[
        "callback",
        "decide",
        "flow",
        "kinds",
        "machine",
        "messages",
        "services",
        "submission",
        "task",
        "workflow",
    ],
    "one home per kind of step: a kind's module holds its definition, which a workflow \
     holds, and its decisions, which read and write a task through the core's moves \
     (`decide`); the task, the messages it keeps (its notifications, its alert) and the \
     workflow language meet in it; a state machine's task keeps where it stands in the
     task's record, and moves through the same core (`machine`). The crate is the unit whose dependencies point one \
     way (the_domain_is_pure)",
)];

/// The top-level modules of the crate whose sources are in `src`, each with the
/// modules of the same crate it names (`crate::module`, or `super::module` from a
/// file at the top), comments and tests aside.
fn module_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("a source directory") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if path.is_dir() {
            files.insert(name, rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
            files.insert(name, vec![path]);
        }
    }
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(module, paths)| {
            let mut named = BTreeSet::new();
            for path in paths {
                let text = std::fs::read_to_string(path).expect("a source file");
                let at_top = path.parent() == Some(src);
                for line in text.lines().map(str::trim) {
                    if line.starts_with("//") {
                        continue;
                    }
                    if line == "mod tests {" {
                        break;
                    }
                    for prefix in ["crate::", "super::"] {
                        if prefix == "super::" && !at_top {
                            continue;
                        }
                        for (at, _) in line.match_indices(prefix) {
                            let rest = &line[at + prefix.len()..];
                            let end = rest
                                .find(|c: char| !c.is_alphanumeric() && c != '_')
                                .unwrap_or(rest.len());
                            let target = &rest[..end];
                            if target != module && modules.contains(target) {
                                named.insert(target.to_owned());
                            }
                        }
                    }
                }
            }
            (module.clone(), named)
        })
        .collect()
}

/// Every `.rs` file under `directory`.
fn rust_files(directory: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![directory.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            let entries = std::fs::read_dir(&path).expect("a directory");
            pending.extend(entries.map(|entry| entry.expect("an entry").path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

/// The circles (strongly connected sets of more than one) of `graph`, each sorted.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reaches = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut pending = vec![from.to_owned()];
        while let Some(module) = pending.pop() {
            for next in graph.get(&module).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    pending.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> = graph
        .keys()
        .map(|module| (module, reaches(module)))
        .collect();
    let mut found: Vec<Vec<String>> = Vec::new();
    for module in graph.keys() {
        let circle: Vec<String> = graph
            .keys()
            .filter(|other| reach[module].contains(*other) && reach[other].contains(module))
            .cloned()
            .collect();
        if circle.len() > 1 && !found.contains(&circle) {
            found.push(circle);
        }
    }
    found
}

#[test]
fn each_crates_modules_import_one_another_in_one_direction_but_where_said() {
    let (root, roots) = crate_roots();
    assert!(roots.len() > 15, "the crates' roots found: {roots:?}");
    let mut unexpected = Vec::new();
    for src in roots {
        let crate_source = src
            .strip_prefix(&root)
            .expect("under the workspace")
            .to_string_lossy()
            .replace('\\', "/");
        let graph = module_imports(&src);
        for circle in circles(&graph) {
            let stays = CIRCLES_THAT_STAY.iter().any(|(source, modules, _)| {
                *source == crate_source && *modules == circle.as_slice()
            });
            if !stays {
                unexpected.push(format!("{crate_source}: {}", circle.join(" <-> ")));
            }
        }
    }
    assert!(
        unexpected.is_empty(),
        "modules that import one another in a circle: {unexpected:#?}; break the circle \
         (move what both need below both), or name it in CIRCLES_THAT_STAY with why"
    );
}

#[test]
fn the_circle_check_sees_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", &["b"][..]),
        ("b", &["c"][..]),
        ("c", &["a"][..]),
        ("d", &["a"][..]),
    ]
    .into_iter()
    .map(|(module, names)| {
        (
            module.to_owned(),
            names.iter().map(|name| (*name).to_owned()).collect(),
        )
    })
    .collect();
    assert_eq!(circles(&graph), [["a", "b", "c"]]);
}
