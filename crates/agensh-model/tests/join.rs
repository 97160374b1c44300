//! Joining parts while hashing, and the cheap `installed()` check.

use std::path::{Path, PathBuf};

use agensh_model::{install, installed, join_parts, status, Error, Size, XLLAMACPP_VERSION};

/// sha256("hello world").
const HELLO_SHA: &str = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9";

fn parts(dir: &Path, chunks: &[&[u8]]) -> Vec<PathBuf> {
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let p = dir.join(format!("part{:02}.bin", i + 1));
            std::fs::write(&p, c).unwrap();
            p
        })
        .collect()
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    s.into()
}

fn leftovers(dest: &Path) -> Vec<PathBuf> {
    [
        dest.to_path_buf(),
        with_suffix(dest, ".partial"),
        with_suffix(dest, ".verified"),
    ]
    .into_iter()
    .filter(|p| p.exists())
    .collect()
}

#[test]
fn right_hash_is_kept_with_its_marker() {
    let t = tempfile::tempdir().unwrap();
    let ps = parts(t.path(), &[b"hello", b" ", b"world"]);
    let dest = t.path().join("out.gguf");
    let mut seen = Vec::new();
    join_parts(&ps, &dest, 11, HELLO_SHA, &mut |d| seen.push(d)).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), b"hello world");
    assert_eq!(
        std::fs::read_to_string(with_suffix(&dest, ".verified"))
            .unwrap()
            .trim(),
        HELLO_SHA
    );
    assert!(!with_suffix(&dest, ".partial").exists());
    assert_eq!(seen.last(), Some(&11));
}

#[test]
fn wrong_hash_is_rejected_and_leaves_nothing() {
    let t = tempfile::tempdir().unwrap();
    let ps = parts(t.path(), &[b"hello", b" ", b"world"]);
    let dest = t.path().join("out.gguf");
    // An older file and marker must not survive a failed join either.
    std::fs::write(&dest, b"old").unwrap();
    std::fs::write(with_suffix(&dest, ".verified"), HELLO_SHA).unwrap();
    let want = "0".repeat(64);
    let e = join_parts(&ps, &dest, 11, &want, &mut |_| {}).unwrap_err();
    assert!(matches!(e, Error::HashMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "model file sha256 mismatch: got {HELLO_SHA}, want {want}"
        )),
        "{msg}"
    );
    assert!(msg.contains("agensh model install --force"), "{msg}");
    assert!(msg.contains(&t.path().display().to_string()), "{msg}");
    assert_eq!(leftovers(&dest), Vec::<PathBuf>::new());
}

#[test]
fn truncated_part_is_rejected_by_size() {
    let t = tempfile::tempdir().unwrap();
    let ps = parts(t.path(), &[b"hello", b" ", b"worl"]);
    let dest = t.path().join("out.gguf");
    let e = join_parts(&ps, &dest, 11, HELLO_SHA, &mut |_| {}).unwrap_err();
    match &e {
        Error::SizeMismatch { got, want, .. } => assert_eq!((*got, *want), (10, 11)),
        other => panic!("want a size mismatch, got {other:?}"),
    }
    assert!(e.to_string().contains("10 bytes, want 11"), "{e}");
    assert_eq!(leftovers(&dest), Vec::<PathBuf>::new());
}

#[test]
fn missing_part_is_an_error_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let mut ps = parts(t.path(), &[b"hello"]);
    ps.push(t.path().join("nope.bin"));
    let dest = t.path().join("out.gguf");
    let e = join_parts(&ps, &dest, 5, HELLO_SHA, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("nope.bin"), "{e}");
    assert_eq!(leftovers(&dest), Vec::<PathBuf>::new());
}

#[test]
fn joins_more_than_one_buffer_and_reports_progress() {
    let t = tempfile::tempdir().unwrap();
    // 3 parts of 5 MiB: 15 MiB crosses the 8 MiB progress step and many 1 MiB buffers.
    let chunk: Vec<u8> = (0..5 << 20).map(|i: u32| (i % 251) as u8).collect();
    let ps = parts(t.path(), &[&chunk, &chunk, &chunk]);
    let dest = t.path().join("big.gguf");
    let e = join_parts(&ps, &dest, 15 << 20, &"a".repeat(64), &mut |_| {}).unwrap_err();
    let Error::HashMismatch { got, .. } = e else {
        panic!("{e:?}")
    };
    let mut seen = Vec::new();
    join_parts(&ps, &dest, 15 << 20, &got, &mut |d| seen.push(d)).unwrap();
    assert!(seen.len() >= 2, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert_eq!(*seen.last().unwrap(), 15 << 20);
    assert_eq!(std::fs::metadata(&dest).unwrap().len(), 15 << 20);
}

/// Lays out a complete-looking installation of `size` (a sparse model file).
fn fake_install(data: &Path, size: Size) -> PathBuf {
    let spec = size.spec();
    let models = data.join("models");
    std::fs::create_dir_all(models.join("venv/bin")).unwrap();
    std::fs::write(models.join("venv/bin/python"), "").unwrap();
    std::fs::write(models.join("venv/agensh-server.ok"), XLLAMACPP_VERSION).unwrap();
    let file = models.join(spec.file_name);
    std::fs::File::create(&file)
        .unwrap()
        .set_len(spec.bytes)
        .unwrap();
    std::fs::write(
        with_suffix(&file, ".verified"),
        format!("{}\n", spec.sha256),
    )
    .unwrap();
    file
}

#[test]
fn installed_needs_every_piece() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path();
    assert!(installed(data, Size::B05).is_none());
    let file = fake_install(data, Size::B05);
    let i = installed(data, Size::B05).expect("complete layout is installed");
    assert_eq!(i.model_file, file);
    assert_eq!(i.python, data.join("models/venv/bin/python"));
    assert!(installed(data, Size::B15).is_none(), "only 0.5b is there");

    // Wrong size.
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(Size::B05.spec().bytes - 1)
        .unwrap();
    assert!(installed(data, Size::B05).is_none());
    let s = status(data, Size::B05);
    assert_eq!(s.file_bytes, Some(Size::B05.spec().bytes - 1));
    assert!(!s.verified && s.server_package && !s.installed);
    fake_install(data, Size::B05);
    assert!(installed(data, Size::B05).is_some());

    // Marker with another hash, then no marker.
    let marker = with_suffix(&file, ".verified");
    std::fs::write(&marker, Size::B15.spec().sha256).unwrap();
    assert!(installed(data, Size::B05).is_none());
    std::fs::remove_file(&marker).unwrap();
    assert!(installed(data, Size::B05).is_none());
    fake_install(data, Size::B05);

    // Server package marker of another version, then no venv python.
    std::fs::write(data.join("models/venv/agensh-server.ok"), "0.0.1").unwrap();
    assert!(installed(data, Size::B05).is_none());
    fake_install(data, Size::B05);
    std::fs::remove_file(data.join("models/venv/bin/python")).unwrap();
    assert!(installed(data, Size::B05).is_none());
    assert!(!status(data, Size::B05).server_package);
}

#[tokio::test]
async fn install_returns_at_once_when_installed() {
    let t = tempfile::tempdir().unwrap();
    fake_install(t.path(), Size::B15);
    let mut steps = Vec::new();
    let i = install(t.path(), Size::B15, false, &mut |p| steps.push(p.step))
        .await
        .unwrap();
    assert_eq!(i.size, Size::B15);
    assert!(steps.is_empty(), "no work expected: {steps:?}");
}

/// Compiles only if install's future can be spawned on a multi-thread runtime.
#[allow(dead_code)]
fn install_future_is_send(d: &Path, on: &mut (dyn FnMut(agensh_model::InstallProgress) + Send)) {
    fn send<T: Send>(_: T) {}
    send(install(d, Size::B05, false, on));
}
