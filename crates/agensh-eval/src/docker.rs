//! Where Docker exists: ProgramBench's own evaluator on its official images
//! (`agensh eval --docker`), and a task's cleanroom workspace and reference executable copied
//! out of its image (`agensh bench programbench --from-image`). agensh's sandbox is the
//! default everywhere; these are for checking it against the original, and for tasks whose
//! reference exists only in an image.

use std::path::{Path, PathBuf};

use crate::env::TestEnv;
use crate::evaluate::{EvalFile, Submission};
use crate::task::Task;

/// The image tag ProgramBench evaluates submissions on, and the cleanroom one.
pub const EVAL_TAG: &str = "task_cleanroom_v6";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Docker is not available here ({0}) — leave out the Docker option to use agensh's own sandbox, or start the Docker daemon")]
    Unavailable(String),
    #[error("{what} failed: {detail}")]
    Failed { what: String, detail: String },
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

async fn run(program: &Path, args: &[&str], env: &[(&str, &Path)]) -> Result<String, Error> {
    let mut c = tokio::process::Command::new(program);
    c.args(args).stdin(std::process::Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().await.map_err(|e| Error::Failed {
        what: format!("{} {}", program.display(), args.join(" ")),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(Error::Failed {
            what: format!("{} {}", program.display(), args.join(" ")),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether a Docker daemon answers; why not, otherwise.
pub async fn available() -> Result<(), Error> {
    run(
        Path::new("docker"),
        &["info", "--format", "{{.ServerVersion}}"],
        &[],
    )
    .await
    .map(|_| ())
    .map_err(|e| match e {
        Error::Failed { detail, .. } => Error::Unavailable(
            detail
                .lines()
                .last()
                .unwrap_or("docker info failed")
                .to_string(),
        ),
        other => other,
    })
}

/// The task's image, as ProgramBench names it (`__` written `_1776_`).
pub fn image(task: &Task, tag: &str) -> String {
    format!(
        "programbench/{}:{tag}",
        task.instance_id.replace("__", "_1776_")
    )
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// `programbench eval` of the installed package on `submission`, in `work`: its
/// `eval.json` as it wrote it.
pub async fn evaluate(
    env: &TestEnv,
    task: &Task,
    submission: &Submission,
    blobs: Option<&Path>,
    work: &Path,
) -> Result<EvalFile, Error> {
    available().await?;
    let run_dir = work.join("run");
    let dest = run_dir.join(&task.instance_id);
    std::fs::create_dir_all(&dest).map_err(io("create", &dest))?;
    let archive = dest.join("submission.tar.gz");
    // ProgramBench reads submission.tar.gz only: anything else is packed first.
    let packed = match submission {
        Submission::TarGz(p) => std::fs::copy(p, &archive)
            .map(|_| ())
            .map_err(io("copy", p)),
        Submission::Dir(d) => pack(d, &archive).await,
        Submission::Zip(z) => {
            let tmp = work.join("unzipped");
            std::fs::create_dir_all(&tmp).map_err(io("create", &tmp))?;
            run(
                Path::new("unzip"),
                &[
                    "-q",
                    "-o",
                    &z.to_string_lossy(),
                    "-d",
                    &tmp.to_string_lossy(),
                ],
                &[],
            )
            .await?;
            pack(&tmp, &archive).await
        }
    };
    packed?;
    let out = work.join("out");
    let mut vars: Vec<(&str, &Path)> = Vec::new();
    if let Some(b) = blobs {
        vars.push(("PROGRAMBENCH_BLOB_DIR", b));
    }
    run(
        &env.bin().join("programbench"),
        &[
            "eval",
            &run_dir.to_string_lossy(),
            "--output",
            &out.to_string_lossy(),
            "--force",
        ],
        &vars,
    )
    .await?;
    let file = out
        .join("run")
        .join(&task.instance_id)
        .join(format!("{}.eval.json", task.instance_id));
    let text = std::fs::read_to_string(&file).map_err(io("read", &file))?;
    serde_json::from_str(&text).map_err(|e| Error::Failed {
        what: format!("reading {}", file.display()),
        detail: e.to_string(),
    })
}

async fn pack(dir: &Path, archive: &Path) -> Result<(), Error> {
    run(
        Path::new("tar"),
        &[
            "-czf",
            &archive.to_string_lossy(),
            "-C",
            &dir.to_string_lossy(),
            ".",
        ],
        &[],
    )
    .await
    .map(|_| ())
}

/// The task's cleanroom `/workspace` copied out of its image into `into`, as the Agensh
/// release does; the reference executable is its `executable`, moved to `reference`.
pub async fn cleanroom(task: &Task, into: &Path, reference: &Path) -> Result<(), Error> {
    available().await?;
    let image = image(task, EVAL_TAG);
    let docker = Path::new("docker");
    let id = run(docker, &["create", &image], &[]).await?;
    let copied = run(
        docker,
        &["cp", &format!("{id}:/workspace/."), &into.to_string_lossy()],
        &[],
    )
    .await;
    let _ = run(docker, &["rm", "-f", &id], &[]).await;
    copied?;
    let exe = into.join("executable");
    if !exe.is_file() {
        return Err(Error::Failed {
            what: format!("copying /workspace out of {image}"),
            detail: "it holds no ./executable (the reference)".into(),
        });
    }
    if let Some(dir) = reference.parent() {
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    }
    std::fs::copy(&exe, reference).map_err(io("copy", &exe))?;
    std::fs::remove_file(&exe).map_err(io("remove", &exe))?;
    Ok(())
}
