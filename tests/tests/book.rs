//! The book (`docs/src/**/*.md`) and the README held to what they show:
//!
//! - every fenced shell block says whether it runs: its info string is `sh run` or
//!   `sh not-run` (not `bash`, `console`, `shell`, nor a bare `sh`);
//! - the `sh run` blocks of a page run, in order, each with `bash -euo pipefail -c`,
//!   against a `sas-local` of the page's own (fresh data, free ports), in a temporary
//!   directory of the page's own, with `sas` first on `PATH` and `SAS_API` set, then
//!   the AWS CLI of the repository's `.venv` (which `./tests/run` installs), with
//!   any credentials and the region the Step Functions API page has a reader export; a
//!   `json state-machine FILE` block is written to `FILE` there as it comes;
//!   `localhost:8080` and `127.0.0.1:8080` in them stand for its API, `localhost:8081`
//!   and `127.0.0.1:8081` for its mock services;
//! - a `text expect` block follows an `sh run` block (prose may come between), and each
//!   of its non-empty lines is in that block's standard output;
//! - every `json workflow` block is a valid workflow definition (and every `json
//!   state-machine` block a state machine this engine runs), and each page of
//!   `docs/src/workflows/` but its index has one;
//! - the HTTP API's page has one `` ### `METHOD /path` `` heading per route of the
//!   OpenAPI document, and no other.
//!
//! `tests/run` builds the book with mdBook and checks its links; this test does not.
//! It runs the binaries cargo built beside it, which it does not build: run it so,
//! with one `CARGO_TARGET_DIR` for both commands,
//!
//! ```sh not-run
//! export CARGO_TARGET_DIR=/work/target-book
//! cargo build -p sas-local -p sas-cli && cargo nextest run -p sas-tests --test book
//! ```
//!
//! and with `SAS_BOOK_PAGES=getting-started` to run only the blocks of the pages whose
//! path contains that text.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sas_domain::workflow::Workflow;
use sas_tests::local::Local;

/// The longest an `sh run` block may take; past it, it is killed with its children.
const BLOCK_LIMIT: Duration = Duration::from_secs(120);

/// The info strings a shell block may have.
const RUN: &str = "sh run";
const NOT_RUN: &str = "sh not-run";
/// A state machine's definition, its file's name after it when the page's blocks use it.
const STATE_MACHINE: &str = "json state-machine";
const EXPECT: &str = "text expect";

/// Languages whose blocks are shell: each must say whether it runs.
const SHELLS: [&str; 6] = ["sh", "bash", "console", "shell", "zsh", "shell-session"];

/// A Markdown file, by its path from the repository's root.
struct Page {
    path: String,
    text: String,
}

/// A fenced block: the line of its opening fence (from 1), its info string, its content.
struct Block {
    line: usize,
    info: String,
    body: String,
}

/// A page's fenced blocks, and its lines outside them (numbered from 1).
struct Parsed<'a> {
    blocks: Vec<Block>,
    prose: Vec<(usize, &'a str)>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The README and every page of the book's sources, in the order of their paths.
fn pages() -> Vec<Page> {
    let mut paths = vec![PathBuf::from("README.md")];
    markdown_under(&root(), Path::new("docs/src"), &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|path| Page {
            text: std::fs::read_to_string(root().join(&path))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            path: path.to_string_lossy().into_owned(),
        })
        .collect()
}

fn markdown_under(root: &Path, directory: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(directory)) else {
        return;
    };
    for entry in entries {
        let path = directory.join(entry.expect("a directory entry").file_name());
        if root.join(&path).is_dir() {
            markdown_under(root, &path, found);
        } else if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
}

/// Splits a page into its fenced blocks (CommonMark's fences of three or more
/// backticks or tildes, indented or not, as in a list item) and the rest.
///
/// # Errors
/// A fence left open, naming its line.
fn parse(page: &Page) -> Result<Parsed<'_>, String> {
    let mut parsed = Parsed {
        blocks: Vec::new(),
        prose: Vec::new(),
    };
    let mut lines = page.text.lines().enumerate().map(|(i, l)| (i + 1, l));
    while let Some((line, text)) = lines.next() {
        let indent = text.len() - text.trim_start_matches(' ').len();
        let rest = &text[indent..];
        let Some(mark) = rest.chars().next().filter(|c| *c == '`' || *c == '~') else {
            parsed.prose.push((line, text));
            continue;
        };
        let length = rest.len() - rest.trim_start_matches(mark).len();
        let info = rest[length..].trim();
        if length < 3 || (mark == '`' && info.contains('`')) {
            parsed.prose.push((line, text));
            continue;
        }
        let mut body = String::new();
        let closed = lines.by_ref().any(|(_, content)| {
            let fence = content.trim();
            let closes = fence.len() >= length && fence.chars().all(|c| c == mark);
            if !closes {
                let strip = content.len() - content.trim_start_matches(' ').len();
                body.push_str(&content[strip.min(indent)..]);
                body.push('\n');
            }
            closes
        });
        if !closed {
            return Err(format!("{}:{line}: this fence is never closed", page.path));
        }
        parsed.blocks.push(Block {
            line,
            info: info.to_owned(),
            body,
        });
    }
    Ok(parsed)
}

/// What breaks the conventions of shell blocks in a page: a shell block that does not
/// say whether it runs, a `text expect` with no `sh run` block before it.
fn convention_errors(page: &Page) -> Vec<String> {
    let blocks = match parse(page) {
        Ok(parsed) => parsed.blocks,
        Err(error) => return vec![error],
    };
    let mut errors = Vec::new();
    let mut previous: Option<&str> = None;
    for block in &blocks {
        let language = block.info.split_whitespace().next().unwrap_or_default();
        if SHELLS.contains(&language) && block.info != RUN && block.info != NOT_RUN {
            errors.push(format!(
                "{}:{}: a shell block's info string is `{RUN}` or `{NOT_RUN}`, not `{}`",
                page.path, block.line, block.info
            ));
        }
        if block.info == EXPECT && previous != Some(RUN) {
            errors.push(format!(
                "{}:{}: a `{EXPECT}` block comes right after an `{RUN}` block, whose output it checks",
                page.path, block.line
            ));
        }
        previous = Some(block.info.as_str());
    }
    errors
}

/// The addresses of the examples made those of a running system, in one pass (a free
/// port the system was given may itself be 8080 or 8081).
fn localize(text: &str, api: &str, mock: &str) -> String {
    let rules = [
        ("localhost:8080", api),
        ("127.0.0.1:8080", api),
        ("localhost:8081", mock),
        ("127.0.0.1:8081", mock),
    ];
    let mut localized = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((at, (from, to))) = rules
        .iter()
        .filter_map(|rule| rest.find(rule.0).map(|at| (at, rule)))
        .min_by_key(|(at, _)| *at)
    {
        localized.push_str(&rest[..at]);
        localized.push_str(to);
        rest = &rest[at + from.len()..];
    }
    localized.push_str(rest);
    localized
}

/// `target/<profile>`, where cargo put the test and the binaries it runs.
///
/// # Panics
/// When `sas-local` or `sas` is not there.
fn binaries() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let directory = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    for name in ["sas-local", "sas"] {
        assert!(
            directory.join(name).is_file(),
            "no {name} in {}: build it first, with the tests' CARGO_TARGET_DIR: \
             `cargo build -p sas-local -p sas-cli`",
            directory.display()
        );
    }
    directory.to_owned()
}

/// What a block printed.
struct Output {
    stdout: String,
    stderr: String,
}

/// Runs a script with `bash -euo pipefail -c` in `directory`, `sas` first on `PATH`
/// and speaking to `local`; its output, or an error with that output.
fn run(script: &str, directory: &Path, binaries: &Path, local: &Local) -> Result<Output, String> {
    let stdout = tempfile::NamedTempFile::new().expect("a file for stdout");
    let stderr = tempfile::NamedTempFile::new().expect("a file for stderr");
    let path = std::env::join_paths(
        [binaries.to_owned(), root().join(".venv/bin")]
            .into_iter()
            .chain(
                std::env::var_os("PATH")
                    .iter()
                    .flat_map(std::env::split_paths),
            ),
    )
    .expect("a PATH");
    // A group of its own, so that a block past its time is killed with its children.
    let mut child = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(directory)
        .env("PATH", path)
        .env("SAS_API", format!("http://{}", local.api))
        .env("AWS_ACCESS_KEY_ID", "any")
        .env("AWS_SECRET_ACCESS_KEY", "any")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env_remove("SAS_TOKEN")
        .env_remove("SAS_SIGV4_REGION")
        .stdin(Stdio::null())
        .stdout(stdout.reopen().expect("stdout"))
        .stderr(stderr.reopen().expect("stderr"))
        .process_group(0)
        .spawn()
        .map_err(|e| format!("bash does not start: {e}"))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the block's status") {
            break Some(status);
        }
        if started.elapsed() > BLOCK_LIMIT {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |file: &tempfile::NamedTempFile| {
        String::from_utf8_lossy(&std::fs::read(file.path()).expect("the block's output"))
            .into_owned()
    };
    let output = Output {
        stdout: read(&stdout),
        stderr: read(&stderr),
    };
    match status {
        Some(status) if status.success() => Ok(output),
        Some(status) => Err(format!(
            "it ended with {status}; stdout:\n{}\nstderr:\n{}",
            output.stdout, output.stderr
        )),
        None => Err(format!(
            "it was still running after {BLOCK_LIMIT:?}; stdout:\n{}\nstderr:\n{}",
            output.stdout, output.stderr
        )),
    }
}

/// Runs a page's `sh run` blocks in order against a `sas-local` of its own, checking
/// each `text expect` block against the output of the block before it; stops at the
/// first failure, naming the page and the line.
fn run_page(page: &Page, binaries: &Path) -> Result<(), String> {
    let blocks = parse(page)?.blocks;
    if !blocks.iter().any(|b| b.info == RUN) {
        return Ok(());
    }
    let data = tempfile::tempdir().expect("a data directory");
    let directory = tempfile::tempdir().expect("a working directory");
    let local = Local::start(&binaries.join("sas-local"), data.path(), &[])
        .map_err(|e| format!("{}: {e}", page.path))?;
    let mut last: Option<(usize, Output)> = None;
    for block in &blocks {
        let text = localize(&block.body, &local.api, &local.mock);
        if let Some(file) = block.info.strip_prefix(STATE_MACHINE).map(str::trim)
            && !file.is_empty()
        {
            std::fs::write(directory.path().join(file), &block.body).expect("written");
        } else if block.info == RUN {
            let output = run(&text, directory.path(), binaries, &local).map_err(|e| {
                format!(
                    "{}:{}: this `{RUN}` block failed: {e}",
                    page.path, block.line
                )
            })?;
            last = Some((block.line, output));
        } else if block.info == EXPECT
            && let Some((line, output)) = &last
        {
            let missing: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !output.stdout.contains(l))
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "{}:{}: the output of the block at line {line} lacks {missing:?}; \
                     its stdout:\n{}\nits stderr:\n{}",
                    page.path, block.line, output.stdout, output.stderr
                ));
            }
        }
    }
    Ok(())
}

/// Runs the pages' blocks, each page beside the others; every page's failure.
fn run_pages(pages: &[Page]) -> Vec<String> {
    let binaries = binaries();
    std::thread::scope(|scope| {
        let running: Vec<_> = pages
            .iter()
            .map(|page| scope.spawn(|| run_page(page, &binaries)))
            .collect();
        running
            .into_iter()
            .filter_map(|page| page.join().expect("a page's thread").err())
            .collect()
    })
}

fn assert_none(errors: &[String]) {
    assert!(
        errors.is_empty(),
        "{} failure(s):\n\n{}",
        errors.len(),
        errors.join("\n\n")
    );
}

#[test]
fn every_shell_block_says_whether_it_runs_and_every_expectation_follows_a_run() {
    let errors: Vec<String> = pages().iter().flat_map(convention_errors).collect();
    assert_none(&errors);
}

#[test]
fn the_run_blocks_of_every_page_succeed_and_print_what_they_expect() {
    let only = std::env::var("SAS_BOOK_PAGES").unwrap_or_default();
    let pages: Vec<Page> = pages()
        .into_iter()
        .filter(|page| page.path.contains(&only))
        .collect();
    assert!(!pages.is_empty(), "no page's path contains {only:?}");
    assert_none(&run_pages(&pages));
}

#[test]
fn every_workflow_example_is_valid_and_every_workflow_page_has_one() {
    let mut errors = Vec::new();
    let mut workflow_pages = 0;
    for page in pages() {
        let blocks = match parse(&page) {
            Ok(parsed) => parsed.blocks,
            Err(error) => {
                errors.push(error);
                continue;
            }
        };
        let examples: Vec<&Block> = blocks
            .iter()
            .filter(|b| b.info == "json workflow" || b.info.starts_with(STATE_MACHINE))
            .collect();
        for block in &examples {
            // A state machine is told by its content (`StartAt`, `States`).
            let label = format!("{}:{}", page.path, block.line);
            if let Err(error) = Workflow::parse_stored("example", &label, &block.body) {
                errors.push(error.to_string());
            }
        }
        if page.path.starts_with("docs/src/workflows/") && !page.path.ends_with("/index.md") {
            workflow_pages += 1;
            if examples.is_empty() {
                errors.push(format!(
                    "{}: a page of the workflow language shows a `json workflow` (or `json state-machine`) block",
                    page.path
                ));
            }
        }
    }
    if workflow_pages == 0 {
        errors.push(
            "docs/src/workflows/: missing; its pages (but index.md) each show a `json workflow` block"
                .to_owned(),
        );
    }
    assert_none(&errors);
}

#[test]
fn the_api_page_has_one_heading_per_route_of_the_openapi_document() {
    let path = "docs/src/api/routes.md";
    let text = std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| {
        panic!("{path}: {e}; it has one ### `METHOD /path` heading per route of the API")
    });
    let page = Page {
        path: path.to_owned(),
        text,
    };
    let parsed = parse(&page).unwrap_or_else(|e| panic!("{e}"));
    let mut documented = BTreeSet::new();
    let mut twice = Vec::new();
    for (line, text) in parsed.prose {
        let Some(route) = text
            .strip_prefix("### `")
            .and_then(|r| r.strip_suffix('`'))
            .filter(|r| !r.contains('`'))
        else {
            continue;
        };
        if !documented.insert(route.to_owned()) {
            twice.push(format!("{path}:{line}: `{route}` again"));
        }
    }
    let document = sas_api::document();
    let routes: BTreeSet<String> = document["paths"]
        .as_object()
        .expect("the document's paths")
        .iter()
        .flat_map(|(path, item)| {
            let methods = item.as_object().expect("a path's operations").keys();
            methods.map(move |method| format!("{} {path}", method.to_uppercase()))
        })
        .collect();
    let undocumented: Vec<_> = routes.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&routes).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty() && twice.is_empty(),
        "{path}: routes with no heading: {undocumented:?}; headings of no route: {unknown:?}; {twice:?}"
    );
}

/// The checks themselves, on pages of their own: what they catch, and where they say
/// it is.
mod checker {
    use super::*;

    fn page(text: &str) -> Page {
        Page {
            path: "example.md".to_owned(),
            text: text.to_owned(),
        }
    }

    #[test]
    fn a_shell_block_that_does_not_say_whether_it_runs_is_named_by_its_line() {
        let example = page(
            "# Example\n\n```bash\nls\n```\n\n- a list item:\n\n  ```sh\n  ls\n  ```\n\n\
             ```text expect\nx\n```\n\n```sh not-run\nls\n```\n\n````sh run\nls\n````\n\n\
             ```text expect\nx\n```\n\n```\ndiagram\n```\n\n~~~console\n$ ls\n~~~\n",
        );
        assert_eq!(
            convention_errors(&example),
            [
                "example.md:3: a shell block's info string is `sh run` or `sh not-run`, not `bash`",
                "example.md:9: a shell block's info string is `sh run` or `sh not-run`, not `sh`",
                "example.md:13: a `text expect` block comes right after an `sh run` block, whose output it checks",
                "example.md:33: a shell block's info string is `sh run` or `sh not-run`, not `console`",
            ]
        );
        let parsed = parse(&example).expect("closed");
        assert_eq!(
            parsed.blocks[1].body, "ls\n",
            "the list item's indent is not the block's"
        );
        assert_eq!(
            convention_errors(&page("text\n\n```sh run\nls\n")),
            ["example.md:3: this fence is never closed"]
        );
    }

    #[test]
    fn the_examples_addresses_are_the_running_systems() {
        assert_eq!(
            localize(
                "curl localhost:8080/a http://127.0.0.1:8081/b 127.0.0.1:8080 localhost:8081",
                "127.0.0.1:8081",
                "127.0.0.1:9"
            ),
            "curl 127.0.0.1:8081/a http://127.0.0.1:9/b 127.0.0.1:8081 127.0.0.1:9"
        );
    }

    #[test]
    fn a_failing_block_and_a_missed_expectation_are_named_by_their_lines() {
        let examples = [
            page(
                "Its workflows, over HTTP and from `sas`:\n\n\
                 ```sh run\ncurl -sf localhost:8080/workflows\ncurl -sf localhost:8081/effects\n```\n\n\
                 ```text expect\n  drone-delivery\n\norder-processing\n```\n\n\
                 ```sh run\nsas workflows > workflows.txt\ncat workflows.txt\n```\n\n\
                 ```text expect\ncheck-account\nno such step\n```\n",
            ),
            page("```sh run\necho before\nfalse\necho after\n```\n"),
        ];
        let errors = run_pages(&examples);
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(
            errors[0].starts_with(
                "example.md:19: the output of the block at line 14 lacks [\"no such step\"]"
            ) && errors[0].contains("create-delivery"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].starts_with(
                "example.md:1: this `sh run` block failed: it ended with exit status: 1"
            ) && errors[1].contains("before")
                && !errors[1].contains("after"),
            "{}",
            errors[1]
        );
    }
}
