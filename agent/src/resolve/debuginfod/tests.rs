//! The checks on what a server sends, and fetching from a small HTTP
//! server of the test's own (the real debuginfod: tests/e2e/debuginfod.rs).

use super::*;
use std::io::BufRead;
use std::net::TcpListener;

/// A small ELF file: a build-id note when `id` is given, and a
/// `.debug_info` section when `debug`.
fn elf(id: Option<&[u8]>, debug: bool) -> Vec<u8> {
    use object::write::Object;
    use object::{Architecture, BinaryFormat, Endianness, SectionKind};
    let mut obj = Object::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
    if let Some(id) = id {
        let mut note = Vec::new();
        note.extend_from_slice(&4u32.to_le_bytes());
        note.extend_from_slice(&(id.len() as u32).to_le_bytes());
        note.extend_from_slice(&object::elf::NT_GNU_BUILD_ID.to_le_bytes());
        note.extend_from_slice(b"GNU\0");
        note.extend_from_slice(id);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        let s = obj.add_section(
            Vec::new(),
            b".note.gnu.build-id".to_vec(),
            SectionKind::Note,
        );
        obj.append_section_data(s, &note, 4);
    }
    if debug {
        let s = obj.add_section(Vec::new(), b".debug_info".to_vec(), SectionKind::Debug);
        obj.append_section_data(s, &[1, 2, 3, 4], 1);
    }
    obj.write().unwrap()
}

const ID: &[u8] = &[0xab, 0xcd, 0xef, 0x01, 0x23];
const HEX: &str = "abcdef0123";

fn file_of(bytes: &[u8]) -> File {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(bytes).unwrap();
    f
}

#[test]
fn only_an_elf_of_the_build_id_asked_with_debug_sections_is_taken() {
    assert_eq!(verify(&file_of(&elf(Some(ID), true)), HEX), Ok(()));
    assert_eq!(
        verify(&file_of(&elf(Some(&[1, 2, 3, 4, 5]), true)), HEX),
        Err(Rejected::OtherBuildId {
            expected: HEX.into(),
            found: "0102030405".into()
        })
    );
    assert_eq!(
        verify(&file_of(&elf(None, true)), HEX),
        Err(Rejected::NoBuildId)
    );
    assert_eq!(
        verify(&file_of(&elf(Some(ID), false)), HEX),
        Err(Rejected::NoDebugSections)
    );
    assert_eq!(
        verify(&file_of(b"<html>404</html>"), HEX),
        Err(Rejected::NotElf)
    );
    assert_eq!(verify_bytes(&elf(Some(ID), true), HEX), Ok(()));
    for (what, bomb) in super::super::section::bombs::shapes(ID) {
        let e = verify_bytes(&bomb, HEX).unwrap_err();
        assert!(matches!(e, Rejected::Inflates(_)), "{what}: {e:?}");
        assert_eq!(verify(&file_of(&bomb), HEX), Err(e), "{what}");
    }
}

#[test]
fn urls_are_split_as_elfutils_splits_them_and_only_http_is_asked() {
    let (urls, ignored) = split_urls(" http://a:8002  https://b/x\tfile:///srv ftp://c http:// ");
    assert_eq!(urls, ["http://a:8002", "https://b/x"]);
    assert_eq!(ignored, ["file:///srv", "ftp://c", "http://"]);
}

/// Answers each connection on `listener` with `answer(path)` (status,
/// body), until the test ends.
fn serve(
    answer: impl Fn(&str) -> (u16, Vec<u8>) + Send + 'static,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = asked.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap() <= 2 {
                    break;
                }
            }
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (status, body) = answer(&path);
            // A redirect's body is its Location.
            let location = match status {
                300..=399 => format!("Location: {}\r\n", String::from_utf8_lossy(&body)),
                _ => String::new(),
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\n{location}Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(&body);
        }
    });
    (url, asked)
}

fn client(urls: Vec<String>, kept_dir: &Path) -> Debuginfod {
    Debuginfod {
        urls,
        timeout: Duration::from_secs(1),
        max_time: Duration::from_secs(10),
        max_bytes: 1 << 20,
        kept_dir: kept_dir.to_path_buf(),
        elfutils_cache: None,
        ignored: Vec::new(),
    }
}

fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The first server answers 404, the second the file: fetched from the
/// second, kept by build id; asked again with no server, it comes from the
/// kept copy; the requests are the protocol's.
#[test]
fn a_fetched_file_is_kept_and_used_again_without_the_network() {
    let d = tempfile::tempdir().unwrap();
    let kept = d.path().join("kept");
    let good = elf(Some(ID), true);
    let (missing, _) = serve(|_| (404, b"not found".to_vec()));
    let paths = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = paths.clone();
    let (url, asked) = serve(move |p| {
        seen.lock().unwrap().push(p.to_string());
        (200, good.clone())
    });
    let found = client(vec![missing.clone(), format!("{url}/")], &kept)
        .find(HEX)
        .unwrap();
    assert_eq!(found.found_by, Source::Server);
    assert_eq!(found.url.as_deref(), Some(&*format!("{url}/")));
    assert_eq!(found.path, kept.join(format!("debuginfod-{HEX}.debug")));
    assert_eq!(
        *paths.lock().unwrap(),
        [format!("/buildid/{HEX}/debuginfo")]
    );
    assert_eq!(dir_names(&kept), [format!("debuginfod-{HEX}.debug")]);
    let again = client(vec![], &kept).find(HEX).unwrap();
    assert_eq!((again.found_by, again.url), (Source::Kept, None));
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A wrong file, an oversized one and an error status are each said in
/// one line per server, and nothing is left in the kept directory.
#[test]
fn what_is_not_the_debug_file_is_refused_and_removed() {
    let d = tempfile::tempdir().unwrap();
    let kept = d.path().join("kept");
    let (wrong, _) = serve(|_| (200, elf(Some(&[9, 9, 9, 9, 9]), true)));
    let (html, _) = serve(|_| (200, b"<html>login</html>".to_vec()));
    let (big, _) = serve(|_| (200, vec![0u8; 2 << 20]));
    let (gone, _) = serve(|_| (500, Vec::new()));
    let failures = client(
        vec![wrong.clone(), html.clone(), big.clone(), gone.clone()],
        &kept,
    )
    .find(HEX)
    .unwrap_err();
    let line = failures_line(&failures);
    for want in [
        format!("{wrong}: build id 0909090909, asked for {HEX}; not used"),
        format!("{html}: not an ELF file; not used"),
        format!("{big}: larger than 1048576 bytes"),
        format!("{gone}: HTTP 500"),
    ] {
        assert!(line.contains(&want), "{want} in {line}");
    }
    assert!(!line.contains('\n'));
    assert!(dir_names(&kept).is_empty(), "{:?}", dir_names(&kept));
}

/// A server that accepts the connection and never answers costs the
/// per-read timeout, not more; the next server is still asked.
#[test]
fn a_silent_server_costs_the_timeout_only() {
    let d = tempfile::tempdir().unwrap();
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let (good, _) = serve(|_| (200, elf(Some(ID), true)));
    let t = Instant::now();
    let found = client(
        vec![silent_url.clone(), good.clone()],
        &d.path().join("kept"),
    )
    .find(HEX)
    .unwrap();
    let took = t.elapsed();
    assert_eq!(found.url.as_deref(), Some(&*good));
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // DEBUGINFOD_MAXTIME bounds the fetch as a whole: two silent servers
    // cost it once, not twice.
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_url = format!("http://{}", other.local_addr().unwrap());
    let mut c = client(
        vec![silent_url.clone(), other_url.clone()],
        &d.path().join("kept2"),
    );
    c.max_time = Duration::from_millis(1200);
    let t = Instant::now();
    let failures = c.find(HEX).unwrap_err();
    let took = t.elapsed();
    let line = failures_line(&failures);
    assert!(took < Duration::from_millis(2500), "{took:?}: {line}");
    assert!(line.contains(&format!("{silent_url}: ")), "{line}");
    assert!(line.contains(&format!("{other_url}: ")), "{line}");
    drop((silent, other));
}

/// Each bomb shape a server may send (a ratio bomb, a stream past its
/// claim, a 1 TiB claim, many sections) is refused in one line and leaves
/// nothing kept; one planted as a kept file (as an earlier build kept it)
/// is refused, said and removed, and the run after it is clean.
#[test]
fn a_bomb_is_refused_and_a_kept_one_removed() {
    let d = tempfile::tempdir().unwrap();
    let kept = d.path().join("kept");
    for (what, bomb) in super::super::section::bombs::shapes(ID) {
        let (url, _) = serve(move |_| (200, bomb.clone()));
        let mut c = client(vec![url.clone()], &kept);
        c.max_bytes = 64 << 20;
        let line = failures_line(&c.find(HEX).unwrap_err());
        assert!(
            line.starts_with(&format!("{url}: "))
                && line.contains(" sections claim ")
                    | line.contains(" bytes it claims")
                    | line.contains(" bytes inflated")
                && line.ends_with("; not used"),
            "{what}: {line}"
        );
        assert!(!line.contains('\n'));
        assert!(
            dir_names(&kept).is_empty(),
            "{what}: {:?}",
            dir_names(&kept)
        );
    }
    let (_, bomb) = super::super::section::bombs::shapes(ID).remove(2);
    persist::ensure_dir(&kept).unwrap();
    let path = kept.join(format!("debuginfod-{HEX}.debug"));
    persist::write_own_file(&kept, &path, &bomb).unwrap();
    let line = failures_line(&client(vec![], &kept).find(HEX).unwrap_err());
    assert_eq!(
        line,
        format!(
            "kept {}: section .debug_str claims 1099511627776 bytes inflated, more than \
             the 1073741824 a section may; removed",
            path.display()
        )
    );
    assert!(dir_names(&kept).is_empty(), "{:?}", dir_names(&kept));
    assert!(client(vec![], &kept).find(HEX).unwrap_err().is_empty());
}

/// A server that drips its headers (a byte every 300 ms, so no read waits
/// the timeout) is cut at the timeout after the request, not at the
/// deadline; one that drips its body is cut at the deadline: each costs
/// what the docs say, and leaves nothing kept.
#[test]
fn a_dripping_server_is_cut_at_the_timeout_or_the_deadline() {
    let drip = |headers_too: bool| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                std::thread::spawn(move || {
                    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n";
                    if !headers_too {
                        let _ = conn.write_all(head);
                    }
                    let bytes: &[u8] = if headers_too { head } else { &[0; 4096] };
                    for b in bytes.iter().cycle() {
                        std::thread::sleep(Duration::from_millis(300));
                        if conn.write_all(&[*b]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        url
    };
    let d = tempfile::tempdir().unwrap();
    let kept = d.path().join("kept");
    let headers = drip(true);
    let mut c = client(vec![headers.clone()], &kept);
    c.timeout = Duration::from_secs(2);
    c.max_time = Duration::from_secs(30);
    let t = Instant::now();
    let line = failures_line(&c.find(HEX).unwrap_err());
    let took = t.elapsed();
    assert!(
        line.contains("timed out") && line.starts_with(&headers),
        "{line}"
    );
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(6),
        "headers dripped for {took:?}: {line}"
    );
    let body = drip(false);
    let mut c = client(vec![body.clone()], &kept);
    c.timeout = Duration::from_secs(2);
    c.max_time = Duration::from_secs(3);
    let t = Instant::now();
    let line = failures_line(&c.find(HEX).unwrap_err());
    let took = t.elapsed();
    assert!(line.starts_with(&body), "{line}");
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(7),
        "body dripped for {took:?}: {line}"
    );
    assert!(dir_names(&kept).is_empty(), "{:?}", dir_names(&kept));
}

/// A redirect on the same server is followed; one to another port or
/// another host name is not (said in one line, nothing asked there).
#[test]
fn redirects_stay_on_the_host_and_port_asked() {
    let d = tempfile::tempdir().unwrap();
    let good = elf(Some(ID), true);
    let (elsewhere, elsewhere_asked) = serve(move |_| (200, good.clone()));
    let good = elf(Some(ID), true);
    let (url, _) = serve(move |p| {
        if p.starts_with("/files/") {
            (200, good.clone())
        } else {
            (302, format!("/files/{HEX}").into_bytes())
        }
    });
    // The test server's 302 body is its Location (see `serve`).
    let found = client(vec![url.clone()], &d.path().join("kept"))
        .find(HEX)
        .unwrap();
    assert_eq!(found.url.as_deref(), Some(&*url));
    let asked = |u: &str| url::Url::parse(u).unwrap();
    let from = asked(&format!("{url}/buildid/{HEX}/debuginfo"));
    assert_eq!(
        follow_redirect(&from, &from, &format!("{elsewhere}/x")),
        Err(RedirectRefused::Port(from.port().unwrap()))
    );
    let by_name = format!("http://localhost:{}/x", from.port().unwrap());
    assert_eq!(
        follow_redirect(&from, &from, &by_name),
        Err(RedirectRefused::Host("127.0.0.1".into()))
    );
    let https = asked("https://debuginfod.example/buildid/x/debuginfo");
    for (location, want) in [
        (
            "http://debuginfod.example/y",
            Err(RedirectRefused::Downgrade),
        ),
        (
            "http://169.254.169.254/latest/meta-data",
            Err(RedirectRefused::Downgrade),
        ),
        (
            "https://169.254.169.254/latest",
            Err(RedirectRefused::Host("debuginfod.example".into())),
        ),
        (
            "https://debuginfod.example:8443/y",
            Err(RedirectRefused::Port(443)),
        ),
        ("file:///etc/shadow", Err(RedirectRefused::Scheme)),
        ("/y?z", Ok(asked("https://debuginfod.example/y?z"))),
        (
            "https://DEBUGINFOD.example/y",
            Ok(asked("https://debuginfod.example/y")),
        ),
    ] {
        assert_eq!(
            follow_redirect(&https, &https, location),
            want,
            "{location}"
        );
    }
    // http to https on the same host, default ports: an upgrade, taken.
    let http = asked("http://debuginfod.example/buildid/x/debuginfo");
    assert!(follow_redirect(&http, &http, "https://debuginfod.example/y").is_ok());

    // Served: a 302 to another port of the same address is not followed.
    let (porter, _) = serve({
        let target = elsewhere.clone();
        move |_| {
            (
                302,
                format!("{target}/buildid/{HEX}/debuginfo").into_bytes(),
            )
        }
    });
    let line = failures_line(
        &client(vec![porter.clone()], &d.path().join("kept3"))
            .find(HEX)
            .unwrap_err(),
    );
    assert_eq!(
        line,
        format!(
            "{porter}: redirected to {elsewhere}/buildid/{HEX}/debuginfo: another port than {}; \
             not followed",
            url::Url::parse(&porter).unwrap().port().unwrap()
        )
    );
    assert_eq!(
        elsewhere_asked.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the other port was never asked"
    );
}

/// What [`a_fetch_killed_mid_body_leaves_nothing`] runs in a child of its
/// own, to be killed: a fetch from `INNOPROF_TEST_FETCH_URL` into
/// `INNOPROF_TEST_FETCH_KEPT`. Not a test by itself (ignored; without the
/// variables it does nothing).
#[test]
#[ignore]
fn fetch_in_a_child() {
    let (Some(url), Some(kept)) = (
        std::env::var_os("INNOPROF_TEST_FETCH_URL"),
        std::env::var_os("INNOPROF_TEST_FETCH_KEPT"),
    ) else {
        return;
    };
    let mut c = client(vec![url.into_string().unwrap()], Path::new(&kept));
    c.max_bytes = 256 << 20;
    c.max_time = Duration::from_secs(60);
    let _ = c.find(HEX);
}

/// A fetch killed (SIGKILL) mid-body leaves nothing in the kept directory
/// (the body goes to an unnamed file: nothing there has a name while it
/// is written); a temporary file an older build left under its pid is
/// removed by the next fetch, which keeps its file.
#[test]
fn a_fetch_killed_mid_body_leaves_nothing() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let d = tempfile::tempdir().unwrap();
    let kept = d.path().join("kept");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let sent = std::sync::Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    std::thread::spawn(move || {
        let Ok((mut conn, _)) = listener.accept() else {
            return;
        };
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            200u64 << 20
        );
        let chunk = vec![7u8; 256 << 10];
        while conn.write_all(&chunk).is_ok() {
            counter.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "resolve::debuginfod::tests::fetch_in_a_child",
            "--ignored",
        ])
        .env("INNOPROF_TEST_FETCH_URL", &url)
        .env("INNOPROF_TEST_FETCH_KEPT", &kept)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while sent.load(Ordering::SeqCst) < 8 << 20 {
        assert!(Instant::now() < deadline, "the child never read 8 MiB");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Mid-body: 8 MiB written, and no name in the directory.
    assert!(dir_names(&kept).is_empty(), "{:?}", dir_names(&kept));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(sent.load(Ordering::SeqCst) < 200 << 20, "killed mid-body");
    assert!(dir_names(&kept).is_empty(), "{:?}", dir_names(&kept));

    // An older build's temporary file, its process (the child) gone.
    let stale = kept.join(format!("debuginfod-{HEX}.debug.tmp.{}", child.id()));
    persist::write_own_file(&kept, &stale, &[0; 4096]).unwrap();
    let good = elf(Some(ID), true);
    let len = good.len() as u64;
    let (server, _) = serve(move |_| (200, good.clone()));
    let found = client(vec![server], &kept).find(HEX).unwrap();
    assert_eq!(found.found_by, Source::Server);
    assert_eq!(dir_names(&kept), [format!("debuginfod-{HEX}.debug")]);
    assert_eq!(std::fs::metadata(&found.path).unwrap().len(), len);
}
