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
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
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
