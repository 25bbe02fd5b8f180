//! A fake MySQL server, as a local attacker would run one under the name
//! `mysqld` to harvest the password of whoever logs in (tests/e2e/hostile.rs).
//! It listens on a Unix socket, greets every client with a v10 handshake
//! and then asks for the password in the most revealing way its `--mode`
//! allows, appending everything it receives to `--log`:
//!
//! - `sha2`: `caching_sha2_password` "perform full authentication"
//!   (0x01 0x04), which a client answers over a Unix socket with the
//!   password in cleartext;
//! - `native`: `mysql_native_password` with a nonce of the fake's choosing
//!   (a scramble it could attack offline);
//! - `clear`: an auth switch to `mysql_clear_password`.
//!
//! Usage: fake_mysqld --socket PATH --log PATH --mode sha2|native|clear
//! (it runs in its working directory, the "datadir").

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let (socket, log, mode) = (arg("--socket"), arg("--log"), arg("--mode"));
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).expect("bind");
    for stream in listener.incoming().flatten() {
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log");
        writeln!(log, "CONNECT").unwrap();
        if let Err(e) = session(stream, &mode, &mut log) {
            writeln!(log, "END {e}").unwrap();
        }
    }
}

fn session(mut s: UnixStream, mode: &str, log: &mut std::fs::File) -> std::io::Result<()> {
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let plugin = if mode == "sha2" {
        "caching_sha2_password"
    } else {
        "mysql_native_password"
    };
    send(&mut s, 0, &handshake(plugin))?;
    let response = recv(&mut s)?;
    record(log, "RESPONSE", &response.1)?;
    let next = response.0.wrapping_add(1);
    match mode {
        "sha2" => send(&mut s, next, &[0x01, 0x04])?,
        "clear" => {
            let mut switch = vec![0xfe];
            switch.extend_from_slice(b"mysql_clear_password\0");
            send(&mut s, next, &switch)?
        }
        _ => return deny(&mut s, next),
    }
    let reply = recv(&mut s)?;
    record(log, "REPLY", &reply.1)?;
    deny(&mut s, reply.0.wrapping_add(1))
}

/// A v10 handshake offering `plugin`, with a fixed nonce.
fn handshake(plugin: &str) -> Vec<u8> {
    let caps: u32 = 0x1 | 0x4 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x8_0000 | 0x10_0000 | 0x20_0000;
    let mut p = vec![10];
    p.extend_from_slice(b"8.0.99-fake\0");
    p.extend_from_slice(&7u32.to_le_bytes());
    p.extend_from_slice(b"abcdefgh\0");
    p.extend_from_slice(&(caps as u16).to_le_bytes());
    p.push(0x21);
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&((caps >> 16) as u16).to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 10]);
    p.extend_from_slice(b"ijklmnopqrst\0");
    p.extend_from_slice(plugin.as_bytes());
    p.push(0);
    p
}

fn deny(s: &mut UnixStream, seq: u8) -> std::io::Result<()> {
    let mut err = vec![0xff];
    err.extend_from_slice(&1045u16.to_le_bytes());
    err.extend_from_slice(b"#28000Access denied");
    send(s, seq, &err)
}

fn send(s: &mut UnixStream, seq: u8, payload: &[u8]) -> std::io::Result<()> {
    let len = payload.len() as u32;
    let mut packet = len.to_le_bytes()[..3].to_vec();
    packet.push(seq);
    packet.extend_from_slice(payload);
    s.write_all(&packet)
}

fn recv(s: &mut UnixStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 4];
    s.read_exact(&mut head)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
    let mut payload = vec![0; len];
    s.read_exact(&mut payload)?;
    Ok((head[3], payload))
}

fn record(log: &mut std::fs::File, what: &str, bytes: &[u8]) -> std::io::Result<()> {
    writeln!(
        log,
        "{what} {}",
        String::from_utf8_lossy(bytes).escape_debug()
    )
}
