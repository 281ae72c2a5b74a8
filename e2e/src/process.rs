//! Child processes (etcd, kube-apiserver, ...) that never outlive the process that
//! started them.
//!
//! Three mechanisms, because each covers a different way the test binary can end:
//!
//! 1. [`Process`] stops its child on `Drop`: the normal path for a cluster owned by a test.
//! 2. An `atexit` hook stops every child still running when the process exits normally
//!    or through a failed test (the test harness calls `exit`). This is what cleans up
//!    the shared cluster, which lives in a `static` and so is never dropped.
//! 3. `PR_SET_PDEATHSIG(SIGKILL)` makes the kernel kill each child when its parent dies,
//!    even on `kill -9` of the test binary, where no Rust code runs at all.
//!
//! The parent-death signal fires when the *thread* that forked the child exits, not the
//! process. Test threads come and go (the shared cluster is started from whichever test
//! runs first), so every child is forked from one dedicated thread that lives as long as
//! the process: [`spawn_from_stable_thread`].
//!
//! Each child also gets its own process group, so a signal reaches anything it forks.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long a stopped child gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// What to run: enough to start the same process again after it was killed.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// Short name for messages, such as `kube-apiserver`.
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// stdout and stderr are appended here.
    pub log: PathBuf,
}

/// A running (or killed, restartable) child process.
#[derive(Debug)]
pub struct Process {
    spec: ProcessSpec,
    child: Mutex<Option<Child>>,
}

impl Process {
    /// Starts `spec`.
    pub fn start(spec: ProcessSpec) -> Result<Process> {
        let child = spawn(&spec)?;
        Ok(Process {
            spec,
            child: Mutex::new(Some(child)),
        })
    }

    pub fn spec(&self) -> &ProcessSpec {
        &self.spec
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The process id while the child has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.lock().as_ref().map(Child::id)
    }

    /// `Some(status)` once the child has exited (it is then reaped), `None` while it runs.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        let mut guard = self.lock();
        let child = guard.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                unregister(child.id());
                *guard = None;
                Some(status)
            }
            Ok(None) => None,
            Err(_) => None,
        }
    }

    /// Fails with the end of the log if the child has exited.
    pub fn check_running(&self) -> Result<()> {
        if self.pid().is_none() {
            bail!("{} is not running", self.spec.name);
        }
        if let Some(status) = self.exit_status() {
            bail!(
                "{} exited ({status}); last lines of {}:\n{}",
                self.spec.name,
                self.spec.log.display(),
                self.log_tail(40)
            );
        }
        Ok(())
    }

    /// SIGKILL (like `kill -9`), then waits for the child to be gone.
    pub fn kill(&self) {
        let mut guard = self.lock();
        if let Some(mut child) = guard.take() {
            signal_group(child.id(), libc::SIGKILL);
            let _ = child.wait();
            unregister(child.id());
        }
    }

    /// SIGTERM, then SIGKILL after `grace` if the child has not exited.
    pub fn stop(&self, grace: Duration) {
        let mut guard = self.lock();
        if let Some(mut child) = guard.take() {
            signal_group(child.id(), libc::SIGTERM);
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            signal_group(child.id(), libc::SIGKILL);
            let _ = child.wait();
            unregister(child.id());
        }
    }

    /// Kills the child if it still runs and starts it again with the same command line.
    pub fn restart(&self) -> Result<()> {
        self.kill();
        let child = spawn(&self.spec)?;
        *self.lock() = Some(child);
        Ok(())
    }

    /// The last `lines` lines of the log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.spec.log, lines)
    }

    fn lock(&self) -> MutexGuard<'_, Option<Child>> {
        self.child
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(STOP_GRACE);
    }
}

/// The last `lines` lines of a text file (empty if unreadable).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Whether a process with this id exists (and is not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Removes `dir` when the process exits (after the children are stopped).
pub fn remove_dir_at_exit(dir: PathBuf) {
    install_exit_hook();
    lock(&DIRS_TO_REMOVE).push(dir);
}

fn spawn(spec: &ProcessSpec) -> Result<Child> {
    let log = File::options()
        .create(true)
        .append(true)
        .open(&spec.log)
        .with_context(|| format!("cannot open {}", spec.log.display()))?;
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let child = spawn_from_stable_thread(command)
        .with_context(|| format!("cannot start {} ({})", spec.name, spec.program.display()))?;
    Ok(child)
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `command` from the long-lived spawner thread, in a new process group, with
/// `PR_SET_PDEATHSIG(SIGKILL)`. The child is registered for the exit hook.
pub fn spawn_from_stable_thread(mut command: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        install_exit_hook();
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("kubeflake-e2e-spawner".into())
            // The sender lives in a static, so this loop (and thread) never ends.
            .spawn(move || {
                for (mut command, reply) in rx {
                    let result = command.spawn();
                    if let Ok(child) = &result {
                        register(child.id());
                    }
                    let _ = reply.send(result);
                }
            })
            .expect("cannot start the kubeflake-e2e spawner thread");
        tx
    });

    // SAFETY: getpid is async-signal-safe; it runs before the fork.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
    // functions (setpgid, prctl, getppid) without allocating.
    unsafe {
        command.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; then nobody would kill us.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .send((command, reply_tx))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the spawner thread did not answer"))?
}

/// Process ids of children that may still run; used by the exit hook.
static LIVE: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());
static DIRS_TO_REMOVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn register(pid: u32) {
    lock(&LIVE).insert(pid);
}

fn unregister(pid: u32) {
    lock(&LIVE).remove(&pid);
}

/// Sends `signal` to the child's process group (its pid, see `setpgid(0, 0)` above).
fn signal_group(pid: u32, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: plain syscall; a vanished group only yields ESRCH.
        unsafe {
            libc::kill(-pid, signal);
        }
    }
}

fn install_exit_hook() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // SAFETY: registers a plain `extern "C" fn` with no captured state.
        unsafe {
            libc::atexit(stop_everything_at_exit);
        }
    });
}

/// Stops all registered children (SIGTERM, then SIGKILL after [`STOP_GRACE`]) and removes
/// the registered directories.
extern "C" fn stop_everything_at_exit() {
    let pids: Vec<u32> = std::mem::take(&mut *lock(&LIVE)).into_iter().collect();
    for &pid in &pids {
        signal_group(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + STOP_GRACE;
    let mut remaining = pids;
    while !remaining.is_empty() && Instant::now() < deadline {
        remaining.retain(|&pid| !reaped(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    for &pid in &remaining {
        signal_group(pid, libc::SIGKILL);
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            // SAFETY: waits for our own child; blocking is fine after SIGKILL.
            unsafe {
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
    for dir in std::mem::take(&mut *lock(&DIRS_TO_REMOVE)) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Reaps `pid` if it has exited; true when it is gone (or was never our child).
fn reaped(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    // SAFETY: non-blocking wait on our own child.
    let r = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    r != 0
}

/// What a finished command printed.
#[derive(Debug, Clone)]
pub struct CommandOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutput {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// stdout if the command succeeded, otherwise an error carrying stderr.
    pub fn ok(self) -> Result<String> {
        if self.status.success() {
            Ok(self.stdout)
        } else {
            bail!(
                "command failed ({}):\nstderr: {}\nstdout: {}",
                self.status,
                self.stderr,
                self.stdout
            )
        }
    }
}

/// Command-line arguments from string slices.
pub fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

/// Removes temporary state directories named `prefix...` whose owning process is gone (for example a test
/// binary killed with `kill -9`, whose exit hook never ran).
pub fn remove_stale_dirs(prefix: &str) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_ours = entry.file_name().to_string_lossy().starts_with(prefix);
        if !is_ours {
            continue;
        }
        let owner = std::fs::read_to_string(path.join("owner.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        if owner.is_some_and(|pid| !pid_alive(pid)) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}
