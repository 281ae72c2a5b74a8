//! The three databases, each started from the Debian package's binaries in a private temp
//! directory and reached only over a unix socket (PostgreSQL and MariaDB listen on no TCP
//! port at all), stopped and removed when dropped, also when a test fails. A missing
//! binary is an error, never a skip: scripts/install-deps.sh installs them.
//!
//! PostgreSQL refuses to run as root, so as root it runs as the `postgres` user the package
//! creates (`setpriv`, which execs, so the server is the process the guard stops).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kubeflake_e2e::process::{Process, ProcessSpec};
use tempfile::TempDir;

use super::{CLIENT_TIMEOUT, run_client, wait_until};

const START_LIMIT: Duration = Duration::from_secs(60);
const INSTALL_HINT: &str = "run scripts/install-deps.sh (Debian packages postgresql, \
                            mariadb-server and sqlite3)";

fn existing(path: PathBuf, package: &str) -> Result<PathBuf> {
    if path.exists() {
        Ok(path)
    } else {
        bail!(
            "{} is missing: the {package} package is not installed; {INSTALL_HINT}",
            path.display()
        )
    }
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// A user's uid and gid, from the password database.
fn user_ids(name: &str) -> Result<(libc::uid_t, libc::gid_t)> {
    let c_name = std::ffi::CString::new(name)?;
    // SAFETY: getpwnam reads a static entry; the fields are copied out at once, and the
    // tests call it from one thread at a time (database start-up).
    let entry = unsafe { libc::getpwnam(c_name.as_ptr()) };
    if entry.is_null() {
        bail!("there is no user {name:?} (the postgresql package creates it); {INSTALL_HINT}");
    }
    // SAFETY: checked non-null above.
    Ok(unsafe { ((*entry).pw_uid, (*entry).pw_gid) })
}

fn chown(path: &Path, (uid, gid): (libc::uid_t, libc::gid_t)) -> Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .with_context(|| format!("chown {}", path.display()))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A private PostgreSQL server (the newest major version installed).
pub struct Postgres {
    // Declared first: the server stops before its directory is removed.
    server: Process,
    bin: PathBuf,
    socket_dir: PathBuf,
    _dir: TempDir,
}

const PG_PORT: &str = "5432";

impl Postgres {
    pub fn start() -> Result<Postgres> {
        let bin = newest_postgres_bin()?;
        let dir = tempfile::Builder::new()
            .prefix("kubeflake-sql-postgres-")
            .tempdir()?;
        if is_root() {
            chown(dir.path(), user_ids("postgres")?)?;
        }
        let data = dir.path().join("data");
        let mut init_args = vec![OsString::from("-D"), data.clone().into_os_string()];
        init_args.extend(os(&[
            "-U",
            "kf",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ]));
        let (program, args) = as_postgres(bin.join("initdb"), init_args)?;
        run_client(&program, &args, "", START_LIMIT).context("initdb")?;
        let mut server_args = vec![
            OsString::from("-D"),
            data.into_os_string(),
            "-k".into(),
            dir.path().as_os_str().to_owned(),
        ];
        server_args.extend(os(&[
            "-p",
            PG_PORT,
            "-c",
            "listen_addresses=",
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
        ]));
        let (program, args) = as_postgres(bin.join("postgres"), server_args)?;
        let server = Process::start(ProcessSpec {
            name: "postgres".into(),
            program,
            args,
            log: dir.path().join("postgres.log"),
        })?;
        let pg = Postgres {
            server,
            bin,
            socket_dir: dir.path().to_path_buf(),
            _dir: dir,
        };
        wait_until(
            "postgres",
            START_LIMIT,
            || pg.server.check_running(),
            || pg.run("SELECT 1;").map(drop),
        )?;
        Ok(pg)
    }

    /// Runs a psql script (stopping at the first error); rows come back tab-separated,
    /// without headers.
    pub fn run(&self, script: &str) -> Result<String> {
        let socket = self.socket_dir.to_string_lossy().into_owned();
        let args = [
            "-X",
            "-q",
            "-A",
            "-t",
            "-F",
            "\t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            &socket,
            "-p",
            PG_PORT,
            "-U",
            "kf",
            "-d",
            "postgres",
        ];
        run_client(&self.bin.join("psql"), &args, script, CLIENT_TIMEOUT)
    }
}

/// `program args` as the `postgres` user when the tests run as root (through setpriv,
/// which execs it), unchanged otherwise.
fn as_postgres(program: PathBuf, args: Vec<OsString>) -> Result<(PathBuf, Vec<OsString>)> {
    if !is_root() {
        return Ok((program, args));
    }
    let setpriv = existing("/usr/bin/setpriv".into(), "util-linux")?;
    // A changed uid clears the parent-death signal the process module sets: set it again.
    let mut all = os(&[
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--pdeathsig=KILL",
        "--",
    ]);
    all.push(program.into_os_string());
    all.extend(args);
    Ok((setpriv, all))
}

/// `/usr/lib/postgresql/<major>/bin` of the newest major version with a server.
fn newest_postgres_bin() -> Result<PathBuf> {
    let root = Path::new("/usr/lib/postgresql");
    let newest = std::fs::read_dir(root)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((major, bin))
        })
        .max();
    match newest {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "no PostgreSQL server under {}/*/bin; {INSTALL_HINT}",
            root.display()
        ),
    }
}

/// A private MariaDB server.
pub struct MariaDb {
    server: Process,
    socket: PathBuf,
    _dir: TempDir,
}

impl MariaDb {
    pub fn start() -> Result<MariaDb> {
        let server_bin = existing("/usr/sbin/mariadbd".into(), "mariadb-server")?;
        let install = existing("/usr/bin/mariadb-install-db".into(), "mariadb-server")?;
        existing("/usr/bin/mariadb".into(), "mariadb-client")?;
        let dir = tempfile::Builder::new()
            .prefix("kubeflake-sql-mariadb-")
            .tempdir()?;
        let data = dir.path().join("data");
        let socket = dir.path().join("mariadb.sock");
        let user = if is_root() {
            "root".to_string()
        } else {
            whoami()
        };
        let datadir = format!("--datadir={}", data.display());
        let user_arg = format!("--user={user}");
        run_client(
            &install,
            &[
                "--no-defaults",
                &datadir,
                &user_arg,
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            "",
            START_LIMIT,
        )
        .context("mariadb-install-db")?;
        let server = Process::start(ProcessSpec {
            name: "mariadbd".into(),
            program: server_bin,
            args: os(&[
                "--no-defaults",
                &datadir,
                &user_arg,
                &format!("--socket={}", socket.display()),
                &format!("--pid-file={}", dir.path().join("mariadb.pid").display()),
                "--skip-networking",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=64M",
                "--innodb-use-native-aio=0",
                "--innodb-flush-log-at-trx-commit=0",
            ]),
            log: dir.path().join("mariadb.log"),
        })?;
        let db = MariaDb {
            server,
            socket,
            _dir: dir,
        };
        wait_until(
            "mariadbd",
            START_LIMIT,
            || db.server.check_running(),
            || db.client(None, "SELECT 1;").map(drop),
        )?;
        db.client(None, "CREATE DATABASE kf;")?;
        Ok(db)
    }

    fn client(&self, database: Option<&str>, script: &str) -> Result<String> {
        let socket = format!("--socket={}", self.socket.display());
        let mut args = vec![
            "--no-defaults",
            &socket,
            "--user=root",
            "--batch",
            "--skip-column-names",
        ];
        if let Some(db) = database {
            args.extend(["--database", db]);
        }
        run_client(Path::new("/usr/bin/mariadb"), &args, script, CLIENT_TIMEOUT)
    }

    /// Runs a script in database `kf` (stopping at the first error); rows come back
    /// tab-separated, without headers, NULL as `NULL`.
    pub fn run(&self, script: &str) -> Result<String> {
        self.client(Some("kf"), script)
    }
}

fn whoami() -> String {
    std::env::var("USER").unwrap_or_else(|_| "nobody".into())
}

/// A private SQLite database file, driven by the sqlite3 shell.
pub struct Sqlite {
    bin: PathBuf,
    file: PathBuf,
    _dir: TempDir,
}

impl Sqlite {
    pub fn open() -> Result<Sqlite> {
        let bin = existing("/usr/bin/sqlite3".into(), "sqlite3")?;
        let dir = tempfile::Builder::new()
            .prefix("kubeflake-sql-sqlite-")
            .tempdir()?;
        Ok(Sqlite {
            bin,
            file: dir.path().join("kf.db"),
            _dir: dir,
        })
    }

    /// Runs a sqlite3 shell script (stopping at the first error) with rows printed
    /// tab-separated, NULL as an empty cell.
    pub fn run(&self, script: &str) -> Result<String> {
        let file = self.file.to_string_lossy().into_owned();
        let script = format!(".mode tabs\n{script}");
        run_client(
            &self.bin,
            &["-batch", "-bail", &file],
            &script,
            CLIENT_TIMEOUT,
        )
    }
}
