//! Turning demangled patterns into attachable addresses in one binary.

pub mod counter;
pub mod debuginfo;
pub mod dwarf;
pub mod elf;
pub mod entry;
pub mod inline;
pub mod latch;
pub mod lines;
pub mod pattern;

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

pub use elf::{ElfError, ElfImage, FunctionSymbol, SymbolTable};
pub use entry::EntryInsn;
pub use pattern::{DemangledName, SymbolPattern};

/// One function the probe will attach to.
#[derive(Debug, Clone, Serialize)]
pub struct ResolvedSymbol {
    /// Demangled, with parameters; clone suffix appended as `[clone .x]`.
    pub name: String,
    /// Demangled without parameters: the frame name in folded stacks.
    pub short_name: String,
    pub raw: String,
    pub address: u64,
    pub file_offset: u64,
    pub size: u64,
    pub table: SymbolTable,
    /// `constprop.0`, `isra.0`: a full copy whose arguments may differ.
    pub clone: Option<String>,
    pub entry: EntryInsn,
}

/// A matching symbol that was deliberately not attached.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SkippedSymbol {
    pub name: String,
    pub address: u64,
    pub reason: SkipReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// `.cold`: an out-of-line block of the function, never entered by a call.
    ColdBlock,
    /// `.part.N`: the tail of a partially inlined function; its entry is not
    /// the function's entry and it returns into the middle of the caller.
    PartialInlineFragment,
    /// Same address as an already attached symbol (an alias).
    Alias,
    /// Outside every loadable segment of the file.
    NotInFile,
    /// In a loadable segment that is not executable: a probe there would
    /// patch data, so it is refused whatever the symbol table says.
    NotCode,
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SkipReason::ColdBlock => "cold block (.cold), not a function entry",
            SkipReason::PartialInlineFragment => {
                "partial-inlining fragment (.part), not the function entry"
            }
            SkipReason::Alias => "alias of an attached symbol",
            SkipReason::NotInFile => "address outside the file's loadable segments",
            SkipReason::NotCode => {
                "address outside the file's executable segments (not code); refused"
            }
        })
    }
}

/// Why a pattern found nothing to attach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unresolved {
    /// No `.symtab`: only exported `.dynsym` names were searched.
    StrippedBinary,
    /// The binary has a full symbol table and no function matches: absent
    /// in this version, renamed, or inlined into every caller.
    NoSuchSymbol,
    /// Only fragments matched (see the skipped list).
    OnlyFragments,
    /// Inline sites were asked for, and the binary has no DWARF to find them.
    InlineNeedsDebugInfo,
    /// Every match lies outside the binary's executable segments.
    NotCode,
    /// The pattern names a variable (this one), not a function.
    DataObject(String),
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Unresolved::DataObject(name) = self {
            return write!(
                f,
                "`{name}` is a data object (a variable), not a function: probes attach only to code"
            );
        }
        f.write_str(match self {
            Unresolved::DataObject(_) => unreachable!("written above"),
            Unresolved::NotCode => {
                "the matching symbols are not in an executable segment of the binary; probes attach only to code"
            }
            Unresolved::StrippedBinary => {
                "binary is stripped (no .symtab) and the symbol is not exported in .dynsym; install the server's debug symbols"
            }
            Unresolved::NoSuchSymbol => "no such function in this build (absent in this version, or inlined everywhere)",
            Unresolved::OnlyFragments => "only .cold/.part fragments match, no function entry",
            Unresolved::InlineNeedsDebugInfo => {
                "no out-of-line copy, and no DWARF debug info to find its inline sites; install the server's debug symbols"
            }
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Resolution {
    pub patterns: Vec<String>,
    pub symbols: Vec<ResolvedSymbol>,
    pub skipped: Vec<SkippedSymbol>,
    /// How many of `symbols` are inline sites (DWARF inlined instances).
    pub inline_sites: usize,
    pub unresolved: Option<Unresolved>,
}

impl Resolution {
    /// Why nothing is attached, for messages (empty when something is).
    pub fn why_unresolved(&self) -> String {
        self.unresolved
            .as_ref()
            .map(|u| u.to_string())
            .unwrap_or_default()
    }
}

/// Resolves many pattern sets against one image, demangling each candidate
/// symbol at most once.
pub struct Resolver<'a> {
    image: &'a ElfImage,
    demangled: HashMap<usize, DemangledName>,
    /// Data object names, read once, on the first pattern that finds nothing.
    data_objects: Option<Vec<String>>,
}

impl<'a> Resolver<'a> {
    pub fn new(image: &'a ElfImage) -> Self {
        Self {
            image,
            demangled: HashMap::new(),
            data_objects: None,
        }
    }

    pub fn resolve(&mut self, patterns: &[String]) -> Resolution {
        let compiled: Vec<SymbolPattern> = patterns.iter().map(|p| SymbolPattern::new(p)).collect();
        let mut symbols = Vec::new();
        let mut skipped = Vec::new();
        let mut addresses = HashSet::new();

        for (idx, sym) in self.image.symbols.iter().enumerate() {
            if !compiled.iter().any(|p| p.may_match(sym.base())) {
                continue;
            }
            let name = self
                .demangled
                .entry(idx)
                .or_insert_with(|| DemangledName::of(sym.base()));
            if !compiled
                .iter()
                .any(|p| p.matches(&sym.raw, name) || p.matches(sym.base(), name))
            {
                continue;
            }
            let display = match &sym.clone_suffix {
                Some(s) => format!("{} [clone .{s}]", name.full),
                None => name.full.clone(),
            };
            let skip = |reason| SkippedSymbol {
                name: display.clone(),
                address: sym.address,
                reason,
            };
            match sym.clone_suffix.as_deref() {
                Some(s) if s == "cold" || s.starts_with("cold.") => {
                    skipped.push(skip(SkipReason::ColdBlock));
                    continue;
                }
                Some(s) if s.starts_with("part.") => {
                    skipped.push(skip(SkipReason::PartialInlineFragment));
                    continue;
                }
                _ => {}
            }
            let Some(file_offset) = self.image.file_offset(sym.address) else {
                skipped.push(skip(SkipReason::NotInFile));
                continue;
            };
            if !self.image.is_code(sym.address) {
                skipped.push(skip(SkipReason::NotCode));
                continue;
            }
            if !addresses.insert(sym.address) {
                skipped.push(skip(SkipReason::Alias));
                continue;
            }
            let entry = EntryInsn::decode(self.image.bytes_at(sym.address, 16).unwrap_or(&[]));
            symbols.push(ResolvedSymbol {
                name: display,
                short_name: name.short.clone(),
                raw: sym.raw.clone(),
                address: sym.address,
                file_offset,
                size: sym.size,
                table: sym.table,
                clone: sym.clone_suffix.clone(),
                entry,
            });
        }
        symbols.sort_by_key(|s| s.address);
        skipped.sort_by_key(|s| s.address);
        let unresolved = if !symbols.is_empty() {
            None
        } else if !skipped.is_empty() && skipped.iter().all(|s| s.reason == SkipReason::NotCode) {
            Some(Unresolved::NotCode)
        } else if !skipped.is_empty() {
            Some(Unresolved::OnlyFragments)
        } else if let Some(name) = self
            .data_objects
            .get_or_insert_with(|| self.image.data_object_names())
            .iter()
            .find(|n| {
                compiled
                    .iter()
                    .any(|p| p.may_match(n) && p.matches(n, &DemangledName::of(n)))
            })
        {
            Some(Unresolved::DataObject(name.clone()))
        } else if !self.image.has_symtab {
            Some(Unresolved::StrippedBinary)
        } else {
            Some(Unresolved::NoSuchSymbol)
        };
        Resolution {
            patterns: patterns.to_vec(),
            symbols,
            skipped,
            inline_sites: 0,
            unresolved,
        }
    }

    /// Like `resolve`, plus every inlined instance of the functions (from
    /// DWARF) as a count-only site.
    pub fn resolve_with_inline(&mut self, patterns: &[String]) -> Resolution {
        let mut r = self.resolve(patterns);
        let compiled: Vec<SymbolPattern> = patterns.iter().map(|p| SymbolPattern::new(p)).collect();
        let sites = match inline::find_inline_sites(self.image.dwarf_data(), &compiled) {
            Ok(sites) => sites,
            Err(_) if !r.symbols.is_empty() => return r,
            Err(_) => {
                r.unresolved = Some(Unresolved::InlineNeedsDebugInfo);
                return r;
            }
        };
        for site in sites {
            // DWARF from a mismatched or hostile debug file can point anywhere.
            let Some(file_offset) = self
                .image
                .file_offset(site.address)
                .filter(|_| self.image.is_code(site.address))
            else {
                continue;
            };
            let entry = EntryInsn::decode(self.image.bytes_at(site.address, 16).unwrap_or(&[]));
            let name = DemangledName::of(&site.function);
            r.symbols.push(ResolvedSymbol {
                name: match &site.caller {
                    Some(c) => format!(
                        "{} [inlined into {}]",
                        name.short,
                        DemangledName::of(c).short
                    ),
                    None => format!("{} [inlined]", name.short),
                },
                short_name: name.short,
                raw: site.function,
                address: site.address,
                file_offset,
                size: 0,
                table: SymbolTable::DwarfInline,
                clone: None,
                entry,
            });
            r.inline_sites += 1;
        }
        if r.inline_sites > 0 {
            r.unresolved = None;
        }
        r
    }
}
