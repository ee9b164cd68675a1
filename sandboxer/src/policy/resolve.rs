//! How a policy is resolved: for which OS, whose home, whether paths resolve through this
//! machine's filesystem, the launcher list and the person's ways out. Every caller — the
//! sandboxer binary, the dispatcher's launches, bridges and profiles — builds its options here.

use std::path::{Component, Path, PathBuf};

use super::launchers::LauncherSet;
use crate::autorun::{self, RepositorySettings};
use crate::located::DataFileError as PolicyError;
use crate::paths::{canonicalize_existing_prefix, normalize};
use crate::target::Target;
use crate::ways_out::{self, Env, WaysOutError};

/// Options that cannot be built: a bad home, or a ways-out list that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Options(#[from] PolicyError),
    #[error(transparent)]
    WaysOut(#[from] WaysOutError),
}

impl From<ResolveError> for PolicyError {
    fn from(e: ResolveError) -> PolicyError {
        match e {
            ResolveError::Options(e) => e,
            ResolveError::WaysOut(e) => PolicyError {
                file: e.file,
                line: e.line,
                column: 0,
                field: e.field,
                message: e.message,
            },
        }
    }
}

/// How to resolve a policy: for which OS, whose home, and whether the paths exist here.
#[derive(Clone, Debug)]
pub struct ResolveOptions {
    pub target: Target,
    /// The variables the ways-out and autorun lists are resolved with, when not this
    /// process's (`sandboxer exec --lists-env`): each named one replaces the process's, an
    /// empty value unsets it.
    pub lists_env: Option<std::collections::BTreeMap<String, String>>,
    /// The person's home, absolute. `~` expands to it.
    pub home: PathBuf,
    /// Resolve symlinks through this machine's filesystem. True when rendering for this
    /// machine; false when rendering for another (a Mac's `/Users/NAME` from Linux), where
    /// only the target's fixed aliases (`/tmp` → `/private/tmp`) apply.
    pub resolve_symlinks: bool,
    /// The launcher list; the embedded one unless overridden.
    pub launchers: LauncherSet,
    /// The target's ways-out list, already expanded for this person (absolute paths, with
    /// why; [`ResolveOptions::add_ways_out`]): added as protected roots when the policy's
    /// `[linux] ways_out` (Linux) or `[macos] ways_out` (macOS) is true, the default. See
    /// `profiles/{linux,macos}/ways-out.toml`.
    pub ways_out: Vec<(PathBuf, String)>,
    /// The autorun list's entries for this person ([`ResolveOptions::add_autorun`]) and the
    /// programs found on `$PATH` ([`ResolveOptions::add_programs`]): added as guarded paths
    /// unless the policy says `[autorun] guard = false`. See `profiles/autorun.toml`.
    pub autorun: Vec<autorun::Entry>,
    /// The autorun list's `[programs]` names, once [`ResolveOptions::add_autorun`] read it.
    pub programs: Option<Vec<String>>,
    /// The autorun list's `[programs] path_folders_in_home`.
    pub path_folders_in_home: bool,
    /// Git repositories under the home, whose git folders are guarded too: Linux looks
    /// for them at load time (on this machine only); macOS guards every repository with one
    /// pattern ([`crate::policy::AutorunKnobs::repositories`]). None: not guarded.
    pub repositories: Option<RepositorySettings>,
}

impl ResolveOptions {
    /// Options for this machine's own OS for the person at `home`, with the ways-out list
    /// ([`ResolveOptions::for_target`]): what `sandboxer exec` enforces.
    pub fn for_host(home: &Path) -> Result<ResolveOptions, ResolveError> {
        let target = Target::host()
            .ok_or_else(|| option_error("target", "this OS has no sandbox backend"))?;
        ResolveOptions::for_target(target, home, None)
    }

    /// Options for `target` with an explicit home.
    pub fn new(
        target: Target,
        home: PathBuf,
        resolve_symlinks: bool,
    ) -> Result<ResolveOptions, PolicyError> {
        let home = check_home(&home, target, resolve_symlinks)?;
        Ok(ResolveOptions {
            lists_env: None,
            target,
            home,
            resolve_symlinks,
            launchers: LauncherSet::embedded(target),
            ways_out: Vec::new(),
            autorun: Vec::new(),
            programs: None,
            path_folders_in_home: false,
            repositories: None,
        })
    }

    /// Options for `target` for the person at `home`, with the target's embedded ways-out list
    /// ([`ResolveOptions::add_ways_out`]): symlinks resolved through this machine's
    /// filesystem when `target` is this machine's OS, else only the target's fixed aliases. `uid`
    /// (default: this process's) is the person's on a Mac whose profile is written elsewhere.
    pub fn for_target(
        target: Target,
        home: &Path,
        uid: Option<u32>,
    ) -> Result<ResolveOptions, ResolveError> {
        let mut opts = ResolveOptions::new(target, home.to_path_buf(), target.is_host())?;
        opts.add_ways_out(None, uid, None)?;
        opts.add_autorun(None, uid, None)?;
        Ok(opts)
    }

    /// Fills [`ResolveOptions::autorun`] with the autorun list's fixed entries
    /// (`profiles_dir/autorun.toml` when given and present, else the embedded one) for the
    /// person, as [`ResolveOptions::add_ways_out`] does for the ways out. Repositories are
    /// looked for only on this machine, for Linux (see [`ResolveOptions::repositories`]);
    /// programs only when asked ([`ResolveOptions::add_programs`]).
    pub fn add_autorun(
        &mut self,
        profiles_dir: Option<&Path>,
        uid: Option<u32>,
        user: Option<&str>,
    ) -> Result<(), PolicyError> {
        if self.target == Target::Linux && !self.target.is_host() {
            return Ok(());
        }
        let env = self.lists_env_for(uid, user);
        let list = autorun::list::load(self.target, profiles_dir, &env)?;
        self.autorun.retain(|e| e.origin.starts_with("(programs)"));
        self.autorun.extend(list.entries);
        self.programs = Some(list.programs);
        self.path_folders_in_home = list.path_folders_in_home;
        // Linux looks for repositories on this machine at load; macOS guards them all by one
        // pattern, wherever the profile is rendered.
        self.repositories = Some(list.repositories);
        Ok(())
    }

    /// Adds the programs run outside a sandbox later to the guarded paths: each name of the
    /// autorun list's `[programs]` and of `names` found on `path_var` (a `$PATH` value), and
    /// each file of `files` (the caller's own binaries). Only for this machine's OS.
    pub fn add_programs(
        &mut self,
        profiles_dir: Option<&Path>,
        names: &[String],
        path_var: Option<&std::ffi::OsStr>,
        files: &[PathBuf],
    ) -> Result<(), PolicyError> {
        if !self.target.is_host() {
            return Ok(());
        }
        let mut all = match &self.programs {
            Some(names) => names.clone(),
            None => {
                let env = Env::for_target(self.target, &self.home, None, None);
                let list = autorun::list::load(self.target, profiles_dir, &env)?;
                self.path_folders_in_home = list.path_folders_in_home;
                list.programs
            }
        };
        all.extend(names.iter().filter(|n| !n.contains('/')).cloned());
        let folders = match self.path_folders_in_home {
            true => autorun::programs::path_folders(path_var, &self.home),
            false => Vec::new(),
        };
        let targets = autorun::programs::path_folder_targets(&folders, &self.home);
        for e in folders
            .into_iter()
            .chain(targets)
            .chain(autorun::programs::entries(&all, path_var, files))
        {
            if !self.autorun.iter().any(|x| x.path == e.path) {
                self.autorun.push(e);
            }
        }
        Ok(())
    }

    /// Fills [`ResolveOptions::ways_out`] from the target's ways-out list
    /// (`profiles_dir/<target>/ways-out.toml` when given and present, else the embedded one) for
    /// the person: this process's user and environment when the target is this machine; for a
    /// Mac's profile written elsewhere, `uid` and `user` (defaults: this process's uid, the
    /// home's last component) and no environment — that machine's variables are unknown here,
    /// so the entries that need one are left out. A Linux plan is only ever enforced on the
    /// machine that makes it, so off-host Linux gets no list. The loader adds the entries as
    /// protected roots unless the policy turns them off.
    pub fn add_ways_out(
        &mut self,
        profiles_dir: Option<&Path>,
        uid: Option<u32>,
        user: Option<&str>,
    ) -> Result<(), WaysOutError> {
        if self.target == Target::Linux && !self.target.is_host() {
            return Ok(());
        }
        let env = self.lists_env_for(uid, user);
        self.ways_out = ways_out::load(self.target, profiles_dir, &env)?;
        Ok(())
    }

    /// Whose lists: [`Env::for_target`], with [`ResolveOptions::lists_env`] over the
    /// process's variables.
    fn lists_env_for(&self, uid: Option<u32>, user: Option<&str>) -> Env {
        let mut env = Env::for_target(self.target, &self.home, uid, user);
        for (name, value) in self.lists_env.iter().flatten() {
            env.vars.insert(name.clone(), value.clone());
        }
        env
    }
}

pub(super) fn option_error(field: &str, message: impl Into<String>) -> PolicyError {
    PolicyError {
        file: "(options)".into(),
        line: 0,
        column: 0,
        field: field.into(),
        message: message.into(),
    }
}

fn check_home(home: &Path, target: Target, resolve: bool) -> Result<PathBuf, PolicyError> {
    let bad = |m: &str| option_error("home", format!("{m}: {:?}", home));
    if home.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(bad("the home path contains NUL"));
    }
    if home.components().any(|c| c == Component::ParentDir) {
        return Err(bad("the home path contains '..'"));
    }
    let home = normalize(home).ok_or_else(|| bad("the home must be an absolute path"))?;
    if home == Path::new("/") {
        return Err(bad("the home cannot be '/'"));
    }
    if resolve {
        canonicalize_existing_prefix(&home).map_err(|e| bad(&format!("cannot resolve: {e}")))
    } else {
        Ok(target.apply_aliases(&home))
    }
}
