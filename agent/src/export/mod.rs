//! Live exporters: the counters as they stand, read while the probes stay
//! attached, in formats other tools scrape.

pub mod pprof_http;
pub mod prometheus;

use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error(
        "refusing to serve metrics on {addr}: not a loopback address, and the metrics name the \
         server's binary and code paths; pass --listen-any to allow it (and restrict the port)"
    )]
    NotLoopback { addr: SocketAddr },
}

/// Loopback unless the user explicitly allows remote scrapers.
pub fn check_listen_address(addr: SocketAddr, allow_remote: bool) -> Result<(), ListenError> {
    if addr.ip().is_loopback() || allow_remote {
        Ok(())
    } else {
        Err(ListenError::NotLoopback { addr })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_without_permission() {
        let ok = |a: &str, any| check_listen_address(a.parse().unwrap(), any).is_ok();
        assert!(ok("127.0.0.1:9707", false));
        assert!(ok("127.0.0.2:1", false));
        assert!(ok("[::1]:9707", false));
        assert!(!ok("0.0.0.0:9707", false));
        assert!(!ok("[::]:9707", false));
        assert!(!ok("192.168.1.5:9707", false));
        assert!(ok("0.0.0.0:9707", true));
        let msg = check_listen_address("0.0.0.0:1".parse().unwrap(), false)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("--listen-any"), "{msg}");
    }
}
