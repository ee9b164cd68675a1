//! Landlock filesystem rights, by name: what plans grant and what the enforcer maps to the
//! kernel's bits.

use serde::{Deserialize, Serialize};

/// Landlock filesystem rights, by name; the enforcer maps them to the kernel's bits. A plan
/// only lists rights its ABI ([`crate::linux::plan::LandlockPlan::abi`]) knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FsRight {
    Execute,
    WriteFile,
    ReadFile,
    ReadDir,
    RemoveDir,
    RemoveFile,
    MakeChar,
    MakeDir,
    MakeReg,
    MakeSock,
    MakeFifo,
    MakeBlock,
    MakeSym,
    /// ABI 2.
    Refer,
    /// ABI 3.
    Truncate,
    /// ABI 5.
    IoctlDev,
    /// ABI 9: connect to a pathname Unix socket (`LANDLOCK_ACCESS_FS_RESOLVE_UNIX`).
    ResolveUnix,
}

impl FsRight {
    pub const ALL: [FsRight; 17] = [
        FsRight::Execute,
        FsRight::WriteFile,
        FsRight::ReadFile,
        FsRight::ReadDir,
        FsRight::RemoveDir,
        FsRight::RemoveFile,
        FsRight::MakeChar,
        FsRight::MakeDir,
        FsRight::MakeReg,
        FsRight::MakeSock,
        FsRight::MakeFifo,
        FsRight::MakeBlock,
        FsRight::MakeSym,
        FsRight::Refer,
        FsRight::Truncate,
        FsRight::IoctlDev,
        FsRight::ResolveUnix,
    ];

    /// The rights that create an entry of some kind in a folder.
    pub const MAKE: [FsRight; 7] = [
        FsRight::MakeChar,
        FsRight::MakeDir,
        FsRight::MakeReg,
        FsRight::MakeSock,
        FsRight::MakeFifo,
        FsRight::MakeBlock,
        FsRight::MakeSym,
    ];

    /// The rights that remove an entry from a folder.
    pub const REMOVE: [FsRight; 2] = [FsRight::RemoveDir, FsRight::RemoveFile];

    /// The rights a rename needs: remove the entry, make it elsewhere, and refer it across
    /// folders.
    pub const MOVE: [FsRight; 10] = [
        FsRight::REMOVE[0],
        FsRight::REMOVE[1],
        FsRight::MAKE[0],
        FsRight::MAKE[1],
        FsRight::MAKE[2],
        FsRight::MAKE[3],
        FsRight::MAKE[4],
        FsRight::MAKE[5],
        FsRight::MAKE[6],
        FsRight::Refer,
    ];

    /// The first Landlock ABI that knows this right.
    pub fn since_abi(self) -> u32 {
        match self {
            FsRight::Refer => 2,
            FsRight::Truncate => 3,
            FsRight::IoctlDev => 5,
            FsRight::ResolveUnix => 9,
            _ => 1,
        }
    }

    /// Rights that mean something on a non-folder; the kernel refuses a rule on a file that
    /// carries any other right.
    pub fn applies_to_files(self) -> bool {
        matches!(
            self,
            FsRight::Execute
                | FsRight::WriteFile
                | FsRight::ReadFile
                | FsRight::Truncate
                | FsRight::IoctlDev
                | FsRight::ResolveUnix
        )
    }

    /// Every right the given ABI knows, in [`FsRight::ALL`] order.
    pub fn known_at(abi: u32) -> Vec<FsRight> {
        FsRight::ALL
            .into_iter()
            .filter(|r| abi >= r.since_abi())
            .collect()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FsRight::Execute => "execute",
            FsRight::WriteFile => "write-file",
            FsRight::ReadFile => "read-file",
            FsRight::ReadDir => "read-dir",
            FsRight::RemoveDir => "remove-dir",
            FsRight::RemoveFile => "remove-file",
            FsRight::MakeChar => "make-char",
            FsRight::MakeDir => "make-dir",
            FsRight::MakeReg => "make-reg",
            FsRight::MakeSock => "make-sock",
            FsRight::MakeFifo => "make-fifo",
            FsRight::MakeBlock => "make-block",
            FsRight::MakeSym => "make-sym",
            FsRight::Refer => "refer",
            FsRight::Truncate => "truncate",
            FsRight::IoctlDev => "ioctl-dev",
            FsRight::ResolveUnix => "resolve-unix",
        }
    }
}

impl std::fmt::Display for FsRight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
