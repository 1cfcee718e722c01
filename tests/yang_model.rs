//! The YANG model in `yang/` must lint clean, and `docs/yang-tree.txt` must
//! be the current output of `scripts/yang-tree.sh`.
//!
//! Both checks need pyang (from `scripts/setup.sh`, or the `PYANG`
//! environment variable) and fail, rather than skip, when it is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Panics with setup instructions unless a pyang is available: either the
/// one named by `$PYANG` or the project's `.venv/bin/pyang`.
fn require_pyang() {
    if let Some(p) = std::env::var_os("PYANG").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        // A bare command name is looked up on PATH by the scripts.
        let is_bare_name = p.components().count() == 1;
        assert!(
            is_bare_name || root().join(&p).is_file(),
            "PYANG={} does not exist; unset it and run scripts/setup.sh, \
             or point PYANG at a pyang executable",
            p.display()
        );
        return;
    }
    let venv = root().join(".venv/bin/pyang");
    assert!(
        venv.is_file(),
        "{} is missing: run scripts/setup.sh to create the virtualenv with \
         pyang and the IETF YANG modules (or set PYANG to a pyang executable)",
        venv.display()
    );
}

fn run_script(name: &str) -> Output {
    let script = root().join("scripts").join(name);
    Command::new("bash")
        .arg(&script)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()))
}

fn describe(output: &Output) -> String {
    format!(
        "exit status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn yang_modules_lint_clean() {
    require_pyang();
    let output = run_script("lint-yang.sh");
    assert!(output.status.success(), "scripts/lint-yang.sh reported errors or warnings\n{}", describe(&output));
}

#[test]
fn yang_tree_doc_is_current() {
    require_pyang();
    let output = run_script("yang-tree.sh");
    assert!(output.status.success(), "scripts/yang-tree.sh failed\n{}", describe(&output));

    let doc_path = root().join("docs/yang-tree.txt");
    let committed = std::fs::read(&doc_path).unwrap_or_else(|e| panic!("cannot read {}: {e}", doc_path.display()));
    if output.stdout == committed {
        return;
    }

    let generated = String::from_utf8_lossy(&output.stdout);
    let committed = String::from_utf8_lossy(&committed);
    let first_diff = generated
        .lines()
        .zip(committed.lines())
        .position(|(g, c)| g != c)
        .unwrap_or_else(|| generated.lines().count().min(committed.lines().count()));
    panic!(
        "docs/yang-tree.txt is out of date with the YANG modules \
         (first difference at line {}:\n  generated: {:?}\n  committed: {:?}).\n\
         Regenerate it with:\n  scripts/yang-tree.sh > docs/yang-tree.txt",
        first_diff + 1,
        generated.lines().nth(first_diff).unwrap_or("<end of output>"),
        committed.lines().nth(first_diff).unwrap_or("<end of file>"),
    );
}
