//! The sources' shape: the domain, the actors and the API name no I/O, every source
//! file of the workspace holds one job (600 lines of code at most), and each is named
//! on the page that says where a change goes (`docs/src/internals/how-it-is-built.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The Rust sources of the domain, the actors and the API, with their text.
fn sources_of_the_domain_actors_and_api() -> Vec<(PathBuf, String)> {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    let mut paths: Vec<_> = ["domain", "core", "api"]
        .iter()
        .map(|package| shared.join(package).join("src"))
        .collect();
    let mut sources = Vec::new();
    while let Some(path) = paths.pop() {
        if path.is_dir() {
            let entries = std::fs::read_dir(&path).expect("a directory");
            paths.extend(entries.map(|entry| entry.expect("an entry").path()));
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            let text = std::fs::read_to_string(&path).expect("a source file");
            sources.push((path, text));
        }
    }
    assert!(
        sources.len() > 30,
        "the walk found {} source files",
        sources.len()
    );
    sources
}

#[test]
fn the_domain_actors_and_apis_sources_use_no_io_of_the_standard_library_or_tokio() {
    let mut found = Vec::new();
    for (path, text) in sources_of_the_domain_actors_and_api() {
        for io in [
            "std::fs",
            "std::net",
            "std::process",
            "tokio::fs",
            "tokio::net",
        ] {
            if text.contains(io) {
                found.push(format!("{}: {io}", path.display()));
            }
        }
    }
    assert!(found.is_empty(), "I/O in the core: {found:?}");
}

/// The most lines of code (neither blank nor comments) a source file of the workspace
/// holds: a file that grows past it has taken on a second job, which wants a room of
/// its own.
const MAX_LINES_OF_CODE: usize = 600;

/// The lines of `text` that are code: neither blank nor a comment's alone.
fn lines_of_code(text: &str) -> usize {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("//"))
        .count()
}

#[test]
fn each_source_file_of_the_workspace_holds_one_job() {
    let workspace = Workspace::read();
    let mut too_long: Vec<_> = workspace
        .sources
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(workspace.root.join(path)).expect("a source file");
            let code = lines_of_code(&text);
            (code > MAX_LINES_OF_CODE).then_some((code, path))
        })
        .collect();
    too_long.sort_by(|a, b| b.cmp(a));
    let list: Vec<_> = too_long
        .iter()
        .map(|(code, path)| format!("  {path}: {code} lines of code"))
        .collect();
    assert!(
        too_long.is_empty(),
        "{} source files hold over {MAX_LINES_OF_CODE} lines of code (neither blank nor \
         comments): split each by job into files of their own (a module's directory, as \
         shared/domain/src/decide/ is), and name the new files in \
         docs/src/internals/how-it-is-built.md:\n{}",
        too_long.len(),
        list.join("\n")
    );
}

/// The workspace as these checks see it: its root, and every Rust source file of its
/// packages (each package's directory walked whole: `src/`, `tests/` with its
/// subdirectories, `benches/`, `examples/`, a `build.rs`; no `target/`,
/// `node_modules/` or hidden directory), relative to the root, with `/` between names.
struct Workspace {
    root: PathBuf,
    sources: BTreeSet<String>,
}

impl Workspace {
    fn read() -> Self {
        let metadata = super::workspace_metadata();
        let root = PathBuf::from(
            metadata["workspace_root"]
                .as_str()
                .expect("the workspace's root"),
        );
        let packages = metadata["packages"].as_array().expect("the packages");
        let mut directories: Vec<PathBuf> = packages
            .iter()
            .map(|package| {
                let manifest = package["manifest_path"].as_str().expect("a manifest");
                Path::new(manifest)
                    .parent()
                    .expect("its directory")
                    .to_owned()
            })
            .collect();
        let mut sources = BTreeSet::new();
        while let Some(path) = directories.pop() {
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("");
            if path.is_dir() {
                if name.starts_with('.') || name == "target" || name == "node_modules" {
                    continue;
                }
                let entries = std::fs::read_dir(&path).expect("a directory");
                directories.extend(entries.map(|entry| entry.expect("an entry").path()));
            } else if name.ends_with(".rs") {
                sources.insert(relative(&root, &path));
            }
        }
        assert!(
            sources.len() > 100,
            "the walk of {} packages found {} source files",
            packages.len(),
            sources.len()
        );
        Workspace { root, sources }
    }
}

/// `path` relative to `root`, with `/` between its names.
fn relative(root: &Path, path: &Path) -> String {
    let path = path.strip_prefix(root).expect("a path in the workspace");
    let names: Vec<_> = path
        .components()
        .map(|name| name.as_os_str().to_string_lossy())
        .collect();
    names.join("/")
}

/// The page that says what each crate holds and where a change goes.
const HOW_IT_IS_BUILT: &str = "docs/src/internals/how-it-is-built.md";

/// Every source file of the workspace is named on [`HOW_IT_IS_BUILT`], and every
/// file the page names exists: so that a reader finds any file's job there, and a
/// file moved or split is seen to move on the page too.
///
/// The page's tree is each ```` ```text ```` block under its `## The crates` heading
/// whose first line names a file or a directory (the dependency graph after it names
/// neither, and is passed over). In a tree:
///
/// - a line is a name, then two spaces or more, then what it holds; a line that
///   starts at or past the column where the description of the line before it
///   starts goes on with that description;
/// - a name ending in `/` is a directory, any other a file; a name may hold a path
///   (`src/task.rs`, `src/workflow/`);
/// - a line indented deeper than a line above it names what is in that line's
///   directories (and a line naming files only has nothing under it);
/// - a line may name several, separated by `, `: the first as above, each after it
///   beside the first (`src/ids.rs, time.rs` is `src/ids.rs` and `src/time.rs`;
///   `submission/, scheduler/` two directories, each holding what is indented under
///   the line);
/// - `*.rs` names every `.rs` file directly in its directory, and only in a
///   package's `tests/` directory (beside its `Cargo.toml`), whose files each are a
///   test binary of their own (`tests/*.rs`); a file anywhere else is named on its
///   own, since each holds a job the page says.
///
/// A directory named is not a file named: its files are named under it.
#[test]
fn every_source_file_is_named_in_how_it_is_built() {
    let workspace = Workspace::read();
    let page = std::fs::read_to_string(workspace.root.join(HOW_IT_IS_BUILT)).expect("the page");
    let tree = Tree::parse(&page, &workspace.root);
    let named = |source: &String| {
        tree.files.contains_key(source)
            || source
                .rsplit_once('/')
                .is_some_and(|(directory, _)| tree.all_of.contains_key(&format!("{directory}/")))
    };
    let unnamed: Vec<_> = workspace
        .sources
        .iter()
        .filter(|source| !named(source))
        .map(|source| format!("  {source}"))
        .collect();
    let mut absent = Vec::new();
    for (file, line) in &tree.files {
        if !workspace.root.join(file).is_file() {
            let hint = if workspace.root.join(file).is_dir() {
                format!(
                    " (a directory: write `{}/`)",
                    file.rsplit('/').next().unwrap_or(file)
                )
            } else {
                String::new()
            };
            absent.push((*line, format!("{file}{hint}")));
        }
    }
    for (directory, line) in &tree.directories {
        if !workspace.root.join(directory).is_dir() {
            absent.push((*line, directory.clone()));
        }
    }
    for (directory, line) in &tree.all_of {
        let any = workspace.sources.iter().any(|source| {
            source
                .strip_prefix(directory.as_str())
                .is_some_and(|name| !name.contains('/'))
        });
        if !any {
            absent.push((*line, format!("{directory}*.rs (no such file)")));
        }
    }
    absent.sort();
    let absent: Vec<_> = absent
        .iter()
        .map(|(line, name)| format!("  line {line}: {name}"))
        .collect();
    let mut report = Vec::new();
    if !tree.errors.is_empty() {
        report.push(format!(
            "{} lines of the tree cannot be read (the test's doc comment has its format):\n{}",
            tree.errors.len(),
            tree.errors.join("\n")
        ));
    }
    if !unnamed.is_empty() {
        report.push(format!(
            "{} source files are not named: name each under its directory, with its job \
             (`src/a.rs, b.rs  what they hold` names two files of one directory):\n{}",
            unnamed.len(),
            unnamed.join("\n")
        ));
    }
    if !absent.is_empty() {
        report.push(format!(
            "{} names do not exist (moved, renamed or deleted: change the line, or remove \
             it):\n{}",
            absent.len(),
            absent.join("\n")
        ));
    }
    assert!(
        report.is_empty(),
        "{HOW_IT_IS_BUILT}'s tree under \"## The crates\" must name every source file of \
         the workspace, and only what exists.\n{}",
        report.join("\n")
    );
}

/// What the tree of [`HOW_IT_IS_BUILT`] names, each with the page's line that names it:
/// files, directories, and the directories whose `.rs` files it names all at once
/// (`*.rs`); each relative to the repository's root, a directory ending in `/`.
#[derive(Default)]
struct Tree {
    files: BTreeMap<String, usize>,
    directories: BTreeMap<String, usize>,
    all_of: BTreeMap<String, usize>,
    errors: Vec<String>,
}

impl Tree {
    fn parse(page: &str, root: &Path) -> Self {
        let mut tree = Tree::default();
        let mut in_section = false;
        let mut block: Option<Vec<(usize, &str)>> = None;
        for (index, line) in page.lines().enumerate() {
            let number = index + 1;
            if let Some(lines) = block.as_mut() {
                if line.trim_start().starts_with("```") {
                    let lines = block.take().expect("a block");
                    tree.read_block(&lines, root);
                } else {
                    lines.push((number, line));
                }
            } else if line.starts_with("## ") {
                in_section = line.trim() == "## The crates";
            } else if in_section && line.trim() == "```text" {
                block = Some(Vec::new());
            }
        }
        if tree.files.is_empty() && tree.directories.is_empty() {
            tree.errors.push(format!(
                "  no tree found: a ```text block under \"## The crates\" of {HOW_IT_IS_BUILT}"
            ));
        }
        tree
    }

    /// Reads one block, if it is a tree: its first line names a file or a directory.
    fn read_block(&mut self, lines: &[(usize, &str)], root: &Path) {
        let is_name = |name: &str| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-/*".contains(c))
        };
        let first = lines.iter().find(|(_, line)| !line.trim().is_empty());
        if !first.is_some_and(|(_, line)| {
            let (names, _) = split_entry(line.trim_start());
            names.split(", ").all(is_name)
        }) {
            return;
        }
        // The lines above the current one that name directories: their indentation,
        // and the directories each names (none for a line of files).
        let mut parents: Vec<(usize, Vec<String>)> = Vec::new();
        let mut description_column = None;
        for &(number, line) in lines {
            let text = line.trim_start();
            if text.is_empty() {
                continue;
            }
            let indent = line.len() - text.len();
            if description_column.is_some_and(|column| indent >= column) {
                continue;
            }
            let (names, description) = split_entry(text);
            description_column = description.map(|offset| indent + offset);
            let names: Vec<&str> = names.split(", ").collect();
            if let Some(name) = names.iter().find(|name| !is_name(name)) {
                self.errors.push(format!(
                    "  line {number}: `{name}` is not a file's or a directory's name \
                     (`name  what it holds`, names separated by `, `)"
                ));
                description_column = None;
                continue;
            }
            while parents.last().is_some_and(|(above, _)| *above >= indent) {
                parents.pop();
            }
            let within = match parents.last() {
                None => vec![String::new()],
                Some((_, directories)) if directories.is_empty() => {
                    self.errors.push(format!(
                        "  line {number}: indented under a line that names no directory"
                    ));
                    continue;
                }
                Some((_, directories)) => directories.clone(),
            };
            // The names after the first are beside it: in the directory its path names.
            let beside = names[0]
                .trim_end_matches('/')
                .rsplit_once('/')
                .map_or(String::new(), |(directory, _)| format!("{directory}/"));
            let mut directories = Vec::new();
            for parent in &within {
                for (position, name) in names.iter().enumerate() {
                    let path = if position == 0 {
                        format!("{parent}{name}")
                    } else {
                        format!("{parent}{beside}{name}")
                    };
                    if let Some(directory) = path.strip_suffix("*.rs") {
                        let manifest = directory.strip_suffix("tests/").and_then(|package| {
                            std::fs::read_to_string(root.join(package).join("Cargo.toml")).ok()
                        });
                        if manifest.is_some_and(|manifest| manifest.contains("[package]")) {
                            self.all_of.insert(directory.to_owned(), number);
                        } else {
                            self.errors.push(format!(
                                "  line {number}: `{path}`: `*.rs` names the files of a \
                                 package's tests/ directory only (each a test binary); \
                                 name each file of another directory on its own"
                            ));
                        }
                    } else if path.ends_with('/') {
                        self.directories.insert(path.clone(), number);
                        directories.push(path);
                    } else {
                        self.files.insert(path, number);
                    }
                }
            }
            parents.push((indent, directories));
        }
    }
}

/// A tree's line without its indentation, split into its names and the offset of its
/// description (after two spaces or more), if it has one.
fn split_entry(text: &str) -> (&str, Option<usize>) {
    match text.find("  ") {
        None => (text.trim_end(), None),
        Some(end) => {
            let rest = &text[end..];
            let offset = end + rest.len() - rest.trim_start().len();
            (&text[..end], (offset < text.len()).then_some(offset))
        }
    }
}
