//! The seccomp deny-list every program runs under.
//!
//! A deny-list (default allow) keeps every language runtime and compiler working while closing the
//! kernel interfaces a sandbox escape or a noisy neighbour would need: namespaces, mounts, module
//! and key management, tracing other processes, clock changes. The filter is compiled once per
//! executor; the child only hands the prebuilt program to the kernel (no allocation after fork).
//!
//! The program is two stacked filters because one seccompiler filter has a single match action:
//! the deny-list answers `EPERM`, the guard answers `ENOSYS`. When several filters are installed
//! the kernel takes the action of highest precedence, and `ERRNO` outranks `ALLOW`, so the two
//! compose into "EPERM for the deny-list, ENOSYS for clone3 and x32 calls, allow the rest".

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

pub use seccompiler::sock_filter;

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

/// On x86_64, syscall numbers with this bit set are the x32 ABI: same audit arch, different
/// numbers, so a deny-list keyed on x86_64 numbers would not see them.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// A compiled filter, ready to be installed after fork.
#[derive(Debug, Clone)]
pub struct Filter {
    programs: Vec<BpfProgram>,
}

impl Filter {
    /// Compiles the deny-list for the architecture this binary runs on.
    pub fn build() -> Result<Filter, SetupError> {
        let arch = target_arch()?;
        let deny = SeccompFilter::new(
            deny_rules().map_err(|e| SetupError::Seccomp(e.to_string()))?,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )
        .map_err(|e| SetupError::Seccomp(e.to_string()))?;
        let deny: BpfProgram = deny
            .try_into()
            .map_err(|e: seccompiler::BackendError| SetupError::Seccomp(e.to_string()))?;
        Ok(Filter {
            programs: vec![deny, guard_program(arch)],
        })
    }

    /// The BPF programs to install, in order, each with `PR_SET_SECCOMP`/`SECCOMP_MODE_FILTER`.
    pub fn programs(&self) -> &[BpfProgram] {
        &self.programs
    }
}

fn target_arch() -> Result<TargetArch, SetupError> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else {
        Err(SetupError::Seccomp(format!(
            "unsupported architecture {}",
            std::env::consts::ARCH
        )))
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
        libc::SYS_setns,
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

fn deny_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = denied_syscalls()
        .into_iter()
        .map(|nr| (nr, Vec::new()))
        .collect();
    // One rule per namespace bit: rules of a syscall are OR-ed, conditions of a rule AND-ed, and a
    // single masked compare cannot express "any of these bits".
    let clone_rules = CLONE_NS_FLAGS
        .iter()
        .map(|&bit| {
            SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(bit),
                bit,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    Ok(rules)
}

/// `clone3` passes its flags in memory, which seccomp cannot inspect; answering ENOSYS makes
/// glibc fall back to `clone`, whose flags the deny-list does check. On x86_64 the x32 ABI is
/// closed the same way. Hand-written because seccompiler matches exact syscall numbers only.
fn guard_program(arch: TargetArch) -> BpfProgram {
    const LD_W_ABS: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    const JEQ_K: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    const RET_K: u32 = libc::BPF_RET | libc::BPF_K;
    // Offsets in struct seccomp_data.
    const OFF_NR: u32 = 0;
    const OFF_ARCH: u32 = 4;
    let stmt = |code: u32, k| sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code: u32, k, jt, jf| sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let audit_arch = match arch {
        TargetArch::aarch64 => 0xC000_00B7, // AUDIT_ARCH_AARCH64
        _ => 0xC000_003E,                   // AUDIT_ARCH_X86_64
    };
    let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let mut p = vec![
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JEQ_K, audit_arch, 1, 0),
        stmt(RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(LD_W_ABS, OFF_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    p.push(jump(
        libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
        X32_SYSCALL_BIT,
        2,
        0,
    ));
    p.push(jump(JEQ_K, libc::SYS_clone3 as u32, 1, 0));
    p.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
    p.push(stmt(RET_K, enosys));
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_for_this_architecture() {
        let f = Filter::build().expect("filter compiles");
        assert_eq!(f.programs().len(), 2);
        assert!(f.programs().iter().all(|p| !p.is_empty() && p.len() < 4096));
    }

    #[test]
    fn guard_jumps_stay_in_bounds() {
        let p = guard_program(target_arch().unwrap());
        for (i, ins) in p.iter().enumerate() {
            if ins.code & 0x07 == 0x05 {
                assert!(i + 1 + (ins.jt.max(ins.jf) as usize) < p.len());
            }
        }
        assert_eq!(p.last().map(|i| i.code), Some(0x06));
    }
}
