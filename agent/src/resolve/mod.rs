//! Turning demangled patterns into attachable addresses in one binary.

pub mod debuginfo;
pub mod debuginfod;
pub mod dwarf;
pub mod elf;
pub mod entry;
pub mod inline;
pub mod lines;
pub mod mapped;
pub mod pattern;
pub mod placement;
pub mod section;
pub mod units;

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

pub use elf::{ElfError, ElfImage, FunctionSymbol, SymbolTable};
pub use entry::EntryInsn;
pub use pattern::{DemangledName, SymbolPattern};
pub use placement::{ArgReads, ProbeMove};

use placement::{FunctionCode, Placement};

/// One function the probe will attach to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResolvedSymbol {
    /// Demangled, with parameters; clone suffix appended as `[clone .x]`.
    pub name: String,
    /// Demangled without parameters: the frame name in folded stacks.
    pub short_name: String,
    pub raw: String,
    /// The function's (or inline site's) address; `file_offset` may lie past it.
    pub address: u64,
    /// Where the probe goes, as a file offset: the function's entry, or the
    /// instruction after it when `moved` (the kernel refused the first).
    pub file_offset: u64,
    pub size: u64,
    pub table: SymbolTable,
    /// `constprop.0`, `isra.0`: a full copy whose arguments may differ.
    pub clone: Option<String>,
    /// The instruction the probe sits on (what a hit costs).
    pub entry: EntryInsn,
    /// Set when the probe sits past the first instruction, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved: Option<ProbeMove>,
}

/// A matching symbol that was deliberately not attached.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SkippedSymbol {
    pub name: String,
    pub address: u64,
    pub reason: SkipReason,
    /// The particulars, for `Unprobeable`: which instruction, why not moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl std::fmt::Display for SkippedSymbol {
    /// `reason` or, when there are particulars, those.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.detail {
            Some(d) => f.write_str(d),
            None => write!(f, "{}", self.reason),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// The kernel refuses a uprobe on its first instruction and the probe
    /// cannot safely move past it (see `detail`).
    Unprobeable,
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
            SkipReason::Unprobeable => "the kernel refuses a uprobe on its first instruction",
        })
    }
}

/// Why a pattern found nothing to attach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Every match starts with an instruction the kernel refuses to probe,
    /// and none could move (why, for the first).
    Unprobeable(String),
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unresolved::DataObject(name) => {
                return write!(
                    f,
                    "`{name}` is a data object (a variable), not a function: probes attach only to code"
                )
            }
            Unresolved::Unprobeable(why) => return f.write_str(why),
            _ => {}
        }
        f.write_str(match self {
            Unresolved::DataObject(_) | Unresolved::Unprobeable(_) => unreachable!("written above"),
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

#[derive(Debug, Clone, Serialize, Deserialize)]
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

    /// The functions `patterns` name, for a probe that reads no argument.
    pub fn resolve(&mut self, patterns: &[String]) -> Resolution {
        self.resolve_reading(patterns, ArgReads::NONE)
    }

    /// The functions `patterns` name, each with where its probe goes; a
    /// probe moved past a refused first instruction must leave the argument
    /// registers in `reads` intact (clones read none: see `attach`).
    pub fn resolve_reading(&mut self, patterns: &[String], reads: ArgReads) -> Resolution {
        let compiled: Vec<SymbolPattern> = patterns.iter().map(|p| SymbolPattern::new(p)).collect();
        let mut symbols = Vec::new();
        let mut skipped = Vec::new();
        let mut addresses = HashSet::new();

        for (idx, sym) in self.image.symbols().iter().enumerate() {
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
                detail: None,
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
            if addresses.contains(&sym.address) {
                skipped.push(skip(SkipReason::Alias));
                continue;
            }
            let reads = if sym.clone_suffix.is_some() {
                ArgReads::NONE
            } else {
                reads
            };
            let function = (sym.size > 0).then_some((sym.address, sym.size, sym.raw.as_str()));
            let (file_offset, moved) = match self.place(sym.address, function, reads) {
                Placement::Entry => (file_offset, None),
                Placement::Moved(m) => match self.image.file_offset(sym.address + m.bytes) {
                    Some(off) => (off, Some(m)),
                    None => (file_offset, None),
                },
                Placement::Refused(why) => {
                    skipped.push(SkippedSymbol {
                        detail: Some(why),
                        ..skip(SkipReason::Unprobeable)
                    });
                    continue;
                }
            };
            let name = self.demangled.get(&idx).expect("demangled above");
            addresses.insert(sym.address);
            let at = sym.address + moved.as_ref().map_or(0, |m| m.bytes);
            let entry = EntryInsn::decode(self.image.bytes_at(at, 16).unwrap_or(&[]));
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
                moved,
            });
        }
        symbols.sort_by_key(|s| s.address);
        skipped.sort_by_key(|s| s.address);
        let unresolved = if !symbols.is_empty() {
            None
        } else if let Some(u) = unprobeable(&skipped) {
            Some(u)
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
        self.resolve_with_inline_reading(patterns, ArgReads::NONE)
    }

    /// `resolve_reading` plus the inline sites (which read no argument:
    /// registers at an inline site are not the function's arguments).
    pub fn resolve_with_inline_reading(
        &mut self,
        patterns: &[String],
        reads: ArgReads,
    ) -> Resolution {
        let mut r = self.resolve_reading(patterns, reads);
        let compiled: Vec<SymbolPattern> = patterns.iter().map(|p| SymbolPattern::new(p)).collect();
        let sites = match inline::find_inline_sites(self.image, &compiled) {
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
            let name = DemangledName::of(&site.function);
            let display = match &site.caller {
                Some(c) => format!(
                    "{} [inlined into {}]",
                    name.short,
                    DemangledName::of(c).short
                ),
                None => format!("{} [inlined]", name.short),
            };
            let holder = self
                .image
                .symbols()
                .iter()
                .find(|s| {
                    s.size > 0 && site.address >= s.address && site.address - s.address < s.size
                })
                .map(|s| (s.address, s.size, s.raw.as_str()));
            let (file_offset, moved) = match self.place(site.address, holder, ArgReads::NONE) {
                Placement::Entry => (file_offset, None),
                Placement::Moved(m) => match self.image.file_offset(site.address + m.bytes) {
                    Some(off) => (off, Some(m)),
                    None => (file_offset, None),
                },
                Placement::Refused(why) => {
                    r.skipped.push(SkippedSymbol {
                        name: display,
                        address: site.address,
                        reason: SkipReason::Unprobeable,
                        detail: Some(why),
                    });
                    continue;
                }
            };
            let at = site.address + moved.as_ref().map_or(0, |m| m.bytes);
            let entry = EntryInsn::decode(self.image.bytes_at(at, 16).unwrap_or(&[]));
            r.symbols.push(ResolvedSymbol {
                name: display,
                short_name: name.short,
                raw: site.function,
                address: site.address,
                file_offset,
                size: 0,
                table: SymbolTable::DwarfInline,
                clone: None,
                entry,
                moved,
            });
            r.inline_sites += 1;
        }
        if r.inline_sites > 0 {
            r.unresolved = None;
        } else if r.symbols.is_empty() {
            if let Some(u) = unprobeable(&r.skipped) {
                r.unresolved = Some(u);
            }
        }
        r
    }

    /// Where the probe for the code at `address` goes. `function`: the
    /// function holding it (address, size, symbol), when known.
    fn place(
        &self,
        address: u64,
        function: Option<(u64, u64, &str)>,
        reads: ArgReads,
    ) -> Placement {
        let Some(code) = self.image.bytes_at(address, 2 * placement::MAX_INSN_LEN) else {
            return Placement::Entry;
        };
        // The common case, decoded once: the kernel takes the first instruction.
        if placement::kernel_refusal(code).is_none() {
            return Placement::Entry;
        }
        let body = function.and_then(|(start, size, _)| {
            let bytes = self.image.bytes_at(start, usize::try_from(size).ok()?)?;
            (bytes.len() as u64 == size).then_some((start, bytes))
        });
        // GCC's `.cold` parts jump back into their function.
        let cold: Vec<(u64, &[u8])> = function
            .map(|(_, _, raw)| {
                let prefix = format!("{raw}.cold");
                self.image
                    .symbols()
                    .iter()
                    .filter(|s| {
                        s.raw == prefix
                            || s.raw
                                .strip_prefix(&prefix)
                                .is_some_and(|t| t.starts_with('.'))
                    })
                    .filter_map(|s| {
                        let bytes = self
                            .image
                            .bytes_at(s.address, usize::try_from(s.size).ok()?)?;
                        Some((s.address, bytes))
                    })
                    .collect()
            })
            .unwrap_or_default();
        placement::place(
            &FunctionCode {
                address,
                code,
                function: body,
                fragments: &cold,
            },
            reads,
        )
    }
}

/// Why nothing attaches, when refused first instructions are the reason.
fn unprobeable(skipped: &[SkippedSymbol]) -> Option<Unresolved> {
    skipped
        .iter()
        .find(|s| s.reason == SkipReason::Unprobeable)
        .map(|s| Unresolved::Unprobeable(format!("{}: {s}", s.name)))
}
