//! The probe set a recording resolved ([`ProbeSet`]), kept across boots.
//!
//! Resolving the default set reads the binary's function symbols (~53,000
//! on MariaDB 10.2.11), matches every catalog pattern against them, decodes
//! each match's first instructions and walks DWARF for latch layouts:
//! ~45 ms of a 30 s recording by `perf`, about a seventh of innoprof's CPU,
//! for the same answer every time. What it finds depends only on the
//! binary's bytes, the debug file's, the request and innoprof's own code
//! (its built-in catalog included), so it is kept in the kept directory
//! ([`crate::persist`]) for the very same binary (device, inode, size,
//! modification time) read by the same innoprof binary in the same boot,
//! beside the debug file's identity and the request it answers. A
//! `--catalog` file is resolved every time: its contents are not in the key.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::persist::{self, FileKey};
use crate::plan::catalog::CatalogError;
use crate::plan::memcounters::PlannedCounter;
use crate::plan::probeset::{PlannedProbe, ProbeRequest, ProbeSet};
use crate::plan::server::ServerInfo;
use crate::resolve::ElfImage;

const KEPT_PREFIX: &str = "probes";
/// Binaries kept for (see [`persist::count_kept`]).
const MAX_KEPT_FILES: usize = 64;
/// Requests kept per binary, the latest first (`default`, `all`, …).
const MAX_KEPT_REQUESTS: usize = 8;
/// `--probes all` on MariaDB 11.4.5 keeps ~0.3 MB.
const MAX_KEPT_BYTES: u64 = 32 << 20;

/// One request's resolution.
#[derive(Serialize, Deserialize)]
struct KeptRequest {
    /// The debug file the symbols and DWARF came from (None: the binary's own).
    debug: Option<FileKey>,
    selection: Option<String>,
    ad_hoc: Vec<String>,
    catalog_file: Option<String>,
    probes: Vec<PlannedProbe>,
    counters: Vec<PlannedCounter>,
}

impl KeptRequest {
    fn answers(&self, debug: &Option<FileKey>, request: &ProbeRequest) -> bool {
        self.debug == *debug && self.selection == request.selection && self.ad_hoc == request.ad_hoc
    }

    fn to_set(&self) -> ProbeSet {
        ProbeSet {
            catalog_file: self.catalog_file.clone(),
            probes: self.probes.clone(),
            counters: self.counters.clone(),
        }
    }
}

/// [`ProbeSet::resolve`], or what it found for the same request on the same
/// files earlier.
pub fn resolve(
    image: &ElfImage,
    server: &ServerInfo,
    request: &ProbeRequest,
) -> Result<ProbeSet, CatalogError> {
    resolve_kept_in(image, server, request, persist::kept_dir())
}

/// [`resolve`], kept in `dir`.
pub fn resolve_kept_in(
    image: &ElfImage,
    server: &ServerInfo,
    request: &ProbeRequest,
    dir: &Path,
) -> Result<ProbeSet, CatalogError> {
    let Some((key, debug)) = keys(image, request) else {
        return ProbeSet::resolve(image, server, request);
    };
    let mut kept = load(dir, &key);
    if let Some(hit) = kept.iter().find(|k| k.answers(&debug, request)) {
        return Ok(hit.to_set());
    }
    // Errors (an unknown probe name) are not kept: they cost nothing.
    let set = ProbeSet::resolve(image, server, request)?;
    kept.retain(|k| !k.answers(&debug, request));
    kept.insert(
        0,
        KeptRequest {
            debug,
            selection: request.selection.clone(),
            ad_hoc: request.ad_hoc.clone(),
            catalog_file: set.catalog_file.clone(),
            probes: set.probes.clone(),
            counters: set.counters.clone(),
        },
    );
    kept.truncate(MAX_KEPT_REQUESTS);
    persist::store_json(dir, &key, KEPT_PREFIX, MAX_KEPT_FILES, &kept);
    Ok(set)
}

/// What `dir` keeps for `request` on `image`'s files, if anything.
pub fn kept_in(image: &ElfImage, request: &ProbeRequest, dir: &Path) -> Option<ProbeSet> {
    let (key, debug) = keys(image, request)?;
    load(dir, &key)
        .iter()
        .find(|k| k.answers(&debug, request))
        .map(KeptRequest::to_set)
}

fn load(dir: &Path, key: &FileKey) -> Vec<KeptRequest> {
    persist::load_json(dir, key, KEPT_PREFIX, MAX_KEPT_BYTES).unwrap_or_default()
}

/// The binary's key and the debug file's (None: DWARF and symbols are the
/// binary's own); nothing is kept when either cannot be told apart, or
/// for a `--catalog` file.
fn keys(image: &ElfImage, request: &ProbeRequest) -> Option<(FileKey, Option<FileKey>)> {
    if request.catalog.is_some() {
        return None;
    }
    let key = image.file_key()?;
    let debug = match image.debug_file {
        Some(_) => Some(image.dwarf_file_key()?),
        None => None,
    };
    Some((key, debug))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an ad-hoc probe of this test binary attaches to.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn innoprof_kept_plan_target(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }

    fn request(pattern: &str) -> ProbeRequest {
        ProbeRequest {
            selection: None,
            ad_hoc: vec![pattern.to_string()],
            ..Default::default()
        }
    }

    fn kept_files(dir: &Path) -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_resolved_set_is_kept_and_answers_the_same_request_again() {
        assert_eq!(innoprof_kept_plan_target(2), 6);
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("run");
        let image = ElfImage::open(&std::env::current_exe().unwrap()).unwrap();
        let server = ServerInfo::from_strings(&[]);
        let ask = request("innoprof_kept_plan_target");
        let first = resolve_kept_in(&image, &server, &ask, &dir).unwrap();
        let address = first.probes[0].resolution.symbols[0].address;
        assert!(address > 0);
        let files = kept_files(&dir);
        assert_eq!(files.len(), 1, "{files:?}");
        // The kept file, marked: the next answer is read from it.
        let text = std::fs::read_to_string(&files[0]).unwrap();
        let marked = text.replace(
            &format!("\"address\":{address},"),
            &format!("\"address\":{},", address + 1),
        );
        assert_ne!(marked, text);
        std::fs::write(&files[0], marked).unwrap();
        let again = resolve_kept_in(&image, &server, &ask, &dir).unwrap();
        assert_eq!(again.probes[0].resolution.symbols[0].address, address + 1);
        assert_eq!(again.probes[0].spec.symbols, first.probes[0].spec.symbols);

        // Another request is resolved and kept beside it.
        let other = ProbeRequest {
            selection: Some("none".into()),
            ..request("innoprof_kept_plan_target")
        };
        let fresh = resolve_kept_in(&image, &server, &other, &dir).unwrap();
        assert_eq!(fresh.probes[0].resolution.symbols[0].address, address);
        let text = std::fs::read_to_string(&files[0]).unwrap();
        let kept: Vec<KeptRequest> = serde_json::from_value(
            serde_json::from_str::<serde_json::Value>(&text).unwrap()["value"].clone(),
        )
        .unwrap();
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].selection, other.selection, "the latest first");
    }

    #[test]
    fn a_users_catalog_is_not_kept() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("run");
        let catalog = d.path().join("catalog.toml");
        std::fs::write(&catalog, "").unwrap();
        let image = ElfImage::open(&std::env::current_exe().unwrap()).unwrap();
        let ask = ProbeRequest {
            catalog: Some(catalog),
            ..request("innoprof_kept_plan_target")
        };
        // Whatever it answers, nothing is kept.
        let _ = resolve_kept_in(&image, &ServerInfo::from_strings(&[]), &ask, &dir);
        assert!(kept_files(&dir).is_empty());
    }
}
