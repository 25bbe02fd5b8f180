//! Two recordings compared (`innoprof diff BASELINE INCIDENT`): what is hot
//! now that was not before. Per profile (on-CPU, off-CPU) a differential
//! folded file (`stack baseline incident`, inferno's difffolded format, the
//! baseline scaled to the incident's total), a differential flame graph
//! (red grew, blue shrank), and the functions whose share changed most.
//! The wait probes' stacks the same way, as one profile rooted at each
//! probe's name and weighed in wait time per second the probe was watched
//! (not scaled: a wait that grew is wider). And the wait probes' rates side
//! by side, with the share of each recording the probe was watched.

use crate::model::files::{DIFF_JSON, DIFF_SVG_FILES, DIFF_TXT};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::bundle::read::{BundleDir, BundleReadError};
use crate::findings::change::CpuShift;
use crate::model::files::instance;
use crate::model::files::FOLDED_FILES as FOLDED;
use crate::model::top_symbols::{self, SelfFrame, TopSymbols};
use crate::report::flamegraph::{self, FlameGraphError};
use crate::report::folded_read::{self, Delta};
use crate::report::{self, OutputError};
use crate::text::units;

#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error(transparent)]
    Read(#[from] BundleReadError),
    #[error("{path} is not an innoprof summary.json")]
    Summary {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{0} holds no innoprof recording (no summary.json)")]
    NotARecording(PathBuf),
    #[error(transparent)]
    Contract(#[from] crate::bundle::contract::ContractError),
    #[error(transparent)]
    FlameGraph(#[from] FlameGraphError),
    #[error(transparent)]
    Output(#[from] OutputError),
    /// A diff written into a bundle would leave its metadata.json file
    /// list and its .tar.gz stale.
    #[error("{0} is a recording (it has {file}); write the diff elsewhere with --out DIR", file = crate::model::files::METADATA_JSON)]
    IntoBundle(PathBuf),
}

/// Functions listed per profile.
const SYMBOL_ROWS: usize = 30;

#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    pub baseline: PathBuf,
    pub incident: PathBuf,
    /// What the change brought: the incident's findings the baseline had
    /// not at that severity, and where CPU moved; most severe first.
    pub findings: Vec<crate::model::finding::Finding>,
    /// Rules that fired in the baseline too (`latch_hotspot (warning)`).
    pub findings_also_in_baseline: Vec<String>,
    pub profiles: Vec<ProfileDiff>,
    pub probes: Vec<ProbeDelta>,
    /// Statements (by fingerprint id) whose wait a second changed most,
    /// where both recordings tied hits to statements.
    pub statements: Vec<StatementDelta>,
    /// The server's own state side by side, when both recordings read it.
    pub server_state: Option<crate::model::server_state::StateComparison>,
    /// What innoprof's caps on reading a bundle cut (docs/OUTPUTS.md), one
    /// line each; empty for any file innoprof wrote.
    pub notes: Vec<String>,
    #[serde(skip)]
    files: Vec<(String, String)>,
}

/// One statement's rates in both recordings (0 where it was not seen).
#[derive(Debug, Clone, Serialize)]
pub struct StatementDelta {
    pub id: String,
    pub fingerprint: String,
    pub baseline_calls_per_sec: f64,
    pub incident_calls_per_sec: f64,
    pub baseline_wait_ns_per_sec: f64,
    pub incident_wait_ns_per_sec: f64,
    pub baseline_executions_per_sec: f64,
    pub incident_executions_per_sec: f64,
    /// On-CPU samples of the statement a second (0 without a CPU profile
    /// tied to statements).
    pub baseline_cpu_samples_per_sec: f64,
    pub incident_cpu_samples_per_sec: f64,
}

/// Statements shown in `diff` (the largest changes of wait a second).
const DIFF_STATEMENTS: usize = 10;

/// The statements of both recordings by id, the largest change of wait a
/// second (calls where untimed) first; empty unless both have statements.
fn statement_deltas(before: &serde_json::Value, after: &serde_json::Value) -> Vec<StatementDelta> {
    let attributed = |s: &serde_json::Value| s["who"]["attributed"].as_bool() == Some(true);
    if !attributed(before) || !attributed(after) {
        return Vec::new();
    }
    let rates = |s: &serde_json::Value| {
        let secs = watched_s(s).max(1e-9);
        let mut out: std::collections::BTreeMap<String, (String, f64, f64, f64, f64)> =
            std::collections::BTreeMap::new();
        for st in s["who"]["statements"].as_array().into_iter().flatten() {
            let (Some(id), Some(fp)) = (st["id"].as_str(), st["fingerprint"].as_str()) else {
                continue;
            };
            let n = |k: &str| st[k].as_f64().unwrap_or(0.0) / secs;
            out.insert(
                id.to_string(),
                (
                    fp.to_string(),
                    n("calls"),
                    n("wait_ns_total"),
                    n("executions"),
                    n("cpu_samples"),
                ),
            );
        }
        out
    };
    let (b, a) = (rates(before), rates(after));
    let mut ids: Vec<&String> = b.keys().chain(a.keys()).collect();
    ids.sort();
    ids.dedup();
    let zero = (String::new(), 0.0, 0.0, 0.0, 0.0);
    let mut out: Vec<StatementDelta> = ids
        .into_iter()
        .map(|id| {
            let (x, y) = (b.get(id).unwrap_or(&zero), a.get(id).unwrap_or(&zero));
            StatementDelta {
                id: id.clone(),
                fingerprint: if y.0.is_empty() {
                    x.0.clone()
                } else {
                    y.0.clone()
                },
                baseline_calls_per_sec: x.1,
                incident_calls_per_sec: y.1,
                baseline_wait_ns_per_sec: x.2,
                incident_wait_ns_per_sec: y.2,
                baseline_cpu_samples_per_sec: x.4,
                incident_cpu_samples_per_sec: y.4,
                baseline_executions_per_sec: x.3,
                incident_executions_per_sec: y.3,
            }
        })
        .collect();
    let change = |d: &StatementDelta| {
        let wait = (d.incident_wait_ns_per_sec - d.baseline_wait_ns_per_sec).abs();
        let calls = (d.incident_calls_per_sec - d.baseline_calls_per_sec).abs();
        (wait, calls)
    };
    out.sort_by(|x, y| {
        change(y)
            .partial_cmp(&change(x))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| x.id.cmp(&y.id))
    });
    out.truncate(DIFF_STATEMENTS);
    out
}

#[derive(Debug, Clone, Serialize)]
pub struct ProfileDiff {
    /// `oncpu`, `offcpu` or `waits`.
    pub kind: String,
    /// `samples`, `us` or `ns/s` (waits: ns of wait per second watched).
    pub unit: String,
    pub baseline_total: u64,
    pub incident_total: u64,
    /// The differential folded file. On- and off-CPU, the baseline column
    /// is scaled to the incident's total, so widths compare shapes, not
    /// load; waits are rates (per second watched) and compared as they are.
    pub folded: String,
    pub flamegraph: Option<String>,
    /// Largest changes first: of self share on-CPU, of total share
    /// off-CPU (where every stack ends in the same few libc waits).
    pub symbols: Vec<SymbolDelta>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SymbolDelta {
    pub symbol: String,
    pub module: String,
    pub baseline_self_pct: f64,
    pub incident_self_pct: f64,
    pub self_delta_pct: f64,
    pub baseline_total_pct: f64,
    pub incident_total_pct: f64,
    pub total_delta_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeDelta {
    pub name: String,
    pub baseline_calls_per_sec: f64,
    pub incident_calls_per_sec: f64,
    /// incident / baseline; `None` when the baseline never fired.
    pub calls_ratio: Option<f64>,
    /// Wait time per second, in ns.
    pub baseline_wait_ns_per_sec: f64,
    pub incident_wait_ns_per_sec: f64,
    /// The rate is an estimate (the governor watched the probe in windows):
    /// its estimate's total over the time it covers, or, where that total's
    /// bound is too wide to quote, the rate over the seconds watched.
    pub baseline_estimated: bool,
    pub incident_estimated: bool,
    /// Of each recording, the share the probe was attached (1 when the
    /// governor never cut it).
    pub baseline_watched_share: f64,
    pub incident_watched_share: f64,
}

impl ProbeDelta {
    /// The two recordings watched this probe very differently (one 3x or
    /// more the other's share): its rates are each over their own watched
    /// time, so they compare, but their bounds differ as much.
    pub fn watched_differently(&self) -> bool {
        let (b, i) = (self.baseline_watched_share, self.incident_watched_share);
        b > 0.0 && i > 0.0 && (b / i >= 3.0 || i / b >= 3.0)
    }
}

/// (kind, unit, self frame, rank by total share)
const PROFILES: [(&str, &str, SelfFrame, bool); 2] = [
    ("oncpu", "samples", SelfFrame::Leaf, false),
    ("offcpu", "us", SelfFrame::UserLeaf, true),
];

/// Symbol → module, from the top-symbols tables of recordings' summaries
/// (`cpu.oncpu.top.rows`, `cpu.offcpu.top.rows`) and the modules of the
/// other functions that had a visible share (`top.modules`).
fn modules_of(
    summaries: &[&serde_json::Value],
    kind: &str,
) -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    for s in summaries {
        let rows = s["cpu"][kind]["top"]["rows"].as_array();
        for r in rows.into_iter().flatten() {
            if let (Some(sym), Some(m)) = (r["symbol"].as_str(), r["module"].as_str()) {
                if !m.is_empty() {
                    out.entry(sym.to_string()).or_insert_with(|| m.to_string());
                }
            }
        }
        if let Some(modules) = s["cpu"][kind]["top"]["modules"].as_object() {
            for (m, names) in modules {
                for sym in names
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str())
                {
                    out.entry(sym.to_string()).or_insert_with(|| m.clone());
                }
            }
        }
    }
    out
}

pub fn diff_dirs(baseline: &Path, incident: &Path) -> Result<DiffReport, DiffError> {
    let base_summary = read_summary(baseline)?;
    let inc_summary = read_summary(incident)?;
    let mut report = DiffReport {
        baseline: baseline.to_path_buf(),
        incident: incident.to_path_buf(),
        profiles: Vec::new(),
        probes: probe_deltas(&base_summary, &inc_summary),
        statements: statement_deltas(&base_summary, &inc_summary),
        findings: Vec::new(),
        findings_also_in_baseline: Vec::new(),
        server_state: None,
        notes: Vec::new(),
        files: Vec::new(),
    };
    let mut shifts: Vec<CpuShift> = Vec::new();
    for (kind, unit, mode, by_total) in PROFILES {
        let name = instance(FOLDED, kind);
        let (Some(before), Some(after)) = (
            BundleDir::new(baseline).read_text(&name)?,
            BundleDir::new(incident).read_text(&name)?,
        ) else {
            continue;
        };
        let read_from = report.notes.len();
        let before = capped(before, &baseline.join(&name), &mut report.notes);
        let after = capped(after, &incident.join(&name), &mut report.notes);
        let diff_folded = differential(&before, &after);
        let title = format!(
            "{kind} differential: {} -> {} (red grew, blue shrank)",
            baseline.display(),
            incident.display()
        );
        let mut before_top = top_symbols::from_folded(&before, mode.clone(), unit);
        let mut after_top = top_symbols::from_folded(&after, mode, unit);
        // Folded stacks carry no module: take it from the recordings' own
        // tables, which symbolization filled (mysqld, libc.so.6, kernel).
        let modules = modules_of(&[&base_summary, &inc_summary], kind);
        for top in [&mut before_top, &mut after_top] {
            for r in top.rows.iter_mut().filter(|r| r.module.is_empty()) {
                if let Some(m) = modules.get(&r.symbol) {
                    r.module = m.clone();
                }
            }
        }
        let mut symbols = symbol_deltas(&before_top, &after_top, by_total);
        // Where CPU moved is judged on every function: an entry point
        // whose time is spread over many callees (the undo walk: +12.7
        // points total on MariaDB 11.4.5 with ~0 self) ranks far below
        // the table's cut by self growth.
        if kind == "oncpu" {
            shifts = symbols.iter().map(CpuShift::from).collect();
        }
        symbols.truncate(SYMBOL_ROWS);
        let (profile, files) = drawn(
            kind,
            unit,
            &title,
            diff_folded,
            (before_top.total, after_top.total),
            symbols,
            (&mut report.notes, read_from),
        )?;
        report.profiles.push(profile);
        report.files.extend(files);
    }
    if let Some(waits) = wait_profile(
        baseline,
        incident,
        &base_summary,
        &inc_summary,
        &mut report.notes,
    )? {
        report.files.extend(waits.1);
        report.profiles.push(waits.0);
    }
    // Findings need the typed summaries; a bundle too old to parse has
    // its numbers compared above, without findings.
    let typed = |v| serde_json::from_value::<crate::model::summary::Summary>(v).ok();
    if let (Some(b), Some(i)) = (typed(base_summary), typed(inc_summary)) {
        report.server_state = b
            .server_state
            .as_ref()
            .zip(i.server_state.as_ref())
            .and_then(|(b, i)| b.compare(i));
        let change = crate::findings::change::of_change(&b, &i, &shifts);
        report.findings = change.new;
        report.findings_also_in_baseline = change.also_in_baseline;
    }
    Ok(report)
}

impl DiffReport {
    /// Writes the differential files, `diff.json` and `diff.txt` into `dir`.
    /// Writes the diff's files into `dir` (created if absent), which must
    /// not be a recording: a diff never changes a bundle.
    pub fn write(&self, dir: &Path) -> Result<(), DiffError> {
        let is_bundle = [
            crate::model::files::METADATA_JSON,
            crate::model::files::SUMMARY_JSON,
        ]
        .iter()
        .any(|f| std::fs::symlink_metadata(dir.join(f)).is_ok());
        if is_bundle {
            return Err(DiffError::IntoBundle(dir.into()));
        }
        report::prepare_dir(dir)?;
        for (name, text) in &self.files {
            report::write_file(&dir.join(name), text.as_bytes())?;
        }
        let json = serde_json::to_vec_pretty(self).expect("diff serialises");
        report::write_file(&dir.join(DIFF_JSON), &json)?;
        report::write_file(&dir.join(DIFF_TXT), self.render().as_bytes())?;
        Ok(())
    }

    /// The comparison as text, with the bundles' strings (untrusted)
    /// made printable (see [`crate::text`]).
    pub fn render(&self) -> String {
        crate::text::printable_lines(&self.render_raw()).into_owned()
    }

    fn render_raw(&self) -> String {
        use comfy_table::presets::ASCII_MARKDOWN;
        use comfy_table::{CellAlignment, Table};
        let mut out = format!(
            "innoprof diff: baseline {} -> incident {}\n",
            self.baseline.display(),
            self.incident.display()
        );
        for note in &self.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        out.push_str(&crate::findings::render(&self.findings));
        if !self.findings_also_in_baseline.is_empty() {
            out.push_str(&format!(
                "in the baseline as well (not listed): {}\n",
                self.findings_also_in_baseline.join(", ")
            ));
        }
        let right = |t: &mut Table, cols: std::ops::Range<usize>| {
            for c in cols {
                if let Some(col) = t.column_mut(c) {
                    col.set_cell_alignment(CellAlignment::Right);
                }
            }
        };
        if !self.probes.is_empty() {
            let mut t = Table::new();
            t.load_preset(ASCII_MARKDOWN);
            t.set_header([
                "probe",
                "calls/s before",
                "calls/s now",
                "x",
                "wait/s before",
                "wait/s now",
            ]);
            // `~`: estimated from the governor's windows.
            let approx = |estimated: bool, text: String| {
                if estimated {
                    format!("~{text}")
                } else {
                    text
                }
            };
            for p in &self.probes {
                t.add_row([
                    p.name.clone(),
                    approx(p.baseline_estimated, units::count(p.baseline_calls_per_sec)),
                    approx(p.incident_estimated, units::count(p.incident_calls_per_sec)),
                    p.calls_ratio
                        .map(|r| format!("{r:.2}"))
                        .unwrap_or_else(|| "new".into()),
                    approx(
                        p.baseline_estimated,
                        units::ns(p.baseline_wait_ns_per_sec as u64),
                    ),
                    approx(
                        p.incident_estimated,
                        units::ns(p.incident_wait_ns_per_sec as u64),
                    ),
                ]);
            }
            right(&mut t, 1..6);
            let note = if self
                .probes
                .iter()
                .any(|p| p.baseline_estimated || p.incident_estimated)
            {
                "; ~ estimated from the windows the governor watched"
            } else {
                ""
            };
            out.push_str(&format!("\nwait probes (per second{note}):\n{t}\n"));
            for p in self.probes.iter().filter(|p| p.watched_differently()) {
                out.push_str(&format!(
                    "  {} was watched {:.0} % of the baseline and {:.0} % of the incident: \
                     each rate is over its own watched time, with bounds as different\n",
                    p.name,
                    p.baseline_watched_share * 100.0,
                    p.incident_watched_share * 100.0
                ));
            }
        }
        if !self.statements.is_empty() {
            let mut t = Table::new();
            t.load_preset(ASCII_MARKDOWN);
            // CPU columns only where a side tied CPU samples to statements.
            let cpu = self.statements.iter().any(|d| {
                d.baseline_cpu_samples_per_sec > 0.0 || d.incident_cpu_samples_per_sec > 0.0
            });
            let mut header = vec![
                "statement",
                "executions/s before",
                "now",
                "calls/s before",
                "now",
                "wait/s before",
                "now",
            ];
            if cpu {
                header.extend(["CPU samples/s before", "now"]);
            }
            t.set_header(header);
            for d in &self.statements {
                let mut row = vec![
                    d.fingerprint.chars().take(70).collect(),
                    units::count(d.baseline_executions_per_sec),
                    units::count(d.incident_executions_per_sec),
                    units::count(d.baseline_calls_per_sec),
                    units::count(d.incident_calls_per_sec),
                    units::ns(d.baseline_wait_ns_per_sec as u64),
                    units::ns(d.incident_wait_ns_per_sec as u64),
                ];
                if cpu {
                    row.push(units::count(d.baseline_cpu_samples_per_sec));
                    row.push(units::count(d.incident_cpu_samples_per_sec));
                }
                t.add_row(row);
            }
            right(&mut t, 1..(7 + if cpu { 2 } else { 0 }));
            out.push_str(&format!(
                "
statements whose wait changed most (client connections' probe hits, per second):
{t}
"
            ));
        }
        for p in &self.profiles {
            let mut t = Table::new();
            t.load_preset(ASCII_MARKDOWN);
            t.set_header([
                "self % before",
                "self % now",
                "delta",
                "total % before",
                "total % now",
                "module",
                "symbol",
            ]);
            for s in &p.symbols {
                t.add_row([
                    format!("{:.2}", s.baseline_self_pct),
                    format!("{:.2}", s.incident_self_pct),
                    format!("{:+.2}", s.self_delta_pct),
                    format!("{:.2}", s.baseline_total_pct),
                    format!("{:.2}", s.incident_total_pct),
                    s.module.clone(),
                    s.symbol.chars().take(90).collect(),
                ]);
            }
            right(&mut t, 0..5);
            // Waits are rates: 420.27 ms of wait a second, not raw ns.
            let total = |v: u64| match p.unit.as_str() {
                "ns/s" => format!("{} of wait a second watched", units::ns(v)),
                unit => format!("{v} {unit}"),
            };
            out.push_str(&format!(
                "\n{}: {} before, {} now; largest changes of {} share:\n{t}\n",
                p.kind,
                total(p.baseline_total),
                total(p.incident_total),
                if p.kind == "oncpu" { "self" } else { "total" }
            ));
        }
        if !self.profiles.iter().any(|p| p.kind != "waits") {
            out.push_str("\nno CPU profile in both recordings (record without --no-cpu)\n");
        }
        if let Some(st) = &self.server_state {
            out.push_str(&render_state(st));
        }
        out
    }
}

/// The server's state of both recordings: settings that differ, history
/// list length and oldest transaction at the end, status rates.
fn render_state(st: &crate::model::server_state::StateComparison) -> String {
    use comfy_table::presets::ASCII_MARKDOWN;
    use comfy_table::{CellAlignment, Table};
    let n = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| units::count(v as f64));
    let mut out = String::from("\nserver state (as each recording's server reported it):\n");
    if st.settings_changed.is_empty() {
        out.push_str("  settings: the same in both\n");
    }
    for c in &st.settings_changed {
        out.push_str(&format!(
            "  setting changed: {} {} -> {}\n",
            c.name,
            c.baseline.as_deref().unwrap_or("(unset)"),
            c.incident.as_deref().unwrap_or("(unset)")
        ));
    }
    out.push_str(&format!(
        "  history list length at the end: {} -> {}\n  oldest transaction at the end: {} -> {} s\n",
        n(st.history_list_length[0]),
        n(st.history_list_length[1]),
        n(st.oldest_trx_age_s[0]),
        n(st.oldest_trx_age_s[1]),
    ));
    if !st.rates.is_empty() {
        let mut t = Table::new();
        t.load_preset(ASCII_MARKDOWN);
        t.set_header(["status", "per s before", "per s now"]);
        for r in &st.rates {
            t.add_row([
                r.name.clone(),
                units::count(r.baseline_per_s),
                units::count(r.incident_per_s),
            ]);
        }
        for c in 1..3 {
            if let Some(col) = t.column_mut(c) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        out.push_str(&format!("{t}\n"));
    }
    out
}

/// The wait probes' stacks of both recordings as one differential: each
/// probe's wait-time stacks (`PROBE.folded`) under a root frame of its
/// name, weighed in ns of wait per second the probe was watched, so probes
/// the governor watched for different shares of each recording compare.
/// `None` when either recording has no wait stacks.
fn wait_profile(
    baseline: &Path,
    incident: &Path,
    base_summary: &serde_json::Value,
    inc_summary: &serde_json::Value,
    notes: &mut Vec<String>,
) -> Result<Option<(ProfileDiff, Vec<(String, String)>)>, DiffError> {
    let read_from = notes.len();
    let (Some(before), Some(after)) = (
        wait_stacks(baseline, base_summary, notes)?,
        wait_stacks(incident, inc_summary, notes)?,
    ) else {
        return Ok(None);
    };
    let unit = "ns/s";
    let diff_folded = differential_as_is(&before, &after);
    let title = format!(
        "wait time per second watched, by probe and stack: {} -> {} (red grew, blue shrank)",
        baseline.display(),
        incident.display()
    );
    let before_top = top_symbols::from_folded(&before, SelfFrame::Leaf, unit);
    let after_top = top_symbols::from_folded(&after, SelfFrame::Leaf, unit);
    let mut symbols = symbol_deltas(&before_top, &after_top, true);
    symbols.truncate(SYMBOL_ROWS);
    drawn(
        "waits",
        unit,
        &title,
        diff_folded,
        (before_top.total, after_top.total),
        symbols,
        (notes, read_from),
    )
    .map(Some)
}

/// A compared profile and its files: the differential folded stacks and
/// their flame graph, named for `kind` (`diff.KIND.folded`, `.svg`).
fn drawn(
    kind: &str,
    unit: &str,
    title: &str,
    diff_folded: String,
    (baseline_total, incident_total): (u64, u64),
    symbols: Vec<SymbolDelta>,
    (notes, read_from): (&mut Vec<String>, usize),
) -> Result<(ProfileDiff, Vec<(String, String)>), DiffError> {
    let folded_name = instance(FOLDED, &format!("diff.{kind}"));
    let svg_name = instance(DIFF_SVG_FILES, kind);
    // Both sides were read within the caps; their sum may be twice that.
    let mut parsed = folded_read::parse::<Delta>(&diff_folded);
    let diff_folded = parsed.to_text();
    notes.extend(parsed.note(&folded_name));
    let svg = flamegraph::render_differential(&diff_folded, title, unit, &notes[read_from..])?;
    if let Some(note) = svg.as_ref().and_then(|d| d.note.as_ref()) {
        notes.push(format!("{svg_name}: {note}"));
    }
    let profile = ProfileDiff {
        kind: kind.to_string(),
        unit: unit.to_string(),
        baseline_total,
        incident_total,
        folded: folded_name.clone(),
        flamegraph: svg.as_ref().map(|_| svg_name.clone()),
        symbols,
    };
    let mut files = vec![(folded_name, diff_folded)];
    if let Some(drawn) = svg {
        files.push((
            svg_name,
            String::from_utf8(drawn.svg).expect("inferno writes UTF-8"),
        ));
    }
    Ok((profile, files))
}

/// One recording's wait stacks, rooted at the probe, per second watched.
/// Each file is read within the caps, and once (a summary.json naming one
/// file for every probe must not make the work grow with the probes), and
/// the probes' stacks together are held to them too.
fn wait_stacks(
    dir: &Path,
    summary: &serde_json::Value,
    notes: &mut Vec<String>,
) -> Result<Option<String>, DiffError> {
    let secs = watched_s(summary);
    let mut out = String::new();
    let mut read = std::collections::HashSet::new();
    for p in summary["probes"].as_array().into_iter().flatten() {
        let (Some(name), Some(file)) = (p["name"].as_str(), p["stacks"]["folded_by_wait"].as_str())
        else {
            continue;
        };
        // The name becomes a frame: a catalog name, nothing that would
        // split or end a folded line.
        let catalog_name = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if p["status"] != "attached" || name.is_empty() || !catalog_name {
            continue;
        }
        // Only a file the bundle names as folded stacks (`*.folded`), read
        // through the bundle's own checks.
        if crate::model::files::describe(file).map(|f| f.name) != Some(FOLDED)
            || !read.insert(file.to_string())
        {
            continue;
        }
        let Some(text) = BundleDir::new(dir).read_text(file)? else {
            continue;
        };
        let stacks = folded_read::parse::<u64>(&text);
        drop(text);
        notes.extend(stacks.note(&dir.join(file).display().to_string()));
        let share = p["sampling"]["attached_fraction"]
            .as_f64()
            .filter(|f| *f > 0.0 && *f <= 1.0)
            .unwrap_or(1.0);
        let watched = secs * share;
        for (stack, ns) in stacks.stacks() {
            let per_s = (ns as f64 / watched).round() as u64;
            if per_s > 0 {
                out.push_str(name);
                for frame in stacks.frames(stack) {
                    out.push(';');
                    out.push_str(frame);
                }
                out.push_str(&format!(" {per_s}\n"));
            }
        }
    }
    if out.is_empty() {
        return Ok(None);
    }
    let what = format!("{}: the wait probes' stacks", dir.display());
    Ok(Some(capped(out, Path::new(&what), notes)))
}

/// `text` (a folded file read from `path`) within the caps on reading a
/// bundle, its names printable, what was cut noted.
fn capped(text: String, path: &Path, notes: &mut Vec<String>) -> String {
    let mut stacks = folded_read::parse::<u64>(&text);
    // Not held beside what was kept of it.
    drop(text);
    let out = stacks.to_text();
    notes.extend(stacks.note(&path.display().to_string()));
    out
}

/// inferno's difffolded, baseline scaled to the incident, lines sorted so
/// the file is deterministic (inferno emits hash-map order).
fn differential(before: &str, after: &str) -> String {
    differential_with(before, after, true)
}

/// inferno's difffolded of two rates, compared as they are.
fn differential_as_is(before: &str, after: &str) -> String {
    differential_with(before, after, false)
}

fn differential_with(before: &str, after: &str, normalize: bool) -> String {
    let opts = inferno::differential::Options {
        normalize,
        strip_hex: false,
    };
    let mut out = Vec::new();
    inferno::differential::from_readers(opts, before.as_bytes(), after.as_bytes(), &mut out)
        .expect("in-memory readers and writer do not fail");
    let text = String::from_utf8_lossy(&out);
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Every function of either table, the largest change first (self growth
/// on-CPU, total growth off-CPU).
fn symbol_deltas(before: &TopSymbols, after: &TopSymbols, by_total: bool) -> Vec<SymbolDelta> {
    use std::collections::BTreeMap;
    let mut merged: BTreeMap<(String, String), [f64; 4]> = BTreeMap::new();
    for (i, top) in [before, after].into_iter().enumerate() {
        for r in &top.rows {
            let e = merged
                .entry((r.module.clone(), r.symbol.clone()))
                .or_default();
            e[i] = r.self_pct;
            e[2 + i] = r.total_pct;
        }
    }
    let mut rows: Vec<SymbolDelta> = merged
        .into_iter()
        .map(|((module, symbol), [bs, is, bt, it])| SymbolDelta {
            symbol,
            module,
            baseline_self_pct: bs,
            incident_self_pct: is,
            self_delta_pct: is - bs,
            baseline_total_pct: bt,
            incident_total_pct: it,
            total_delta_pct: it - bt,
        })
        .collect();
    let key = |d: &SymbolDelta| {
        if by_total {
            (d.total_delta_pct.abs(), d.self_delta_pct.abs())
        } else {
            (d.self_delta_pct.abs(), d.total_delta_pct.abs())
        }
    };
    rows.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        kb.0.total_cmp(&ka.0)
            .then(kb.1.total_cmp(&ka.1))
            .then_with(|| a.symbol.cmp(&b.symbol))
    });
    rows
}

impl From<&SymbolDelta> for CpuShift {
    fn from(s: &SymbolDelta) -> Self {
        CpuShift {
            symbol: s.symbol.clone(),
            module: s.module.clone(),
            baseline_pct: s.baseline_self_pct,
            incident_pct: s.incident_self_pct,
            baseline_total_pct: s.baseline_total_pct,
            incident_total_pct: s.incident_total_pct,
        }
    }
}

fn probe_deltas(before: &serde_json::Value, after: &serde_json::Value) -> Vec<ProbeDelta> {
    let rates = |s: &serde_json::Value| -> Vec<(String, Rate)> {
        let secs = watched_s(s);
        s["probes"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .filter(|p| p["status"] == "attached")
                    .filter_map(|p| Some((p["name"].as_str()?.to_string(), probe_rate(p, secs))))
                    .collect()
            })
            .unwrap_or_default()
    };
    let b = rates(before);
    let a = rates(after);
    let mut names: Vec<&String> = b.iter().chain(a.iter()).map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    let find = |v: &[(String, Rate)], n: &str| {
        v.iter()
            .find(|(name, _)| name == n)
            .map(|(_, r)| *r)
            .unwrap_or_default()
    };
    let mut out: Vec<ProbeDelta> = names
        .into_iter()
        // Silent in both: nothing changed, and nothing is `new`.
        .filter(|n| find(&b, n).calls > 0.0 || find(&a, n).calls > 0.0)
        .map(|n| {
            let (bf, af) = (find(&b, n), find(&a, n));
            ProbeDelta {
                name: n.clone(),
                baseline_calls_per_sec: bf.calls,
                incident_calls_per_sec: af.calls,
                calls_ratio: (bf.calls > 0.0).then(|| af.calls / bf.calls),
                baseline_wait_ns_per_sec: bf.wait_ns,
                incident_wait_ns_per_sec: af.wait_ns,
                baseline_estimated: bf.estimated,
                incident_estimated: af.estimated,
                baseline_watched_share: bf.watched_share,
                incident_watched_share: af.watched_share,
            }
        })
        .collect();
    // Most grown first. A probe that never fired in the baseline counts as
    // having fired once in it: one call of a rare path (0 -> 1) must not
    // outrank a path that went from 2 calls to 1.5 million.
    let floor = 1.0 / watched_s(before);
    out.sort_by(|x, y| {
        let key = |p: &ProbeDelta| p.incident_calls_per_sec / p.baseline_calls_per_sec.max(floor);
        key(y)
            .total_cmp(&key(x))
            .then(
                y.incident_calls_per_sec
                    .total_cmp(&x.incident_calls_per_sec),
            )
            .then_with(|| x.name.cmp(&y.name))
    });
    out
}

/// A probe's calls and wait per second, over the time it speaks for.
#[derive(Debug, Clone, Copy, Default)]
struct Rate {
    calls: f64,
    wait_ns: f64,
    estimated: bool,
    watched_share: f64,
}

/// The probe's one rate ([`crate::model::summary::ProbeRate`], as
/// summary.txt, the findings and `top DIR` show it): exact where it was
/// on throughout, its estimate's over the seconds covered, or per second
/// watched where the estimate's bound is too wide to quote. Dividing what
/// a cut probe saw by the whole recording read sql.commit at 466.6/s where
/// the server committed 1,391.7/s.
fn probe_rate(p: &serde_json::Value, secs: f64) -> Rate {
    let sampling =
        serde_json::from_value::<crate::model::summary::Sampling>(p["sampling"].clone()).ok();
    let rate = crate::model::summary::ProbeRate::of(
        p["calls"].as_u64().unwrap_or(0),
        p["wait_ns_total"].as_u64().unwrap_or(0),
        secs,
        sampling.as_ref(),
    );
    Rate {
        calls: rate.calls_per_s,
        wait_ns: rate.wait_ns_per_s,
        estimated: sampling.is_some(),
        watched_share: sampling.as_ref().map_or(1.0, |s| s.attached_fraction),
    }
}

fn duration_s(summary: &serde_json::Value) -> f64 {
    summary["duration_s"]
        .as_f64()
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0)
}

/// Seconds watched ([`crate::model::summary::Summary::watched_s`]): a
/// `--follow` recording's segments, its gaps (the server restarting) left
/// out, as every other surface divides by; else the whole recording.
fn watched_s(summary: &serde_json::Value) -> f64 {
    let segments: f64 = summary["segments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["duration_s"].as_f64())
        .sum();
    if segments > 0.0 {
        segments
    } else {
        duration_s(summary)
    }
}

fn read_summary(dir: &Path) -> Result<serde_json::Value, DiffError> {
    let text = BundleDir::new(dir)
        .read_text(crate::model::files::SUMMARY_JSON)?
        .ok_or_else(|| DiffError::NotARecording(dir.to_path_buf()))?;
    crate::bundle::contract::check_version(
        &dir.join(crate::model::files::SUMMARY_JSON),
        text.as_bytes(),
    )?;
    serde_json::from_str(&text).map_err(|source| DiffError::Summary {
        path: dir.join(crate::model::files::SUMMARY_JSON),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording(dir: &Path, duration: f64, calls: u64, oncpu: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let summary = serde_json::json!({
            "duration_s": duration,
            "probes": [{"name": "innodb.undo.prev_version", "status": "attached", "calls": calls, "wait_ns_total": calls * 1000}],
        });
        std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
        std::fs::write(dir.join("oncpu.folded"), oncpu).unwrap();
    }

    #[test]
    fn finds_what_got_hot() {
        let tmp = tempfile::tempdir().unwrap();
        let (base, inc, out) = (
            tmp.path().join("b"),
            tmp.path().join("i"),
            tmp.path().join("o"),
        );
        recording(
            &base,
            10.0,
            100,
            "main;row_search 90\nmain;trx_undo_prev_version_build 10\n",
        );
        recording(
            &inc,
            5.0,
            5000,
            "main;row_search 20\nmain;trx_undo_prev_version_build 180\n",
        );
        let r = diff_dirs(&base, &inc).unwrap();
        assert_eq!(
            r.profiles.len(),
            1,
            "no off-CPU files: only on-CPU compared"
        );
        let p = &r.profiles[0];
        assert_eq!((p.baseline_total, p.incident_total), (100, 200));
        assert_eq!(p.symbols[0].symbol, "row_search");
        let undo = p
            .symbols
            .iter()
            .find(|s| s.symbol == "trx_undo_prev_version_build")
            .unwrap();
        assert_eq!(
            (undo.baseline_self_pct, undo.incident_self_pct),
            (10.0, 90.0)
        );
        assert_eq!(undo.self_delta_pct, 80.0);
        let probe = &r.probes[0];
        assert_eq!(
            (probe.baseline_calls_per_sec, probe.incident_calls_per_sec),
            (10.0, 1000.0)
        );
        assert_eq!(probe.calls_ratio, Some(100.0));

        r.write(&out).unwrap();
        // Baseline scaled to the incident's 200 samples.
        let folded = std::fs::read_to_string(out.join("diff.oncpu.folded")).unwrap();
        assert_eq!(
            folded,
            "main;row_search 180 20\nmain;trx_undo_prev_version_build 20 180\n"
        );
        let svg = std::fs::read_to_string(out.join("diff.oncpu.svg")).unwrap();
        assert!(svg.contains("trx_undo_prev_version_build") && svg.trim_end().ends_with("</svg>"));
        let text = std::fs::read_to_string(out.join("diff.txt")).unwrap();
        assert!(
            text.contains("+80.00") && text.contains("innodb.undo.prev_version"),
            "{text}"
        );
        assert!(out.join("diff.json").exists());
    }

    /// The undo walk's time spread over many callees: its own row ranks
    /// below the listed 30 by self growth, and still decides where CPU
    /// moved (the shape of an S6 run on MariaDB 11.4.5).
    #[test]
    fn cpu_moved_is_judged_on_functions_past_the_table() {
        let tmp = tempfile::tempdir().unwrap();
        let (base, inc) = (tmp.path().join("b"), tmp.path().join("i"));
        let summary = serde_json::to_string(&crate::report::html::tests::summary()).unwrap();
        let (mut before, mut after) = (String::new(), String::new());
        for n in 0..40 {
            before += &format!("main;f{n} 10\n");
            after += &format!("main;f{n} 7\n");
            after += &format!("main;row_vers_build_for_consistent_read;g{n} 3\n");
        }
        for (dir, folded) in [(&base, before), (&inc, after)] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("summary.json"), &summary).unwrap();
            std::fs::write(dir.join("oncpu.folded"), folded).unwrap();
        }
        let r = diff_dirs(&base, &inc).unwrap();
        let listed = &r.profiles[0].symbols;
        assert_eq!(listed.len(), SYMBOL_ROWS);
        assert!(listed
            .iter()
            .all(|s| s.symbol != "row_vers_build_for_consistent_read"));
        let f = &r.findings[0];
        assert_eq!(f.rule, "cpu_hot_path", "{:?}", r.findings);
        assert!(
            f.title.contains("undo and MVCC") && f.title.contains("+30"),
            "{f:?}"
        );
    }

    /// The wait stacks of two recordings, one watching the probe a fifth
    /// of the time: rooted at the probe, per second watched, not scaled.
    #[test]
    fn wait_stacks_compare_per_second_watched() {
        let tmp = tempfile::tempdir().unwrap();
        let (base, inc, out) = (
            tmp.path().join("b"),
            tmp.path().join("i"),
            tmp.path().join("o"),
        );
        let write = |dir: &Path, share: Option<f64>, folded: &str| {
            std::fs::create_dir_all(dir).unwrap();
            let mut probe = serde_json::json!({
                "name": "innodb.rwlock.s_wait", "status": "attached", "calls": 10,
                "wait_ns_total": 1000, "stacks": {"folded_by_wait": "innodb.rwlock.s_wait.folded"},
            });
            if let Some(f) = share {
                probe["sampling"] = serde_json::json!({"attached_fraction": f});
            }
            let hostile = serde_json::json!({
                "name": "a;b c", "status": "attached", "calls": 1, "wait_ns_total": 1,
                "stacks": {"folded_by_wait": "innodb.rwlock.s_wait.folded"},
            });
            let summary = serde_json::json!({"duration_s": 10.0, "probes": [probe, hostile]});
            std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
            std::fs::write(dir.join("innodb.rwlock.s_wait.folded"), folded).unwrap();
        };
        // Baseline: 10 s watched, 1 ms of wait a second under row_search.
        write(&base, None, "main;row_search;wait 10000000\n");
        // Incident: 2 s watched (a fifth), 10 ms a second, plus a new site.
        write(
            &inc,
            Some(0.2),
            "main;row_search;wait 20000000\nmain;purge;wait 2000000\n",
        );
        let r = diff_dirs(&base, &inc).unwrap();
        let waits = r.profiles.iter().find(|p| p.kind == "waits").unwrap();
        assert_eq!(
            (waits.baseline_total, waits.incident_total),
            (1_000_000, 11_000_000)
        );
        r.write(&out).unwrap();
        let folded = std::fs::read_to_string(out.join("diff.waits.folded")).unwrap();
        assert_eq!(
            folded,
            "innodb.rwlock.s_wait;main;purge;wait 0 1000000\n\
             innodb.rwlock.s_wait;main;row_search;wait 1000000 10000000\n"
        );
        assert!(out.join("diff.waits.svg").exists());
        let p = &r.probes[0];
        assert_eq!(
            (p.baseline_watched_share, p.incident_watched_share),
            (1.0, 1.0)
        );
        let mut d = p.clone();
        d.incident_watched_share = 0.2;
        assert!(d.watched_differently());
        d.incident_watched_share = 0.5;
        assert!(!d.watched_differently());
    }

    #[test]
    fn a_path_that_grew_a_million_times_outranks_one_new_call() {
        let probes = |calls: [u64; 3]| {
            serde_json::json!({"duration_s": 4.0, "probes": [
                {"name": "a.rare", "status": "attached", "calls": calls[0], "wait_ns_total": 0},
                {"name": "b.walk", "status": "attached", "calls": calls[1], "wait_ns_total": 0},
                {"name": "c.new", "status": "attached", "calls": calls[2], "wait_ns_total": 0},
            ]})
        };
        let d = probe_deltas(&probes([0, 2, 0]), &probes([1, 1_500_000, 40]));
        let names: Vec<&str> = d.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["b.walk", "c.new", "a.rare"], "{d:?}");
        assert_eq!((d[1].calls_ratio, d[2].calls_ratio), (None, None));
    }

    /// A `--follow` recording's rates are over its segments' seconds: the
    /// server's restart between them watched nothing (summary.txt, the
    /// findings and `top DIR` divide by the same).
    #[test]
    fn a_followed_recording_compares_over_its_segments() {
        let followed = serde_json::json!({"duration_s": 30.0,
            "segments": [{"duration_s": 10.0}, {"duration_s": 5.0}],
            "probes": [{"name": "a.walk", "status": "attached", "calls": 1500, "wait_ns_total": 0}]});
        let plain = serde_json::json!({"duration_s": 15.0,
            "probes": [{"name": "a.walk", "status": "attached", "calls": 1500, "wait_ns_total": 0}]});
        let d = probe_deltas(&plain, &followed);
        assert_eq!(d[0].baseline_calls_per_sec, 100.0, "{d:?}");
        assert_eq!(d[0].incident_calls_per_sec, 100.0, "{d:?}");
    }

    /// A probe the governor cut is compared at its estimate per second it
    /// covers (or per second watched, where the estimate is too wide),
    /// never at what it saw divided by the whole recording.
    #[test]
    fn a_cut_probe_is_compared_over_the_time_it_speaks_for() {
        let sampling = |calls: f64, bound: f64, seen: u64| {
            serde_json::json!({
                "state": "duty_cycled", "attached_fraction": 0.3, "observed_calls": seen,
                "calls_before_start": 0, "off_at_end_s": null, "projected_full_pct_of_core": 3.0,
                "windows": [
                    {"start_s": 0.0, "end_s": 1.0, "calls": seen / 2, "wait_ns": seen / 2 * 1000},
                    {"start_s": 5.0, "end_s": 6.0, "calls": seen / 2, "wait_ns": seen / 2 * 1000},
                ],
                "estimate": {
                    "observed_calls": seen, "calls": calls, "calls_bound": bound,
                    "wait_ns": calls * 1000.0, "wait_ns_bound": bound * 1000.0, "covered_s": 10.0,
                    "gap_s": 8.0, "windows": 2, "confidence": 0.95, "assumption": "test",
                },
            })
        };
        let summary = |smp: serde_json::Value| {
            serde_json::json!({"duration_s": 10.0, "probes": [
                {"name": "sql.commit", "status": "attached", "calls": 2_000, "wait_ns_total": 2_000_000,
                 "sampling": smp},
            ]})
        };
        // 2,000 seen in 2 s watched of 10; estimated 10,000 ± 500.
        let d = probe_deltas(
            &summary(sampling(10_000.0, 500.0, 2_000)),
            &summary(sampling(10_000.0, 9_000.0, 2_000)),
        );
        assert!(
            (d[0].baseline_calls_per_sec - 1_000.0).abs() < 1e-9,
            "{d:?}"
        );
        assert!((d[0].baseline_wait_ns_per_sec - 1e6).abs() < 1e-3, "{d:?}");
        // Too wide to quote: 1,000 calls per second watched.
        assert!(
            (d[0].incident_calls_per_sec - 1_000.0).abs() < 1e-9,
            "{d:?}"
        );
        assert!(d[0].baseline_estimated && d[0].incident_estimated);
        let r = DiffReport {
            baseline: PathBuf::from("b"),
            incident: PathBuf::from("i"),
            findings: Vec::new(),
            findings_also_in_baseline: Vec::new(),
            profiles: Vec::new(),
            probes: d,
            statements: Vec::new(),
            server_state: None,
            notes: Vec::new(),
            files: Vec::new(),
        };
        assert!(r.render_raw().contains("~1000 "), "{}", r.render_raw());
    }

    /// Statements are matched by id across recordings, per second of each,
    /// the largest change of wait first; one seen only now is 0 before.
    #[test]
    fn statements_compare_by_id_per_second() {
        let summary = |secs: f64, rows: serde_json::Value| {
            serde_json::json!({"duration_s": secs, "probes": [],
                "who": {"attributed": true, "statements": rows}})
        };
        let st = |id: &str, fp: &str, calls: u64, wait: u64| {
            serde_json::json!({"id": id, "fingerprint": fp, "calls": calls,
                "wait_ns_total": wait, "executions": calls, "cpu_samples": calls * 2})
        };
        let before = summary(
            10.0,
            serde_json::json!([st("a", "UPDATE t", 100, 1_000), st("b", "SELECT", 50, 500)]),
        );
        let after = summary(
            5.0,
            serde_json::json!([st("a", "UPDATE t", 100, 50_000), st("c", "DELETE", 10, 10)]),
        );
        let d = statement_deltas(&before, &after);
        assert_eq!(
            d.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(
            (d[0].baseline_wait_ns_per_sec, d[0].incident_wait_ns_per_sec),
            (100.0, 10_000.0)
        );
        assert_eq!(
            (d[0].baseline_calls_per_sec, d[0].incident_calls_per_sec),
            (10.0, 20.0)
        );
        assert_eq!(d[2].baseline_calls_per_sec, 0.0);
        assert_eq!(
            (
                d[0].baseline_cpu_samples_per_sec,
                d[0].incident_cpu_samples_per_sec
            ),
            (20.0, 40.0)
        );
        // Without statements on one side: nothing to compare.
        let none = serde_json::json!({"duration_s": 10.0, "probes": []});
        assert!(statement_deltas(&none, &after).is_empty());
    }

    #[test]
    fn not_a_recording() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(matches!(
            diff_dirs(tmp.path(), tmp.path()),
            Err(DiffError::NotARecording(_))
        ));
    }
}
