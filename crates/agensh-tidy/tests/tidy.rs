//! The code keeps the promises ARCHITECTURE.md makes (see the crate's README).

use std::path::{Path, PathBuf};
use std::process::Command;

use agensh_tidy::{check, CodeMap, Workspace};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/agensh-tidy is two levels below the workspace root")
        .to_path_buf()
}

#[test]
fn the_workspace_keeps_the_promises_of_its_code_map() {
    let root = root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .current_dir(&root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ws = Workspace::from_metadata(&String::from_utf8_lossy(&out.stdout)).expect("metadata");
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let map = CodeMap::parse(&text).expect("the code map");
    let violations = check(&ws, &map, &|dir| root.join(dir).join("README.md").is_file());
    let list: Vec<String> = violations.iter().map(|v| format!("- {v}")).collect();
    assert!(
        violations.is_empty(),
        "ARCHITECTURE.md and the code disagree:\n{}",
        list.join("\n")
    );
}
