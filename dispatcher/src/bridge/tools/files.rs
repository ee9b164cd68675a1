//! The file tools: `read_file`, `write_file` and `list_dir`, each decided on the real path of
//! what the dispatcher itself opened.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;

use sandboxer::Op;
use serde_json::{Map, Value};

use super::args;
use super::call::{Call, Done, Policies, Stop, deny, fail};
use super::catalogue::{MAX_LIST_ENTRIES, MAX_LIST_TEXT, MAX_READ, MAX_WRITE};
use super::decide::{checked_path, describe};
use crate::bridge::fsx::{self, Kind};

impl Call {
    pub(super) fn read_file(
        &mut self,
        policy: &Policies<'_>,
        args: &Map<String, Value>,
    ) -> Result<Done, Stop> {
        let args: args::ReadFile = args::parse(args).map_err(fail)?;
        self.set_target(&args.path);
        let path = checked_path(&args.path)?;
        let offset = args.offset.unwrap_or(0);
        let length = args.length.unwrap_or(MAX_READ);
        if length == 0 || length > MAX_READ {
            return Err(fail(format!("length must be between 1 and {MAX_READ}")));
        }
        let (looked, reason) = self.look(policy, Op::Read, &path)?;
        let meta = looked.meta;
        match meta.kind {
            Kind::File => {}
            Kind::Dir => {
                return Err(fail(format!(
                    "{} is a folder; use list_dir",
                    path.display()
                )));
            }
            _ => return Err(fail(format!("{} is not a regular file", path.display()))),
        }
        if meta.nlink == 0 {
            return Err(fail(format!(
                "{} was removed while it was being opened",
                path.display()
            )));
        }
        if meta.nlink > 1 {
            return Err(deny(format!(
                "{} has {} hard links; the bridge reads only files with one name, since a second \
                 name may lie in a folder it may not read",
                path.display(),
                meta.nlink
            )));
        }
        let file = looked
            .into_reader()
            .map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
        let size = meta.size;
        if offset > size {
            return Err(fail(format!(
                "offset {offset} is past the end of the file ({size} bytes)"
            )));
        }
        let want = length.min(size - offset) as usize;
        let mut buf = vec![0u8; want];
        let mut got = 0;
        while got < want {
            match file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(fail(format!("cannot read {}: {e}", path.display()))),
            }
        }
        buf.truncate(got);
        let end_of_file = offset + got as u64 >= size;
        let text = match std::str::from_utf8(&buf) {
            Ok(t) => t.to_string(),
            // A chunk cut inside a character: return up to its start, read on from there.
            Err(e) if e.error_len().is_none() && !end_of_file && e.valid_up_to() > 0 => {
                buf.truncate(e.valid_up_to());
                String::from_utf8(buf).expect("valid up to here")
            }
            Err(e) => {
                let at = offset + e.valid_up_to() as u64;
                return Err(fail(format!(
                    "{} is not UTF-8 text (at byte {at}){}; the bridge reads text only",
                    path.display(),
                    if e.valid_up_to() == 0 && offset > 0 {
                        ", or offset is inside a character"
                    } else {
                        ""
                    }
                )));
            }
        };
        let next = offset + text.len() as u64;
        let note = (next < size).then(|| {
            format!(
                "[read_file: bytes {offset}..{next} of {size}; call read_file with offset {next} for more]"
            )
        });
        Ok(Done { text, note, reason })
    }

    pub(super) fn write_file(
        &mut self,
        policy: &Policies<'_>,
        args: &Map<String, Value>,
    ) -> Result<Done, Stop> {
        let args: args::WriteFile = args::parse(args).map_err(fail)?;
        let raw = args.path.as_str();
        self.set_target(raw);
        let content = args.content.as_str();
        let create = args.create.unwrap_or(false);
        let path = checked_path(raw)?;
        if content.len() > MAX_WRITE {
            return Err(fail(format!(
                "content is {} bytes; write_file takes at most {MAX_WRITE}",
                content.len()
            )));
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(fail(format!("{raw:?} names no file")));
        };
        if raw.ends_with('/') {
            return Err(fail(format!(
                "{raw:?} ends with '/': it names a folder, not a file"
            )));
        }
        let op = if create { Op::Create } else { Op::Write };
        let fsx::Resolved {
            fd: dir,
            real: real_parent,
        } = fsx::open_dir(parent).map_err(|e| self.open_failed(policy, op, &path, parent, e))?;
        let real = real_parent.join(name);
        let mut reason = self.decide(policy, Op::Write, &path, &real)?;
        let mut created = false;
        let mut attempts = 0;
        let mut file = loop {
            attempts += 1;
            let entry = fsx::stat_at(dir.as_fd(), name)
                .map_err(|e| fail(format!("cannot inspect {}: {e}", path.display())))?;
            match entry {
                None if !create => {
                    return Err(fail(format!(
                        "{} does not exist; pass create: true to create it",
                        path.display()
                    )));
                }
                None => {
                    reason = self.decide(policy, Op::Create, &path, &real)?;
                    match fsx::create_at(dir.as_fd(), name) {
                        Ok(f) => {
                            created = true;
                            break f;
                        }
                        // Something appeared in between: look again, once.
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 2 => {
                            continue;
                        }
                        Err(e) => {
                            return Err(fail(format!("cannot create {}: {e}", path.display())));
                        }
                    }
                }
                Some(m) => match m.kind {
                    Kind::Symlink => {
                        return Err(deny(format!(
                            "{} is a symbolic link; the bridge never writes through a link \
                             (write to the file's real path)",
                            path.display()
                        )));
                    }
                    Kind::Dir => return Err(fail(format!("{} is a folder", path.display()))),
                    Kind::Other => {
                        return Err(fail(format!("{} is not a regular file", path.display())));
                    }
                    Kind::File if m.nlink > 1 => {
                        return Err(deny(format!(
                            "{} has {} hard links; the bridge writes only files with one name, \
                             since a second name may lie in a folder it may not write",
                            path.display(),
                            m.nlink
                        )));
                    }
                    Kind::File => {
                        let f = fsx::open_write_at(dir.as_fd(), name).map_err(|e| {
                            fail(format!("cannot open {}: {}", path.display(), describe(&e)))
                        })?;
                        let now = fsx::meta_fd(f.as_fd()).map_err(|e| fail(e.to_string()))?;
                        if !now.same_file(&m) || now.kind != Kind::File || now.nlink != 1 {
                            return Err(fail(format!(
                                "{} changed while it was being opened",
                                path.display()
                            )));
                        }
                        break f;
                    }
                },
            }
        };
        file.set_len(0)
            .and_then(|()| file.write_all(content.as_bytes()))
            .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
        Ok(Done::new(
            format!(
                "{} {} bytes to {}",
                if created { "created, wrote" } else { "wrote" },
                content.len(),
                real.display()
            ),
            reason,
        ))
    }

    pub(super) fn list_dir(
        &mut self,
        policy: &Policies<'_>,
        args: &Map<String, Value>,
    ) -> Result<Done, Stop> {
        let args: args::ListDir = args::parse(args).map_err(fail)?;
        self.set_target(&args.path);
        let path = checked_path(&args.path)?;
        let (looked, reason) = self.look(policy, Op::List, &path)?;
        if looked.meta.kind != Kind::Dir {
            return Err(fail(format!("{} is not a folder", path.display())));
        }
        if looked.meta.nlink == 0 {
            return Err(fail(format!(
                "{} was removed while it was being opened",
                path.display()
            )));
        }
        let real = looked.real.clone();
        let dir = looked
            .into_dir()
            .map_err(|e| fail(format!("cannot open {}: {e}", path.display())))?;
        let (mut names, mut more) = fsx::dir_names(dir.as_fd(), MAX_LIST_ENTRIES)
            .map_err(|e| fail(format!("cannot list {}: {e}", path.display())))?;
        names.sort();
        let mut text = format!("{}:\n", real.display());
        if names.is_empty() {
            text.push_str("(empty)\n");
        }
        for name in &names {
            if text.len() > MAX_LIST_TEXT {
                more = true;
                break;
            }
            let shown_name = display_name(name);
            let line = match fsx::stat_at(dir.as_fd(), name) {
                Ok(Some(m)) => match m.kind {
                    Kind::Dir => format!("dir   {shown_name}/"),
                    Kind::File => format!("file  {shown_name}  ({} bytes)", m.size),
                    Kind::Symlink => match fsx::read_link_at(dir.as_fd(), name) {
                        Ok(t) => format!("link  {shown_name} -> {}", display_name(&t)),
                        Err(_) => format!("link  {shown_name}"),
                    },
                    Kind::Other => format!("other {shown_name}"),
                },
                // Removed since it was listed.
                Ok(None) => continue,
                Err(_) => format!("?     {shown_name}"),
            };
            text.push_str(&line);
            text.push('\n');
        }
        if more {
            let _ = writeln!(text, "[list_dir: more entries not shown]");
        }
        Ok(Done::new(text, reason))
    }
}

/// A name for display: control characters and invalid UTF-8 escaped, so one entry is one line.
fn display_name(name: &OsStr) -> String {
    let lossy = String::from_utf8_lossy(name.as_bytes());
    if lossy.chars().any(char::is_control) {
        lossy.escape_debug().to_string()
    } else {
        lossy.into_owned()
    }
}
