use super::response::head_end;
use super::*;
use std::os::unix::net::UnixListener;

/// A socket path in a directory of its own, removed with everything in it when dropped.
struct SocketDir(PathBuf);

impl SocketDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kubeflake-app-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        SocketDir(dir)
    }

    fn socket(&self) -> PathBuf {
        self.0.join("kubeflake.sock")
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn url() -> SidecarUrl {
    SidecarUrl::parse("http://127.0.0.1:7070").unwrap()
}

/// With `KUBEFLAKE_SOCKET` the call goes over the socket, with the same HTTP.
#[test]
fn calls_go_over_the_unix_socket_when_one_is_given() {
    let dir = SocketDir::new("serve");
    let path = dir.socket();
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while head_end(&head).is_none() {
            stream.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        let body = r#"{"id":"42"}"#;
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        String::from_utf8(head).unwrap()
    });
    let sidecar = Sidecar::new(url()).with_socket(Some(path));
    assert_eq!(sidecar.transport(), "unix");
    assert_eq!(sidecar.id_after(Some(7)).unwrap(), 42);
    let head = server.join().unwrap();
    assert!(head.starts_with("GET /id?after=7 HTTP/1.1\r\n"), "{head}");
    assert!(head.contains("Host: 127.0.0.1:7070\r\n"), "{head}");
}

#[test]
fn a_missing_socket_is_unreachable_and_the_error_names_the_variable() {
    let dir = SocketDir::new("missing");
    let path = dir.socket();
    let sidecar = Sidecar::new(url()).with_socket(Some(path.clone()));
    let err = sidecar.id_after(None).unwrap_err().to_string();
    assert!(err.contains("sidecar unreachable"), "{err}");
    assert!(err.contains(SOCKET_ENV), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert_eq!(Sidecar::new(url()).transport(), "tcp");
}
