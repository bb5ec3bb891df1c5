//! The workspace's binaries, built in the running program's profile for the tests and
//! tools that start them.

use std::path::PathBuf;

/// The path of a function's binary (`sas-scheduler`, say), built by cargo for this
/// machine in the profile of the running program (a no-op when it is up to date).
///
/// In the dev profile it builds every binary of the workspace and its tests, as
/// `./tests/run` does before the tests, so that both resolve the same features and
/// share what they compile; once per process, since that build covers every name. In
/// another (the benchmarks' `server`, where each binary's link optimizes the whole
/// program and takes a minute or more) it builds the binary asked for, once each.
///
/// # Panics
/// When cargo cannot build it.
#[must_use]
pub fn function_binary(name: &str) -> PathBuf {
    static TARGET: std::sync::OnceLock<(PathBuf, String)> = std::sync::OnceLock::new();
    static EVERY_ONE: std::sync::Once = std::sync::Once::new();
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let (directory, profile) = TARGET.get_or_init(running_profile);
    if profile == "dev" {
        EVERY_ONE.call_once(|| build(profile, &["--bins", "--tests"]));
    } else {
        let mut built = BUILT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !built.iter().any(|b| b == name) {
            build(profile, &["--bin", name]);
            built.push(name.to_owned());
        }
    }
    directory.join(name)
}

/// The directory the running program's profile builds into, target/<profile>, and
/// that profile's name.
fn running_profile() -> (PathBuf, String) {
    // Tests run from target/<profile>/deps, tools from target/<profile>.
    let exe = std::env::current_exe().expect("the running program's path");
    let mut directory = exe.parent().expect("target/<profile>");
    if directory.ends_with("deps") {
        directory = directory.parent().expect("target/<profile>");
    }
    // Cargo builds its `dev` profile into target/debug, any other into its own name.
    let profile = match directory.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev",
        Some(profile) => profile,
    };
    (directory.to_path_buf(), profile.to_owned())
}

/// Builds `targets` of the workspace in `profile`.
fn build(profile: &str, targets: &[&str]) {
    let mut arguments = vec![
        "build",
        "--quiet",
        "--locked",
        "--profile",
        profile,
        "--workspace",
    ];
    arguments.extend_from_slice(targets);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = std::process::Command::new(&cargo)
        .args(&arguments)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
    assert!(built.success(), "cargo {} failed", arguments.join(" "));
}
