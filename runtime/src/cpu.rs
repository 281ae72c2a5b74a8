//! CPU time spent by the calling thread, for measuring what a piece of synchronous work
//! costs independently of how busy the machine is (wall time on a loaded machine also
//! counts the time the thread waited for a core).
//!
//! Only meaningful around code that does not `await`: an async task may move between
//! threads, and another task may run on the thread in between.

use std::time::Duration;

/// The CPU time the calling thread has used so far, or `None` where the platform does not
/// tell (then callers record nothing rather than a wrong figure).
pub fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` only writes the `timespec` it is given, which lives for the
    // whole call; CLOCK_THREAD_CPUTIME_ID is a clock every Linux kernel we run on has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    Some(Duration::new(secs, nanos))
}

/// A stopwatch of the calling thread's CPU time.
#[derive(Debug, Clone, Copy)]
pub struct ThreadCpu {
    started: Option<Duration>,
}

impl ThreadCpu {
    pub fn start() -> ThreadCpu {
        ThreadCpu {
            started: thread_cpu_time(),
        }
    }

    /// CPU time the thread used since [`Self::start`] (`None` where it cannot be told).
    pub fn elapsed(&self) -> Option<Duration> {
        Some(thread_cpu_time()?.saturating_sub(self.started?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threads_cpu_time_is_told_and_grows_with_work_done() {
        let watch = ThreadCpu::start();
        let mut x = 1u64;
        // Enough work to move any clock with a resolution of a millisecond or better.
        for i in 0..50_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        std::hint::black_box(x);
        let used = watch.elapsed().expect("Linux tells a thread's CPU time");
        assert!(
            used > Duration::ZERO,
            "CPU time did not grow over a busy loop"
        );
    }

    #[test]
    fn another_threads_work_is_not_counted() {
        let watch = ThreadCpu::start();
        let before = watch.elapsed().expect("Linux tells a thread's CPU time");
        std::thread::spawn(|| {
            let mut x = 1u64;
            for i in 0..50_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
            x
        })
        .join()
        .expect("the busy thread ends");
        let after = watch.elapsed().expect("Linux tells a thread's CPU time");
        // This thread only waited for the join: it used far less than the busy thread's
        // whole loop (which takes at least tens of milliseconds in any build).
        assert!(
            after - before < Duration::from_millis(5),
            "the other thread's work was counted: {:?}",
            after - before
        );
    }
}
