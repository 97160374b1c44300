//! Install's failures before any download, with stand-in pythons (AGENSH_PYTHON). One
//! test function: the variable is process-wide.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agensh_model::{install, Error, Size};

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

async fn try_install(data: &Path) -> Error {
    install(data, Size::B05, false, &mut |_| {})
        .await
        .unwrap_err()
}

#[tokio::test]
async fn install_failures_say_what_to_do() {
    let t = tempfile::tempdir().unwrap();
    let bin = t.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let data = t.path().join("data");

    // No such python.
    std::env::set_var("AGENSH_PYTHON", t.path().join("nope/python3"));
    let e = try_install(&data).await;
    assert!(matches!(e, Error::PythonNotFound { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("nope/python3 not found"), "{msg}");
    assert!(
        msg.contains("AGENSH_PYTHON") && msg.contains("python3-venv"),
        "{msg}"
    );

    // Too old.
    std::env::set_var("AGENSH_PYTHON", script(&bin, "old", "echo 3.8.10"));
    let e = try_install(&data).await;
    assert!(matches!(e, Error::PythonTooOld { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("is Python 3.8.10; the model server needs 3.10+"),
        "{e}"
    );

    // No venv module: the detail is quoted and nothing half-made is left.
    let no_venv = script(
        &bin,
        "novenv",
        r#"if [ "$1" = -c ]; then echo 3.11.4; exit 0; fi
echo "The virtual environment was not created successfully because ensurepip is not available." >&2
exit 1"#,
    );
    std::env::set_var("AGENSH_PYTHON", &no_venv);
    let e = try_install(&data).await;
    assert!(matches!(e, Error::Venv { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("ensurepip is not available"), "{msg}");
    assert!(msg.contains("apt-get install python3-venv"), "{msg}");
    assert!(!data.join("models/venv").exists());

    // A venv whose pip cannot reach the index: pip's last lines are quoted.
    let venv_pip = script(
        &bin,
        "venvpython",
        r#"echo "ERROR: Could not find a version that satisfies the requirement $6" >&2
exit 1"#,
    );
    let makes_venv = script(
        &bin,
        "makesvenv",
        &format!(
            r#"if [ "$1" = -c ]; then echo 3.12.1; exit 0; fi
mkdir -p "$3/bin" && cp '{}' "$3/bin/python""#,
            venv_pip.display()
        ),
    );
    std::env::set_var("AGENSH_PYTHON", &makes_venv);
    let e = try_install(&data).await;
    assert!(matches!(e, Error::Pip { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("pip could not install xllamacpp==2026.10.11549: (exit status: 1) ERROR: Could not find"),
        "{msg}"
    );
    assert!(msg.contains("pip config list"), "{msg}");

    // Two installs at once: the second is refused while the first holds the lock.
    std::env::set_var("AGENSH_PYTHON", script(&bin, "slow", "sleep 2; echo 3.8.0"));
    let d1 = data.clone();
    let first = tokio::spawn(async move { try_install(&d1).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let e = try_install(&data).await;
    assert!(matches!(e, Error::Busy { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("another `agensh model install` is running"),
        "{e}"
    );
    let e = first.await.unwrap();
    assert!(matches!(e, Error::PythonTooOld { .. }), "{e:?}");
}
