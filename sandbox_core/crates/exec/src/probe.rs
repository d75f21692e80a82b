//! TEMPORARY timing probe.
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
pub const N: usize = 24;
static PAGE: AtomicPtr<u64> = AtomicPtr::new(std::ptr::null_mut());
static COUNT: AtomicU64 = AtomicU64::new(0);
static SUMS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];
static mut SAMPLES: Vec<[u64; N]> = Vec::new();
pub fn now() -> u64 {
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
pub fn page() -> *mut u64 {
    let p = PAGE.load(Ordering::Acquire);
    if !p.is_null() { return p; }
    let p = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ|libc::PROT_WRITE, libc::MAP_SHARED|libc::MAP_ANONYMOUS, -1, 0) } as *mut u64;
    PAGE.store(p, Ordering::Release);
    p
}
/// Mark point i (any process).
pub fn mark(i: usize) { unsafe { *page().add(i) = now(); } }
pub fn reset() { for i in 0..N { unsafe { *page().add(i) = 0; } } }
/// Called at the end of an exec: records deltas from point 0.
pub fn finish() {
    let mut s = [0u64; N];
    let t0 = unsafe { *page() };
    for i in 1..N { let v = unsafe { *page().add(i) }; s[i] = if v >= t0 && v != 0 { v - t0 } else { 0 }; }
    #[allow(static_mut_refs)]
    unsafe { SAMPLES.push(s); }
    let c = COUNT.fetch_add(1, Ordering::Relaxed) + 1;
    let _ = &SUMS;
    if c % 300 == 0 {
        #[allow(static_mut_refs)]
        let samples = unsafe { std::mem::take(&mut SAMPLES) };
        let mut line = String::from("PROBE medians(us):");
        for i in 1..N {
            let mut v: Vec<u64> = samples.iter().map(|s| s[i]).collect();
            if v.iter().all(|x| *x == 0) { continue; }
            v.sort();
            line += &format!(" {}={:.1}", i, v[v.len()/2] as f64 / 1000.0);
        }
        eprintln!("{line}");
    }
}
