//! The renderers of a bundle's files, by name, in the order of
//! [`crate::model::files::FILES`] (which names and describes every file).
//! `bundle::write` renders each listed file that has one here.

use std::collections::BTreeMap;

use std::path::Path;

use crate::bundle::error::BundleError;
use crate::model::files::{
    BundleFile, FileInfo, CPU_PPROF, FILES, FOLDED_FILES, HISTOGRAMS_CSV, HISTOGRAMS_JSON,
    INNODB_STATUS_FILES, METADATA_JSON, OFFCPU_PPROF, OFFCPU_SVG, ONCPU_SVG, RAW_STACKS_JSON,
    REPORT_HTML, SUMMARY_JSON, SUMMARY_TXT, TIMESERIES_CSV, TIMESERIES_JSON, WAITS_PPROF,
};
use crate::model::summary::{ProbeStatus, Summary};
use crate::model::timeseries::TimeSeries;
use crate::record::recording::Recording;
use crate::report::flamegraph::{self};
use crate::report::html::{self, FlameGraph, Page};
use crate::report::metadata::{HostInfo, Metadata};
use crate::report::{histograms, pprof, table};

/// The files rendered so far, by name, in list order.
pub type Files = BTreeMap<String, Vec<u8>>;

/// What a renderer sees: the recording, innoprof's argv, and the files
/// the entries before it rendered.
pub struct Context<'a> {
    pub recording: &'a Recording,
    pub command_line: &'a [String],
    pub files: &'a Files,
}

/// Renders an entry's files: none, one, or (for a pattern) several.
pub type Render = fn(&BundleFile, &Context) -> Result<Vec<(String, Vec<u8>)>, BundleError>;

/// How `record` renders each file it writes (files another command
/// writes, `diff`, or that only name innoprof's own scratch files have none).
pub const RENDERERS: &[(&str, Render)] = &[
    (ONCPU_SVG, recorded),
    (OFFCPU_SVG, recorded),
    (INNODB_STATUS_FILES, recorded),
    (FOLDED_FILES, recorded),
    (TIMESERIES_JSON, timeseries_json),
    (TIMESERIES_CSV, timeseries_csv),
    (SUMMARY_JSON, summary_json),
    (SUMMARY_TXT, summary_txt),
    (HISTOGRAMS_JSON, histograms_json),
    (HISTOGRAMS_CSV, histograms_csv),
    (CPU_PPROF, cpu_pprof),
    (OFFCPU_PPROF, offcpu_pprof),
    (WAITS_PPROF, waits_pprof),
    (RAW_STACKS_JSON, raw_stacks_json),
    (METADATA_JSON, metadata_json),
    (REPORT_HTML, report_html),
];

/// The renderer of the file entry named `name`.
pub fn renderer(name: &str) -> Option<Render> {
    RENDERERS.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

// The renderers.

type Rendered = Result<Vec<(String, Vec<u8>)>, BundleError>;

fn one(name: &str, bytes: Vec<u8>) -> Rendered {
    Ok(vec![(name.to_string(), bytes)])
}

/// The entry's files among those the recorder rendered itself.
pub fn recorded(o: &BundleFile, c: &Context) -> Rendered {
    Ok(c.recording
        .folded
        .iter()
        .filter(|(n, _)| crate::model::files::describe(n).is_some_and(|d| d.name == o.name))
        .map(|(n, t)| (n.clone(), t.clone().into_bytes()))
        .collect())
}

pub fn timeseries_json(o: &BundleFile, c: &Context) -> Rendered {
    Ok(c.recording
        .timeseries
        .iter()
        .map(|t| (o.name.to_string(), t.to_json()))
        .collect())
}

pub fn timeseries_csv(o: &BundleFile, c: &Context) -> Rendered {
    Ok(c.recording
        .timeseries
        .iter()
        .map(|t| (o.name.to_string(), t.to_csv()))
        .collect())
}

pub fn summary_json(o: &BundleFile, c: &Context) -> Rendered {
    let json = serde_json::to_vec_pretty(&c.recording.summary).expect("summary serialises");
    one(o.name, json)
}

pub fn summary_txt(o: &BundleFile, c: &Context) -> Rendered {
    one(o.name, table::render(&c.recording.summary).into_bytes())
}

pub fn histograms_json(o: &BundleFile, c: &Context) -> Rendered {
    one(
        o.name,
        histograms::json(&histograms::of(&c.recording.summary)),
    )
}

pub fn histograms_csv(o: &BundleFile, c: &Context) -> Rendered {
    one(
        o.name,
        histograms::csv(&histograms::of(&c.recording.summary)),
    )
}

pub fn cpu_pprof(o: &BundleFile, c: &Context) -> Rendered {
    let (summary, stacks) = (&c.recording.summary, &c.recording.stacks);
    let Some(cpu) = summary.cpu.as_ref().filter(|_| !stacks.oncpu.is_empty()) else {
        return Ok(Vec::new());
    };
    let (start_ms, duration_ns) = pprof_span(summary);
    let p = pprof::cpu_profile(
        &stacks.oncpu,
        &stacks.oncpu_statements,
        cpu.oncpu.frequency_hz,
        start_ms,
        duration_ns,
    );
    one(o.name, pprof::encode_gz(&p))
}

pub fn offcpu_pprof(o: &BundleFile, c: &Context) -> Rendered {
    let (summary, stacks) = (&c.recording.summary, &c.recording.stacks);
    let offcpu = summary.cpu.as_ref().is_some_and(|c| c.offcpu.is_some());
    if !offcpu || stacks.offcpu.is_empty() {
        return Ok(Vec::new());
    }
    let (start_ms, duration_ns) = pprof_span(summary);
    let p = pprof::offcpu_profile(&stacks.offcpu, start_ms, duration_ns);
    one(o.name, pprof::encode_gz(&p))
}

pub fn waits_pprof(o: &BundleFile, c: &Context) -> Rendered {
    let (summary, stacks) = (&c.recording.summary, &c.recording.stacks);
    let probes: Vec<pprof::ProbeStacks> = stacks
        .probes
        .iter()
        .map(|set| pprof::ProbeStacks {
            set,
            note: summary
                .probes
                .iter()
                .find(|p| p.name == set.probe)
                .and_then(unscaled_note),
        })
        .collect();
    if probes.is_empty() {
        return Ok(Vec::new());
    }
    let (start_ms, duration_ns) = pprof_span(summary);
    let p = pprof::waits_profile(&probes, start_ms, duration_ns);
    one(o.name, pprof::encode_gz(&p))
}

/// The stacks as addresses: compact JSON (it is the largest JSON file of
/// a bundle, read by programs).
pub fn raw_stacks_json(o: &BundleFile, c: &Context) -> Rendered {
    Ok(c.recording
        .raw
        .iter()
        .map(|r| {
            let json = serde_json::to_vec(r).expect("raw stacks serialise");
            (o.name.to_string(), json)
        })
        .collect())
}

/// Lists the files rendered so far, itself, and the entries after it
/// (each writes its one file: see [`FILES`]).
pub fn metadata_json(o: &BundleFile, c: &Context) -> Rendered {
    let summary = &c.recording.summary;
    let mut metadata = Metadata::new(
        summary,
        c.command_line,
        c.recording.host.clone().unwrap_or_else(HostInfo::names),
    );
    let me = FILES.iter().position(|x| x.name == o.name).unwrap_or(0);
    let later = FILES[me + 1..]
        .iter()
        .filter(|x| crate::bundle::outputs::renderer(x.name).is_some())
        .map(|x| x.name.to_string());
    metadata.files = c
        .files
        .keys()
        .cloned()
        .chain([o.name.to_string()])
        .chain(later)
        .collect();
    metadata.files.sort();
    metadata.file_info = metadata.files.iter().map(|f| FileInfo::of(f)).collect();
    let json = serde_json::to_vec_pretty(&metadata).expect("metadata serialises");
    one(o.name, json)
}

pub fn report_html(o: &BundleFile, c: &Context) -> Rendered {
    let metadata: Option<Metadata> = c
        .files
        .get(METADATA_JSON)
        .map(|b| serde_json::from_slice(b).expect("metadata.json as just written"));
    let (page, _notes) = render_page(&c.recording.summary, metadata.as_ref(), |n| {
        Ok(c.files.get(n).cloned())
    })?;
    one(o.name, page.into_bytes())
}

/// pprof's start time and duration.
fn pprof_span(summary: &Summary) -> (u64, i64) {
    let start_ms = u64::try_from(summary.started_unix_ms).unwrap_or(0);
    (start_ms, (summary.duration_s * 1e9) as i64)
}

/// The page from the summary and the bundle's other files (`get` by name),
/// and what innoprof's caps on reading a bundle cut of them (one line
/// each; none for files innoprof wrote).
pub(crate) fn render_page(
    summary: &Summary,
    metadata: Option<&Metadata>,
    get: impl Fn(&str) -> Result<Option<Vec<u8>>, BundleError>,
) -> Result<(String, Vec<String>), BundleError> {
    let mut notes = Vec::new();
    let text = |name: &str| -> Result<Option<String>, BundleError> {
        Ok(get(name)?.map(|b| String::from_utf8_lossy(&b).into_owned()))
    };
    let ts_file = crate::model::files::TIMESERIES_JSON;
    let timeseries = match get(ts_file)? {
        Some(b) => {
            crate::bundle::contract::check_version(Path::new(ts_file), &b)?;
            Some(TimeSeries::parse(&b).map_err(|source| BundleError::Parse {
                path: ts_file.into(),
                source,
            })?)
        }
        None => None,
    };
    let mut cpu_flames = Vec::new();
    if let Some(cpu) = &summary.cpu {
        let profiles = [
            (
                cpu.oncpu.flamegraph.as_deref(),
                "on-CPU: where the server runs",
            ),
            (
                cpu.offcpu.as_ref().and_then(|o| o.flamegraph.as_deref()),
                "off-CPU: where its threads block",
            ),
        ];
        for (file, title) in profiles {
            if let Some(svg) = file.map(text).transpose()?.flatten() {
                cpu_flames.push(FlameGraph {
                    title: title.to_string(),
                    svg,
                });
            }
        }
    }
    let mut probe_flames = Vec::new();
    for p in summary
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
    {
        let (file, unit, what) = match (&p.stacks.folded_by_wait, &p.stacks.folded_by_count) {
            (Some(w), _) => (w, "ns", "wait time"),
            (None, Some(c)) => (c, "calls", "calls"),
            (None, None) => continue,
        };
        let Some(folded) = text(file)? else { continue };
        // A file whose weights overflow the drawing's sums is no recording's.
        if !crate::model::top_symbols::weights_fit(&folded) {
            continue;
        }
        // A duty-cycled probe's stacks are those of the calls it saw: said
        // on its graph as in waits.pb.gz's comment.
        let title = match &p.sampling {
            Some(sm) => format!(
                "{}: {what} by stack, of the calls seen while attached ({:.0} % of the \
                 recording), unscaled",
                p.name,
                sm.attached_fraction * 100.0
            ),
            None => format!("{}: {what} by stack", p.name),
        };
        // Drawn within the caps; the graph's subtitle says what was cut.
        if let Some(drawn) = flamegraph::render(&folded, &title, unit)? {
            if let Some(note) = drawn.note {
                notes.push(format!("{}: {note}", crate::text::printable(file)));
            }
            probe_flames.push(FlameGraph {
                title,
                svg: String::from_utf8_lossy(&drawn.svg).into_owned(),
            });
        }
    }
    let page = html::render(&Page {
        summary,
        metadata,
        timeseries: timeseries.as_ref(),
        cpu_flamegraphs: &cpu_flames,
        probe_flamegraphs: &probe_flames,
    });
    Ok((page, notes))
}

/// What a duty-cycled probe's stacks stand for: the calls seen while it
/// was attached, not scaled to summary.json's estimate (a stack seen in
/// one window says nothing of the stacks in a gap).
fn unscaled_note(p: &crate::model::summary::ProbeResult) -> Option<String> {
    let s = p.sampling.as_ref()?;
    Some(format!(
        "{}: stacks of the {} calls seen while attached ({:.0} % of the recording), unscaled; \
         summary.json estimates {:.0} ± {:.0} calls in all",
        p.name,
        p.calls,
        s.attached_fraction * 100.0,
        s.estimate.calls,
        s.estimate.calls_bound
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::files::FILES;

    /// Every renderer is for a listed file that `record` writes, and every
    /// file `record` writes has one.
    #[test]
    fn every_recorded_file_has_one_renderer() {
        for (name, _) in RENDERERS {
            let listed = FILES.iter().find(|f| f.name == *name);
            assert!(
                listed.is_some_and(|f| f.written_by.contains("record")),
                "{name}"
            );
            assert_eq!(
                RENDERERS.iter().filter(|(n, _)| n == name).count(),
                1,
                "{name}"
            );
        }
        for f in FILES.iter().filter(|f| {
            f.written_by.starts_with("record") && f.name != crate::model::files::WRITE_CHECK
        }) {
            assert!(renderer(f.name).is_some(), "{} has no renderer", f.name);
        }
    }
}
