//! `innoprof probes`: what each catalog probe resolves to in a binary,
//! without attaching anything.

use std::path::Path;

use comfy_table::presets::ASCII_MARKDOWN;
use comfy_table::Table;
use serde::Serialize;

use crate::plan::catalog::CatalogError;
use crate::plan::memcounters::PlannedCounter;
use crate::plan::probeset::PlannedProbe;
use crate::plan::probeset::{ProbeRequest, ProbeSet};
use crate::plan::server::ServerInfo;
use crate::resolve::debuginfo::{attach_debug_info, DebugSearch, FoundBy};
use crate::resolve::{ElfError, ElfImage};
use crate::target::Target;

#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error(transparent)]
    Elf(#[from] ElfError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

#[derive(Debug, Serialize)]
pub struct Inspection {
    pub binary: String,
    pub build_id: Option<String>,
    pub server: ServerInfo,
    pub position_independent: bool,
    pub has_symtab: bool,
    pub has_debug_info: bool,
    pub debug_file: Option<String>,
    pub debug_found_by: Option<FoundBy>,
    /// What was ignored while reading the binary (an unsafe debuglink).
    pub notes: Vec<String>,
    pub catalog: Option<String>,
    pub probes: Vec<PlannedProbe>,
    /// Counters read from memory (`measure = "counter"`): where each lives,
    /// or why it cannot be read in this binary.
    pub counters: Vec<PlannedCounter>,
    /// How each hit's statement and connection would be read (the THD
    /// plan), or why they cannot be.
    pub statements: String,
}

/// Resolves the request against the binary at `path` (`shown_as`: the path
/// to print, e.g. the one the target sees).
pub fn inspect(
    path: &Path,
    shown_as: &str,
    request: &ProbeRequest,
    debug: &DebugSearch,
) -> Result<Inspection, InspectError> {
    let mut out = inspect_image(ElfImage::open(path)?, request, debug, None)?;
    out.binary = shown_as.to_string();
    Ok(out)
}

/// Resolves the request against a target's executable (opened as the
/// file it runs, see [`crate::target::rootfs`]).
pub fn inspect_target(
    target: &Target,
    request: &ProbeRequest,
    debug: &DebugSearch,
) -> Result<Inspection, InspectError> {
    inspect_image(
        ElfImage::open_target(target)?,
        request,
        debug,
        Some(target.pid),
    )
}

fn inspect_image(
    mut image: ElfImage,
    request: &ProbeRequest,
    debug: &DebugSearch,
    pid: Option<u32>,
) -> Result<Inspection, InspectError> {
    let debug_found_by = attach_debug_info(&mut image, debug)?;
    let server = ServerInfo::detect(&image);
    let set = ProbeSet::resolve(&image, &server, request)?;
    // The pthread-key way reads the key's number from the running server.
    let statements = match pid {
        Some(pid) => match crate::plan::thd::plan_thd(pid, &image) {
            Ok(layout) => crate::plan::thd::describe(&layout),
            Err(e) => format!("not attributed: {}", crate::error_chain(&e)),
        },
        None => "shown for a running server (-p PID): the THD may be found through a pthread key it holds".into(),
    };
    Ok(Inspection {
        statements,
        binary: image.path.display().to_string(),
        build_id: image.build_id.clone(),
        server,
        position_independent: image.position_independent,
        has_symtab: image.has_symtab,
        has_debug_info: image.has_debug_info,
        debug_file: image.debug_file.as_ref().map(|p| p.display().to_string()),
        debug_found_by,
        notes: image.notes.clone(),
        catalog: set.catalog_file,
        probes: set.probes,
        counters: set.counters,
    })
}

const SYMBOLS_SHOWN: usize = 4;

/// What a wait probe can say of who holds the latch: where the holder is
/// read, or that this latch kind records none (so its waits get no
/// waiter -> holder edge). Nothing for probes that are not latch waits.
fn holder_line(p: &PlannedProbe, all: &[PlannedProbe]) -> Option<String> {
    let spec = p.spec.latch.as_ref();
    if let Some(w) = p.spec.wake {
        return Some(format!(
            "releases: a hit is a release that wakes waiters (argument {}: what they wait on); \
             its thread is their holder",
            w.arg
        ));
    }
    let recorded = recorded_holder_line(p);
    let woken = spec.and_then(|s| woken_line(p, s, all));
    let line = match (recorded, woken) {
        (Some(r), Some(w)) if r.starts_with("holder: none") => Some(w),
        (Some(r), Some(w)) => Some(format!("{r}; else {}", w.trim_start_matches("holder: "))),
        (r, w) => r.or(w),
    }?;
    if line.starts_with("holder: none") {
        return Some(line);
    }
    // Said where a holder is named, so no one reads its wait as its hold.
    Some(format!(
        "{line}; hold time not measured (the latch is taken by an inline compare-and-swap no probe sees)"
    ))
}

/// Where a waiter finds the release that ends its wait, if its latch
/// names one (`woken_by`).
fn woken_line(
    p: &PlannedProbe,
    spec: &crate::plan::catalog::LatchSpec,
    all: &[PlannedProbe],
) -> Option<String> {
    let by = spec.woken_by.as_deref()?;
    let resolved = all
        .iter()
        .find(|q| q.spec.name == by)
        .is_some_and(|q| !q.resolution.symbols.is_empty());
    if !resolved {
        return Some(format!(
            "holder: none: `{by}` (the release that wakes these waiters) is not in this binary"
        ));
    }
    let via = match spec.woken_key.as_deref() {
        None => String::new(),
        Some(key) => {
            let found = p.latch.as_ref().map_or(0, |l| l.layout.woken.len());
            if found == 0 {
                return Some(format!(
                    "holder: none: no `{key}` member found in {} (what `{by}` is called on)",
                    members_from(p)
                ));
            }
            format!(
                " through `{key}` ({found} of {} symbols)",
                p.resolution.symbols.len()
            )
        }
    };
    Some(format!(
        "holder: the thread whose release ends the wait, seen by `{by}`{via} (attached with this probe)"
    ))
}

/// Where a probe's latch members were looked up: DWARF, or for a binary
/// without it the catalog's layout of the object for this exact version.
fn members_from(p: &PlannedProbe) -> String {
    match p.latch.as_ref().and_then(|l| l.layout_from.as_deref()) {
        Some(object) => format!("the catalog's `{object}` layout of this version, without DWARF"),
        None => "DWARF".to_string(),
    }
}

fn recorded_holder_line(p: &PlannedProbe) -> Option<String> {
    let spec = p.spec.latch.as_ref();
    let is_latch = spec.is_some()
        || (p.spec.cost == crate::plan::catalog::CostClass::Contended
            && p.spec.measure == crate::plan::catalog::Measure::Latency);
    let found = p.latch.as_ref().map_or(0, |l| l.layout.holders.len());
    match spec.and_then(|s| s.holder_members()) {
        Some((thread, valid)) if found > 0 => {
            let around = spec
                .and_then(|s| s.holder_in.as_deref())
                .map(|c| format!(" of the enclosing {} object", c.trim_end_matches("::*")))
                .unwrap_or_default();
            let site = match (
                spec.and_then(|s| s.holder_site_members()),
                p.latch.as_ref().map_or(0, |l| l.layout.holder_sites.len()),
            ) {
                (Some((file, line)), n) if n > 0 => {
                    format!(", with where it took the latch (`{file}`/`{line}`)")
                }
                (Some((file, _)), _) => {
                    format!(
                        ", not where it took it (no `{file}` in {})",
                        members_from(p)
                    )
                }
                (None, _) => String::new(),
            };
            let from = match p.latch.as_ref().and_then(|l| l.layout_from.as_deref()) {
                Some(_) => format!("; members from {}", members_from(p)),
                None => String::new(),
            };
            Some(format!(
                "holder: `{thread}`{around} (valid while `{valid}`){site} read at the wait's start in {found} of {} symbols{from}",
                p.resolution.symbols.len()
            ))
        }
        Some((thread, _)) => Some(format!(
            "holder: none: no `{thread}` member found in {} for these symbols",
            members_from(p)
        )),
        None if is_latch => Some(
            "holder: none: this latch kind records no holder (waits get no waiter -> holder edge)"
                .to_string(),
        ),
        None => None,
    }
}

pub fn render(i: &Inspection) -> String {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut out = format!(
        "binary:   {}\nserver:   {}\nbuild-id: {}\nsymbols:  .symtab {}, DWARF {}{}\ncatalog:  {}\n",
        i.binary,
        i.server,
        i.build_id.as_deref().unwrap_or("none"),
        yes(i.has_symtab),
        yes(i.has_debug_info),
        i.debug_file.as_ref().map(|d| format!(" (from {d})")).unwrap_or_default(),
        i.catalog.as_deref().unwrap_or("none (ad-hoc probes only)"),
    );
    out.push_str(&format!("statements: {}\n", i.statements));
    for n in &i.notes {
        out.push_str(&format!("note:     {n}\n"));
    }
    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN);
    table.set_header([
        "probe",
        "cost",
        "measure",
        "resolved",
        "symbols (address, probed instruction) / reason",
    ]);
    for p in &i.probes {
        let r = &p.resolution;
        let detail = if r.symbols.is_empty() {
            r.why_unresolved()
        } else {
            let mut lines: Vec<String> = r
                .symbols
                .iter()
                .take(SYMBOLS_SHOWN)
                .map(|s| match &s.moved {
                    None => format!("{} @ {:#x} ({})", short(&s.name), s.address, s.entry),
                    Some(m) => format!(
                        "{} @ {:#x}+{} ({}; {m})",
                        short(&s.name),
                        s.address,
                        m.bytes,
                        s.entry
                    ),
                })
                .collect();
            if r.symbols.len() > SYMBOLS_SHOWN {
                lines.push(format!("… {} more", r.symbols.len() - SYMBOLS_SHOWN));
            }
            if r.inline_sites > 0 {
                lines.push(format!("{} inline sites (count only)", r.inline_sites));
            }
            for s in &r.skipped {
                lines.push(format!("skipped {}: {s}", short(&s.name)));
            }
            if let (Some(spec), Some(plan)) = (&p.spec.latch, &p.latch) {
                if let Some(why) = &plan.unavailable {
                    lines.push(format!("latch names unavailable: {why}"));
                }
                if !plan.layout.fields.is_empty() {
                    lines.push(format!(
                        "latch named: {} found in {} of {} symbols ({} names)",
                        spec.id_type,
                        plan.layout.fields.len(),
                        r.symbols.len(),
                        plan.layout.names.len()
                    ));
                }
                if let (false, Some((file, line))) =
                    (plan.layout.created.is_empty(), spec.created_members())
                {
                    lines.push(format!(
                        "latch named by creation site: {file}/{line} found in {} of {} symbols{}",
                        plan.layout.created.len(),
                        r.symbols.len(),
                        match plan.layout_from.as_deref() {
                            Some(_) => format!(", from {}", members_from(p)),
                            None => String::new(),
                        }
                    ));
                }
            }
            if let Some(line) = holder_line(p, &i.probes) {
                lines.push(line);
            }
            lines.join("\n")
        };
        let resolved = if r.symbols.is_empty() {
            "no".to_string()
        } else {
            r.symbols.len().to_string()
        };
        table.add_row([
            p.spec.name.clone(),
            format!("{:?}", p.spec.cost).to_lowercase(),
            format!("{:?}", p.spec.measure).to_lowercase(),
            resolved,
            detail,
        ]);
    }
    out.push_str(&table.to_string());
    out.push('\n');
    if !i.counters.is_empty() {
        let mut table = Table::new();
        table.load_preset(ASCII_MARKDOWN);
        table.set_header([
            "counter (read from memory, no cost per event)",
            "readable",
            "global -> members (offsets, size, type) / reason",
        ]);
        for c in &i.counters {
            table.add_row([
                c.spec.name.clone(),
                if c.layout.is_ok() { "yes" } else { "no" }.to_string(),
                c.describe(),
            ]);
        }
        out.push('\n');
        out.push_str(&table.to_string());
        out.push('\n');
    }
    out
}

/// Drops the parameter list, keeps `[clone …]` / `[inlined into …]`.
fn short(name: &str) -> String {
    let (head, tail) = match name.find(" [") {
        Some(b) => (&name[..b], &name[b..]),
        None => (name, ""),
    };
    let head = match head.find('(') {
        Some(p) if p > 0 => &head[..p],
        _ => head,
    };
    format!("{head}{tail}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn short_names() {
        assert_eq!(
            super::short("fil_flush(unsigned long) [clone .constprop.0]"),
            "fil_flush [clone .constprop.0]"
        );
        assert_eq!(
            super::short("dict_sys_get_new_row_id [inlined into row_ins_step]"),
            "dict_sys_get_new_row_id [inlined into row_ins_step]"
        );
        assert_eq!(
            super::short("log_write_up_to(unsigned long, bool)"),
            "log_write_up_to"
        );
    }
}
