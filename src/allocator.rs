//! glibc's allocator held to what the operator uses (its image is glibc-based: distroless
//! `cc`). A heap profile at 100 Clairs found 23 MiB live at the heap's peak; the same run
//! without the profiler peaked at 50 MiB resident (22 of them before the first Clair):
//! glibc keeps freed memory in per-thread arenas. One arena serves the runtime's threads,
//! blocks of 128 KiB and more (response bodies, large lists) are mapped and unmapped on
//! their own, and freed pages go back to the kernel every ten seconds (docs/performance.md
//! has what these and the Event change did).

use std::time::Duration;

/// Blocks this large or larger get a mapping of their own, returned to the kernel when freed.
/// Setting it also stops glibc raising it (up to 32 MiB) each time a large block is freed,
/// after which large buffers come from the arenas and leave holes there.
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;

/// One malloc arena, and a fixed mapping threshold. Call before any thread starts.
///
/// One arena, not two: at 300 Clairs, at rest, `/proc/PID/smaps` showed 41 MiB resident:
/// 18 of code, a main heap of 14 and 3 more in the mapping a second arena takes; each
/// thread's cache (glibc's tcache) still serves most small allocations without the arena's
/// lock (docs/performance.md has what it changed).
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// How often freed memory is handed back.
const TRIM_EVERY: Duration = Duration::from_secs(10);

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
