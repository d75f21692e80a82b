//! Which cgroup this process is in and where the hierarchies are mounted, from
//! /proc/self/cgroup and /proc/self/mountinfo: the one discovery of the crate and its users.

use super::*;

/// The v1 controllers a sandbox's cgroup is made in and mounted for its programs (v2: its one
/// directory has them all).
pub const SANDBOX_V1_CONTROLLERS: [&str; 4] = ["memory", "pids", "cpu", "cpuacct"];

/// This process's own cgroup directory in each hierarchy a sandbox's cgroup is made in: `("",
/// dir)` for cgroup v2, `(controllers, dir)` for a v1 hierarchy of `SANDBOX_V1_CONTROLLERS` (its
/// controllers among them, joined by commas). A hybrid host mounts an empty cgroup2 beside v1:
/// v2 counts only when no such v1 hierarchy is mounted. Read from /proc/self/cgroup and
/// /proc/self/mountinfo, as `Cgroups::detect` reads them.
pub fn own_dirs() -> io::Result<Vec<(String, PathBuf)>> {
    let m = membership()?;
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    for mt in cgroup_mounts()? {
        if mt.fstype == "cgroup2" {
            if let Some(dir) = m.v2.as_deref().and_then(|p| mt.dir_of(p)) {
                out.push((String::new(), dir));
            }
            continue;
        }
        let ctrls: Vec<&str> = mt
            .controllers()
            .filter(|c| SANDBOX_V1_CONTROLLERS.contains(c))
            .collect();
        let Some(path) = ctrls.iter().find_map(|c| m.v1.get(*c)) else {
            continue;
        };
        if let Some(dir) = mt.dir_of(path) {
            out.push((ctrls.join(","), dir));
        }
    }
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    if out.iter().any(|(k, _)| !k.is_empty()) {
        out.retain(|(k, _)| !k.is_empty());
    }
    Ok(out)
}

/// This process's own directory in the v1 hierarchy of `controller` (e.g. "freezer"), when one
/// is mounted; None on a v2-only host.
pub fn own_v1_dir(controller: &str) -> Option<PathBuf> {
    let m = membership().ok()?;
    let path = m.v1.get(controller)?;
    cgroup_mounts()
        .ok()?
        .into_iter()
        .filter(|mt| mt.fstype != "cgroup2" && mt.controllers().any(|c| c == controller))
        .find_map(|mt| mt.dir_of(path))
}

/// Membership of this process, from /proc/self/cgroup.
#[derive(Debug, Default)]
pub(super) struct Membership {
    /// controller -> cgroup path (v1 hierarchies).
    pub(super) v1: HashMap<String, String>,
    /// The v2 path ("0::path").
    pub(super) v2: Option<String>,
}

pub(super) fn membership() -> io::Result<Membership> {
    Ok(parse_membership(&fs::read_to_string("/proc/self/cgroup")?))
}

pub(super) fn parse_membership(s: &str) -> Membership {
    let mut m = Membership::default();
    for line in s.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && ctrls.is_empty() {
            m.v2 = Some(path.to_string());
        } else {
            for c in ctrls.split(',').filter(|c| !c.is_empty()) {
                m.v1.insert(c.to_string(), path.to_string());
            }
        }
    }
    m
}

/// A cgroup mount from /proc/self/mountinfo.
#[derive(Debug, Clone)]
pub(super) struct Mount {
    pub(super) root: String,
    pub(super) point: PathBuf,
    pub(super) fstype: String,
    pub(super) super_opts: String,
}

impl Mount {
    pub(super) fn controllers(&self) -> impl Iterator<Item = &str> {
        self.super_opts.split(',')
    }

    /// The directory of cgroup `path` in this mount, if the mount shows it.
    pub(super) fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let rel = if self.root == "/" {
            path
        } else {
            let rest = path.strip_prefix(self.root.as_str())?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None;
            }
            rest
        };
        let dir = self.point.join(rel.trim_start_matches('/'));
        dir.is_dir().then_some(dir)
    }
}

pub(super) fn cgroup_mounts() -> io::Result<Vec<Mount>> {
    Ok(parse_mountinfo(&fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

pub(super) fn parse_mountinfo(s: &str) -> Vec<Mount> {
    s.lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let mut post = post.split(' ');
            let fstype = post.next()?;
            let _source = post.next()?;
            let super_opts = post.next().unwrap_or("");
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some(Mount {
                root: unescape(pre.get(3)?),
                point: PathBuf::from(unescape(pre.get(4)?)),
                fstype: fstype.to_string(),
                super_opts: super_opts.to_string(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
pub(super) fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
