//! Hot swap in a model repository: the served repository (a working copy for a started server),
//! the new versions of the swapped model, written beside and renamed in, and the load's target,
//! the other model.

use crate::engine::Target;
use crate::queries::Queries;
use crate::scenario::RepositorySwap;
use crate::server;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file of one version inside its directory (the server's layout).
const BUNDLE_FILE: &str = "model.xmcb";

/// The repository a run serves and the swapped model's versions in it.
#[derive(Clone, Debug)]
pub struct Versions {
    /// The served repository.
    pub dir: PathBuf,
    /// The swapped model's name.
    pub swapped: String,
    /// The version the next write gets.
    pub next: u64,
    /// The bundles of every other model, bytes: their highest versions' (what serves under the
    /// server's default policy, the latest version).
    pub other_bytes: u64,
    /// How many models the repository serves, the swapped one included.
    pub models: usize,
}

/// A model's versions, `(version, bundle)`, lowest first.
type VersionList = Vec<(u64, PathBuf)>;

/// A model directory's versions: `(version, bundle)` for each positive-integer directory that
/// holds a bundle, lowest first.
fn versions_in(model_dir: &Path) -> anyhow::Result<VersionList> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(model_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("reading {}", model_dir.display())),
    };
    for e in entries {
        let e = e.with_context(|| format!("reading {}", model_dir.display()))?;
        let Some(v) = e.file_name().to_str().and_then(|n| {
            let v: u64 = n.parse().ok()?;
            (v > 0 && v.to_string() == n).then_some(v)
        }) else {
            continue;
        };
        let bundle = e.path().join(BUNDLE_FILE);
        if bundle.exists() {
            out.push((v, bundle));
        }
    }
    out.sort();
    Ok(out)
}

/// The models of repository `dir`: each model directory's name and versions.
fn models_in(dir: &Path) -> anyhow::Result<Vec<(String, VersionList)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e.with_context(|| format!("reading {}", dir.display()))?;
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if xmc::serve::repository::valid_name(&name) && e.path().is_dir() {
            let versions = versions_in(&e.path())?;
            out.push((name, versions));
        }
    }
    out.sort();
    Ok(out)
}

/// Makes the repository a run serves, with the swapped model's first version (a copy of
/// `first`) written in: for a started server, a fresh working copy of `r.dir` at `work` whose
/// version files are symlinks to the originals (and each model's `model.toml` copied); with
/// `r.url`, `r.dir` itself. The model that takes the load must have a version.
pub fn prepare(r: &RepositorySwap, work: &Path, first: &Path) -> anyhow::Result<Versions> {
    let dir = match r.url {
        Some(_) => r.dir.clone(),
        None => {
            if work.exists() {
                std::fs::remove_dir_all(work)
                    .with_context(|| format!("removing {}", work.display()))?;
            }
            for (name, versions) in models_in(&r.dir)? {
                let from = r.dir.join(&name);
                let settings = from.join("model.toml");
                std::fs::create_dir_all(work.join(&name))
                    .with_context(|| format!("creating {}", work.join(&name).display()))?;
                if settings.exists() {
                    std::fs::copy(&settings, work.join(&name).join("model.toml"))
                        .with_context(|| format!("copying {}", settings.display()))?;
                }
                for (v, bundle) in versions {
                    let to = work.join(&name).join(v.to_string());
                    std::fs::create_dir_all(&to)
                        .with_context(|| format!("creating {}", to.display()))?;
                    let target = std::fs::canonicalize(&bundle)
                        .with_context(|| format!("bundle {} not found", bundle.display()))?;
                    std::os::unix::fs::symlink(&target, to.join(BUNDLE_FILE))
                        .with_context(|| format!("linking {}", to.display()))?;
                }
            }
            std::path::absolute(work)?
        }
    };
    let models = models_in(&dir)?;
    let loaded = models.iter().find(|(n, _)| *n == r.loaded);
    anyhow::ensure!(
        loaded.is_some_and(|(_, v)| !v.is_empty()),
        "hot_swap.repository: model {:?} (the load's) has no version in {}",
        r.loaded,
        r.dir.display()
    );
    let mut other_bytes = 0;
    for (_, versions) in models.iter().filter(|(n, _)| *n != r.swapped) {
        if let Some((_, bundle)) = versions.last() {
            other_bytes += std::fs::metadata(bundle)
                .with_context(|| format!("reading {}", bundle.display()))?
                .len();
        }
    }
    let top = versions_in(&dir.join(&r.swapped))?
        .last()
        .map_or(0, |(v, _)| *v);
    let mut v = Versions {
        dir,
        swapped: r.swapped.clone(),
        next: top + 1,
        other_bytes,
        models: models.len() + usize::from(!models.iter().any(|(n, _)| *n == r.swapped)),
    };
    v.write_next(first)?;
    Ok(v)
}

impl Versions {
    /// Writes a copy of `bundle` as the swapped model's next version: into a hidden directory
    /// of the model's (which the server skips), synced, then renamed to the version's number,
    /// so the server sees the whole version or none of it. Returns the version.
    pub fn write_next(&mut self, bundle: &Path) -> anyhow::Result<u64> {
        let model_dir = self.dir.join(&self.swapped);
        let v = self.next;
        let staging = model_dir.join(format!(".loadtest-{v}"));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)
            .with_context(|| format!("creating {}", staging.display()))?;
        let file = staging.join(BUNDLE_FILE);
        std::fs::copy(bundle, &file)
            .with_context(|| format!("copying {} to {}", bundle.display(), file.display()))?;
        std::fs::File::open(&file)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("syncing {}", file.display()))?;
        let to = model_dir.join(v.to_string());
        std::fs::rename(&staging, &to)
            .with_context(|| format!("renaming {} to {}", staging.display(), to.display()))?;
        self.next += 1;
        Ok(v)
    }
}

/// The `/v1/models/{name}/predict` target of the server at `base`, sending the queries' bodies.
pub fn model_target(base: &str, name: &str, q: &Queries) -> anyhow::Result<Target> {
    Ok(Target {
        uri: server::uri(base, &format!("/v1/models/{name}/predict"))?,
        bodies: Arc::new(q.bodies.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(repo: &Path, name: &str, v: u64, bytes: &[u8]) {
        let d = repo.join(name).join(v.to_string());
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join(BUNDLE_FILE), bytes).expect("write");
    }

    #[test]
    fn a_working_copy_links_every_version_and_the_swapped_model_gets_new_ones() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let src = tmp.path().join("src");
        place(&src, "a", 3, b"a3");
        place(&src, "b", 1, b"b1");
        place(&src, "b", 2, b"b2--");
        std::fs::create_dir_all(src.join("b").join("not-a-version")).expect("mkdir");
        std::fs::write(src.join("README"), "not a model").expect("write");
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        std::fs::write(&one, b"first").expect("write");
        std::fs::write(&two, b"second!").expect("write");
        let r = RepositorySwap {
            dir: src.clone(),
            swapped: "a".into(),
            loaded: "b".into(),
            url: None,
            admin_token: None,
        };
        let work = tmp.path().join("work");
        let mut v = prepare(&r, &work, &one).expect("prepare");
        assert_eq!((v.models, v.other_bytes), (2, 4), "b's latest, 4 bytes");
        let link = work.join("b/1").join(BUNDLE_FILE);
        assert!(std::fs::symlink_metadata(&link).expect("link").is_symlink());
        assert_eq!(std::fs::read(&link).expect("read"), b"b1");
        // The first version follows the swapped model's highest one.
        assert_eq!(
            std::fs::read(work.join("a/4/model.xmcb")).expect("a4"),
            b"first"
        );
        assert_eq!(v.write_next(&two).expect("write"), 5);
        assert_eq!(
            std::fs::read(work.join("a/5/model.xmcb")).expect("a5"),
            b"second!"
        );
        let names: Vec<u64> = versions_in(&work.join("a"))
            .expect("versions")
            .into_iter()
            .map(|x| x.0)
            .collect();
        assert_eq!(names, vec![3, 4, 5], "no staging directory is left");
        // The original repository is left alone.
        assert!(!src.join("a/4").exists());
        // A swapped model that does not exist yet starts at version 1; the loaded one must.
        let fresh = RepositorySwap {
            swapped: "c".into(),
            ..r.clone()
        };
        let v = prepare(&fresh, &work, &one).expect("prepare");
        assert_eq!((v.next, v.models, v.other_bytes), (2, 3, 6));
        let missing = RepositorySwap {
            loaded: "nope".into(),
            ..r
        };
        let err = prepare(&missing, &work, &one).expect_err("no such model");
        assert!(format!("{err:#}").contains("\"nope\""), "{err:#}");
    }
}
