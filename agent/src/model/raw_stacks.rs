//! `stacks.raw.json`: a recording's stacks as addresses, with what naming
//! them later needs (like `perf record`'s data file, which `perf report`
//! names): every executable mapping of the target with its file's build
//! id, load segments and stamp; the kernel's names for the kernel
//! addresses (named on the host: a kernel address means nothing on
//! another boot); per probe its samples with the markers innoprof put
//! around them; the CPU profile's stacks.
//!
//! Written by every recording (it is a few hundred KiB), so that one
//! recording can be named both on the host and later by `innoprof report`
//! (`record --no-symbolize` leaves the naming to that). A bundle is
//! untrusted input: [`RawStacks::check`] bounds every count, depth and
//! string before any of it is used.

use crate::plan::catalog::Measure;

/// Most mappings, probes, samples and kernel names a raw file may hold.
/// The BPF maps bound what a recording takes far below these (a stack map
/// holds at most 64 Ki entries; a target maps a few hundred files).
pub const MAX_MAPPINGS: usize = 16 << 10;
pub const MAX_PROBES: usize = 4096;
pub const MAX_SAMPLES: usize = 1 << 20;
pub const MAX_KERNEL_NAMES: usize = 1 << 20;
/// Deepest stack (user or kernel) a sample may have: the BPF side takes
/// at most 127 frames of each.
pub const MAX_DEPTH: usize = 256;
/// Longest path or name: `PATH_MAX`.
pub const MAX_TEXT: usize = 4096;
/// Most load segments per mapped file.
pub const MAX_SEGMENTS: usize = 64;

/// The whole file.
#[derive(
    Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct RawStacks {
    /// The output contract's version of the innoprof that wrote it (docs/OUTPUTS.md).
    pub format_version: u32,
    /// Whether the recording named its user frames on the host (`false`:
    /// `record --no-symbolize`, its folded files hold `module+0x…`).
    pub named_on_host: bool,
    /// The target's executable file mappings when the stacks were named.
    pub mappings: Vec<RawMapping>,
    /// Kernel addresses (as looked up: return addresses less one) and
    /// their names on the host.
    pub kernel: Vec<KernelName>,
    /// Per probe with stacks, in the summary's order.
    pub probes: Vec<RawProbeStacks>,
    /// The CPU profile's stacks (`record --cpu`).
    pub cpu: Option<RawCpuStacks>,
}

/// An executable file mapping: where, from which file, and how to know
/// that file again elsewhere.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RawMapping {
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    /// The path the target mapped (as it sees it; ` (deleted)` appended
    /// when the file was gone).
    pub path: String,
    /// The file's GNU build id, hex: what a file found later must carry.
    pub build_id: Option<String>,
    /// The file's load segments, so that a separate debug file (which
    /// has the addresses but not the code's offsets) can name it.
    pub segments: Vec<RawSegment>,
    /// The file as it was on the host (none where it could not be opened).
    pub file: Option<RawFileStamp>,
}

/// A load segment: file offset and size, virtual address.
#[derive(
    Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct RawSegment {
    pub offset: u64,
    pub size: u64,
    pub address: u64,
}

/// What identifies the very same file on the host: device and inode,
/// size, modification and change times (what innoprof keys the files it
/// keeps across runs by). A file without a build id is named later only if all
/// of these match.
#[derive(
    Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct RawFileStamp {
    pub major: u32,
    pub minor: u32,
    pub inode: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct KernelName {
    pub address: u64,
    pub name: String,
}

/// One probe's stacks as taken.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RawProbeStacks {
    pub probe: String,
    /// Its folded files' stem (`NAME.folded`, `NAME.count.folded`).
    pub stem: String,
    pub measure: Measure,
    pub samples: Vec<RawProbeSample>,
}

/// One distinct stack of a probe.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RawProbeSample {
    /// The probed function's short name (the leaf of a latency stack).
    pub function: String,
    /// The thread's role, as innoprof numbers them (the `[role]` root
    /// frame of the folded stacks); 0: unknown.
    pub role: u32,
    /// User addresses, innermost first; empty: the stack was lost, or
    /// (`unsampled`) none was taken.
    pub ips: Vec<u64>,
    /// No stack was taken: the hits of a (call site, latch, role) cell
    /// none of whose hits took one, so the stacks still split as the
    /// exact tables do (folded as `[stack not sampled]`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsampled: bool,
    pub count: u64,
    pub wait_ns: u64,
    /// The latch's name, as the host named it.
    pub latch: Option<String>,
    /// The call site's label, as the host named it.
    pub callsite: Option<String>,
    /// The fingerprint of the statement whose hit took the stack (it
    /// stands for the hits the stack carried), where known: the wait
    /// profile's `statement` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
}

/// The CPU profile's stacks.
#[derive(
    Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct RawCpuStacks {
    /// File name of the target's executable (the off-CPU top table's
    /// self frame is the innermost frame in it).
    pub exe_module: Option<String>,
    /// (stack, samples)
    pub oncpu: Vec<RawCpuSample>,
    /// (stack, ns blocked): blocked and then still blocked at the stop;
    /// absent without off-CPU profiling.
    pub offcpu: Option<Vec<RawCpuSample>>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RawCpuSample {
    /// The BPF side's flags (truncated, unwind stopped, kernel stack lost).
    pub flags: u32,
    /// The thread's name.
    pub thread: Option<String>,
    /// Innermost first.
    pub user: Vec<u64>,
    /// Innermost first.
    pub kernel: Vec<u64>,
    pub value: u64,
    /// On-CPU samples of a connection: its statement's fingerprint, cut
    /// to [`MAX_STATEMENT_LABEL`] bytes (the profile's `statement` label);
    /// none when not a connection's, or not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
}

/// Longest `statement` label of a CPU sample: a fingerprint's first
/// bytes tell the statement apart; the whole text is in summary.json.
pub const MAX_STATEMENT_LABEL: usize = 256;

/// A fingerprint as a stack's `statement` label: its first
/// [`MAX_STATEMENT_LABEL`] bytes (at a character boundary), `…` where cut.
pub fn statement_label(fingerprint: &str) -> String {
    if fingerprint.len() <= MAX_STATEMENT_LABEL {
        return fingerprint.to_string();
    }
    let mut end = MAX_STATEMENT_LABEL;
    while !fingerprint.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &fingerprint[..end])
}

/// What is wrong with a raw file, in one line.
#[derive(Debug, thiserror::Error)]
pub enum RawStacksError {
    #[error("format_version {0} is newer than this innoprof reads ({known}); use a newer innoprof", known = crate::model::files::FORMAT_VERSION)]
    TooNew(u32),
    #[error("{what}: {found} is more than the {max} innoprof writes; refused (not a file innoprof wrote?)")]
    TooMany {
        what: &'static str,
        found: usize,
        max: usize,
    },
    #[error("mapping {0:?}: {1}; refused")]
    BadMapping(String, &'static str),
}

impl RawStacks {
    /// Checks every count, depth, string and mapping against what innoprof
    /// writes: a file that lies is refused whole, in one line.
    pub fn check(&self) -> Result<(), RawStacksError> {
        if self.format_version > crate::model::files::FORMAT_VERSION {
            return Err(RawStacksError::TooNew(self.format_version));
        }
        let at_most = |what: &'static str, found: usize, max: usize| {
            if found > max {
                Err(RawStacksError::TooMany { what, found, max })
            } else {
                Ok(())
            }
        };
        at_most("mappings", self.mappings.len(), MAX_MAPPINGS)?;
        at_most("kernel names", self.kernel.len(), MAX_KERNEL_NAMES)?;
        at_most("probes", self.probes.len(), MAX_PROBES)?;
        for m in &self.mappings {
            let bad = |why| {
                Err(RawStacksError::BadMapping(
                    m.path.chars().take(200).collect(),
                    why,
                ))
            };
            if m.path.len() > MAX_TEXT {
                return bad("path longer than PATH_MAX");
            }
            if !m.path.starts_with('/') || m.path.contains('\0') {
                return bad("not an absolute path");
            }
            if m.end <= m.start {
                return bad("ends before it starts");
            }
            if m.segments.len() > MAX_SEGMENTS {
                return bad("too many segments");
            }
            if m.build_id
                .as_ref()
                .is_some_and(|b| b.len() > 128 || !b.bytes().all(|c| c.is_ascii_hexdigit()))
            {
                return bad("build id is not hex");
            }
        }
        at_most(
            "kernel name length",
            self.kernel.iter().map(|k| k.name.len()).max().unwrap_or(0),
            MAX_TEXT,
        )?;
        let mut samples = 0usize;
        for p in &self.probes {
            samples += p.samples.len();
            at_most("samples", samples, MAX_SAMPLES)?;
            at_most(
                "probe name length",
                p.probe.len().max(p.stem.len()),
                MAX_TEXT,
            )?;
            for s in &p.samples {
                at_most("stack depth", s.ips.len(), MAX_DEPTH)?;
                let text = [Some(&s.function), s.latch.as_ref(), s.callsite.as_ref()];
                let longest = text.iter().flatten().map(|t| t.len()).max().unwrap_or(0);
                at_most("label length", longest, MAX_TEXT)?;
                at_most(
                    "statement label length",
                    s.statement.as_ref().map_or(0, String::len),
                    MAX_STATEMENT_LABEL + 4,
                )?;
            }
        }
        if let Some(cpu) = &self.cpu {
            let off = cpu.offcpu.iter().flatten();
            for s in cpu.oncpu.iter().chain(off) {
                samples += 1;
                at_most("samples", samples, MAX_SAMPLES)?;
                at_most("stack depth", s.user.len().max(s.kernel.len()), MAX_DEPTH)?;
                at_most(
                    "thread name length",
                    s.thread.as_ref().map_or(0, String::len),
                    64,
                )?;
                at_most(
                    "statement label length",
                    s.statement.as_ref().map_or(0, String::len),
                    MAX_STATEMENT_LABEL + 4,
                )?;
            }
            at_most(
                "module name length",
                cpu.exe_module.as_ref().map_or(0, String::len),
                MAX_TEXT,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(path: &str) -> RawMapping {
        RawMapping {
            start: 0x1000,
            end: 0x2000,
            file_offset: 0,
            path: path.into(),
            build_id: Some("abcd".into()),
            segments: Vec::new(),
            file: None,
        }
    }

    /// Lies are refused in one line: too many of anything, paths that
    /// are not absolute, a build id that is not hex, a newer version.
    #[test]
    fn a_lying_file_is_refused() {
        let ok = RawStacks {
            format_version: crate::model::files::FORMAT_VERSION,
            mappings: vec![mapping("/usr/sbin/mysqld")],
            ..Default::default()
        };
        ok.check().unwrap();
        let lies = [
            RawStacks {
                format_version: 99,
                ..ok.clone()
            },
            RawStacks {
                mappings: vec![mapping("../../etc/shadow")],
                ..ok.clone()
            },
            RawStacks {
                mappings: vec![RawMapping {
                    build_id: Some("../x".into()),
                    ..mapping("/x")
                }],
                ..ok.clone()
            },
            RawStacks {
                cpu: Some(RawCpuStacks {
                    oncpu: vec![RawCpuSample {
                        flags: 0,
                        thread: None,
                        user: vec![1; MAX_DEPTH + 1],
                        kernel: Vec::new(),
                        value: 1,
                        statement: None,
                    }],
                    ..Default::default()
                }),
                ..ok.clone()
            },
        ];
        for lie in lies {
            let err = lie.check().unwrap_err().to_string();
            assert!(!err.contains('\n'), "{err}");
        }
    }
}
