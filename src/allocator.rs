//! glibc's allocator held to what the operator uses (its image is glibc-based: distroless
//! `cc`). A heap profile at 100 Clairs found 23 MiB live at the heap's peak; the same run
//! without the profiler peaked at 50 MiB resident (22 of them before the first Clair):
//! glibc keeps freed memory in per-thread arenas. Two arenas serve the runtime's threads,
//! and freed pages go back to the kernel every half minute (docs/performance.md has what
//! this and the Event change did).

use std::time::Duration;

/// At most two malloc arenas. Call before any thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// How often freed memory is handed back.
const TRIM_EVERY: Duration = Duration::from_secs(30);

/// Hands freed memory back to the kernel every [`TRIM_EVERY`], forever.
pub async fn trim_periodically() {
    let mut every = tokio::time::interval(TRIM_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim is thread-safe; it only returns free pages to the kernel.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
