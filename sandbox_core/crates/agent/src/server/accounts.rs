//! The sandbox's users: a name of the request (`ExecRequest.user`, `WriteFilesRequest.user`)
//! looked up in the sandbox's own `/etc/passwd` and `/etc/group`, as `initgroups` would. Only a
//! sandbox whose programs run as root has other users: root inside may become any of its ids (its
//! user namespace maps them all), so this is the step `su` would take, not a new power. Elsewhere
//! the programs' own user is the one accepted.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use sandbox_exec::{Account, Command};

use super::files::Owner;
use crate::error::AgentError;
use crate::paths::{open_beneath, open_root};

/// The account files are read whole; a bigger one is refused rather than read.
const MAX_ACCOUNTS_FILE: u64 = 4 << 20;

/// Who the sandbox's programs are, and whether they may be others.
#[derive(Clone, Copy)]
pub struct Accounts {
    /// The programs' ids, inside their user namespace.
    pub uid: u32,
    pub gid: u32,
    /// The host ids of the programs' ids (files the agent makes for them).
    pub owner: Owner,
    /// The programs run as root: every user of the sandbox is theirs to be.
    pub others: bool,
}

/// One user of the sandbox, resolved.
pub struct User {
    pub name: String,
    pub account: Account,
    pub home: String,
    /// Its ids on the host: the owner of what the agent writes for it.
    pub owner: Owner,
}

impl Accounts {
    /// The user a request names; `None` for an empty name or the programs' own user.
    pub fn lookup(&self, name: &str) -> Result<Option<User>, AgentError> {
        if name.is_empty() {
            return Ok(None);
        }
        let passwd = read_etc("passwd")?;
        let entry = passwd
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .filter(|f| f.len() >= 7)
            .find(|f| {
                f[0] == name
                    || name
                        .parse::<u32>()
                        .is_ok_and(|n| f[2].parse::<u32>() == Ok(n))
            });
        let (uid, gid, login, home) = match (entry, name.parse::<u32>()) {
            (Some(f), _) => {
                let id = |s: &str| {
                    s.parse::<u32>().map_err(|_| {
                        AgentError::Invalid(format!(
                            "the sandbox's /etc/passwd gives user {name:?} no numeric id"
                        ))
                    })
                };
                (id(f[2])?, id(f[3])?, f[0].to_string(), f[5].to_string())
            }
            // A bare id without an account, as `setpriv --reuid` allows: its own group, no home.
            (None, Ok(uid)) => (uid, uid, uid.to_string(), "/".to_string()),
            (None, Err(_)) => {
                return Err(AgentError::Invalid(format!(
                    "no user {name:?} in this sandbox's /etc/passwd"
                )))
            }
        };
        if !self.others && uid == self.uid {
            return Ok(None);
        }
        if !self.others {
            return Err(AgentError::Invalid(format!(
                "user {name:?}: this sandbox's programs run as uid {} and may not become another \
                 user (a sandbox whose programs run as root may)",
                self.uid
            )));
        }
        if uid >= sandbox_exec::userns::RANGE || gid >= sandbox_exec::userns::RANGE {
            return Err(AgentError::Invalid(format!(
                "user {name:?} has ids {uid}:{gid}, beyond the sandbox's {} ids",
                sandbox_exec::userns::RANGE
            )));
        }
        let mut groups = vec![gid];
        if let Ok(group) = read_etc("group") {
            for f in group.lines().map(|l| l.split(':').collect::<Vec<_>>()) {
                if f.len() >= 4 && f[3].split(',').any(|m| m == login) {
                    if let Ok(g) = f[2].parse::<u32>() {
                        if g < sandbox_exec::userns::RANGE && !groups.contains(&g) {
                            groups.push(g);
                        }
                    }
                }
            }
        }
        // Inside ids map to host ids at the programs' offset (their user namespace's base).
        let owner = Owner {
            uid: self.owner.uid - self.uid + uid,
            gid: self.owner.gid - self.gid + gid,
        };
        Ok(Some(User {
            name: login,
            account: Account { uid, gid, groups },
            home,
            owner,
        }))
    }

    /// Makes `cmd` run as the user `name`, with its HOME, USER and LOGNAME unless the request's
    /// environment sets them.
    pub fn apply(&self, cmd: &mut Command, name: &str) -> Result<(), AgentError> {
        let Some(user) = self.lookup(name)? else {
            return Ok(());
        };
        for (k, v) in [
            ("HOME", user.home.as_str()),
            ("USER", user.name.as_str()),
            ("LOGNAME", user.name.as_str()),
        ] {
            cmd.env
                .entry(k.to_string())
                .or_insert_with(|| v.to_string());
        }
        cmd.account = Some(user.account);
        Ok(())
    }

    /// The host gid of the group `name` of the sandbox's `/etc/group` (or a bare id), for a
    /// change of a file's group; only the programs' own group where they may not be others.
    pub fn group(&self, name: &str) -> Result<u32, AgentError> {
        let gid = match read_etc("group")?
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.len() >= 3 && f[0] == name)
        {
            Some(f) => f[2].parse::<u32>().map_err(|_| {
                AgentError::Invalid(format!(
                    "the sandbox's /etc/group gives group {name:?} no numeric id"
                ))
            })?,
            None => name.parse::<u32>().map_err(|_| {
                AgentError::Invalid(format!("no group {name:?} in this sandbox's /etc/group"))
            })?,
        };
        if gid != self.gid && !self.others {
            return Err(AgentError::PermissionDenied(format!(
                "group {name:?}: this sandbox's programs run as gid {} and may give files no \
                 other group (a sandbox whose programs run as root may)",
                self.gid
            )));
        }
        if gid >= sandbox_exec::userns::RANGE {
            return Err(AgentError::Invalid(format!(
                "group {name:?} has id {gid}, beyond the sandbox's {} ids",
                sandbox_exec::userns::RANGE
            )));
        }
        Ok(self.owner.gid - self.gid + gid)
    }

    /// How files' owners read inside the sandbox: its ids, and their names in its `/etc/passwd`
    /// and `/etc/group` (read once; without them, the ids).
    pub fn ids(&self) -> Ids {
        let names = |file: &str| -> HashMap<u32, String> {
            read_etc(file)
                .unwrap_or_default()
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .filter(|f| f.len() >= 3)
                .filter_map(|f| Some((f[2].parse().ok()?, f[0].to_string())))
                .collect()
        };
        Ids {
            uid_base: i64::from(self.owner.uid) - i64::from(self.uid),
            gid_base: i64::from(self.owner.gid) - i64::from(self.gid),
            users: names("passwd"),
            groups: names("group"),
        }
    }

    /// The owner of files written for the user `name`.
    pub fn owner(&self, name: &str) -> Result<Owner, AgentError> {
        Ok(self.lookup(name)?.map_or(self.owner, |u| u.owner))
    }
}

/// Files' owners as the sandbox's programs see them (`Accounts::ids`).
pub struct Ids {
    /// The host ids of the programs' id 0.
    uid_base: i64,
    gid_base: i64,
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

/// The id the kernel shows for a host id the sandbox does not map.
const OVERFLOW_ID: u32 = 65534;

impl Ids {
    fn inside(host: u32, base: i64) -> u32 {
        match u32::try_from(i64::from(host) - base) {
            Ok(id) if id < sandbox_exec::userns::RANGE => id,
            _ => OVERFLOW_ID,
        }
    }

    /// The user of a host uid: its id inside and its name (the id when it has none).
    pub fn user(&self, host: u32) -> (u32, String) {
        let id = Self::inside(host, self.uid_base);
        (
            id,
            self.users
                .get(&id)
                .cloned()
                .unwrap_or_else(|| id.to_string()),
        )
    }

    /// The group of a host gid: its id inside and its name (the id when it has none).
    pub fn group(&self, host: u32) -> (u32, String) {
        let id = Self::inside(host, self.gid_base);
        (
            id,
            self.groups
                .get(&id)
                .cloned()
                .unwrap_or_else(|| id.to_string()),
        )
    }
}

/// `/etc/<name>` of the sandbox, read without following a link out of its root file system.
fn read_etc(name: &str) -> Result<String, AgentError> {
    let unreadable = |e: std::io::Error| {
        AgentError::Invalid(format!("the sandbox's /etc/{name} cannot be read: {e}"))
    };
    let root: OwnedFd = open_root(Path::new("/"))?;
    let fd = open_beneath(
        &root,
        &Path::new("etc").join(name),
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .map_err(unreadable)?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() || meta.len() > MAX_ACCOUNTS_FILE {
        return Err(AgentError::Invalid(format!(
            "the sandbox's /etc/{name} is not a regular file of at most {MAX_ACCOUNTS_FILE} bytes"
        )));
    }
    let mut text = String::new();
    file.take(MAX_ACCOUNTS_FILE)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    Ok(text)
}
