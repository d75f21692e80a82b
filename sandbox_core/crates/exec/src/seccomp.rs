//! The seccomp deny-list every program runs under.
//!
//! A deny-list (default allow) keeps every language runtime and compiler working while closing the
//! kernel interfaces a sandbox escape or a noisy neighbour would need: namespaces, mounts, module
//! and key management, tracing other processes, clock changes. The filter is compiled once per
//! executor; the child only hands the prebuilt program to the kernel (no allocation after fork).
//!
//! What the filter answers, in order:
//! 1. a foreign audit architecture (e.g. i386 calls from an x86_64 process): kill the process;
//! 2. x32 syscall numbers on x86_64 (same audit arch, different numbers, so a deny-list keyed on
//!    x86_64 numbers would not see them) and `clone3` (its flags sit in memory, which seccomp cannot
//!    inspect; ENOSYS makes glibc fall back to `clone`): `ENOSYS`;
//! 3. the deny-list, `clone` with a namespace flag, and `setns` unless it is
//!    `setns(USERNS_FD, CLONE_NEWUSER)`: `EPERM`;
//! 4. everything else: allowed.
//!
//! It is one hand-assembled program, a binary search over the syscall numbers that need an answer
//! other than "allow". Attaching a filter costs in proportion to its size: the kernel JIT-compiles
//! it and runs it for every syscall number to precompute which ones are always allowed (its action
//! cache). A linear list of comparisons (what seccompiler emits), stacked as two programs, made
//! that a quarter of a millisecond per exec; this program is a few dozen instructions deep at most
//! and any syscall number is decided after about ten of them.

use std::collections::BTreeMap;

use crate::error::SetupError;

/// Namespace bits that `clone` may not carry: creating namespaces is how most container escapes
/// start, and a sandboxed program never needs one.
const CLONE_NS_FLAGS: [u64; 7] = [
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// The one fd number `setns` may be called on, and only to enter a user namespace: where the
/// executor keeps the sandbox's user namespace (`ExecutorConfig::user_namespace`), so a child of a
/// thread that wears the filter can still enter it. Harmless for programs: the fd is closed before
/// exec, and entering a user namespace takes CAP_SYS_ADMIN over it, which a program never holds
/// (it cannot make namespaces of its own, and every other is its parent's or the host's).
pub const USERNS_FD: i32 = 1021;

/// On x86_64, syscall numbers with this bit set are the x32 ABI.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

/// Offsets in `struct seccomp_data`: nr, arch, instruction_pointer, args[6].
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// Low 32 bits of args[0] (little-endian: x86_64 and aarch64). The clone flags that matter all
/// live there; the upper half is not looked at.
const OFF_ARG0_LO: u32 = 16;
/// Low 32 bits of args[1].
const OFF_ARG1_LO: u32 = 24;

/// A compiled filter, ready to be installed after fork.
#[derive(Clone)]
pub struct Filter {
    program: Vec<libc::sock_filter>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("instructions", &self.program.len())
            .finish()
    }
}

impl Filter {
    /// The program as hex of its `sock_filter`s in memory (what a process that installs it
    /// itself passes to `prctl(PR_SET_SECCOMP)`, see `template.rs`).
    pub(crate) fn hex(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::with_capacity(self.program.len() * 16);
        for f in &self.program {
            for b in f.code.to_ne_bytes() {
                let _ = write!(s, "{b:02x}");
            }
            let _ = write!(s, "{:02x}{:02x}", f.jt, f.jf);
            for b in f.k.to_ne_bytes() {
                let _ = write!(s, "{b:02x}");
            }
        }
        s
    }

    /// Assembles the filter for the architecture this binary runs on.
    pub fn build() -> Result<Filter, SetupError> {
        if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            return Err(SetupError::Seccomp(format!(
                "unsupported architecture {}",
                std::env::consts::ARCH
            )));
        }
        let program = assemble(&special_syscalls()).map_err(SetupError::Seccomp)?;
        Ok(Filter { program })
    }

    /// The BPF program to install with `PR_SET_SECCOMP`/`SECCOMP_MODE_FILTER`.
    pub fn program(&self) -> &[libc::sock_filter] {
        &self.program
    }
}

/// Syscalls refused outright (architecture-specific ones only where they exist).
fn denied_syscalls() -> Vec<libc::c_long> {
    let mut v = vec![
        libc::SYS_ptrace,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_bpf,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_perf_event_open,
        libc::SYS_unshare,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_syslog,
        libc::SYS_acct,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_userfaultfd,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_quotactl,
        libc::SYS_lookup_dcookie,
        libc::SYS_fanotify_init,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([libc::SYS_iopl, libc::SYS_ioperm]);
    v
}

/// What the filter does with one syscall number that is not simply allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Eperm,
    Enosys,
    /// `clone`: EPERM if arg 0 carries a namespace flag, else allow.
    CloneFlags,
    /// `setns`: allow `setns(USERNS_FD, CLONE_NEWUSER)` only, else EPERM.
    SetnsUser,
}

/// Every syscall number with a verdict other than "allow", sorted.
fn special_syscalls() -> Vec<(u32, Verdict)> {
    let mut m: BTreeMap<u32, Verdict> = denied_syscalls()
        .into_iter()
        .map(|nr| (nr as u32, Verdict::Eperm))
        .collect();
    m.insert(libc::SYS_clone as u32, Verdict::CloneFlags);
    m.insert(libc::SYS_setns as u32, Verdict::SetnsUser);
    m.insert(libc::SYS_clone3 as u32, Verdict::Enosys);
    m.into_iter().collect()
}

/// Where a jump goes: the next instruction, or one of the shared tails.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Next,
    Index(usize),
    Clone,
    Setns,
    Eperm,
    Enosys,
}

/// One instruction before jump offsets are resolved.
struct Insn {
    code: u32,
    k: u32,
    jt: Label,
    jf: Label,
}

/// Assembles the program (see the module doc), checking every jump is forward and in range.
fn assemble(special: &[(u32, Verdict)]) -> Result<Vec<libc::sock_filter>, String> {
    const LD_W_ABS: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    const JEQ_K: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    const RET_K: u32 = libc::BPF_RET | libc::BPF_K;
    let stmt = |code, k| Insn {
        code,
        k,
        jt: Label::Next,
        jf: Label::Next,
    };
    let mut p = vec![
        stmt(LD_W_ABS, OFF_ARCH),
        Insn {
            code: JEQ_K,
            k: AUDIT_ARCH,
            jt: Label::Index(3),
            jf: Label::Next,
        },
        stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(LD_W_ABS, OFF_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    p.push(Insn {
        code: libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
        k: X32_SYSCALL_BIT,
        jt: Label::Enosys,
        jf: Label::Next,
    });
    search(&mut p, special);
    // The shared tails, after everything that jumps to them (cBPF jumps only go forward).
    let tails_at = p.len();
    p.push(stmt(LD_W_ABS, OFF_ARG0_LO));
    let ns_mask = CLONE_NS_FLAGS.iter().fold(0u64, |m, f| m | f);
    let ns_mask = u32::try_from(ns_mask).map_err(|_| "namespace flags above bit 31".to_string())?;
    p.push(Insn {
        code: libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K,
        k: ns_mask,
        jt: Label::Eperm,
        jf: Label::Next,
    });
    p.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
    // setns: fd and namespace type must both match (ints: the low 32 bits are what counts).
    p.push(stmt(LD_W_ABS, OFF_ARG0_LO));
    p.push(Insn {
        code: JEQ_K,
        k: USERNS_FD as u32,
        jt: Label::Next,
        jf: Label::Eperm,
    });
    p.push(stmt(LD_W_ABS, OFF_ARG1_LO));
    p.push(Insn {
        code: JEQ_K,
        k: libc::CLONE_NEWUSER as u32,
        jt: Label::Next,
        jf: Label::Eperm,
    });
    p.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
    p.push(stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
    p.push(stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    let target = |l: Label, i: usize| match l {
        Label::Next => i + 1,
        Label::Index(t) => t,
        Label::Clone => tails_at,
        Label::Setns => tails_at + 3,
        Label::Eperm => tails_at + 8,
        Label::Enosys => tails_at + 9,
    };
    if p.len() > 4096 {
        return Err(format!(
            "seccomp program too long ({} instructions)",
            p.len()
        ));
    }
    p.iter()
        .enumerate()
        .map(|(i, ins)| {
            let off = |l| {
                let t = target(l, i);
                if t <= i || t >= p.len() || t - i - 1 > 255 {
                    return Err(format!("seccomp jump {i} -> {t} out of range"));
                }
                Ok((t - i - 1) as u8)
            };
            let is_cond_jump = ins.code & 0x07 == libc::BPF_JMP && ins.code & 0xf0 != libc::BPF_JA;
            Ok(libc::sock_filter {
                code: ins.code as u16,
                jt: if is_cond_jump { off(ins.jt)? } else { 0 },
                jf: if is_cond_jump { off(ins.jf)? } else { 0 },
                k: ins.k,
            })
        })
        .collect()
}

/// Emits a binary search over `keys` (sorted) with the syscall number in the accumulator: every
/// path ends in a return or a jump to a tail.
fn search(p: &mut Vec<Insn>, keys: &[(u32, Verdict)]) {
    const LEAF: usize = 4;
    let to = |v: Verdict| match v {
        Verdict::Eperm => Label::Eperm,
        Verdict::Enosys => Label::Enosys,
        Verdict::CloneFlags => Label::Clone,
        Verdict::SetnsUser => Label::Setns,
    };
    if keys.len() <= LEAF {
        for &(nr, v) in keys {
            p.push(Insn {
                code: libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
                k: nr,
                jt: to(v),
                jf: Label::Next,
            });
        }
        p.push(Insn {
            code: libc::BPF_RET | libc::BPF_K,
            k: libc::SECCOMP_RET_ALLOW,
            jt: Label::Next,
            jf: Label::Next,
        });
        return;
    }
    let (low, high) = keys.split_at(keys.len() / 2);
    let split = p.len();
    p.push(Insn {
        code: libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
        k: high[0].0,
        jt: Label::Next, // patched below, once the lower half's length is known
        jf: Label::Next,
    });
    search(p, low);
    p[split].jt = Label::Index(p.len());
    search(p, high);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// seccomp_data as the kernel passes it.
    struct Data {
        nr: u32,
        arch: u32,
        args: [u64; 6],
    }

    /// A cBPF interpreter for the instructions seccomp programs use.
    fn run(p: &[libc::sock_filter], d: &Data) -> u32 {
        let word = |off: u32| -> u32 {
            match off {
                0 => d.nr,
                4 => d.arch,
                o if (16..64).contains(&o) && o % 4 == 0 => {
                    let a = d.args[((o - 16) / 8) as usize];
                    if (o - 16) % 8 == 0 {
                        a as u32
                    } else {
                        (a >> 32) as u32
                    }
                }
                o => panic!("load at {o}"),
            }
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let ins = p[pc];
            let code = u32::from(ins.code);
            pc += 1;
            match code & 0x07 {
                c if c == libc::BPF_LD => acc = word(ins.k),
                c if c == libc::BPF_ALU => {
                    assert_eq!(code & 0xf0, libc::BPF_AND);
                    acc &= ins.k
                }
                c if c == libc::BPF_RET => return ins.k,
                c if c == libc::BPF_JMP => {
                    let taken = match code & 0xf0 {
                        o if o == libc::BPF_JA => {
                            pc += ins.k as usize;
                            continue;
                        }
                        o if o == libc::BPF_JEQ => acc == ins.k,
                        o if o == libc::BPF_JGE => acc >= ins.k,
                        o if o == libc::BPF_JGT => acc > ins.k,
                        o if o == libc::BPF_JSET => acc & ins.k != 0,
                        o => panic!("jump op {o:#x}"),
                    };
                    pc += usize::from(if taken { ins.jt } else { ins.jf });
                }
                c => panic!("class {c}"),
            }
        }
    }

    fn eperm() -> u32 {
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32
    }
    fn enosys() -> u32 {
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
    }

    /// The policy of the module doc, written out plainly.
    fn expected(d: &Data) -> u32 {
        if d.arch != AUDIT_ARCH {
            return libc::SECCOMP_RET_KILL_PROCESS;
        }
        #[cfg(target_arch = "x86_64")]
        if d.nr >= X32_SYSCALL_BIT {
            return enosys();
        }
        let nr = libc::c_long::from(d.nr);
        if nr == libc::SYS_clone3 {
            return enosys();
        }
        if denied_syscalls().contains(&nr) {
            return eperm();
        }
        if nr == libc::SYS_setns {
            let ok = d.args[0] as u32 == USERNS_FD as u32
                && d.args[1] as u32 == libc::CLONE_NEWUSER as u32;
            return if ok { libc::SECCOMP_RET_ALLOW } else { eperm() };
        }
        if nr == libc::SYS_clone
            && CLONE_NS_FLAGS
                .iter()
                .any(|f| d.args[0] as u32 & *f as u32 != 0)
        {
            return eperm();
        }
        libc::SECCOMP_RET_ALLOW
    }

    fn cases() -> Vec<Data> {
        let mut nrs: Vec<u32> = (0..1100).collect();
        nrs.extend([
            0x3fff_ffff,
            0x4000_0000,
            0x4000_0038,
            0x4000_00a5,
            0x7fff_ffff,
            0xffff_ffff,
        ]);
        let ns_any = CLONE_NS_FLAGS.iter().fold(0u64, |m, f| m | f);
        let mut flags: Vec<u64> = vec![0, 0x11, (libc::CLONE_VM | libc::CLONE_VFORK) as u64];
        flags.extend(CLONE_NS_FLAGS.iter().map(|f| f | libc::SIGCHLD as u64));
        flags.extend([ns_any, u32::MAX as u64, u64::MAX, ns_any << 32, 1 << 63]);
        let fd = USERNS_FD as u64;
        let user = libc::CLONE_NEWUSER as u64;
        let setns_args: [[u64; 2]; 7] = [
            [fd, user],
            [fd | 1 << 32, user],
            [fd, 0],
            [fd, libc::CLONE_NEWNS as u64],
            [fd, user | libc::CLONE_NEWNET as u64],
            [3, user],
            [fd + 1, user],
        ];
        let mut v = Vec::new();
        for arch in [AUDIT_ARCH, 0xC000_003E, 0] {
            for a in setns_args {
                v.push(Data {
                    nr: libc::SYS_setns as u32,
                    arch,
                    args: [a[0], a[1], 0, 0, 0, 0],
                });
            }
        }
        for arch in [AUDIT_ARCH, 0x4000_0003, 0xC000_00B7, 0xC000_003E, 0] {
            for &nr in &nrs {
                let fl: &[u64] = if libc::c_long::from(nr) == libc::SYS_clone {
                    &flags
                } else {
                    &[0, u64::MAX]
                };
                for &a0 in fl {
                    v.push(Data {
                        nr,
                        arch,
                        args: [a0, 0, 0, 0, 0, 0],
                    });
                }
            }
        }
        v
    }

    #[test]
    fn program_answers_as_the_policy_says() {
        let f = Filter::build().expect("filter assembles");
        let p = f.program();
        assert!(p.len() < 256, "{} instructions", p.len());
        for d in cases() {
            assert_eq!(
                run(p, &d),
                expected(&d),
                "nr {} arch {:#x} arg0 {:#x}",
                d.nr,
                d.arch,
                d.args[0]
            );
        }
    }

    #[test]
    fn every_syscall_is_decided_quickly() {
        // The kernel evaluates the program for each syscall number at attach time; a deep search
        // would bring back the cost this module exists to avoid.
        let f = Filter::build().unwrap();
        let p = f.program();
        for nr in 0..1024u32 {
            let mut steps = 0;
            let mut pc = 0usize;
            loop {
                steps += 1;
                let ins = p[pc];
                let code = u32::from(ins.code);
                if code & 0x07 == libc::BPF_RET {
                    break;
                }
                pc += 1;
                if code & 0x07 == libc::BPF_JMP {
                    let acc = nr;
                    let taken = match code & 0xf0 {
                        o if o == libc::BPF_JEQ => acc == ins.k,
                        o if o == libc::BPF_JGE => acc >= ins.k,
                        // The argument check of clone: either way is a bounded tail.
                        _ => false,
                    };
                    pc += usize::from(if taken { ins.jt } else { ins.jf });
                }
            }
            assert!(steps <= 16, "syscall {nr}: {steps} instructions");
        }
    }

    #[test]
    fn same_answers_as_the_previous_two_stacked_programs() {
        // The reference: the same rules as a seccompiler deny-list stacked with a hand-written
        // guard, which the kernel combines by action precedence (most recent wins ties).
        use seccompiler::{
            BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
            SeccompFilter, SeccompRule, TargetArch,
        };
        let arch = if cfg!(target_arch = "x86_64") {
            TargetArch::x86_64
        } else {
            TargetArch::aarch64
        };
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = denied_syscalls()
            .into_iter()
            .chain([libc::SYS_setns])
            .map(|nr| (nr, Vec::new()))
            .collect();
        rules.insert(
            libc::SYS_clone,
            CLONE_NS_FLAGS
                .iter()
                .map(|&bit| {
                    SeccompRule::new(vec![SeccompCondition::new(
                        0,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(bit),
                        bit,
                    )
                    .unwrap()])
                    .unwrap()
                })
                .collect(),
        );
        let deny: BpfProgram = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )
        .unwrap()
        .try_into()
        .unwrap();
        let conv = |p: &BpfProgram| -> Vec<libc::sock_filter> {
            p.iter()
                .map(|i| libc::sock_filter {
                    code: i.code,
                    jt: i.jt,
                    jf: i.jf,
                    k: i.k,
                })
                .collect()
        };
        let deny = conv(&deny);
        let ld = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
        let jeq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
        let ret = libc::BPF_RET | libc::BPF_K;
        let ins = |code: u32, k, jt, jf| libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        };
        let mut guard = vec![
            ins(ld, OFF_ARCH, 0, 0),
            ins(jeq, AUDIT_ARCH, 1, 0),
            ins(ret, libc::SECCOMP_RET_KILL_PROCESS, 0, 0),
            ins(ld, OFF_NR, 0, 0),
        ];
        #[cfg(target_arch = "x86_64")]
        guard.push(ins(
            libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
            X32_SYSCALL_BIT,
            2,
            0,
        ));
        guard.push(ins(jeq, libc::SYS_clone3 as u32, 1, 0));
        guard.push(ins(ret, libc::SECCOMP_RET_ALLOW, 0, 0));
        guard.push(ins(ret, enosys(), 0, 0));
        // Kernel: iterate from the most recent filter, keep the first lowest (signed) action.
        let stacked = |d: &Data| {
            let action = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
            let mut r = run(&guard, d);
            let older = run(&deny, d);
            if action(older) < action(r) {
                r = older;
            }
            r
        };
        let f = Filter::build().unwrap();
        for d in cases() {
            if libc::c_long::from(d.nr) == libc::SYS_setns
                && expected(&d) == libc::SECCOMP_RET_ALLOW
            {
                continue; // the one intended difference: setns(USERNS_FD, CLONE_NEWUSER)
            }
            assert_eq!(
                run(f.program(), &d),
                stacked(&d),
                "nr {} arch {:#x}",
                d.nr,
                d.arch
            );
        }
    }
}
