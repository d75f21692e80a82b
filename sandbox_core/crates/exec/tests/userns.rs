//! Programs in a user namespace of their own (`ExecutorConfig::user_namespace`), started from a
//! thread that wears the seccomp filter: root inside is the namespace's base id outside, and the
//! one `setns` the filter allows is the way in. Needs root (the id maps name host ids).

mod common;

use std::sync::Arc;

use sandbox_exec::{seccomp::USERNS_FD, userns, Executor, ExecutorConfig};

// A range of its own, above ordinary and subordinate ids (the manager's `ids.py` hands out
// others from 2**28 on; this test keeps below them).
const BASE: u32 = (1 << 28) - (1 << 17);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[tokio::test]
async fn programs_enter_the_namespace_from_a_filtered_thread() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let ns = userns::create(BASE).expect("user namespace");
    assert_eq!(std::os::fd::AsRawFd::as_raw_fd(&ns), USERNS_FD);
    let ex = Executor::new(ExecutorConfig {
        uid: Some(0),
        gid: Some(0),
        user_namespace: Some(Arc::new(ns)),
        ..common::config()
    })
    .expect("executor");
    std::thread::scope(|s| {
        s.spawn(|| {
            ex.wear_seccomp_on_this_thread().expect("filter");
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let o = ex
                    .run(
                        common::cmd(&["/bin/sh", "-c", "id -u; cat /proc/self/uid_map; sleep 0"]),
                        Default::default(),
                    )
                    .await
                    .expect("runs");
                let out = String::from_utf8_lossy(&o.stdout).to_string();
                let fields: Vec<&str> = out.split_whitespace().collect();
                assert_eq!(fields, ["0", "0", &BASE.to_string(), "65536"], "{out}");
                // Inside, the filter still refuses namespaces: no way further in or out.
                let o = ex
                    .run(
                        common::cmd(&["/usr/bin/unshare", "-U", "true"]),
                        Default::default(),
                    )
                    .await
                    .expect("runs");
                assert_ne!(o.exit_code, Some(0));
            });
        });
    });
}

#[test]
fn a_range_that_does_not_fit_is_refused() {
    assert!(userns::create(0).is_err());
    assert!(userns::create(u32::MAX - 10).is_err());
}
