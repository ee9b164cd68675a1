//! Arguments and loading shared by every subcommand.

use crate::ExitCode;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use std::ffi::OsStr;

use sandboxer::policy::{LauncherSet, ResolveOptions, default_policy};
use sandboxer::{Policy, Target};

/// Which policy, for which target and home.
#[derive(Args, Clone, Debug)]
pub struct PolicyArgs {
    /// Policy file (TOML). Default: the embedded default policy.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Target OS: macos or linux. Default: this machine's.
    #[arg(long, value_name = "OS", value_parser = parse_target)]
    pub target: Option<Target>,
    /// The person's home that `~` expands to (e.g. a Mac's /Users/NAME when rendering on
    /// Linux). Default: $HOME.
    #[arg(long, value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// Folder overriding the embedded profiles (seatbelt/, linux/, macos/, launchers.toml).
    #[arg(long, value_name = "DIR")]
    pub profiles_dir: Option<PathBuf>,
    /// The person's uid, for the ways-out list (e.g. a Mac's `tmux-UID` folder when rendering
    /// on another machine). Default: this process's.
    #[arg(long, value_name = "N")]
    pub uid: Option<u32>,
    /// The person's user name, for the ways-out list (screen's `S-NAME`). Default: this
    /// process's on this machine; the last component of --home for another.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// A variable the ways-out and autorun lists are resolved with (XDG_CONFIG_HOME,
    /// SSH_AUTH_SOCK, …), instead of this process's: the person's, when the command runs with
    /// another environment (the dispatcher passes every one; an empty value is unset).
    /// Repeatable.
    #[arg(long = "lists-env", value_name = "NAME=VALUE")]
    pub lists_env: Vec<String>,
}

pub fn parse_target(s: &str) -> Result<Target, String> {
    Target::parse(s).ok_or_else(|| format!("unknown target {s:?}; expected macos or linux"))
}

impl PolicyArgs {
    pub fn target(&self) -> Result<Target> {
        match self.target.or_else(Target::host) {
            Some(t) => Ok(t),
            None => bail!("this OS has no sandbox backend; pass --target macos or --target linux"),
        }
    }

    /// Resolve options for these arguments: symlinks are resolved through this machine's
    /// filesystem only when the target is this machine's OS.
    pub fn resolve_options(&self) -> Result<ResolveOptions> {
        let target = self.target()?;
        let home = match &self.home {
            Some(h) => h.clone(),
            None => std::env::var_os("HOME")
                .map(PathBuf::from)
                .context("HOME is not set; pass --home")?,
        };
        let mut opts = ResolveOptions::new(target, home, target.is_host())?;
        for pair in &self.lists_env {
            let (name, value) = pair
                .split_once('=')
                .with_context(|| format!("--lists-env {pair:?}: expected NAME=VALUE"))?;
            if !sandboxer::ways_out::ENV_VARS.contains(&name) {
                bail!(
                    "--lists-env {name}: not a variable the lists read (expected one of {})",
                    sandboxer::ways_out::ENV_VARS.join(", ")
                );
            }
            opts.lists_env
                .get_or_insert_with(Default::default)
                .insert(name.to_string(), value.to_string());
        }
        if let Some(dir) = &self.profiles_dir {
            let file = dir.join("launchers.toml");
            if file.exists() {
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?;
                opts.launchers = LauncherSet::from_toml(&text, target)
                    .with_context(|| format!("{}: invalid launcher list", file.display()))?;
            }
        }
        Ok(opts)
    }

    /// Fills `opts.ways_out` from the target's ways-out list (`--profiles-dir`/<target>/
    /// ways-out.toml or the embedded one) for the person, `--uid` and `--user` for a Mac's
    /// profile rendered elsewhere ([`ResolveOptions::add_ways_out`]).
    pub fn fill_ways_out(&self, opts: &mut ResolveOptions) -> Result<()> {
        opts.add_ways_out(self.profiles_dir.as_deref(), self.uid, self.user.as_deref())
            .context("loading the ways-out list")
    }

    /// Fills `opts.autorun` from the autorun list (`--profiles-dir`/autorun.toml or the
    /// embedded one) and, for this machine, the programs run outside a sandbox later: the
    /// list's names and `commands` found on `$PATH` (a command given as a path is guarded at
    /// that path), and this `sandboxer` binary ([`ResolveOptions::add_programs`]).
    pub fn fill_autorun(&self, opts: &mut ResolveOptions, commands: &[&OsStr]) -> Result<()> {
        opts.add_autorun(self.profiles_dir.as_deref(), self.uid, self.user.as_deref())
            .context("loading the autorun list")?;
        let has_slash = |c: &OsStr| c.as_encoded_bytes().contains(&b'/');
        let names: Vec<String> = commands
            .iter()
            .filter(|c| !has_slash(c))
            .filter_map(|c| c.to_str().map(str::to_string))
            .collect();
        let mut files: Vec<PathBuf> = commands
            .iter()
            .filter(|c| has_slash(c))
            .filter_map(|c| std::path::absolute(c).ok())
            .collect();
        files.extend(std::env::current_exe().ok());
        opts.add_programs(
            self.profiles_dir.as_deref(),
            &names,
            std::env::var_os("PATH").as_deref(),
            &files,
        )
        .context("loading the autorun list")
    }

    pub fn load_with(&self, opts: &ResolveOptions) -> Result<Policy> {
        let policy = match &self.policy {
            Some(path) => Policy::load(path, opts)?,
            None => Policy::from_toml(
                default_policy(opts.target),
                "(embedded default policy)",
                opts,
            )?,
        };
        Ok(policy)
    }

    /// Loads the policy as every command sees it: resolved for the target, and on this Linux
    /// machine with the ways-out list added (unless the policy turns it off).
    pub fn load(&self) -> Result<Policy> {
        let mut opts = self.resolve_options()?;
        self.fill_ways_out(&mut opts)?;
        self.fill_autorun(&mut opts, &[])?;
        self.load_with(&opts)
    }
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Print the resolved policy as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn check(args: CheckArgs) -> Result<ExitCode> {
    let policy = args.policy.load()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&policy)?);
    } else {
        println!(
            "ok: {} policy for {} (home {}): {} protected, {} grants, {} refused, launchers {}",
            match policy.base {
                sandboxer::Base::Open => "open",
                sandboxer::Base::Closed => "closed",
            },
            policy.target,
            policy.home.display(),
            policy.protected.len(),
            policy.grants.len(),
            policy.refuse.len(),
            if policy.launchers.block {
                "blocked"
            } else {
                "allowed"
            },
        );
    }
    Ok(ExitCode::SUCCESS)
}
