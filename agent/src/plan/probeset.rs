//! From a request (`--probes`, `--probe`, `--catalog`) and a binary to the
//! resolved probe set: which catalog file applies, which probes it selects,
//! and what each resolved to. Shared by `record` and `probes`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::plan::catalog::{
    check_pattern, Catalog, CatalogError, CatalogFile, CounterSpec, LatchSpec, LayoutSpec,
    ProbeSpec,
};
use crate::plan::latch::{
    find_latch_layout, fixed_latch_layout, HolderSpec, LatchError, LatchLayout,
};
use crate::plan::memcounters::{plan_counters, PlannedCounter};
use crate::plan::server::ServerInfo;
use crate::resolve::{ArgReads, ElfImage, Resolution, Resolver};

#[derive(Debug, Clone)]
pub struct ProbeRequest {
    /// `default`, `all`, `none`, or names/globs; `None`: `default`, unless
    /// only ad-hoc probes were given.
    pub selection: Option<String>,
    pub ad_hoc: Vec<String>,
    /// Replaces the built-in catalog.
    pub catalog: Option<PathBuf>,
    /// Most symbols the whole set may attach to (`--max-probe-points`).
    pub max_points: usize,
}

impl Default for ProbeRequest {
    fn default() -> Self {
        Self {
            selection: None,
            ad_hoc: Vec::new(),
            catalog: None,
            max_points: DEFAULT_MAX_POINTS,
        }
    }
}

impl ProbeRequest {
    /// Whether the user named the probes (as opposed to taking the default).
    pub fn is_explicit(&self) -> bool {
        self.selection.is_some() || !self.ad_hoc.is_empty()
    }
}

/// Most probe points (attached symbols) a set may have unless raised with
/// `--max-probe-points` (the built-in catalogs' `all` needs ~50). Attaching
/// is cheap with uprobe_multi links (3,000 points in ~0.1 s here), but every
/// point is a breakpoint in the server: a pattern that matches thousands of
/// functions is more likely a mistake than a plan.
pub const DEFAULT_MAX_POINTS: usize = 1000;

/// A probe as planned: what the catalog asked for and what resolved.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlannedProbe {
    pub spec: ProbeSpec,
    pub resolution: Resolution,
    /// Where each symbol's latch id is, for probes whose spec names latches.
    pub latch: Option<LatchPlan>,
}

/// The latch layout found for a probe, or why none was.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatchPlan {
    pub layout: LatchLayout,
    /// Set when no symbol's latch could be located (no DWARF, no member).
    pub unavailable: Option<String>,
    /// The catalog `[[layout]]` object the members came from, for a
    /// binary without DWARF; none when DWARF gave them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout_from: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ProbeSet {
    pub catalog_file: Option<String>,
    pub probes: Vec<PlannedProbe>,
    /// Counters read from memory (`measure = "counter"`), not probed.
    pub counters: Vec<PlannedCounter>,
}

impl ProbeSet {
    pub fn resolve(
        image: &ElfImage,
        server: &ServerInfo,
        request: &ProbeRequest,
    ) -> Result<Self, CatalogError> {
        let catalog = match &request.catalog {
            Some(path) => Catalog::from_path(path)?,
            None => Catalog::builtin(),
        };
        let selection = request
            .selection
            .clone()
            .or_else(|| request.ad_hoc.is_empty().then(|| "default".to_string()))
            .filter(|s| s != "none");
        // `--probes ''` (or only commas): an empty list is a mistake, not a
        // request for nothing (that is `none`).
        if selection
            .as_deref()
            .is_some_and(|s| s.split(',').all(|name| name.trim().is_empty()))
        {
            return Err(CatalogError::EmptySelection);
        }
        let mut specs: Vec<ProbeSpec> = Vec::new();
        let mut counter_specs: Vec<CounterSpec> = Vec::new();
        let mut catalog_file = None;
        // Its `[[layout]]`s: member offsets for binaries without DWARF.
        let mut layouts_in: Option<&CatalogFile> = None;
        if let Some(selection) = selection {
            let file = catalog
                .for_server(server)
                // A user's catalog applies to whatever binary it is given for.
                .or_else(|| request.catalog.is_some().then(|| &catalog.files[0]))
                .ok_or_else(|| CatalogError::NoCatalog {
                    server: server.to_string(),
                })?;
            catalog_file = Some(file.file.clone());
            layouts_in = Some(file);
            let (probes, counters) = file.select_with_counters(&selection)?;
            specs.extend(probes);
            counter_specs.extend(counters);
        }
        for pattern in &request.ad_hoc {
            check_pattern(pattern, "--probe")?;
            specs.push(ProbeSpec::ad_hoc(pattern));
        }

        let mut resolver = Resolver::new(image);
        let probes = specs
            .into_iter()
            .map(|spec| {
                let reads = arg_reads(&spec);
                let resolution = if spec.inline {
                    resolver.resolve_with_inline_reading(&spec.symbols, reads)
                } else {
                    resolver.resolve_reading(&spec.symbols, reads)
                };
                let latch = spec
                    .latch
                    .as_ref()
                    .filter(|_| !resolution.symbols.is_empty())
                    .map(|l| {
                        let fixed = l
                            .object
                            .as_deref()
                            .and_then(|o| layouts_in?.layout_for(o, server));
                        plan_latch(image, &mut resolver, &resolution, l, fixed)
                    });
                PlannedProbe {
                    resolution,
                    spec,
                    latch,
                }
            })
            .collect();
        // Resolution is done with the file: symbol tables, DWARF and code
        // bytes read on the way leave the resident set.
        image.release_pages();
        Ok(Self {
            catalog_file,
            probes,
            counters: plan_counters(image, counter_specs),
        })
    }

    /// Refuses a set with more probe points than `max_points`, saying
    /// which probe is broadest and how long attaching would take.
    pub fn check_breadth(&self, max_points: usize) -> Result<(), CatalogError> {
        let points: usize = self.probes.iter().map(|p| p.resolution.symbols.len()).sum();
        if points <= max_points {
            return Ok(());
        }
        let widest = self
            .probes
            .iter()
            .max_by_key(|p| p.resolution.symbols.len())
            .expect("points > 0");
        let estimate = crate::plan::links::AttachEstimate::for_points(points, self.probes.len());
        Err(CatalogError::TooBroad {
            pattern: widest.spec.symbols.join(", "),
            origin: format!("probe `{}`", widest.spec.name),
            reason: format!(
                "the set has {points} probe points, more than {max_points} ({} has {}; {estimate}); narrow it or raise --max-probe-points",
                widest.spec.name,
                widest.resolution.symbols.len()
            ),
        })
    }

    /// Whether any probe or counter can record something.
    pub fn any_resolved(&self) -> bool {
        self.probes.iter().any(|p| !p.resolution.symbols.is_empty())
            || self.counters.iter().any(|c| c.layout.is_ok())
    }

    /// One line per unresolved probe or counter: name, patterns, why.
    pub fn unresolved_report(&self) -> String {
        let probes = self
            .probes
            .iter()
            .filter(|p| p.resolution.symbols.is_empty())
            .map(|p| {
                format!(
                    "  {} ({}): {}",
                    p.spec.name,
                    p.spec.symbols.join(", "),
                    p.resolution.why_unresolved()
                )
            });
        let counters = self.counters.iter().filter_map(|c| {
            let why = c.layout.as_ref().err()?;
            Some(format!(
                "  {} (counter {}.{}): {why}",
                c.spec.name, c.spec.counter.global, c.spec.counter.path
            ))
        });
        probes.chain(counters).collect::<Vec<_>>().join("\n")
    }
}

/// The arguments the probe's BPF program reads from registers at the
/// probe: a probe moved past a first instruction must find them intact.
fn arg_reads(spec: &ProbeSpec) -> ArgReads {
    let callsite = spec.callsite.map(|c| [c.file_arg, c.line_arg]);
    let latch = spec.latch.as_ref().map(|l| l.arg);
    ArgReads::of(callsite.into_iter().flatten().chain(latch))
}

/// Locate the latch id (or creation site) in the object each resolved
/// symbol is called on.
fn plan_latch(
    image: &ElfImage,
    resolver: &mut Resolver<'_>,
    resolution: &Resolution,
    spec: &LatchSpec,
    fixed: Option<&LayoutSpec>,
) -> LatchPlan {
    let addresses: Vec<u64> = resolution.symbols.iter().map(|s| s.address).collect();
    let created = spec.created_members();
    // The enclosing class's methods, whose `this` says where its holder is.
    let in_addresses: Vec<u64> = match &spec.holder_in {
        Some(pattern) => resolver
            .resolve(std::slice::from_ref(pattern))
            .symbols
            .iter()
            .map(|s| s.address)
            .collect(),
        None => Vec::new(),
    };
    let holder = spec
        .holder_members()
        .map(|(thread, valid)| HolderSpec {
            thread,
            valid,
            in_addresses: &in_addresses,
            site: spec.holder_site_members(),
        })
        // A `holder_in` class this binary does not have: no holder.
        .filter(|h| spec.holder_in.is_none() || !h.in_addresses.is_empty());
    let names_wanted = !spec.id_type.is_empty() || created.is_some();
    // Woken through the object itself: nothing to find in DWARF for that.
    let woken_by_object = spec.woken_by.is_some() && spec.woken_key.is_none();
    let woken_key = spec.woken_key.as_deref();
    let found = find_latch_layout(
        image,
        &addresses,
        spec.arg,
        &spec.id_type,
        created,
        holder,
        woken_key,
    );
    // No DWARF, but the catalog read this build's layout of the object
    // from its code: creation site, holder and release key from there.
    if let (Err(LatchError::NoDebugInfo), Some(fixed)) = (&found, fixed) {
        let layout = fixed_latch_layout(&addresses, &fixed.members, created, holder, woken_key);
        // A latch id's names are an enum's: only DWARF has them.
        let named = !names_wanted || !layout.created.is_empty();
        let found = named || !layout.holders.is_empty() || !layout.woken.is_empty();
        let object = fixed.object.clone();
        return LatchPlan {
            layout,
            unavailable: match (found, named) {
                (false, _) => Some(format!(
                    "the binary has no DWARF, and the catalog's layout of `{object}` for this \
                     version has none of the members this probe reads"
                )),
                (true, false) => Some(
                    "the binary has no DWARF debug info (.debug_info); latch names need it"
                        .to_string(),
                ),
                (true, true) => None,
            },
            layout_from: Some(object),
        };
    }
    match found {
        Ok(layout)
            if !layout.fields.is_empty()
                || !layout.created.is_empty()
                || (!names_wanted
                    && (woken_by_object
                        || !layout.holders.is_empty()
                        || !layout.woken.is_empty())) =>
        {
            LatchPlan {
                layout,
                unavailable: None,
                layout_from: None,
            }
        }
        Ok(layout) => {
            let mut wanted = Vec::new();
            if let (false, Some((thread, _))) = (names_wanted, spec.holder_members()) {
                wanted.push(format!("`{thread}` holder member"));
            }
            if let (false, Some(key)) = (names_wanted, woken_key) {
                wanted.push(format!("`{key}` member"));
            }
            if !spec.id_type.is_empty() {
                wanted.push(format!("a `{}` member", spec.id_type));
            }
            if let Some((file, line)) = created {
                wanted.push(format!("`{file}`/`{line}` members"));
            }
            LatchPlan {
                layout,
                unavailable: Some(format!(
                    "no {} found in DWARF for argument {}",
                    wanted.join(" or "),
                    spec.arg
                )),
                layout_from: None,
            }
        }
        // No DWARF is needed to tie waits to the thread whose release ends them.
        Err(_) if woken_by_object && !names_wanted => LatchPlan {
            layout: Default::default(),
            unavailable: None,
            layout_from: None,
        },
        Err(e) => LatchPlan {
            layout: Default::default(),
            unavailable: Some(crate::error_chain(&e)),
            layout_from: None,
        },
    }
}
