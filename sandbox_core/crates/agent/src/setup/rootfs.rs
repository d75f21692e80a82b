//! A fresh root file system for the sandbox, built by the agent (pid 1 of fresh mount, pid and
//! cgroup namespaces) before it serves:
//!
//! ```text
//! /            tmpfs, read-only once built
//! /usr         host /usr, read-only, nosuid, nodev (interpreters and compilers live here)
//! /bin /lib .. symlinks into /usr as on the host (or read-only binds)
//! /etc         a few host files read-only (ld.so.cache, alternatives, ...) + our passwd/group/hosts
//! /dev         null zero full random urandom tty, shm
//! /proc        this pid namespace only, other users' processes hidden (/proc/sys read-only
//!              where the programs' user namespace owns the pid namespace)
//! /sys/fs/cgroup  the sandbox's own cgroup subtree (cgroup namespace), root-owned
//! /tmp, /mnt, <work>  private tmpfs, size-limited; the work dir belongs to the sandbox user
//! /judge       the judge's scratch: a private tmpfs only the agent creates entries in
//! ```
//! The host's other files, the agent's socket and the run dir are simply not there.
//!
//! A root sandbox (`RootSpec::writable_size`) gets a writable root instead: `/` is a directory of the
//! sandbox's own disk (a tmpfs bounded in size and inodes, thrown away with the sandbox) and
//! `/usr` an overlay whose lower layer is the host's `/usr`, idmapped into the programs' user
//! namespace (so root inside owns it there) and whose upper layer is on that same disk: a program
//! may change anything, the host's files never change, and all it writes counts against one
//! quota (ENOSPC past it). The few host files of `/etc` stay read-only binds. `/mnt` is then a
//! directory of that root like any other.
//!
//! The judge's scratch (`JUDGE_SCRATCH`: a grading's program, its build, its cases' directories)
//! is a disk of its own, the size of `/tmp`, whose top the programs cannot write: however full a
//! program leaves its `/tmp`, work dir or root, the next grading has room for its files. A case
//! still writes only in its own directory there, so its own full disk is its ENOSPC.
//!
//! A sandbox made from a checkpoint (`RootSpec::layers`) has the same places, each an overlay on
//! its part of the layers (`setup::layers`), which also records every writable place for the
//! `Checkpoint` call.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::layers::{self, Changes, Place};
use super::SetupError;

pub struct RootSpec {
    pub work_dir: PathBuf,
    pub work_size: u64,
    pub tmp_size: u64,
    pub ro_binds: Vec<PathBuf>,
    /// Host ids that own the work dir and, in a writable root, every directory the agent makes.
    pub uid: u32,
    pub gid: u32,
    /// The programs' user namespace, which the host's `/usr` is idmapped into (so its files are
    /// root's inside, as on any machine); without one, `/usr` is a plain read-only bind.
    pub userns: Option<RawFd>,
    /// A writable root (root sandboxes) of this many bytes: `/` and what is written under `/usr`.
    pub writable_size: Option<u64>,
    /// The programs' uid/gid as they see them (inside their user namespace), for /etc/passwd.
    pub inside: (u32, u32),
    /// An unpacked image to build the root on (the lower layer of an overlay whose upper layer
    /// is the sandbox's disk) instead of the host's `/usr`.
    pub image: Option<PathBuf>,
    /// Whether the image's ids are already the programs' (`--pod-ids`: the pod's root file system,
    /// whose root is the programs' root), so it is used without an idmap.
    pub image_ids_inside: bool,
    /// The sandbox's `/etc/resolv.conf`: the agent's own DNS (an allow-list sandbox), or the
    /// outside's file (a sandbox with the outside's network); without one there is no DNS inside.
    pub resolv_conf: Option<String>,
    /// Where the new root is built (a directory that exists and holds nothing a sandbox needs:
    /// whatever is beneath it, binds included, is hidden from then on).
    pub disk: PathBuf,
    /// Checkpoint layers the sandbox is made from, bottom first (`setup::layers`).
    pub layers: Vec<PathBuf>,
    /// The lowest layer of the places only (`--places-layer`).
    pub places_layer: Option<PathBuf>,
    /// Whether the programs' user namespace owns the pid namespace (`--userns-fd`): its root
    /// could then set the namespace's `ns_last_pid` and `pid_max`, so `/proc/sys` is read-only.
    pub programs_own_pids: bool,
    /// Volumes mounted in the sandbox (`setup::volumes`).
    pub volumes: Vec<super::volumes::Volume>,
    /// Layered volumes, directories of the sandbox's own (`setup::volumes`).
    pub layered_volumes: Vec<super::volumes::LayeredVolume>,
}

impl RootSpec {
    /// The user namespace an image or a layer is idmapped into (none when its ids are already the
    /// programs').
    fn layer_userns(&self) -> Option<RawFd> {
        self.userns.filter(|_| !self.image_ids_inside)
    }

    /// Host id of the programs' id 0.
    fn id_base(&self) -> u32 {
        match self.userns {
            Some(_) if !self.image_ids_inside => self.uid - self.inside.0,
            _ => 0,
        }
    }
}

/// Where the judge's scratch disk is mounted (see the module's doc).
pub const JUDGE_SCRATCH: &str = "/judge";

const DEFAULT_TMPFS: u64 = 256 << 20;
/// The disk of an image sandbox that is not a root one (only root and the image's own
/// world-writable directories can use it).
const DEFAULT_IMAGE_DISK: u64 = 64 << 20;
const TOP_LINKS: [&str; 6] = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"];
const ETC_FROM_HOST: [&str; 12] = [
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "ssl",
    "python3",
    "python3.11",
    "python3.12",
    "mime.types",
    // The JVM's security configuration (its conf/ links here).
    "java-17-openjdk",
    "java-21-openjdk",
];
/// What a root sandbox adds to those for a working Linux user database: the login and PAM
/// configuration (`su`, `runuser`, `login -f`), `useradd`'s defaults and the skeleton of a new
/// home. Packages' default configuration, read-only like the list above.
const ETC_USER_DATABASE: [&str; 6] = [
    "pam.d",
    "security",
    "login.defs",
    "default/useradd",
    "skel",
    "shells",
];
/// The system's users and groups a root sandbox starts with (the `base-passwd` package's
/// masters, as `update-passwd` installs them); without the package, root and nobody alone.
const BASE_PASSWD: &str = "/usr/share/base-passwd/passwd.master";
const BASE_GROUP: &str = "/usr/share/base-passwd/group.master";
/// The `tty` group of a Debian system (base-passwd).
const TTY_GID: u32 = 5;
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

fn mount(
    src: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), SetupError> {
    let src_c = src.map(c);
    let fstype_c = fstype.map(|s| CString::new(s).unwrap_or_default());
    let data_c = data.map(|s| CString::new(s).unwrap_or_default());
    let t = c(target);
    // SAFETY: mount(2) with valid C strings or NULLs.
    let rc = unsafe {
        libc::mount(
            src_c.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            t.as_ptr(),
            fstype_c.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data_c
                .as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr() as *const libc::c_void),
        )
    };
    if rc != 0 {
        return Err(SetupError::Mount {
            what: src
                .map(|p| p.display().to_string())
                .or(fstype.map(String::from))
                .unwrap_or_default(),
            target: target.display().to_string(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

pub(super) fn mkdirs(p: &Path) -> Result<(), SetupError> {
    std::fs::create_dir_all(p).map_err(|source| SetupError::Create {
        path: p.display().to_string(),
        source,
    })
}

fn write(p: &Path, data: &str) -> Result<(), SetupError> {
    std::fs::write(p, data).map_err(|source| SetupError::Create {
        path: p.display().to_string(),
        source,
    })
}

/// Bind `src` read-only at the same place under `root` (a file or a directory).
fn bind_ro(root: &Path, src: &Path) -> Result<(), SetupError> {
    let rel = src.strip_prefix("/").unwrap_or(src);
    let dst = root.join(rel);
    if src.is_dir() {
        mkdirs(&dst)?;
    } else {
        if let Some(parent) = dst.parent() {
            mkdirs(parent)?;
        }
        write(&dst, "")?;
    }
    mount(Some(src), &dst, None, libc::MS_BIND | libc::MS_REC, None)?;
    mount(
        None,
        &dst,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )
}

/// Inodes a tmpfs gets per byte of its size: without a bound, empty files cost no space but
/// ~1 KiB of kernel memory each (700,000 of them pinned ~640 MiB), so a program could pin far
/// more memory than its disk allows.
pub const BYTES_PER_INODE: u64 = 8 << 10;
const MIN_INODES: u64 = 1024;

pub(super) fn tmpfs(target: &Path, size: u64, mode: &str, extra: &str) -> Result<(), SetupError> {
    mkdirs(target)?;
    let size = if size == 0 { DEFAULT_TMPFS } else { size };
    let inodes = (size / BYTES_PER_INODE).max(MIN_INODES);
    mount(
        None,
        target,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&format!(
            "size={size},nr_inodes={inodes},mode={mode}{extra}"
        )),
    )
}

const HOSTS: &str = "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n";

fn resolv_conf(spec: &RootSpec) -> &str {
    spec.resolv_conf.as_deref().unwrap_or_default()
}

fn etc(root: &Path, spec: &RootSpec) -> Result<(), SetupError> {
    let etc = root.join("etc");
    mkdirs(&etc)?;
    etc_accounts(&etc, spec)?;
    let resolv = resolv_conf(spec);
    let nsswitch = match spec.resolv_conf {
        Some(_) => "passwd: files\ngroup: files\nhosts: files dns\n",
        None => "passwd: files\ngroup: files\nhosts: files\n",
    };
    let files = [
        ("hosts", HOSTS),
        ("hostname", "sandbox\n"),
        ("resolv.conf", resolv),
        ("nsswitch.conf", nsswitch),
    ];
    for (name, data) in files {
        write(&etc.join(name), data)?;
        if spec.writable_size.is_some() {
            chown(&etc.join(name), spec.uid, spec.gid)?;
        }
    }
    if spec.writable_size.is_some() {
        chown(&etc, spec.uid, spec.gid)?;
    }
    for name in ETC_FROM_HOST {
        let src = Path::new("/etc").join(name);
        if src.exists() {
            bind_ro(root, &src)?;
        }
    }
    if spec.writable_size.is_some() {
        for name in ETC_USER_DATABASE {
            let src = Path::new("/etc").join(name);
            if src.exists() {
                bind_ro(root, &src)?;
            }
        }
        if etc.join("default").is_dir() {
            chown(&etc.join("default"), spec.uid, spec.gid)?;
        }
        let sudoers = etc.join("sudoers.d");
        mkdirs(&sudoers)?;
        chown(&sudoers, spec.uid, spec.gid)?;
    }
    Ok(())
}

/// A root sandbox's passwd, group, shadow and gshadow: the system's users and groups with
/// passwords locked (`*`), as a fresh Debian installs them; and its sudoers.
fn base_accounts() -> [(&'static str, String, u32); 5] {
    let master = |p: &str, fallback: &str| {
        std::fs::read_to_string(p)
            .ok()
            .filter(|s| s.lines().any(|l| l.starts_with("root:")))
            .unwrap_or_else(|| fallback.to_string())
    };
    let passwd = master(
        BASE_PASSWD,
        "root:*:0:0:root:/root:/bin/sh\nnobody:*:65534:65534:nobody:/nonexistent:/bin/sh\n",
    );
    let group = master(BASE_GROUP, "root:*:0:\nusers:*:100:\nnogroup:*:65534:\n");
    let names = |text: &str| {
        text.lines()
            .filter_map(|l| l.split(':').next().filter(|n| !n.is_empty()))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // The masters' password field is `*`; the databases say `x` and keep it in the shadows.
    let shown = |text: &str| {
        text.lines()
            .map(|l| {
                let mut f: Vec<&str> = l.split(':').collect();
                if f.len() > 1 {
                    f[1] = "x";
                }
                f.join(":") + "\n"
            })
            .collect::<String>()
    };
    let shadow: String = names(&passwd)
        .iter()
        .map(|n| format!("{n}:*::0:99999:7:::\n"))
        .collect();
    let gshadow: String = names(&group).iter().map(|n| format!("{n}:*::\n")).collect();
    [
        ("passwd", shown(&passwd), 0o644),
        ("group", shown(&group), 0o644),
        ("shadow", shadow, 0o640),
        ("gshadow", gshadow, 0o640),
        ("sudoers", SUDOERS.to_string(), 0o440),
    ]
}

/// A root sandbox's sudoers, as Debian's: root, and the `sudo` group, may run anything. (The
/// host's is root's, which root inside cannot read; a program that is not root inside cannot
/// become root through `sudo`: programs run with no new privileges.)
const SUDOERS: &str = "Defaults\tenv_reset\nDefaults\tsecure_path=\"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"\nroot\tALL=(ALL:ALL) ALL\n%sudo\tALL=(ALL:ALL) ALL\n@includedir /etc/sudoers.d\n";

/// passwd and group: root and the sandbox user; a root sandbox's are `base_accounts`.
fn etc_accounts(etc: &Path, spec: &RootSpec) -> Result<(), SetupError> {
    if spec.writable_size.is_some() && etc.join("passwd").exists() {
        return Ok(()); // a writable root made from a checkpoint keeps its accounts
    }
    if spec.writable_size.is_some() {
        for (name, data, mode) in base_accounts() {
            let p = etc.join(name);
            write(&p, &data)?;
            chown(&p, spec.uid, spec.gid)?;
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .map_err(|source| SetupError::Create {
                    path: p.display().to_string(),
                    source,
                })?;
        }
        return Ok(());
    }
    let work = spec.work_dir.display();
    let passwd = format!(
        "root:x:0:0:root:/root:/bin/sh\nsandbox:x:{}:{}:sandbox:{work}:/bin/sh\n",
        spec.inside.0, spec.inside.1
    );
    let group = format!("root:x:0:\nsandbox:x:{}:\n", spec.inside.1);
    for (name, data) in [("passwd", passwd), ("group", group)] {
        write(&etc.join(name), &data)?;
    }
    Ok(())
}

fn dev(root: &Path, spec: &RootSpec) -> Result<(), SetupError> {
    let dev = root.join("dev");
    mkdirs(&dev)?;
    mount(
        None,
        &dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("size=64k,nr_inodes=64,mode=755"),
    )?;
    for name in DEVICES {
        let src = Path::new("/dev").join(name);
        if src.exists() {
            let dst = dev.join(name);
            write(&dst, "")?;
            mount(Some(&src), &dst, None, libc::MS_BIND, None)?;
        }
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link)).map_err(|source| {
            SetupError::Create {
                path: format!("/dev/{link}"),
                source,
            }
        })?;
    }
    devpts(&dev, spec);
    tmpfs(&dev.join("shm"), 64 << 20, "1777", "")
}

/// The sandbox's own devpts instance, for the terminals of its programs (`ExecInput.terminal`):
/// none of the host's terminals is visible in it. Best effort: without it a terminal is refused
/// when asked for (step `terminal`), and nothing else needs it. In a user namespace its terminals
/// are the programs' (and, in a root sandbox, of the `tty` group, 5 inside), as on any machine:
/// root inside may then give one to another user (`login`, `su -P`).
fn devpts(dev: &Path, spec: &RootSpec) {
    let pts = dev.join("pts");
    let owner = match spec.userns {
        Some(_) if spec.writable_size.is_some() => {
            format!(
                ",uid={},gid={}",
                spec.uid,
                spec.gid - spec.inside.1 + TTY_GID
            )
        }
        Some(_) => format!(",uid={},gid={}", spec.uid, spec.gid),
        None => String::new(),
    };
    let options = format!("newinstance,ptmxmode=0666,mode=0620{owner}");
    let made = mkdirs(&pts)
        .and_then(|()| {
            mount(
                None,
                &pts,
                Some("devpts"),
                libc::MS_NOSUID | libc::MS_NOEXEC,
                Some(&options),
            )
        })
        .and_then(|()| {
            std::os::unix::fs::symlink("pts/ptmx", dev.join("ptmx")).map_err(|source| {
                SetupError::Create {
                    path: "/dev/ptmx".into(),
                    source,
                }
            })
        });
    if let Err(e) = made {
        eprintln!("sandbox-agent: {e}; its programs get no terminal");
    }
}

fn proc_fs(root: &Path, read_only_sys: bool) -> Result<(), SetupError> {
    let target = root.join("proc");
    mkdirs(&target)?;
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // Hide the agent (root) from user programs; older kernels only know the numeric form.
    mount(
        None,
        &target,
        Some("proc"),
        flags,
        Some("hidepid=invisible"),
    )
    .or_else(|_| mount(None, &target, Some("proc"), flags, Some("hidepid=2")))
    .or_else(|_| mount(None, &target, Some("proc"), flags, None))?;
    if !read_only_sys {
        return Ok(());
    }
    // Root of the programs' user namespace owns the pid namespace here (the launcher's
    // `programs_ns`): the kernel's knobs are read-only, else it could set the namespace's
    // `ns_last_pid` and `pid_max`. The agent's own write of the first comes later, through an
    // fd opened now (`pids::hold`).
    let last_pid = target.join("sys/kernel/ns_last_pid");
    super::pids::hold(&last_pid).map_err(|source| SetupError::Mount {
        what: "open".into(),
        target: last_pid.display().to_string(),
        source,
    })?;
    let sys = target.join("sys");
    mount(Some(&sys), &sys, None, libc::MS_BIND, None)?;
    mount(
        None,
        &sys,
        None,
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | flags,
        None,
    )
}

/// Mounts the sandbox's own cgroup subtree (we are in a fresh cgroup namespace, so the
/// hierarchy's root is the sandbox's cgroup). Best effort: without it the agent runs without
/// per-exec cgroups and says so in Info.
fn cgroups(root: &Path) {
    let Ok(own) = std::fs::read_to_string("/proc/self/cgroup") else {
        return;
    };
    let has_v1 = own.lines().any(|l| {
        l.split(':')
            .nth(1)
            .is_some_and(|c| !c.is_empty() && !c.starts_with("name="))
    });
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls) = (parts.next(), parts.next().unwrap_or(""));
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        if ctrls.is_empty() {
            let target = root.join(if has_v1 {
                "sys/fs/cgroup/unified"
            } else {
                "sys/fs/cgroup"
            });
            if mkdirs(&target).is_ok() {
                let _ = mount(None, &target, Some("cgroup2"), flags, None);
            }
        } else if ctrls
            .split(',')
            .any(|c| sandbox_exec::cgroup::SANDBOX_V1_CONTROLLERS.contains(&c))
        {
            let target = root.join("sys/fs/cgroup").join(ctrls);
            if mkdirs(&target).is_ok() {
                let _ = mount(
                    Some(Path::new("cgroup")),
                    &target,
                    Some("cgroup"),
                    flags,
                    Some(ctrls),
                );
            }
        }
    }
}

fn pivot(root: &Path) -> Result<(), SetupError> {
    let err = |source| SetupError::PivotRoot {
        path: root.display().to_string(),
        source,
    };
    std::env::set_current_dir(root).map_err(err)?;
    let dot = CString::new(".").unwrap_or_default();
    // SAFETY: pivot_root(".", ".") stacks the old root on top of the new one; we detach it next.
    if unsafe { libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) } != 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    // SAFETY: umount2 of the old root, which sits on "." after pivot_root.
    if unsafe { libc::umount2(dot.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    std::env::set_current_dir("/").map_err(err)
}

fn chown(p: &Path, uid: u32, gid: u32) -> Result<(), SetupError> {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).map_err(|source| SetupError::Create {
        path: p.display().to_string(),
        source,
    })
}

/// The read-only root of a judge-style sandbox: a small tmpfs with the host's `/usr` bound in.
fn read_only_root(spec: &RootSpec) -> Result<PathBuf, SetupError> {
    let root = spec.disk.as_path();
    mount(
        None,
        root,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("size=16m,mode=755"),
    )?;
    let usr = root.join("usr");
    mkdirs(&usr)?;
    let mapped = spec
        .userns
        .map(|ns| idmapped_bind(Path::new("/usr"), &usr, ns, true));
    if let Some(Err(e)) = &mapped {
        eprintln!("sandbox-agent: {e}; /usr is bound as it is");
    }
    if !matches!(mapped, Some(Ok(()))) {
        bind_ro(root, Path::new("/usr"))?;
    }
    Ok(root.to_path_buf())
}

/// The writable root (see the module's doc): the disk at `spec.disk`, the root a directory of it.
fn writable_root(
    spec: &RootSpec,
    size: u64,
    places: &mut Vec<Place>,
) -> Result<PathBuf, SetupError> {
    let disk = spec.disk.as_path();
    tmpfs(disk, size, "700", "")?;
    let upper = disk.join("root");
    for d in ["root", "usr.lower", "usr.upper", "usr.work"] {
        mkdirs(&disk.join(d))?;
    }
    for d in ["root", "usr.upper"] {
        chown(&disk.join(d), spec.uid, spec.gid)?;
    }
    // Opened before anything is mounted on it: its changes are the disk's, not what is mounted.
    places.push(Place {
        path: PathBuf::from("/"),
        changes: layers::open_dir(&upper)?,
        volume: false,
    });
    let layers = layers::parts(&spec.layers, Path::new(""));
    let root = if layers.is_empty() {
        // pivot_root wants a mount point.
        mount(Some(&upper), &upper, None, libc::MS_BIND, None)?;
        upper.clone()
    } else {
        let lowers = layers::mount_lowers(&layers, &disk.join("layers"), spec.layer_userns())?;
        let (work, merged) = (disk.join("root.work"), disk.join("merged"));
        mkdirs(&work)?;
        mkdirs(&merged)?;
        overlay(&lowers, &upper, &work, &merged)?;
        merged
    };
    let usr = root.join("usr");
    mkdirs(&usr)?;
    chown(&usr, spec.uid, spec.gid)?;
    let lower = disk.join("usr.lower");
    let userns = spec.userns.ok_or_else(|| SetupError::UserNs {
        what: "a writable root needs one",
        source: std::io::Error::from_raw_os_error(libc::EINVAL),
    })?;
    match idmapped_bind(Path::new("/usr"), &lower, userns, true) {
        Ok(()) => {
            let usr_layers = layers::parts(&spec.layers, Path::new("usr"));
            let mut lowers =
                layers::mount_lowers(&usr_layers, &disk.join("usr.layers"), spec.layer_userns())?;
            lowers.push(lower);
            let changes = disk.join("usr.upper");
            overlay(&lowers, &changes, &disk.join("usr.work"), &usr)?;
            places.push(Place {
                path: PathBuf::from("/usr"),
                changes: layers::open_dir(&changes)?,
                volume: false,
            });
        }
        Err(e) => {
            // A kernel or file system without idmapped mounts: /usr stays the host's, read-only.
            eprintln!("sandbox-agent: {e}; /usr is read-only in this sandbox");
            bind_ro(&root, Path::new("/usr"))?;
        }
    }
    // The directories a Debian system has beside /usr, root's inside (a made-from-checkpoint root
    // has them already): programs and image builds expect them (`RUN echo x > /opt/y`).
    for d in FHS_DIRS {
        let p = root.join(d);
        mkdirs(&p)?;
        chown(&p, spec.uid, spec.gid)?;
    }
    for (d, mode) in [("var/tmp", 0o1777), ("root", 0o700)] {
        let p = root.join(d);
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode)).map_err(
            |source| SetupError::Create {
                path: p.display().to_string(),
                source,
            },
        )?;
    }
    for (link, target) in [("var/run", "/run"), ("var/lock", "/run/lock")] {
        let p = root.join(link);
        if std::fs::symlink_metadata(&p).is_err() {
            std::os::unix::fs::symlink(target, &p).map_err(|source| SetupError::Create {
                path: p.display().to_string(),
                source,
            })?;
        }
    }
    Ok(root)
}

/// The directories of a writable root beside `/usr`, as a fresh Debian has them.
const FHS_DIRS: [&str; 15] = [
    "root",
    "home",
    "opt",
    "srv",
    "media",
    "run",
    "run/lock",
    "var",
    "var/lib",
    "var/log",
    "var/cache",
    "var/tmp",
    "var/spool",
    "var/mail",
    "var/local",
];

/// Binds `src` at `target` (an existing directory) read-only, with the ids of its files shifted
/// into `userns` (file uid 0 is the namespace's root).
pub(super) fn idmapped_bind(
    src: &Path,
    target: &Path,
    userns: RawFd,
    read_only: bool,
) -> Result<(), SetupError> {
    let err = |source| SetupError::IdMap {
        path: src.display().to_string(),
        source,
    };
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const MOUNT_ATTR_NOSUID: u64 = 0x2;
    const MOUNT_ATTR_NODEV: u64 = 0x4;
    const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    let (src_c, target_c, empty) = (c(src), c(target), CString::default());
    // SAFETY: open_tree with a valid C string; the fd it returns is ours.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            src_c.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    // SAFETY: just returned by the kernel.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as RawFd) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP
            | MOUNT_ATTR_NOSUID
            | MOUNT_ATTR_NODEV
            | if read_only { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns as u64,
    };
    use std::os::fd::AsRawFd;
    // SAFETY: mount_setattr on our detached tree with an attr struct of the size we pass.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    // SAFETY: move_mount of our tree onto an existing directory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target_c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The root of an image sandbox: an overlay of the image (idmapped into the programs' user
/// namespace when there is one, so its root-owned files are root's inside) and the sandbox's disk.
/// Root sandboxes may write anywhere; others only where the image's modes let their uid.
fn image_root(
    spec: &RootSpec,
    image: &Path,
    size: u64,
    places: &mut Vec<Place>,
) -> Result<PathBuf, SetupError> {
    let disk = spec.disk.as_path();
    tmpfs(disk, size, "700", "")?;
    let (lower, upper, work, root) = (
        disk.join("image"),
        disk.join("upper"),
        disk.join("work"),
        disk.join("root"),
    );
    for d in [&lower, &upper, &work, &root] {
        mkdirs(d)?;
    }
    let mapped = spec
        .userns
        .filter(|_| !spec.image_ids_inside)
        .map(|ns| idmapped_bind(image, &lower, ns, true));
    match mapped {
        Some(Ok(())) => chown(&upper, spec.uid - spec.inside.0, spec.gid - spec.inside.1)?,
        Some(Err(e)) => {
            eprintln!("sandbox-agent: {e}; the image is used with its ids as they are");
            bind_plain_ro(image, &lower)?;
        }
        None => bind_plain_ro(image, &lower)?,
    }
    let layers = layers::parts(&spec.layers, Path::new(""));
    let mut lowers = layers::mount_lowers(&layers, &disk.join("layers"), spec.layer_userns())?;
    lowers.push(lower);
    overlay(&lowers, &upper, &work, &root)?;
    places.push(Place {
        path: PathBuf::from("/"),
        changes: layers::open_dir(&upper)?,
        volume: false,
    });
    Ok(root)
}

/// An overlay at `target`: `lowers` read-only beneath (top first), changes in `upper` (`work` is
/// its scratch).
pub(super) fn overlay(
    lowers: &[PathBuf],
    upper: &Path,
    work: &Path,
    target: &Path,
) -> Result<(), SetupError> {
    let lowers: Vec<String> = lowers.iter().map(|l| l.display().to_string()).collect();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lowers.join(":"),
        upper.display(),
        work.display()
    );
    mount(
        Some(Path::new("overlay")),
        target,
        Some("overlay"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&opts),
    )
}

/// Makes the mount at `target` read-only (and without set-id bits or devices).
pub(super) fn remount_ro(target: &Path) -> Result<(), SetupError> {
    mount(
        None,
        target,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )
}

pub(super) fn bind_plain_ro(src: &Path, target: &Path) -> Result<(), SetupError> {
    bind_plain(src, target, true)
}

/// A bind of `src` at `target` with no set-id bits or devices, read-only when asked.
pub(super) fn bind_plain(src: &Path, target: &Path, read_only: bool) -> Result<(), SetupError> {
    mount(Some(src), target, None, libc::MS_BIND | libc::MS_REC, None)?;
    let ro = if read_only { libc::MS_RDONLY } else { 0 };
    mount(
        None,
        target,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | ro | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )
}

/// The few files of /etc the agent writes into an image's root: names, not accounts (the
/// image's own passwd and group stay).
fn image_etc(root: &Path, spec: &RootSpec) -> Result<(), SetupError> {
    let etc = root.join("etc");
    mkdirs(&etc)?;
    for (name, data) in [
        ("hosts", HOSTS),
        ("hostname", "sandbox\n"),
        ("resolv.conf", resolv_conf(spec)),
    ] {
        let p = etc.join(name);
        // A symlink of the image (resolv.conf often is one) must not send the write elsewhere.
        let _ = std::fs::remove_file(&p);
        write(&p, data)?;
    }
    if !etc.join("passwd").exists() {
        return etc_accounts(&etc, spec);
    }
    Ok(())
}

/// The host's view: `/bin`, `/lib`, ... as on the host (symlinks into `/usr`, or read-only
/// binds), and our `/etc`.
fn host_view(root: &Path, spec: &RootSpec) -> Result<(), SetupError> {
    for top in TOP_LINKS {
        let host = Path::new("/").join(top);
        match std::fs::symlink_metadata(&host) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&host).map_err(|source| SetupError::Create {
                    path: host.display().to_string(),
                    source,
                })?;
                // A root made from a checkpoint has it already.
                let _ = std::fs::remove_file(root.join(top));
                std::os::unix::fs::symlink(target, root.join(top)).map_err(|source| {
                    SetupError::Create {
                        path: top.to_string(),
                        source,
                    }
                })?;
            }
            Ok(m) if m.is_dir() => bind_ro(root, &host)?,
            _ => {}
        }
    }
    etc(root, spec)
}

/// The place at `path` (a tmpfs just mounted under `root`), stacked on its part of the layers.
fn place(root: &Path, path: &Path, spec: &RootSpec) -> Result<Place, SetupError> {
    let rel = path.strip_prefix("/").unwrap_or(path);
    let mut lowers = layers::parts(&spec.layers, rel);
    if let Some(bottom) = &spec.places_layer {
        lowers.extend(layers::parts(std::slice::from_ref(bottom), rel));
    }
    Ok(Place {
        path: path.to_path_buf(),
        changes: layers::stack_on_tmpfs(&root.join(rel), &lowers, spec.layer_userns())?,
        volume: false,
    })
}

/// Builds the new root and pivots into it. Must run before any thread is started.
pub fn build(spec: &RootSpec) -> Result<(), SetupError> {
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    let mut places = Vec::new();
    let root = match (&spec.image, spec.writable_size) {
        (Some(image), size) => {
            image_root(spec, image, size.unwrap_or(DEFAULT_IMAGE_DISK), &mut places)?
        }
        (None, Some(size)) => writable_root(spec, size, &mut places)?,
        (None, None) => read_only_root(spec)?,
    };
    let root = root.as_path();
    if spec.image.is_some() {
        image_etc(root, spec)?;
    } else {
        host_view(root, spec)?;
    }
    dev(root, spec)?;
    proc_fs(root, spec.programs_own_pids)?;
    cgroups(root);
    // Root's inside the programs' user namespace (else it shows as nobody's there).
    let tmp_owner = match spec.userns {
        Some(_) => format!(
            ",uid={},gid={}",
            spec.uid - spec.inside.0,
            spec.gid - spec.inside.1
        ),
        None => String::new(),
    };
    tmpfs(&root.join("tmp"), spec.tmp_size, "1777", &tmp_owner)?;
    places.push(place(root, Path::new("/tmp"), spec)?);
    if spec.writable_size.is_none() {
        // Programs written for SandboxFusion write under /mnt.
        tmpfs(&root.join("mnt"), spec.tmp_size, "1777", &tmp_owner)?;
        places.push(place(root, Path::new("/mnt"), spec)?);
    }
    let judge = JUDGE_SCRATCH.trim_start_matches('/');
    tmpfs(&root.join(judge), spec.tmp_size, "755", "")?;
    let work_rel = spec.work_dir.strip_prefix("/").unwrap_or(&spec.work_dir);
    tmpfs(
        &root.join(work_rel),
        spec.work_size,
        "755",
        &format!(",uid={},gid={}", spec.uid, spec.gid),
    )?;
    places.push(place(root, &spec.work_dir, spec)?);
    let volumes = super::volumes::mount_layered(
        root,
        &spec.layered_volumes,
        spec.work_size,
        (spec.uid, spec.gid),
        &places,
        spec.layer_userns(),
    )?;
    places.extend(volumes);
    layers::record(Changes {
        places,
        id_base: spec.id_base(),
    });
    super::volumes::mount_all(root, &spec.volumes, spec.layer_userns())?;
    for p in &spec.ro_binds {
        if p.is_absolute() && p.exists() {
            bind_ro(root, p)?;
        }
    }
    mkdirs(&root.join("root"))?;
    pivot(root)?;
    if spec.writable_size.is_some() || spec.image.is_some() {
        return Ok(());
    }
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )
}
