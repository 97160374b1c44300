//! Keeping the hub's repository packed.
//!
//! Seeding from a directory and every merge or small push write *loose* objects, one file
//! each; `gc.auto` is off in the hub's repository, so nothing packs them. Every checkout
//! that shares the objects then reads each blob through two failed and two successful
//! file opens (its own objects directory first, then the hub's) instead of from one
//! mapped pack: on a repository of 3,000 files a checkout makes about 40% more system
//! calls. Packing after the seed and whenever loose objects pile up keeps checkouts and
//! merges on packs (docs/PERFORMANCE.md, "Git workspace").

use agensh_domain::{Error, Result};

use crate::Workspace;

/// Loose objects above which [`Workspace::maintain`] packs them.
pub const LOOSE_LIMIT: u64 = 256;
/// Packs above which [`Workspace::maintain`] joins them into one.
pub const PACK_LIMIT: u64 = 16;

/// What `git count-objects -v` says of a repository.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObjectCounts {
    /// Loose objects.
    pub loose: u64,
    /// Objects in packs.
    pub in_pack: u64,
    /// Packs.
    pub packs: u64,
}

/// What [`Workspace::maintain`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Maintained {
    /// Nothing needed doing.
    Nothing,
    /// Every object went into one pack.
    Repacked,
}

impl Workspace {
    /// Counts the repository's objects.
    pub async fn object_counts(&self) -> Result<ObjectCounts> {
        let out = self.git().run(["count-objects", "-v"]).await?;
        let field = |name: &str| -> Result<u64> {
            out.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .ok_or_else(|| {
                    Error::internal(format!("git count-objects -v gave no {name} line: {out}"))
                })
        };
        Ok(ObjectCounts {
            loose: field("count:")?,
            in_pack: field("in-pack:")?,
            packs: field("packs:")?,
        })
    }

    /// Puts every object into one pack, reachable or not (an object a merge wrote for a
    /// pull request that did not land may still be wanted), and removes the loose copies.
    /// Safe while merges, pushes and fetches run: git removes a loose object only once it
    /// is in the new pack, and readers look again in the packs when an object moves.
    pub async fn pack_all(&self) -> Result<()> {
        self.git()
            .run([
                "repack",
                "-a",
                "-d",
                "-q",
                "--keep-unreachable",
                "--no-write-bitmap-index",
            ])
            .await
            .map(drop)
    }

    /// Packs everything ([`Workspace::pack_all`]) when there are more than [`LOOSE_LIMIT`]
    /// loose objects or more than [`PACK_LIMIT`] packs.
    pub async fn maintain(&self) -> Result<Maintained> {
        let counts = self.object_counts().await?;
        if counts.loose > LOOSE_LIMIT || counts.packs > PACK_LIMIT {
            self.pack_all().await?;
            return Ok(Maintained::Repacked);
        }
        Ok(Maintained::Nothing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::{self, Source};

    async fn seeded(tmp: &std::path::Path) -> Workspace {
        let src = tmp.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("a.txt"), "a").unwrap();
        seed::create(&tmp.join("ws.git"), Source::Dir(&src), "g")
            .await
            .unwrap()
    }

    /// Writes `n` new blobs as loose objects; their ids.
    async fn loose_blobs(
        ws: &Workspace,
        tmp: &std::path::Path,
        tag: &str,
        n: usize,
    ) -> Vec<String> {
        let dir = tmp.join(format!("blobs-{tag}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut paths = String::new();
        for i in 0..n {
            let p = dir.join(format!("{i}"));
            std::fs::write(&p, format!("{tag} {i}\n")).unwrap();
            paths.push_str(&format!("{}\n", p.display()));
        }
        let out = ws
            .git()
            .output_with_input(
                ["hash-object", "-w", "--stdin-paths"],
                Some(paths.as_bytes()),
            )
            .await
            .unwrap();
        assert!(out.success(), "{}", out.stderr);
        out.stdout.lines().map(str::to_string).collect()
    }

    async fn assert_fsck_clean(ws: &Workspace) {
        let out = ws.git().output(["fsck", "--no-progress"]).await.unwrap();
        assert!(out.success(), "{}", out.stderr);
    }

    #[tokio::test]
    async fn a_seeded_repository_is_packed() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = seeded(tmp.path()).await;
        let c = ws.object_counts().await.unwrap();
        assert_eq!(c.loose, 0, "{c:?}");
        assert_eq!(c.packs, 1, "{c:?}");
        assert!(c.in_pack >= 3, "blob, tree and commit: {c:?}");
    }

    #[tokio::test]
    async fn loose_objects_past_the_limit_are_packed_and_stay_readable() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = seeded(tmp.path()).await;
        let few = loose_blobs(&ws, tmp.path(), "few", 10).await;
        assert_eq!(ws.maintain().await.unwrap(), Maintained::Nothing);
        assert_eq!(ws.object_counts().await.unwrap().loose, 10);

        let many = loose_blobs(&ws, tmp.path(), "many", LOOSE_LIMIT as usize).await;
        assert_eq!(ws.maintain().await.unwrap(), Maintained::Repacked);
        let c = ws.object_counts().await.unwrap();
        assert_eq!((c.loose, c.packs), (0, 1), "{c:?}");
        for id in few.iter().chain(&many) {
            ws.git().run(["cat-file", "-e", id]).await.unwrap();
        }
        assert_fsck_clean(&ws).await;
    }

    #[tokio::test]
    async fn many_packs_are_joined_into_one() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = seeded(tmp.path()).await;
        let pack_base = ws.git_dir().join("objects/pack/pack");
        for i in 0..PACK_LIMIT {
            let id = loose_blobs(&ws, tmp.path(), &i.to_string(), 1).await;
            let out = ws
                .git()
                .output_with_input(
                    [
                        std::ffi::OsStr::new("pack-objects"),
                        std::ffi::OsStr::new("-q"),
                        pack_base.as_os_str(),
                    ],
                    Some(format!("{}\n", id[0]).as_bytes()),
                )
                .await
                .unwrap();
            assert!(out.success(), "{}", out.stderr);
        }
        assert_eq!(ws.object_counts().await.unwrap().packs, PACK_LIMIT + 1);
        assert_eq!(ws.maintain().await.unwrap(), Maintained::Repacked);
        let c = ws.object_counts().await.unwrap();
        assert_eq!((c.packs, c.loose), (1, 0), "{c:?}");
        assert_fsck_clean(&ws).await;
    }
}
