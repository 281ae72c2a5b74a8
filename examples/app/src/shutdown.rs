//! Shutdown on SIGTERM (what kubelet sends) or SIGINT, through a self-pipe.
//!
//! The signal handler only `write(2)`s the signal number to a non-blocking pipe, which is
//! async-signal-safe. The accept loop `poll(2)`s the listener and the pipe's read end
//! together, so it wakes at once on a signal without any timer. Tests call
//! [`Shutdown::trigger`], which writes to the same pipe.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The write end the signal handler uses; -1 when no handler is installed.
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

/// Byte written by [`Shutdown::trigger`] (signal numbers are never 0).
const TRIGGERED: u8 = 0;

pub struct Shutdown {
    read: OwnedFd,
    write: OwnedFd,
    requested: AtomicBool,
}

/// Why the server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Signal(i32),
    Requested,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Reason::Signal(libc::SIGTERM) => f.write_str("SIGTERM"),
            Reason::Signal(libc::SIGINT) => f.write_str("SIGINT"),
            Reason::Signal(n) => write!(f, "signal {n}"),
            Reason::Requested => f.write_str("shutdown request"),
        }
    }
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn set_flags(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a file descriptor we own, with integer arguments only.
    unsafe {
        let fl = check(libc::fcntl(fd, libc::F_GETFL))?;
        check(libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK))?;
        let fd_flags = check(libc::fcntl(fd, libc::F_GETFD))?;
        check(libc::fcntl(fd, libc::F_SETFD, fd_flags | libc::FD_CLOEXEC))?;
    }
    Ok(())
}

extern "C" fn on_signal(signal: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    let byte = signal as u8;
    // SAFETY: write(2) is async-signal-safe; the pipe is non-blocking, so a full pipe
    // (shutdown already pending) makes it fail instead of blocking. errno is saved and
    // restored so the interrupted code does not see it change.
    unsafe {
        let errno = errno_location();
        let saved = errno.map(|p| *p);
        libc::write(fd, (&byte as *const u8).cast(), 1);
        if let (Some(p), Some(saved)) = (errno, saved) {
            *p = saved;
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
unsafe fn errno_location() -> Option<*mut libc::c_int> {
    // SAFETY: always valid for the calling thread.
    Some(unsafe { libc::__errno_location() })
}

#[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
unsafe fn errno_location() -> Option<*mut libc::c_int> {
    // SAFETY: always valid for the calling thread.
    Some(unsafe { libc::__error() })
}

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd"
)))]
unsafe fn errno_location() -> Option<*mut libc::c_int> {
    None
}

impl Shutdown {
    pub fn new() -> io::Result<Shutdown> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe(2) fills the two-element array on success.
        check(unsafe { libc::pipe(fds.as_mut_ptr()) })?;
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        set_flags(read.as_raw_fd())?;
        set_flags(write.as_raw_fd())?;
        Ok(Shutdown {
            read,
            write,
            requested: AtomicBool::new(false),
        })
    }

    /// Makes SIGTERM and SIGINT trigger this shutdown. One `Shutdown` per process may do
    /// this; it must live until the process exits (main keeps it to the end).
    pub fn install_signal_handlers(&self) -> io::Result<()> {
        SIGNAL_PIPE.store(self.write.as_raw_fd(), Ordering::SeqCst);
        for signal in [libc::SIGTERM, libc::SIGINT] {
            // SAFETY: a zeroed sigaction is valid; we set a plain handler that only
            // calls async-signal-safe functions. SA_RESTART keeps the blocking reads
            // and writes of connection threads from failing with EINTR.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                check(libc::sigaction(signal, &action, std::ptr::null_mut()))?;
            }
        }
        Ok(())
    }

    /// Asks the server to stop, as a signal would (used by tests; an app embedding this
    /// server could call it from anywhere).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn trigger(&self) {
        self.requested.store(true, Ordering::SeqCst);
        let byte = TRIGGERED;
        // SAFETY: writing one byte from a valid buffer to our own non-blocking pipe; if
        // the pipe is full a wake-up is already pending.
        unsafe {
            libc::write(self.write.as_raw_fd(), (&byte as *const u8).cast(), 1);
        }
    }

    /// The descriptor that becomes readable when shutdown was asked for.
    pub fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    /// Reads what the pipe holds: the reason, if shutdown was asked for.
    pub fn take(&self) -> Option<Reason> {
        let mut reason = None;
        let mut buf = [0u8; 16];
        loop {
            // SAFETY: reading into a local buffer of the given size from our own fd.
            let n =
                unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            for &b in &buf[..n as usize] {
                reason.get_or_insert(if b == TRIGGERED {
                    Reason::Requested
                } else {
                    Reason::Signal(i32::from(b))
                });
            }
        }
        if reason.is_some() {
            self.requested.store(true, Ordering::SeqCst);
        }
        reason.or_else(|| self.is_requested().then_some(Reason::Requested))
    }

    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

impl Drop for Shutdown {
    fn drop(&mut self) {
        // Never leave the handler writing to a closed (and maybe reused) descriptor.
        let _ = SIGNAL_PIPE.compare_exchange(
            self.write.as_raw_fd(),
            -1,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_is_seen_once_through_the_pipe() {
        let shutdown = Shutdown::new().unwrap();
        assert!(!shutdown.is_requested());
        assert_eq!(shutdown.take(), None);
        shutdown.trigger();
        shutdown.trigger();
        assert!(shutdown.is_requested());
        assert_eq!(shutdown.take(), Some(Reason::Requested));
        // The pipe is drained, the flag stays.
        assert_eq!(shutdown.take(), Some(Reason::Requested));
    }

    #[test]
    fn reasons_read_well() {
        assert_eq!(Reason::Signal(libc::SIGTERM).to_string(), "SIGTERM");
        assert_eq!(Reason::Signal(libc::SIGINT).to_string(), "SIGINT");
        assert_eq!(Reason::Requested.to_string(), "shutdown request");
    }
}
