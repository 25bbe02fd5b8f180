//! `innoprof serve`: the process, HTTP requests to it and its Prometheus
//! exposition.

use crate::ready::{Ready, ReadyPipe, READY_FD};
use crate::run::innoprof;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A loopback TCP port free right now (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on a loopback HTTP server: (status, body). HTTP/1.0, so the
/// server closes the connection after the body.
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

/// As [`http_get`], with extra request header lines (`Name: value`).
pub fn http_get_with(port: u16, path: &str, headers: &[&str]) -> std::io::Result<(u16, String)> {
    let s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    request_over(s, path, headers)
}

/// `GET path` over a connected stream (TCP or unix): (status, body).
pub fn request_over<S: std::io::Read + std::io::Write>(
    mut s: S,
    path: &str,
    headers: &[&str],
) -> std::io::Result<(u16, String)> {
    let mut head = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

/// Percent-encodes a query-string value (PromQL has spaces, braces, quotes).
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `innoprof serve` in the background; stderr captured to a file.
pub struct Serve {
    pub child: Child,
    pub port: u16,
    /// Its `--ready-fd` line: what was attached when it began serving.
    pub ready: Ready,
    stderr_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Serve {
    /// Starts `innoprof serve ARGS --listen 127.0.0.1:PORT` on a free port
    /// and waits until it serves. Like `Recording::start`, the governor is
    /// off unless the test passes `--max-overhead`: counts stay exact.
    pub fn start(args: &[&str]) -> Self {
        Self::start_under(&[], args)
    }

    /// As `start`, run through `wrapper` (e.g. `prlimit --nofile=64`).
    pub fn start_under(wrapper: &[&str], args: &[&str]) -> Self {
        let port = free_port();
        Self::start_listening(wrapper, args, &format!("127.0.0.1:{port}"), port)
    }

    /// As `start`, listening on the unix socket `path` (`port` is 0).
    pub fn start_unix(path: &std::path::Path, args: &[&str]) -> Self {
        Self::start_listening(&[], args, &format!("unix:{}", path.display()), 0)
    }

    fn start_listening(wrapper: &[&str], args: &[&str], listen: &str, port: u16) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let stderr_path = dir.path().join("stderr.txt");
        let governor: &[&str] = if args.contains(&"--max-overhead") {
            &[]
        } else {
            &["--max-overhead", "off"]
        };
        let mut argv: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
        argv.push(innoprof().to_string_lossy().into_owned());
        let mut cmd = Command::new(&argv[0]);
        let mut pipe = ReadyPipe::attach_to(&mut cmd);
        let mut child = cmd
            .args(&argv[1..])
            .arg("serve")
            .args(args)
            .args(governor)
            .arg("--listen")
            .arg(listen)
            .args(["--ready-fd", &READY_FD.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap();
        drop(cmd);
        let ready = pipe.wait(&mut child, &stderr_path);
        assert_eq!(ready.listen.as_deref(), Some(listen));
        Self {
            child,
            port,
            ready,
            stderr_path,
            _dir: dir,
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The /metrics text.
    pub fn scrape(&self) -> String {
        let (status, body) = http_get(self.port, "/metrics").unwrap();
        assert_eq!(status, 200, "{body}");
        body
    }

    pub fn signal(&self, sig: i32) {
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits (up to 20 s) for it to exit; its exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "serve did not exit: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One sample line of a Prometheus exposition.
#[derive(Debug, Clone)]
pub struct MetricSample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl MetricSample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The sample lines of an exposition (comments skipped).
pub fn metric_samples(text: &str) -> Vec<MetricSample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once("=\"").unwrap();
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect();
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap(),
            };
            MetricSample {
                name: name.to_string(),
                labels,
                value,
            }
        })
        .collect()
}
