//! kubeflake-example-app: an application that gets its IDs from the kubeflake sidecar in
//! its pod, the way any app would: HTTP to `$KUBEFLAKE_URL` on the pod's loopback.
//!
//! Standard library only (plus `libc` for SIGTERM and `serde_json`), so it builds fast
//! into a small static binary that runs in a `FROM scratch` image. See README.md.

mod app;
mod server;
mod shutdown;
mod sidecar;

#[cfg(test)]
mod roundtrip_tests;

use std::ffi::OsString;
use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::sync::Arc;

use crate::app::App;
use crate::server::Limits;
use crate::shutdown::Shutdown;
use crate::sidecar::{SOCKET_ENV, Sidecar, SidecarUrl, URL_ENV};

const NAME: &str = "kubeflake-example-app";
const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
const LISTEN_ENV: &str = "APP_LISTEN";
const FIRST_ID_ENV: &str = "APP_FIRST_ID";
const POD_ENV: &str = "POD_NAME";

const USAGE: &str = "\
kubeflake-example-app: serves IDs from the kubeflake sidecar in its pod

Usage: kubeflake-example-app [--listen ADDR] [--first-id]

Options:
  --listen ADDR   address to serve on, IP:PORT [env: APP_LISTEN] [default: 0.0.0.0:8080]
  --first-id      before listening, take one ID from the sidecar (one GET /id, no retry)
                  and exit 1 if that fails; then serve it on GET /first
                  [env: APP_FIRST_ID=true|false]
  -h, --help      print this help
  -V, --version   print the version

Environment:
  KUBEFLAKE_URL   the sidecar, http://IP:PORT (required; set by the kubeflake webhook)
  KUBEFLAKE_SOCKET  the sidecar's Unix socket; when set, calls go over it instead of TCP
                  (set by the webhook too)
  POD_NAME        reported in answers (downward API; optional)

Routes: GET / (one ID), GET /ids?count=N (1..=1000), GET /first (the ID taken at start
with --first-id), GET /healthz, GET /readyz";

#[derive(Debug, Clone, PartialEq, Eq)]
struct Config {
    listen: SocketAddr,
    sidecar: SidecarUrl,
    /// `KUBEFLAKE_SOCKET`, when set and not empty.
    socket: Option<std::path::PathBuf>,
    pod: String,
    /// `--first-id` / `APP_FIRST_ID`: take one ID before listening, exit 1 if that fails.
    first_id: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Run(Config),
    Help,
    Version,
}

fn env_string(
    env: &dyn Fn(&str) -> Option<OsString>,
    name: &str,
) -> Result<Option<String>, String> {
    match env(name) {
        None => Ok(None),
        Some(v) => v
            .into_string()
            .map(Some)
            .map_err(|v| format!("{name}={v:?} is not valid UTF-8")),
    }
}

/// Reads the command line (without the program name) and the environment.
fn parse_config(
    args: impl IntoIterator<Item = OsString>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Command, String> {
    let mut listen_flag: Option<String> = None;
    let mut first_id_flag = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let arg = arg
            .into_string()
            .map_err(|a| format!("argument {a:?} is not valid UTF-8"))?;
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--first-id" => first_id_flag = true,
            "--listen" => {
                let value = args
                    .next()
                    .ok_or("--listen needs a value, e.g. --listen 0.0.0.0:8080")?
                    .into_string()
                    .map_err(|a| format!("--listen {a:?} is not valid UTF-8"))?;
                listen_flag = Some(value);
            }
            other => {
                if let Some(value) = other.strip_prefix("--listen=") {
                    listen_flag = Some(value.to_string());
                } else {
                    return Err(format!("unexpected argument {other:?}; see --help"));
                }
            }
        }
    }
    let (listen_raw, listen_source) = match (listen_flag, env_string(env, LISTEN_ENV)?) {
        (Some(flag), _) => (flag, "--listen"),
        (None, Some(from_env)) => (from_env, LISTEN_ENV),
        (None, None) => (DEFAULT_LISTEN.to_string(), "the default listen address"),
    };
    let listen = listen_raw.trim().parse::<SocketAddr>().map_err(|_| {
        format!("{listen_source} {listen_raw:?} is not an address: expected IP:PORT, e.g. {DEFAULT_LISTEN}")
    })?;
    let sidecar = match env_string(env, URL_ENV)? {
        None => {
            return Err(format!(
                "{URL_ENV} is not set: set it to the sidecar's address, e.g. \
                 {URL_ENV}=http://127.0.0.1:7070 (the kubeflake webhook sets it in pods \
                 labelled kubeflake.io/sequence; for a local try, run kubeflake-sidecar)"
            ));
        }
        Some(raw) => SidecarUrl::parse(&raw).map_err(|e| e.to_string())?,
    };
    let socket = env_string(env, SOCKET_ENV)?
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .map(|s| {
            if s.starts_with('/') {
                Ok(std::path::PathBuf::from(s))
            } else {
                Err(format!(
                    "{SOCKET_ENV}={s:?} is not an absolute path: set it to the sidecar's socket, \
                     e.g. /var/run/kubeflake-socket/kubeflake.sock, or unset it to use {URL_ENV}"
                ))
            }
        })
        .transpose()?;
    let pod = env_string(env, POD_ENV)?.unwrap_or_default();
    // The flag switches it on; the variable can too (an image's args need not change).
    let first_id = first_id_flag || parse_switch(FIRST_ID_ENV, env_string(env, FIRST_ID_ENV)?)?;
    Ok(Command::Run(Config {
        listen,
        sidecar,
        socket,
        pod,
        first_id,
    }))
}

/// An on/off variable: `true`/`1` or `false`/`0` (any case), unset or empty is off.
fn parse_switch(name: &str, value: Option<String>) -> Result<bool, String> {
    let Some(raw) = value else { return Ok(false) };
    match raw.trim().to_ascii_lowercase().as_str() {
        "" | "false" | "0" => Ok(false),
        "true" | "1" => Ok(true),
        _ => Err(format!(
            "{name}={raw:?} is not a switch: set it to true or false (or 1 or 0)"
        )),
    }
}

fn main() -> ExitCode {
    let command = parse_config(std::env::args_os().skip(1), &|name| std::env::var_os(name));
    let config = match command {
        Ok(Command::Run(config)) => config,
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            println!("{NAME} {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("{NAME}: {message}");
            return ExitCode::from(2);
        }
    };
    // Handlers first, so a SIGTERM right after start is not fatal.
    let shutdown = match Shutdown::new().and_then(|s| s.install_signal_handlers().map(|()| s)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{NAME}: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut app = App {
        sidecar: Sidecar::new(config.sidecar.clone()).with_socket(config.socket.clone()),
        pod: config.pod.clone(),
        first_id: None,
    };
    if config.first_id {
        // The app's very first action: one ID, before it listens, and no retry. An app
        // that needs an ID to start must not start without one; the startup probe the
        // kubeflake webhook gives its sidecar starts the app only once the sidecar can issue.
        if let Err(e) = app.take_first_id() {
            eprintln!("{NAME}: cannot take the first ID (--first-id), exiting: {e}");
            return ExitCode::FAILURE;
        }
    }
    let listener = match TcpListener::bind(config.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{NAME}: cannot listen on {}: {e}", config.listen);
            return ExitCode::FAILURE;
        }
    };
    let local = listener.local_addr().unwrap_or(config.listen);
    let via = match &config.socket {
        Some(path) => format!(" over {SOCKET_ENV}={}", path.display()),
        None => String::new(),
    };
    let first = match app.first_id {
        Some(id) => format!(", first ID {id}"),
        None => String::new(),
    };
    eprintln!(
        "{NAME} {}: listening on {local}, sidecar {URL_ENV}={}{via}, pod {:?}{first}",
        env!("CARGO_PKG_VERSION"),
        config.sidecar,
        config.pod
    );
    let app = Arc::new(app);
    let limits = Limits::default();
    match server::serve(listener, app, &shutdown, limits) {
        Ok(stopped) if stopped.abandoned == 0 => {
            eprintln!(
                "{NAME}: {}: stopped accepting, requests in flight finished, exiting",
                stopped.reason
            );
            ExitCode::SUCCESS
        }
        Ok(stopped) => {
            eprintln!(
                "{NAME}: {}: stopped accepting, {} connection(s) still open after {:?}, exiting",
                stopped.reason, stopped.abandoned, limits.drain
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{NAME}: serving failed: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Command, String> {
        let env: Vec<(String, OsString)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        parse_config(args.iter().map(OsString::from), &move |name| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    fn config(args: &[&str], env: &[(&str, &str)]) -> Config {
        match run(args, env) {
            Ok(Command::Run(c)) => c,
            other => panic!("{args:?} {env:?}: {other:?}"),
        }
    }

    const URL: (&str, &str) = ("KUBEFLAKE_URL", "http://127.0.0.1:7070");

    #[test]
    fn defaults_and_overrides() {
        let c = config(&[], &[URL]);
        assert_eq!(c.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(c.sidecar.addr, "127.0.0.1:7070".parse().unwrap());
        assert_eq!(c.pod, "");

        let env = [URL, ("APP_LISTEN", "127.0.0.1:9000"), ("POD_NAME", "web-1")];
        let c = config(&[], &env);
        assert_eq!(c.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(c.pod, "web-1");
        // The flag wins over the environment, in both spellings.
        assert_eq!(
            config(&["--listen", "[::1]:81"], &env).listen,
            "[::1]:81".parse().unwrap()
        );
        assert_eq!(
            config(&["--listen=127.0.0.1:82"], &env).listen,
            "127.0.0.1:82".parse().unwrap()
        );
    }

    #[test]
    fn the_socket_comes_from_kubeflake_socket_and_must_be_absolute() {
        assert_eq!(config(&[], &[URL]).socket, None);
        assert_eq!(config(&[], &[URL, ("KUBEFLAKE_SOCKET", "")]).socket, None);
        let c = config(&[], &[URL, ("KUBEFLAKE_SOCKET", "/run/k/kubeflake.sock")]);
        assert_eq!(c.socket, Some("/run/k/kubeflake.sock".into()));
        let relative = run(&[], &[URL, ("KUBEFLAKE_SOCKET", "k.sock")]).unwrap_err();
        assert!(
            relative.contains("KUBEFLAKE_SOCKET=\"k.sock\" is not an absolute path"),
            "{relative}"
        );
    }

    #[test]
    fn first_id_mode_comes_from_the_flag_or_app_first_id() {
        assert!(!config(&[], &[URL]).first_id, "off by default");
        assert!(config(&["--first-id"], &[URL]).first_id);
        assert!(config(&["--listen", "127.0.0.1:1", "--first-id"], &[URL]).first_id);
        for on in ["true", "TRUE", "1", " true "] {
            assert!(config(&[], &[URL, ("APP_FIRST_ID", on)]).first_id, "{on:?}");
        }
        for off in ["false", "False", "0", ""] {
            assert!(
                !config(&[], &[URL, ("APP_FIRST_ID", off)]).first_id,
                "{off:?}"
            );
        }
        // The flag switches it on whatever the variable says.
        assert!(config(&["--first-id"], &[URL, ("APP_FIRST_ID", "false")]).first_id);
        let bad = run(&[], &[URL, ("APP_FIRST_ID", "yes")]).unwrap_err();
        assert!(
            bad.contains("APP_FIRST_ID=\"yes\" is not a switch"),
            "{bad}"
        );
        let value = run(&["--first-id=true"], &[URL]).unwrap_err();
        assert!(value.contains("unexpected argument"), "{value}");
    }

    #[test]
    fn help_and_version() {
        assert_eq!(run(&["--help"], &[]), Ok(Command::Help));
        assert_eq!(run(&["-V"], &[]), Ok(Command::Version));
    }

    #[test]
    fn config_errors_say_what_to_fix() {
        let missing = run(&[], &[]).unwrap_err();
        assert!(missing.contains("KUBEFLAKE_URL is not set"), "{missing}");
        let https = run(&[], &[("KUBEFLAKE_URL", "https://127.0.0.1:7070")]).unwrap_err();
        assert!(
            https.contains("KUBEFLAKE_URL=") && https.contains("https is not supported"),
            "{https}"
        );
        let listen = run(&[], &[URL, ("APP_LISTEN", "localhost:8080")]).unwrap_err();
        assert!(
            listen.contains("APP_LISTEN \"localhost:8080\" is not an address"),
            "{listen}"
        );
        let flag = run(&["--listen", "8080"], &[URL]).unwrap_err();
        assert!(flag.contains("--listen \"8080\""), "{flag}");
        let no_value = run(&["--listen"], &[URL]).unwrap_err();
        assert!(no_value.contains("--listen needs a value"), "{no_value}");
        let unknown = run(&["--port", "1"], &[URL]).unwrap_err();
        assert!(
            unknown.contains("unexpected argument \"--port\""),
            "{unknown}"
        );
    }
}
