//! Symbol resolution and catalog coverage against real binaries: a compiled
//! clone/alias fixture, its stripped copy, and the four real servers.

use std::path::{Path, PathBuf};
use std::process::Command;

use innoprof::catalog::Catalog;
use innoprof::resolve::{ElfImage, EntryInsn, Resolver, SkipReason, SymbolTable, Unresolved};
use innoprof::server::{Family, ServerInfo};
use innoprof_e2e::repo_root;

fn build_clones(dir: &Path) -> PathBuf {
    let bin = dir.join("clones");
    let ok = Command::new("g++")
        .args(["-O0", "-g", "-rdynamic", "-o"])
        .arg(&bin)
        .arg(repo_root().join("tests/fixture/clones.cc"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "compiling clones.cc");
    bin
}

fn resolve(image: &ElfImage, pattern: &str) -> innoprof::resolve::Resolution {
    Resolver::new(image).resolve(&[pattern.to_string()])
}

#[test]
fn clones_are_attached_fragments_skipped_aliases_merged() {
    let dir = tempfile::tempdir().unwrap();
    let image = ElfImage::open(&build_clones(dir.path())).unwrap();
    assert!(image.position_independent);

    let r = resolve(&image, "target_fn");
    let names: Vec<&str> = r.symbols.iter().map(|s| s.raw.as_str()).collect();
    assert_eq!(names, ["target_fn", "target_fn.constprop.0", "target_fn.isra.0"]);
    assert_eq!(r.symbols[1].clone.as_deref(), Some("constprop.0"));
    assert!(r.symbols.iter().all(|s| s.entry == EntryInsn::Push && s.file_offset == s.address));
    let skipped: Vec<(&str, SkipReason)> = r.skipped.iter().map(|s| (s.name.as_str(), s.reason)).collect();
    assert_eq!(
        skipped,
        [("target_fn [clone .part.0]", SkipReason::PartialInlineFragment), ("target_fn [clone .cold]", SkipReason::ColdBlock)]
    );
    assert_eq!(r.unresolved, None);

    let ctor = resolve(&image, "Widget::Widget");
    assert_eq!(ctor.symbols.len(), 1, "{ctor:?}");
    assert_eq!(ctor.skipped.len(), 1);
    assert_eq!(ctor.skipped[0].reason, SkipReason::Alias);

    assert_eq!(resolve(&image, "only_part_fn").unresolved, Some(Unresolved::OnlyFragments));
    assert_eq!(resolve(&image, "no_such_fn").unresolved, Some(Unresolved::NoSuchSymbol));
}

#[test]
fn stripped_copy_keeps_only_exported_symbols_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build_clones(dir.path());
    let stripped = dir.path().join("clones.stripped");
    assert!(Command::new("strip").args(["--strip-all", "-o"]).arg(&stripped).arg(&bin).status().unwrap().success());
    let full = ElfImage::open(&bin).unwrap();
    let image = ElfImage::open(&stripped).unwrap();
    assert!(full.has_symtab && !image.has_symtab);
    assert_eq!(full.build_id, image.build_id, "strip keeps the build-id");

    // -rdynamic exported it: found in .dynsym at the same offset.
    let r = resolve(&image, "target_fn");
    assert_eq!(r.symbols[0].table, SymbolTable::Dynsym);
    assert_eq!(r.symbols[0].file_offset, resolve(&full, "target_fn").symbols[0].file_offset);
    assert_eq!(resolve(&image, "no_such_fn").unresolved, Some(Unresolved::StrippedBinary));
}

fn server_binary(name: &str) -> PathBuf {
    let out = Command::new(repo_root().join("scripts/servers.sh")).args(["fetch", name]).output().unwrap();
    assert!(out.status.success(), "fetching {name}: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Every probe of the catalog entry for a real server resolves in it.
fn catalog_resolves_fully(name: &str, family: Family, version: &str, catalog_file: &str, pie: bool, symtab: bool) {
    let image = ElfImage::open(&server_binary(name)).unwrap();
    let server = ServerInfo::detect(&image);
    assert_eq!(server.family, family, "{name}");
    assert_eq!(server.version.map(|v| v.to_string()).as_deref(), Some(version));
    assert_eq!(image.position_independent, pie, "{name} PIE");
    assert_eq!(image.has_symtab, symtab, "{name} .symtab");
    let catalog = Catalog::builtin();
    let file = catalog.for_server(&server).unwrap();
    assert_eq!(file.file, catalog_file);
    let mut resolver = Resolver::new(&image);
    for probe in file.select("all").unwrap() {
        let r = resolver.resolve(&probe.symbols);
        assert!(!r.symbols.is_empty(), "{name}: {} unresolved: {:?}", probe.name, r.unresolved);
        for s in &r.symbols {
            assert!(image.file_offset(s.address) == Some(s.file_offset));
            assert_eq!(s.table, if symtab { SymbolTable::Symtab } else { SymbolTable::Dynsym }, "{}", s.name);
        }
    }
}

#[test]
fn mysql_5_6_24_catalog() {
    catalog_resolves_fully("mysql-5.6.24", Family::Mysql, "5.6.24", "probes/mysql-5.6.toml", false, true);
}

#[test]
fn mysql_8_0_15_catalog_from_dynsym_only() {
    catalog_resolves_fully("mysql-8.0.15", Family::Mysql, "8.0.15", "probes/mysql-8.0.toml", false, false);
}

#[test]
fn mariadb_10_2_11_catalog() {
    catalog_resolves_fully("mariadb-10.2.11", Family::Mariadb, "10.2.11", "probes/mariadb-10.2.toml", false, true);
}

#[test]
fn mariadb_11_4_5_catalog_pie() {
    catalog_resolves_fully("mariadb-11.4.5", Family::Mariadb, "11.4.5", "probes/mariadb-10.6.toml", true, true);
}
