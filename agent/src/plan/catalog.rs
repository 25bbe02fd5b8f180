//! The probe catalog: per server family/version range, the logical probes
//! (`innodb.mutex.wait`, …) and the symbol patterns that implement them.
//! The files live in `probes/` and are embedded at build time.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use wildmatch::WildMatch;

use crate::plan::server::{Family, ServerInfo, Version};

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read catalog {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("catalog {file} is malformed")]
    Parse {
        file: String,
        source: Box<toml::de::Error>,
    },
    #[error("catalog {file} is invalid: {reason}")]
    Invalid { file: String, reason: String },
    #[error("unknown probe `{name}`{suggestion}; this catalog ({file}) has: {known}")]
    UnknownProbe {
        name: String,
        /// ", did you mean `…`?" when a known name is close.
        suggestion: String,
        file: String,
        known: String,
    },
    #[error("catalog {path} is larger than {max} bytes, too large for a catalog file")]
    TooLarge { path: PathBuf, max: u64 },
    #[error("pattern `{pattern}` ({origin}) is too broad: {reason}")]
    TooBroad {
        pattern: String,
        origin: String,
        reason: String,
    },
    #[error(
        "no catalog covers {server}; name functions with --probe PATTERN or supply --catalog FILE"
    )]
    NoCatalog { server: String },
    #[error(
        "--probes names no probe; give names or globs (`innoprof probes --pid PID` lists them), or default, all or none"
    )]
    EmptySelection,
}

/// How a probe measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Measure {
    /// Entry + return: calls, wait time, histogram, stacks weighted by time.
    Latency,
    /// Entry only: calls and stacks.
    Count,
}

/// How often a probe fires, which decides whether it is on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CostClass {
    /// Every operation takes this path: opt-in.
    Hot,
    /// Taken only when a latch is busy: on by default.
    Contended,
    /// A few times per transaction at most: on by default.
    Rare,
    /// Ad-hoc `--probe`: the user asked for it explicitly.
    Unknown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub symbols: Vec<String>,
    pub measure: Measure,
    pub cost: CostClass,
    /// Where the function takes the caller's `(const char* file, unsigned line)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callsite: Option<CallsiteArgs>,
    /// Also probe the function's inlined instances (from DWARF), counting
    /// calls at each inline site.
    #[serde(default)]
    pub inline: bool,
    /// Name the latch the function is called on, from an enum member of
    /// the object an argument points to (found in DWARF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latch: Option<LatchSpec>,
    /// `default = true`: in the default set whatever its cost class (a
    /// hot function the mission names, e.g. `trx_undo_prev_version_build`;
    /// the governor keeps it affordable). `false` keeps a probe out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
    /// `wake = { arg = 1 }`: the function runs on the release slow path,
    /// only when someone waits (MySQL 5.6's `mutex_signal_object`, MariaDB
    /// 10.6+'s `srw_mutex_impl<*>::wake`), and argument `arg` is what the
    /// waiters wait on. The thread that hits it is the holder its waiters
    /// waited for: latch specs name such a probe in `woken_by`. Count-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<WakeSpec>,
}

/// See [`ProbeSpec::wake`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WakeSpec {
    pub arg: u8,
}

/// `latch = { arg = 1, id_type = "latch_id_t", strip_prefix = "LATCH_ID_", suffix = "_mutex" }`:
/// argument 1 (`this`) points to an object holding a `latch_id_t`
/// somewhere in its members; `LATCH_ID_DICT_SYS` is shown as `dict_sys_mutex`.
///
/// `latch = { arg = 1, created_file = "cfile_name", created_line = "cline" }`:
/// the object keeps the `__FILE__`/`__LINE__` of its creation in those
/// members (rw-locks, MySQL 5.6 mutexes: no latch id in release builds);
/// the latch is named by that site and the function holding it, as SHOW
/// ENGINE INNODB STATUS names a latch ("created in file dict0dict.cc line 1107").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatchSpec {
    pub arg: u8,
    #[serde(default)]
    pub id_type: String,
    #[serde(default)]
    pub strip_prefix: String,
    #[serde(default)]
    pub suffix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_line: Option<String>,
    /// The member holding the exclusive holder's thread (`pthread_t`:
    /// its thread pointer), read at a waiter's entry (`writer_thread` of
    /// `rw_lock_t`, MySQL 5.6-5.7 and MariaDB 10.2-10.5; `writer` of
    /// `sux_lock`, MariaDB 10.6+, with `holder_in`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The member that says `holder` is current (InnoDB leaves
    /// `writer_thread` stale after the release): non-zero (`recursive`,
    /// MySQL 5.6), or with `<=0` after its name, signed and at most 0
    /// (`lock_word<=0`, MySQL 5.7 and MariaDB 10.2-10.5: x- or sx-held,
    /// or a writer queued ahead of the readers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_valid: Option<String>,
    /// Where the object the probe sees does not record its holder but an
    /// object around it does: a symbol pattern of the enclosing class's
    /// methods (`sux_lock<*>::*`, MariaDB 10.6+, whose `writer` sits next
    /// to the `ssux_lock_impl` the wait functions are called on). Their
    /// `this` types say where, relative to the inner object, `holder` is.
    /// An object of the same type outside such a class has no holder
    /// there: BPF checks that what it reads is a thread pointer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_in: Option<String>,
    /// The members where the latch records where its exclusive holder took
    /// it (`last_x_file_name`, `last_x_line` of `rw_lock_t`: what SHOW
    /// ENGINE INNODB STATUS prints as "Last time write locked in file …
    /// line …"), read with the holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_line: Option<String>,
    /// Where the latch records no holder (or not this one: a shared holder,
    /// a plain mutex): the catalog probe, with `wake`, whose hits release
    /// this latch while someone waits. A wait the release ends is tied to
    /// the releasing thread, read at the wait's return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub woken_by: Option<String>,
    /// With `woken_by`: the member of the object holding what the release
    /// function is called on (`m_event`: MariaDB 10.2's mutexes are woken
    /// through `os_event_set(m_event)`); without it, the object itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub woken_key: Option<String>,
    /// The type argument `arg` points to (`rw_lock_t`): where the binary
    /// has no DWARF, the members above are looked up in the catalog's
    /// `[[layout]]` of that object for the server's exact version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
}

impl LatchSpec {
    /// The holder's members (thread, validity flag), when both are given.
    pub fn holder_members(&self) -> Option<(&str, &str)> {
        self.holder.as_deref().zip(self.holder_valid.as_deref())
    }

    /// The validity member's name, and whether it is read as "signed, at
    /// most 0" rather than "non-zero".
    pub fn holder_valid_rule(valid: &str) -> (&str, bool) {
        match valid.strip_suffix("<=0") {
            Some(name) => (name.trim(), true),
            None => (valid, false),
        }
    }

    /// The member names holding the holder's lock site, when both are given.
    pub fn holder_site_members(&self) -> Option<(&str, &str)> {
        self.holder_file.as_deref().zip(self.holder_line.as_deref())
    }

    /// The member names holding the creation site, when both are given.
    pub fn created_members(&self) -> Option<(&str, &str)> {
        self.created_file
            .as_deref()
            .zip(self.created_line.as_deref())
    }
}

/// A counter InnoDB already keeps in memory, read instead of probed:
///
/// ```toml
/// [[probe]]
/// name = "innodb.dict_sys.row_ids"
/// measure = "counter"
/// counter = { global = "dict_sys", path = "row_id" }
/// ```
///
/// `global` is a variable's name; `path` names members, dot-separated
/// (alternatives for different versions separated by `|`, first found wins),
/// from the global's type, following pointers where DWARF says a member
/// (or the global) is one (`dict_sys->row_id` and `log_sys.lsn` are both
/// written `path = "…"` as DWARF decides). The last member must be an
/// integer, or a struct that wraps exactly one (`std::atomic<ulong>`,
/// `Atomic_counter<ulong>`). It costs nothing per event: innoprof reads
/// the few bytes at start, at each `--interval` and at the end.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Always `counter`: what tells this entry from a probe.
    pub measure: CounterMeasure,
    pub counter: CounterPath,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CounterMeasure {
    Counter,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterPath {
    pub global: String,
    pub path: String,
}

impl CounterPath {
    /// The alternative member paths, in order (`a.b|c` → `[["a", "b"], ["c"]]`):
    /// one catalog range can span versions that renamed the member
    /// (`max_trx_id` in MariaDB 10.2, `m_max_trx_id` from 10.3).
    pub fn alternatives(&self) -> Vec<Vec<&str>> {
        self.path
            .split('|')
            .map(|alt| alt.split('.').map(str::trim).collect())
            .collect()
    }
}

/// Longest counter path: InnoDB's are one member deep.
const MAX_COUNTER_PATH: usize = 8;

/// 1-based positions in the machine-level argument list (for a member
/// function `this` is argument 1), e.g. `PolicyMutex<…>::enter(this,
/// n_spins, n_delay, file, line)` has `file_arg = 4`, `line_arg = 5`.
/// Only the six register arguments of the x86-64 SysV ABI can be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallsiteArgs {
    pub file_arg: u8,
    pub line_arg: u8,
}

impl ProbeSpec {
    /// Contended and rare paths, except inline-site probes: those sit
    /// mid-function, usually on an instruction the kernel must single-step,
    /// and on MariaDB 10.2.11 (kernel 6.18) such a site was seen to stop
    /// other uprobes firing in connection threads. Opt-in by name only.
    /// An explicit `default = …` in the catalog wins.
    pub fn is_default(&self) -> bool {
        match self.default {
            Some(explicit) => explicit,
            // A release probe comes with the waits it names holders for
            // (see `select_with_counters`), not on its own: os_event_set
            // runs for every event of the server, not only latch releases.
            None => {
                matches!(self.cost, CostClass::Contended | CostClass::Rare)
                    && !self.inline
                    && self.wake.is_none()
            }
        }
    }

    /// A probe for a user-supplied pattern, outside any catalog.
    pub fn ad_hoc(pattern: &str) -> Self {
        Self {
            name: pattern.to_string(),
            description: "ad-hoc probe (--probe)".into(),
            symbols: vec![pattern.to_string()],
            measure: Measure::Latency,
            cost: CostClass::Unknown,
            callsite: None,
            inline: false,
            latch: None,
            default: None,
            wake: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerRange {
    pub family: Family,
    /// Inclusive `major.minor` bounds.
    pub min_version: String,
    pub max_version: String,
    /// Versions whose real binaries these symbols were checked against.
    #[serde(default)]
    pub verified: Vec<String>,
    /// For entries not verified on a binary: the source files the symbol
    /// names and signatures were read from.
    #[serde(default)]
    pub sources: Vec<String>,
}

/// Where an object's members are in builds of exact versions that carry
/// no DWARF (MySQL 8.0.15's binary), read from their machine code; latch
/// specs naming the `object` use it when DWARF is missing:
///
/// ```toml
/// [[layout]]
/// object = "rw_lock_t"
/// versions = ["8.0.15"]
/// members = { writer_thread = { offset = 0x28, size = 8 }, last_x_line = { offset = 0x5c, size = 4, bits = 14 } }
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutSpec {
    pub object: String,
    /// Exact `MAJOR.MINOR.PATCH` versions whose code was read.
    pub versions: Vec<String>,
    pub members: std::collections::BTreeMap<String, MemberOffset>,
}

/// A member at `offset` of `size` bytes; a bit-field is `bits` wide,
/// starting `shift` bits above the least significant bit of those bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberOffset {
    pub offset: u32,
    pub size: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bits: Option<u8>,
    #[serde(default)]
    pub shift: u8,
}

impl LayoutSpec {
    /// Whether this layout was read from `server`'s exact version.
    pub fn applies_to(&self, server: &ServerInfo) -> bool {
        server
            .version
            .is_some_and(|v| self.versions.iter().any(|w| Version::parse(w) == Some(v)))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogFile {
    #[serde(skip)]
    pub file: String,
    pub server: ServerRange,
    #[serde(rename = "probe")]
    pub probes: Vec<ProbeSpec>,
    /// Member offsets of builds without DWARF.
    #[serde(default, rename = "layout")]
    pub layouts: Vec<LayoutSpec>,
    /// The `[[probe]]` entries with `measure = "counter"`.
    #[serde(skip)]
    pub counters: Vec<CounterSpec>,
}

/// A catalog file as written: probes and counters share `[[probe]]`,
/// told apart by `measure`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCatalogFile {
    server: ServerRange,
    #[serde(rename = "probe")]
    entries: Vec<toml::Value>,
    #[serde(default, rename = "layout")]
    layouts: Vec<LayoutSpec>,
}

impl CatalogFile {
    pub fn parse(file: &str, text: &str) -> Result<Self, CatalogError> {
        let malformed = |e| CatalogError::Parse {
            file: file.into(),
            source: Box::new(e),
        };
        let raw: RawCatalogFile = toml::from_str(text).map_err(malformed)?;
        let mut probes = Vec::new();
        let mut counters = Vec::new();
        for entry in raw.entries {
            let is_counter = entry.get("measure").and_then(|m| m.as_str()) == Some("counter");
            if is_counter {
                counters.push(entry.try_into::<CounterSpec>().map_err(malformed)?);
            } else {
                probes.push(entry.try_into::<ProbeSpec>().map_err(malformed)?);
            }
        }
        let parsed = CatalogFile {
            file: file.to_string(),
            server: raw.server,
            probes,
            layouts: raw.layouts,
            counters,
        };
        parsed.validate()?;
        parsed.validate_layouts()?;
        Ok(parsed)
    }

    fn validate(&self) -> Result<(), CatalogError> {
        let invalid = |reason: String| {
            Err(CatalogError::Invalid {
                file: self.file.clone(),
                reason,
            })
        };
        for bound in [&self.server.min_version, &self.server.max_version] {
            if Version::parse(bound).is_none() {
                return invalid(format!("version bound `{bound}` is not MAJOR.MINOR"));
            }
        }
        let mut names = std::collections::HashSet::new();
        let all_names = self
            .probes
            .iter()
            .map(|p| &p.name)
            .chain(self.counters.iter().map(|c| &c.name));
        for name in all_names {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                return invalid(format!(
                    "probe name `{name}` must be non-empty [A-Za-z0-9._-]"
                ));
            }
            if !names.insert(name) {
                return invalid(format!("probe `{name}` is defined twice"));
            }
        }
        let identifier = |s: &str| {
            !s.is_empty()
                && !s.starts_with(|c: char| c.is_ascii_digit())
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        for c in &self.counters {
            let alternatives = c.counter.alternatives();
            if !identifier(&c.counter.global)
                || alternatives.len() > MAX_COUNTER_PATH
                || !alternatives.iter().all(|members| {
                    members.len() <= MAX_COUNTER_PATH && members.iter().all(|m| identifier(m))
                })
            {
                return invalid(format!(
                    "counter `{}`: `global` must be a variable name and `path` up to \
                     {MAX_COUNTER_PATH} dot-separated member names (alternatives separated by `|`)",
                    c.name
                ));
            }
        }
        for p in &self.probes {
            if p.symbols.is_empty() {
                return invalid(format!("probe `{}` has no symbol patterns", p.name));
            }
            for pattern in &p.symbols {
                check_pattern(pattern, &format!("probe `{}` in {}", p.name, self.file))?;
            }
            if let Some(c) = p.callsite {
                let ok = |a: u8| (1..=6).contains(&a);
                if !ok(c.file_arg) || !ok(c.line_arg) || c.file_arg == c.line_arg {
                    return invalid(format!(
                        "probe `{}`: callsite arguments must be distinct positions 1..=6",
                        p.name
                    ));
                }
            }
            if let Some(l) = &p.latch {
                let blank = |m: &Option<String>| m.as_deref().is_none_or(|m| m.trim().is_empty());
                let created = !blank(&l.created_file) && !blank(&l.created_line);
                let holder = !blank(&l.holder) && !blank(&l.holder_valid);
                let woken = !blank(&l.woken_by);
                if !(1..=6).contains(&l.arg)
                    || (l.id_type.trim().is_empty() && !created && !holder && !woken)
                    || (blank(&l.created_file) != blank(&l.created_line))
                    || (blank(&l.holder) != blank(&l.holder_valid))
                    || (!blank(&l.holder_in) && !holder)
                    || (!blank(&l.woken_key) && !woken)
                    || (blank(&l.holder_file) != blank(&l.holder_line))
                    || (!blank(&l.holder_file) && !holder)
                {
                    return invalid(format!(
                        "probe `{}`: latch needs arg in 1..=6 and a non-empty id_type, \
                         both created_file and created_line, both holder and holder_valid \
                         (holder_in, holder_file and holder_line only with them), or woken_by \
                         (woken_key only with it)",
                        p.name
                    ));
                }
                if let Some(by) = l.woken_by.as_deref().filter(|b| !b.trim().is_empty()) {
                    let waker = self.probes.iter().find(|q| q.name == by);
                    if waker.is_none_or(|q| q.wake.is_none()) {
                        return invalid(format!(
                            "probe `{}`: woken_by `{by}` is not a probe with `wake` in {}",
                            p.name, self.file
                        ));
                    }
                }
            }
            if let Some(object) = p.latch.as_ref().and_then(|l| l.object.as_deref()) {
                if !self.layouts.iter().any(|l| l.object == object) {
                    return invalid(format!(
                        "probe `{}`: latch object `{object}` has no [[layout]] in {}",
                        p.name, self.file
                    ));
                }
            }
            if let Some(w) = p.wake {
                if !(1..=6).contains(&w.arg) || p.measure != Measure::Count {
                    return invalid(format!(
                        "probe `{}`: wake needs arg in 1..=6 and measure = \"count\"",
                        p.name
                    ));
                }
            }
        }
        Ok(())
    }

    fn validate_layouts(&self) -> Result<(), CatalogError> {
        for l in &self.layouts {
            let exact = |v: &String| v.split('.').count() == 3 && Version::parse(v).is_some();
            if l.versions.is_empty() || !l.versions.iter().all(exact) {
                return Err(CatalogError::Invalid {
                    file: self.file.clone(),
                    reason: format!(
                        "layout `{}`: versions must be exact MAJOR.MINOR.PATCH versions",
                        l.object
                    ),
                });
            }
            for (name, m) in &l.members {
                let whole = matches!(m.size, 1 | 2 | 4 | 8);
                let fits = m.bits.is_none_or(|b| {
                    b > 0 && u32::from(b) + u32::from(m.shift) <= u32::from(m.size) * 8
                });
                if !whole || !fits || (m.bits.is_none() && m.shift != 0) {
                    return Err(CatalogError::Invalid {
                        file: self.file.clone(),
                        reason: format!(
                            "layout `{}`: member `{name}` needs size 1, 2, 4 or 8 and bits \
                             (with shift) inside it",
                            l.object
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// The `[[layout]]` of `object` read from `server`'s exact version.
    pub fn layout_for(&self, object: &str, server: &ServerInfo) -> Option<&LayoutSpec> {
        self.layouts
            .iter()
            .find(|l| l.object == object && l.applies_to(server))
    }

    pub fn covers(&self, server: &ServerInfo) -> bool {
        let (Some(v), Some(lo), Some(hi)) = (
            server.version,
            Version::parse(&self.server.min_version),
            Version::parse(&self.server.max_version),
        ) else {
            return false;
        };
        let mm = (v.major, v.minor);
        self.server.family == server.family
            && (lo.major, lo.minor) <= mm
            && mm <= (hi.major, hi.minor)
    }

    /// A comma list of `default` (the cheap probes), `all`, names and
    /// globs (`innodb.redo.*`), e.g. `default,innodb.mutex.enter`.
    /// The probes only; [`Self::select_with_counters`] also gives counters.
    pub fn select(&self, selection: &str) -> Result<Vec<ProbeSpec>, CatalogError> {
        Ok(self.select_with_counters(selection)?.0)
    }

    /// The probes and the counters a selection names. Counters cost nothing
    /// per event, so `default` includes every one.
    pub fn select_with_counters(
        &self,
        selection: &str,
    ) -> Result<(Vec<ProbeSpec>, Vec<CounterSpec>), CatalogError> {
        let mut out: Vec<ProbeSpec> = Vec::new();
        let mut counters: Vec<CounterSpec> = Vec::new();
        for want in selection
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let (hits, counter_hits): (Vec<&ProbeSpec>, Vec<&CounterSpec>) = match want {
                "default" => (
                    self.probes.iter().filter(|p| p.is_default()).collect(),
                    self.counters.iter().collect(),
                ),
                "all" => (self.probes.iter().collect(), self.counters.iter().collect()),
                glob => {
                    let m = WildMatch::new(glob);
                    (
                        self.probes.iter().filter(|p| m.matches(&p.name)).collect(),
                        self.counters
                            .iter()
                            .filter(|c| m.matches(&c.name))
                            .collect(),
                    )
                }
            };
            if hits.is_empty() && counter_hits.is_empty() {
                return Err(CatalogError::UnknownProbe {
                    name: want.into(),
                    suggestion: self
                        .closest_name(want)
                        .map_or(String::new(), |n| format!(", did you mean `{n}`?")),
                    file: self.file.clone(),
                    known: self.names().collect::<Vec<_>>().join(", "),
                });
            }
            for h in hits {
                if !out.iter().any(|p| p.name == h.name) {
                    out.push(h.clone());
                }
            }
            for c in counter_hits {
                if !counters.iter().any(|k| k.name == c.name) {
                    counters.push(c.clone());
                }
            }
        }
        // A wait whose holder is found by its release brings that release's
        // probe: without it the wait names no holder.
        let wakers: Vec<String> = out
            .iter()
            .filter_map(|p| p.latch.as_ref()?.woken_by.clone())
            .collect();
        for by in wakers {
            if out.iter().any(|p| p.name == by) {
                continue;
            }
            if let Some(w) = self.probes.iter().find(|p| p.name == by) {
                out.push(w.clone());
            }
        }
        Ok((out, counters))
    }

    /// Every probe and counter name, probes first.
    fn names(&self) -> impl Iterator<Item = &str> {
        self.probes
            .iter()
            .map(|p| p.name.as_str())
            .chain(self.counters.iter().map(|c| c.name.as_str()))
    }
}

impl CatalogFile {
    /// The probe name closest to a mistyped one, if any is close enough.
    fn closest_name(&self, wanted: &str) -> Option<&str> {
        // `redo.flush` for `innodb.redo.flush`: the family prefix left out.
        let suffix = format!(".{wanted}");
        if let Some(name) = self.names().find(|n| n.ends_with(&suffix)) {
            return Some(name);
        }
        self.names()
            .map(|n| (strsim::normalized_damerau_levenshtein(wanted, n), n))
            .filter(|(score, _)| *score >= 0.7)
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, name)| name)
    }
}

/// Literal characters a symbol pattern needs at least: fewer, and it could
/// match a large part of a server's functions (`*`, `?*`, `*a*`).
const MIN_LITERAL_CHARS: usize = 3;
/// Longest symbol pattern accepted (C++ signatures are long, not this long).
const MAX_PATTERN_LEN: usize = 1024;

/// Refuses patterns that would match almost everything. Used for catalog
/// entries and for ad-hoc `--probe` patterns alike.
pub fn check_pattern(pattern: &str, origin: &str) -> Result<(), CatalogError> {
    let too_broad = |reason: String| {
        Err(CatalogError::TooBroad {
            pattern: pattern.chars().take(80).collect(),
            origin: origin.into(),
            reason,
        })
    };
    let literal = pattern
        .chars()
        .filter(|c| !matches!(c, '*' | '?') && !c.is_whitespace())
        .count();
    if literal < MIN_LITERAL_CHARS {
        return too_broad(format!(
            "name at least {MIN_LITERAL_CHARS} characters of the function (e.g. `fil_flush`, `PolicyMutex<*>::enter`)"
        ));
    }
    if pattern.len() > MAX_PATTERN_LEN {
        return too_broad(format!("longer than {MAX_PATTERN_LEN} characters"));
    }
    Ok(())
}

/// Largest catalog file read: the built-in ones are ~10 KB.
pub const MAX_CATALOG_BYTES: u64 = 1 << 20;

/// Every `probes/*.toml`, embedded: `(probes/NAME.toml, text)` in name
/// order. agent/build.rs lists the directory, so a new server line is a
/// new file and nothing else.
const BUILTIN: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/builtin_catalogs.rs"));

#[derive(Debug, Clone)]
pub struct Catalog {
    pub files: Vec<CatalogFile>,
}

impl Catalog {
    pub fn builtin() -> Self {
        let files = BUILTIN
            .iter()
            .map(|(name, text)| {
                CatalogFile::parse(name, text).expect("embedded catalog is validated by tests")
            })
            .collect();
        Self { files }
    }

    /// A user catalog replaces the built-in one entirely.
    pub fn from_path(path: &Path) -> Result<Self, CatalogError> {
        let read_err = |source| CatalogError::Read {
            path: path.into(),
            source,
        };
        // Read through a bounded reader: the size in the metadata says
        // nothing for a FIFO or a device (`--catalog /dev/zero`).
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CATALOG_BYTES + 1).read_to_end(&mut bytes))
            .map_err(read_err)?;
        if bytes.len() as u64 > MAX_CATALOG_BYTES {
            return Err(CatalogError::TooLarge {
                path: path.into(),
                max: MAX_CATALOG_BYTES,
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            read_err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                e.utf8_error(),
            ))
        })?;
        Ok(Self {
            files: vec![CatalogFile::parse(&path.display().to_string(), &text)?],
        })
    }

    pub fn for_server(&self, server: &ServerInfo) -> Option<&CatalogFile> {
        self.files.iter().find(|f| f.covers(server))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(family: Family, v: &str) -> ServerInfo {
        ServerInfo {
            family,
            version: Version::parse(v),
        }
    }

    #[test]
    fn builtin_catalog_parses_and_covers_the_test_servers() {
        let cat = Catalog::builtin();
        assert_eq!(
            cat.for_server(&server(Family::Mysql, "5.6.24"))
                .unwrap()
                .file,
            "probes/mysql-5.6.toml"
        );
        assert_eq!(
            cat.for_server(&server(Family::Mysql, "8.0.15"))
                .unwrap()
                .file,
            "probes/mysql-8.0.toml"
        );
        assert_eq!(
            cat.for_server(&server(Family::Mariadb, "10.2.11"))
                .unwrap()
                .file,
            "probes/mariadb-10.2.toml"
        );
        assert_eq!(
            cat.for_server(&server(Family::Mariadb, "11.4.5"))
                .unwrap()
                .file,
            "probes/mariadb-10.6.toml"
        );
        assert!(cat.for_server(&server(Family::Mysql, "4.1.0")).is_none());
    }

    #[test]
    fn latch_specs_name_an_id_type_or_both_creation_members() {
        let file = |latch: &str| {
            format!(
                "[server]\nfamily = \"mysql\"\nmin_version = \"5.6\"\nmax_version = \"5.6\"\n\
                 [[probe]]\nname = \"x\"\ndescription = \"x\"\nsymbols = [\"fil_flush\"]\n\
                 measure = \"latency\"\ncost = \"rare\"\nlatch = {latch}\n"
            )
        };
        let ok = |latch: &str| CatalogFile::parse("t.toml", &file(latch)).is_ok();
        assert!(ok(r#"{ arg = 1, id_type = "latch_id_t" }"#));
        assert!(ok(
            r#"{ arg = 1, created_file = "cfile_name", created_line = "cline" }"#
        ));
        assert!(!ok(r#"{ arg = 1 }"#));
        assert!(!ok(r#"{ arg = 1, created_file = "cfile_name" }"#));
        assert!(!ok(r#"{ arg = 1, id_type = "t", created_line = "cline" }"#));
        assert!(!ok(
            r#"{ arg = 7, created_file = "a", created_line = "b" }"#
        ));
        let err = CatalogFile::parse("t.toml", &file(r#"{ arg = 1 }"#))
            .unwrap_err()
            .to_string();
        assert!(err.contains("created_file and created_line"), "{err}");
    }

    #[test]
    fn default_set_excludes_hot_paths_but_the_undo_walk() {
        let cat = Catalog::builtin();
        for f in &cat.files {
            let def = f.select("default").unwrap();
            assert!(!def.is_empty(), "{}", f.file);
            // The seed many-row-versions incident must show as a probe in
            // a default recording on every server (issue 12, item 7).
            let undo = def
                .iter()
                .find(|p| p.name == "innodb.undo.prev_version")
                .unwrap_or_else(|| panic!("{}: no undo walk in default", f.file));
            assert_eq!(undo.symbols, ["trx_undo_prev_version_build"]);
            assert_eq!(undo.default, Some(true));
            assert!(def
                .iter()
                .all(|p| p.cost != CostClass::Hot || p.default == Some(true)));
            assert!(
                f.select("all").unwrap().len() > def.len(),
                "{} has no opt-in probe",
                f.file
            );
        }
    }

    #[test]
    fn selection_by_name_and_glob() {
        let catalog = Catalog::builtin();
        let f = catalog
            .files
            .iter()
            .find(|f| f.file == "probes/mariadb-10.2.toml")
            .unwrap();
        let sel = f.select("innodb.redo.*,innodb.mutex.enter").unwrap();
        let names: Vec<_> = sel.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "innodb.redo.write_up_to",
                "innodb.redo.flush",
                "innodb.mutex.enter",
                // The release that names mutex.enter's holders.
                "innodb.event.set"
            ]
        );
        let mixed = f.select("default,innodb.mutex.enter").unwrap();
        // The mutex enter and the release probe it brings.
        assert_eq!(mixed.len(), f.select("default").unwrap().len() + 2);
        let err = f
            .select("innodb.nope")
            .map_err(|e| crate::error_chain(&e))
            .unwrap_err();
        assert!(err.contains("innodb.nope") && err.contains("innodb.mutex.enter"));
    }

    #[test]
    fn malformed_files_are_refused_with_the_reason() {
        let bad = |t: &str| {
            CatalogFile::parse("x.toml", t)
                .map_err(|e| crate::error_chain(&e))
                .unwrap_err()
        };
        assert!(bad("not toml [").contains("malformed"));
        let head = "[server]\nfamily='mysql'\nmin_version='5.6'\nmax_version='5.6'\n";
        for everything in ["*", "?*", "*a*", " * "] {
            assert!(bad(&format!(
                "{head}[[probe]]\nname='a'\nsymbols=['{everything}']\nmeasure='count'\ncost='rare'\n"
            ))
            .contains("too broad"));
        }
        assert!(bad(&format!(
            "{head}[[probe]]\nname='a'\nsymbols=['f']\nmeasure='sometimes'\ncost='rare'\n"
        ))
        .contains("malformed"));
        let twice = format!(
            "{head}[[probe]]\nname='a'\nsymbols=['fil_flush']\nmeasure='count'\ncost='rare'\n"
        );
        assert!(bad(&format!("{twice}{}", &twice[head.len()..])).contains("twice"));
        assert!(
            bad("probe=[]\n[server]\nfamily='mysql'\nmin_version='five'\nmax_version='5.6'\n")
                .contains("MAJOR.MINOR")
        );
    }

    /// Hostile catalogs: wrong types, unknown keys, absurd argument
    /// numbers, deep nesting, huge values. Each is a typed error, no panic.
    #[test]
    fn hostile_catalogs_are_refused() {
        let bad = |t: &str| {
            CatalogFile::parse("x.toml", t)
                .map_err(|e| crate::error_chain(&e))
                .unwrap_err()
        };
        let head = "[server]\nfamily='mysql'\nmin_version='5.6'\nmax_version='5.6'\n";
        let probe = |body: &str| {
            format!("{head}[[probe]]\nname='a'\nsymbols=['fil_flush']\nmeasure='count'\ncost='rare'\n{body}")
        };
        assert!(bad(&probe("surprise = true\n")).contains("unknown field `surprise`"));
        assert!(bad(&format!(
            "{head}[[probe]]\nname=['a']\nsymbols=['fil_flush']\nmeasure='count'\ncost='rare'\n"
        ))
        .contains("malformed"));
        assert!(bad(&format!(
            "{head}[[probe]]\nname='a'\nsymbols='fil_flush'\nmeasure='count'\ncost='rare'\n"
        ))
        .contains("malformed"));
        for (f, l) in [(0, 1), (7, 2), (2, 2), (255, 1)] {
            assert!(
                bad(&probe(&format!(
                    "callsite = {{ file_arg = {f}, line_arg = {l} }}\n"
                )))
                .contains("positions 1..=6"),
                "{f} {l}"
            );
        }
        assert!(
            bad(&probe("callsite = { file_arg = 99999, line_arg = 1 }\n")).contains("malformed")
        );
        assert!(bad(&probe("callsite = { file_arg = -1, line_arg = 1 }\n")).contains("malformed"));
        let deep = format!("{head}x = {}{}\n", "[".repeat(5000), "]".repeat(5000));
        assert!(bad(&deep).contains("malformed"));
        let long_name = format!(
            "{head}[[probe]]\nname='a'\nsymbols=['{}']\nmeasure='count'\ncost='rare'\n",
            "f".repeat(100_000)
        );
        assert!(bad(&long_name).contains("too broad"));
        assert!(bad(&format!("{head}[[probe]]\nname='{}'\n", "\u{202e}")).contains("malformed"));
        assert!(bad(&format!("{head}probe = []\n[[probe]]\n")).contains("malformed"));
    }

    /// A catalog file is read through a bounded reader: a huge file or a
    /// device that never ends is refused by size, not read into memory.
    #[test]
    fn huge_catalog_files_are_refused_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_CATALOG_BYTES as usize + 1]).unwrap();
        let err = Catalog::from_path(&big)
            .map_err(|e| crate::error_chain(&e))
            .unwrap_err();
        assert!(
            err.contains("too large") && err.contains("big.toml"),
            "{err}"
        );
        let err = Catalog::from_path(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("too large"), "{err}");
        let err = Catalog::from_path(&dir.path().join("absent.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot read catalog"), "{err}");
    }

    #[test]
    fn unknown_probe_names_get_a_suggestion() {
        let f = Catalog::builtin()
            .for_server(&server(Family::Mariadb, "10.2.11"))
            .unwrap()
            .clone();
        let err = f
            .select("innodb.rwlock.s_wiat")
            .map_err(|e| crate::error_chain(&e))
            .unwrap_err();
        assert!(
            err.contains("did you mean `innodb.rwlock.s_wait`?"),
            "{err}"
        );
        let err = f
            .select("redo.flush")
            .map_err(|e| crate::error_chain(&e))
            .unwrap_err();
        assert!(err.contains("did you mean `innodb.redo.flush`?"), "{err}");
        let err = f
            .select("zzzz")
            .map_err(|e| crate::error_chain(&e))
            .unwrap_err();
        assert!(!err.contains("did you mean"), "{err}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Any text: a catalog or a typed error, never a panic.
        #[test]
        fn parser_never_panics_on_any_text(text in "\\PC{0,400}") {
            let _ = CatalogFile::parse("fuzz.toml", &text);
        }

        /// Catalog-shaped text with arbitrary values in every field.
        #[test]
        fn parser_never_panics_on_catalog_shaped_text(
            family in "[a-z]{0,8}",
            lo in "[0-9.]{0,6}",
            name in "\\PC{0,20}",
            symbol in "\\PC{0,30}",
            measure in "[a-z]{0,9}",
            file_arg in proptest::num::i64::ANY,
            line_arg in 0u8..=255,
            extra in "[a-z_]{0,8} = [0-9]{1,3}",
        ) {
            let text = format!(
                "[server]\nfamily = '{family}'\nmin_version = '{lo}'\nmax_version = '{lo}'\n\
                 [[probe]]\nname = {name:?}\nsymbols = [{symbol:?}]\nmeasure = '{measure}'\n\
                 cost = 'rare'\ncallsite = {{ file_arg = {file_arg}, line_arg = {line_arg} }}\n{extra}\n"
            );
            if let Ok(c) = CatalogFile::parse("fuzz.toml", &text) {
                let site = c.probes[0].callsite.unwrap();
                proptest::prop_assert!((1..=6).contains(&site.file_arg));
                proptest::prop_assert!(c.probes[0].symbols[0].chars().filter(|c| c.is_alphanumeric()).count() >= 1);
            }
        }

        /// Any selection string: probes or a typed error.
        #[test]
        fn selection_never_panics(selection in "\\PC{0,60}") {
            let f = Catalog::builtin().files[0].clone();
            let _ = f.select(&selection);
        }
    }

    /// The logical probe names shared by every catalog file (a probe absent
    /// in a line is simply not listed there).
    const CANONICAL_PROBES: &[&str] = &[
        "innodb.mutex.enter",
        "innodb.mutex.wait",
        "innodb.rwlock.x",
        "innodb.rwlock.s",
        "innodb.rwlock.sx",
        "innodb.rwlock.x_wait",
        "innodb.rwlock.s_wait",
        "innodb.rwlock.sx_wait",
        "innodb.sync.wait_event",
        "innodb.latch.wake",
        "innodb.event.set",
        "innodb.dict_sys.lock",
        "innodb.dict_sys.lock_wait",
        "innodb.dict_sys.row_id",
        "innodb.undo.prev_version",
        "innodb.row_vers.consistent_read",
        "innodb.redo.write_up_to",
        "innodb.redo.write",
        "innodb.redo.flush",
        "innodb.file.write",
        "innodb.file.flush",
        "innodb.buf.page_get",
        "sql.commit",
        // Counters (measure = "counter").
        "innodb.dict_sys.row_ids",
        "innodb.trx_sys.trx_ids",
        "innodb.redo.lsn",
        "innodb.rows_read",
    ];

    fn bounds(f: &CatalogFile) -> ((u32, u32), (u32, u32)) {
        let lo = Version::parse(&f.server.min_version).unwrap();
        let hi = Version::parse(&f.server.max_version).unwrap();
        ((lo.major, lo.minor), (hi.major, hi.minor))
    }

    #[test]
    fn builtin_ranges_do_not_overlap_within_a_family() {
        let cat = Catalog::builtin();
        for (i, a) in cat.files.iter().enumerate() {
            let (alo, ahi) = bounds(a);
            assert!(alo <= ahi, "{}: empty range", a.file);
            for b in &cat.files[i + 1..] {
                if a.server.family != b.server.family {
                    continue;
                }
                let (blo, bhi) = bounds(b);
                assert!(ahi < blo || bhi < alo, "{} and {} overlap", a.file, b.file);
            }
        }
    }

    #[test]
    fn builtin_probe_names_are_canonical() {
        for f in &Catalog::builtin().files {
            for name in f.names() {
                assert!(
                    CANONICAL_PROBES.contains(&name),
                    "{}: `{name}` is not a canonical probe name",
                    f.file,
                );
            }
        }
    }

    #[test]
    fn counters_are_in_the_default_set_and_selectable_by_name() {
        let f = Catalog::builtin()
            .for_server(&server(Family::Mysql, "5.6.24"))
            .unwrap()
            .clone();
        let (_, counters) = f.select_with_counters("default").unwrap();
        let names: Vec<_> = counters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "innodb.dict_sys.row_ids",
                "innodb.trx_sys.trx_ids",
                "innodb.redo.lsn",
                "innodb.rows_read"
            ]
        );
        assert_eq!(counters[0].counter.global, "dict_sys");
        let (probes, counters) = f.select_with_counters("innodb.redo.lsn").unwrap();
        assert!(probes.is_empty() && counters.len() == 1);
        // Probes only: a counter-only selection is no error.
        assert!(f.select("innodb.redo.lsn").unwrap().is_empty());
        let err = f
            .select("innodb.redo.lns")
            .map_err(|e| crate::error_chain(&e))
            .unwrap_err();
        assert!(err.contains("did you mean `innodb.redo.lsn`?"), "{err}");
    }

    #[test]
    fn a_wait_brings_the_release_probe_that_names_its_holder() {
        let names = |family, version, selection: &str| {
            let f = Catalog::builtin()
                .for_server(&server(family, version))
                .unwrap()
                .clone();
            let probes = f.select(selection).unwrap();
            probes.into_iter().map(|p| p.name).collect::<Vec<_>>()
        };
        let five_six = names(Family::Mysql, "5.6.24", "innodb.mutex.wait");
        assert_eq!(five_six, ["innodb.mutex.wait", "innodb.latch.wake"]);
        assert!(names(Family::Mysql, "5.6.24", "default").contains(&"innodb.latch.wake".into()));
        // os_event_set runs for every event: only with the (opt-in) mutex
        // enter it names holders for.
        let default = names(Family::Mariadb, "10.2.11", "default");
        assert!(!default.contains(&"innodb.event.set".into()), "{default:?}");
        let with_mutex = names(Family::Mariadb, "10.2.11", "innodb.mutex.enter");
        assert_eq!(with_mutex, ["innodb.mutex.enter", "innodb.event.set"]);
        let ten_six = names(Family::Mariadb, "11.4.5", "default");
        assert!(ten_six.contains(&"innodb.latch.wake".into()), "{ten_six:?}");
    }

    #[test]
    fn wake_probes_and_woken_by_are_validated() {
        let head = "[server]\nfamily='mysql'\nmin_version='5.6'\nmax_version='5.6'\n";
        let probe = |name: &str, measure: &str, extra: &str| {
            format!("[[probe]]\nname='{name}'\nsymbols=['some_fn']\nmeasure='{measure}'\ncost='contended'\n{extra}\n")
        };
        let parse = |body: String| CatalogFile::parse("t.toml", &format!("{head}{body}"));
        let waiter = |by: &str, key: &str| {
            probe(
                "innodb.mutex.wait",
                "latency",
                &format!("latch = {{ arg = 1, woken_by = '{by}'{key} }}"),
            )
        };
        let waker = probe("innodb.latch.wake", "count", "wake = { arg = 1 }");
        let ok = parse(waiter("innodb.latch.wake", ", woken_key = 'm_event'") + &waker).unwrap();
        let latch = ok.probes[0].latch.as_ref().unwrap();
        assert_eq!(latch.woken_by.as_deref(), Some("innodb.latch.wake"));
        assert_eq!(latch.woken_key.as_deref(), Some("m_event"));
        assert_eq!(ok.probes[1].wake, Some(WakeSpec { arg: 1 }));
        let err = |body: String| crate::error_chain(&parse(body).unwrap_err());
        // Names no probe, or one without `wake`.
        assert!(err(waiter("innodb.nope", "")).contains("woken_by `innodb.nope`"));
        let plain = probe("innodb.latch.wake", "count", "");
        assert!(err(waiter("innodb.latch.wake", "") + &plain).contains("not a probe with `wake`"));
        // A key without a waker; a timed or argument-less wake.
        let keyed = probe("p", "latency", "latch = { arg = 1, woken_key = 'm_event' }");
        assert!(err(keyed).contains("woken_key only with it"));
        let timed = probe("innodb.latch.wake", "latency", "wake = { arg = 1 }");
        assert!(err(timed).contains("measure = \"count\""));
        let no_arg = probe("innodb.latch.wake", "count", "wake = { arg = 0 }");
        assert!(err(no_arg).contains("wake needs arg in 1..=6"));
    }

    #[test]
    fn layouts_apply_to_their_exact_versions_and_are_validated() {
        let head = "[server]\nfamily='mysql'\nmin_version='8.0'\nmax_version='8.0'\n";
        let probe = "[[probe]]\nname='w'\nsymbols=['rw_lock_x_lock_func']\nmeasure='latency'\ncost='contended'\ndescription='d'\n\
                     latch = { arg = 1, holder = 'writer_thread', holder_valid = 'lock_word<=0', object = 'rw_lock_t' }\n";
        let parse = |layout: &str| {
            CatalogFile::parse("t.toml", &format!("{head}{probe}{layout}"))
                .map_err(|e| crate::error_chain(&e))
        };
        let ok = parse(
            "[[layout]]\nobject='rw_lock_t'\nversions=['8.0.15']\n\
             members = { writer_thread = { offset = 0x28, size = 8 }, last_x_line = { offset = 0x5c, size = 4, bits = 14 } }\n",
        )
        .unwrap();
        assert_eq!(
            ok.layouts[0].members["last_x_line"],
            MemberOffset {
                offset: 0x5c,
                size: 4,
                bits: Some(14),
                shift: 0
            }
        );
        assert!(ok
            .layout_for("rw_lock_t", &server(Family::Mysql, "8.0.15"))
            .is_some());
        // Another patch release, another object: not this layout.
        assert!(ok
            .layout_for("rw_lock_t", &server(Family::Mysql, "8.0.16"))
            .is_none());
        assert!(ok
            .layout_for("ib_mutex_t", &server(Family::Mysql, "8.0.15"))
            .is_none());
        // A latch naming an object without a layout.
        assert!(parse("").unwrap_err().contains("has no [[layout]]"));
        for (bad, says) in [
            ("versions=['8.0']\nmembers = {}", "exact MAJOR.MINOR.PATCH"),
            ("versions=[]\nmembers = {}", "exact MAJOR.MINOR.PATCH"),
            ("versions=['8.0.15']\nmembers = { a = { offset = 0, size = 3 } }", "member `a`"),
            ("versions=['8.0.15']\nmembers = { a = { offset = 0, size = 2, bits = 17 } }", "member `a`"),
            ("versions=['8.0.15']\nmembers = { a = { offset = 0, size = 4, bits = 30, shift = 4 } }", "member `a`"),
            ("versions=['8.0.15']\nmembers = { a = { offset = 0, size = 4, shift = 4 } }", "member `a`"),
        ] {
            let e = parse(&format!("[[layout]]\nobject='rw_lock_t'\n{bad}\n")).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn counter_entries_are_validated() {
        let head = "[server]\nfamily='mysql'\nmin_version='5.6'\nmax_version='5.6'\n";
        let parse = |c: &str| {
            CatalogFile::parse(
                "t.toml",
                &format!("{head}[[probe]]\nname='c'\nmeasure='counter'\n{c}\n"),
            )
        };
        let ok =
            parse("counter = { global = 'trx_sys', path = 'max_trx_id|m_max_trx_id' }").unwrap();
        assert_eq!(
            ok.counters[0].counter.alternatives(),
            [vec!["max_trx_id"], vec!["m_max_trx_id"]]
        );
        assert!(ok.probes.is_empty());
        for bad in [
            "counter = { global = '', path = 'x' }",
            "counter = { global = 'a b', path = 'x' }",
            "counter = { global = 'g', path = 'x..y' }",
            "counter = { global = 'g', path = 'x->y' }",
            "counter = { global = 'g', path = 'a.b.c.d.e.f.g.h.i' }",
        ] {
            let err = parse(bad).map_err(|e| crate::error_chain(&e)).unwrap_err();
            assert!(err.contains("member names"), "{bad}: {err}");
        }
        // A counter has no symbols or cost; a probe-only field is refused.
        assert!(
            parse("counter = { global = 'g', path = 'x' }\nsymbols = ['f']")
                .unwrap_err()
                .to_string()
                .contains("malformed")
        );
        assert!(parse("")
            .map_err(|e| crate::error_chain(&e))
            .unwrap_err()
            .contains("malformed"));
    }

    #[test]
    fn builtin_files_say_where_their_symbols_come_from() {
        for f in &Catalog::builtin().files {
            assert!(
                !f.server.verified.is_empty() || !f.server.sources.is_empty(),
                "{}: neither verified on a binary nor sourced",
                f.file
            );
            for v in &f.server.verified {
                let v = Version::parse(v).unwrap_or_else(|| panic!("{}: {v}", f.file));
                let probe = server(f.server.family, &v.to_string());
                assert!(
                    f.covers(&probe),
                    "{}: verified {v} outside its range",
                    f.file
                );
            }
        }
    }

    #[test]
    fn builtin_catalog_covers_every_supported_line() {
        let cat = Catalog::builtin();
        let file = |family, v: &str| cat.for_server(&server(family, v)).map(|f| f.file.as_str());
        for (family, v, want) in [
            (Family::Mysql, "5.6.51", "probes/mysql-5.6.toml"),
            (Family::Mysql, "5.7.44", "probes/mysql-5.7.toml"),
            (Family::Mysql, "8.0.40", "probes/mysql-8.0.toml"),
            (Family::Mysql, "8.1.0", "probes/mysql-8.4.toml"),
            (Family::Mysql, "8.4.3", "probes/mysql-8.4.toml"),
            (Family::Mysql, "9.1.0", "probes/mysql-8.4.toml"),
            (Family::Percona, "5.7.44", "probes/percona-5.7.toml"),
            (Family::Percona, "8.0.39", "probes/percona-8.0.toml"),
            (Family::Mariadb, "10.3.39", "probes/mariadb-10.2.toml"),
            (Family::Mariadb, "10.5.27", "probes/mariadb-10.2.toml"),
            (Family::Mariadb, "10.6.20", "probes/mariadb-10.6.toml"),
            (Family::Mariadb, "10.11.10", "probes/mariadb-10.6.toml"),
        ] {
            assert_eq!(file(family, v), Some(want), "{family} {v}");
        }
        assert_eq!(file(Family::Percona, "5.6.51"), None);
    }

    #[test]
    fn row_id_allocation_is_counted_at_inline_sites() {
        // dict_sys_get_new_row_id is inline-only wherever it exists (MySQL
        // 5.6.24 and MariaDB 10.2.11 DWARF: inlined instances, no symbol). An
        // inline site has no arguments and no return: such a probe can only
        // count, and cannot carry a call site.
        for f in &Catalog::builtin().files {
            for p in &f.probes {
                if p.name == "innodb.dict_sys.row_id" {
                    assert!(p.inline && p.measure == Measure::Count, "{}", f.file);
                }
                if p.inline && p.measure == Measure::Count {
                    assert!(p.callsite.is_none(), "{}: {}", f.file, p.name);
                }
            }
        }
    }
}
