//! Named stacks as pprof profiles (`profile.proto`, gzip'd): `cpu.pb.gz`
//! for `go tool pprof`, Pyroscope, Grafana and the rest of the pprof world.
//! Each address is a location in its mapping (file, build id), with its
//! function and the functions inlined there as lines of that one location,
//! each with its source file and line where DWARF gives them.
//!
//! The messages are declared here with prost's derive, field numbers as in
//! github.com/google/pprof/proto/profile.proto: prost is the maintained
//! protobuf crate, and the derive needs no protoc or build script. Only
//! the fields innoprof fills are declared (a reader skips absent ones).

use foldhash::{HashMap, HashMapExt};
use std::io::Write;
use std::sync::Arc;

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use crate::model::named_stack::{NamedStack, ProbeStackSet, StackFrame};
use crate::symbolize::{Frame, FrameKind, KERNEL_MODULE};

#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Index 0 must be "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// String index of the sample type a viewer shows first.
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Innermost inlined function first, the function they were inlined
    /// into last (pprof's order).
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// Kernel addresses (the upper half on x86-64) form one mapping named as
/// perf names the kernel, so pprof can tell kernel frames from user ones.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Builds one profile from named stacks: strings, functions, mappings and
/// locations interned. A location is one address (with the functions
/// inlined there as extra lines) or one marker name.
pub struct ProfileBuilder {
    profile: Profile,
    strings: HashMap<String, i64>,
    /// (name, file) → function id.
    functions: HashMap<(String, Option<Arc<str>>), u64>,
    /// start → (path, mapping id).
    mappings: HashMap<u64, Vec<(String, u64)>>,
    /// (address, mapping id) → location id.
    addresses: HashMap<(u64, u64), u64>,
    /// Marker name → location id.
    markers: HashMap<String, u64>,
}

impl ProfileBuilder {
    /// `sample_types`: (type, unit) per value of every sample.
    pub fn new(sample_types: &[(&str, &str)]) -> Self {
        let mut b = Self {
            profile: Profile::default(),
            strings: HashMap::new(),
            functions: HashMap::new(),
            mappings: HashMap::new(),
            addresses: HashMap::new(),
            markers: HashMap::new(),
        };
        b.string("");
        for (ty, unit) in sample_types {
            let vt = b.value_type(ty, unit);
            b.profile.sample_type.push(vt);
        }
        b
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn value_type(&mut self, ty: &str, unit: &str) -> ValueType {
        ValueType {
            r#type: self.string(ty),
            unit: self.string(unit),
        }
    }

    fn function(&mut self, name: &str, file: Option<&Arc<str>>) -> u64 {
        let key = (name.to_string(), file.cloned());
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        let name = self.string(&key.0);
        let filename = file.map_or(0, |f| self.string(f));
        self.profile.function.push(Function {
            id,
            name,
            system_name: name,
            filename,
        });
        self.functions.insert(key, id);
        id
    }

    fn mapping(
        &mut self,
        start: u64,
        limit: u64,
        offset: u64,
        path: &str,
        build_id: Option<&str>,
    ) -> u64 {
        // Looked up for every frame: by borrowed path, no string made.
        if let Some(&(_, id)) = self
            .mappings
            .get(&start)
            .and_then(|at| at.iter().find(|(p, _)| p == path))
        {
            return id;
        }
        let id = self.profile.mapping.len() as u64 + 1;
        let filename = self.string(path);
        let build_id = build_id.map_or(0, |b| self.string(b));
        self.profile.mapping.push(Mapping {
            id,
            memory_start: start,
            memory_limit: limit,
            file_offset: offset,
            filename,
            build_id,
            // Every address is named here (some as module+offset): a
            // reader must not symbolize again.
            has_functions: true,
            ..Default::default()
        });
        self.mappings
            .entry(start)
            .or_default()
            .push((path.to_string(), id));
        id
    }

    fn located(&mut self, at: &crate::symbolize::Location) -> u64 {
        let mapping = match &at.mapping {
            Some(m) => self.mapping(
                m.start,
                m.limit,
                m.file_offset,
                &m.path,
                m.build_id.as_deref(),
            ),
            None if at.address >= KERNEL_START => {
                self.mapping(KERNEL_START, u64::MAX, 0, KERNEL_MODULE, None)
            }
            None => 0,
        };
        if let Some(&id) = self.addresses.get(&(at.address, mapping)) {
            return id;
        }
        let id = self.profile.location.len() as u64 + 1;
        let line = at
            .frames
            .iter()
            .rev()
            .map(|f| Line {
                function_id: self.function(&f.name, f.source.as_ref().map(|s| &s.file)),
                line: f.source.as_ref().map_or(0, |s| i64::from(s.line)),
            })
            .collect();
        if let Some(m) = mapping
            .checked_sub(1)
            .and_then(|i| self.profile.mapping.get_mut(i as usize))
        {
            let lines = at
                .frames
                .iter()
                .any(|f| f.source.as_ref().is_some_and(|s| s.line > 0));
            m.has_filenames |= at.frames.iter().any(|f| f.source.is_some());
            m.has_line_numbers |= lines;
            m.has_inline_frames |= at.frames.len() > 1;
        }
        self.profile.location.push(Location {
            id,
            mapping_id: mapping,
            address: at.address,
            line,
        });
        self.addresses.insert((at.address, mapping), id);
        id
    }

    fn marker(&mut self, frame: &Frame) -> u64 {
        let name = frame.folded_name();
        if let Some(&id) = self.markers.get(&name) {
            return id;
        }
        let id = self.profile.location.len() as u64 + 1;
        let function_id = self.function(&name, None);
        self.profile.location.push(Location {
            id,
            line: vec![Line {
                function_id,
                line: 0,
            }],
            ..Default::default()
        });
        self.markers.insert(name, id);
        id
    }

    pub fn period(&mut self, ty: &str, unit: &str, period: i64) -> &mut Self {
        self.profile.period_type = Some(self.value_type(ty, unit));
        self.profile.period = period;
        self
    }

    pub fn time(&mut self, start_unix_ns: i64, duration_ns: i64) -> &mut Self {
        self.profile.time_nanos = start_unix_ns;
        self.profile.duration_nanos = duration_ns;
        self
    }

    pub fn default_sample_type(&mut self, ty: &str) -> &mut Self {
        self.profile.default_sample_type = self.string(ty);
        self
    }

    pub fn comment(&mut self, text: &str) -> &mut Self {
        let c = self.string(text);
        self.profile.comment.push(c);
        self
    }

    /// One sample: the stack, one value per sample type, labels as (key,
    /// value) besides `thread` (the stack's own).
    pub fn add(&mut self, stack: &NamedStack, values: &[i64], labels: &[(&str, &str)]) {
        let location_id = stack
            .frames
            .iter()
            .rev()
            .map(|f| match f {
                StackFrame::At(l) => self.located(l),
                StackFrame::Marker(m) => self.marker(m),
            })
            .collect();
        let thread = stack.thread.as_deref().map(|t| ("thread", t));
        let label = labels
            .iter()
            .copied()
            .chain(thread)
            .map(|(k, v)| Label {
                key: self.string(k),
                str: self.string(v),
            })
            .collect();
        self.profile.sample.push(Sample {
            location_id,
            value: values.to_vec(),
            label,
        });
    }

    pub fn build(self) -> Profile {
        self.profile
    }
}

/// The profile, protobuf-encoded and gzip'd (what pprof reads), at the
/// fastest level as Go's runtime/pprof writes its own: written at the end
/// of every recording and at every scrape, where the agent's CPU counts
/// more than a few KiB.
pub fn encode_gz(profile: &Profile) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&profile.encode_to_vec())
        .expect("in-memory gzip");
    gz.finish().expect("in-memory gzip")
}

/// A gzipped profile read back (`None` when it is not one): what
/// comparing two profiles message for message takes.
pub fn decode_gz(bytes: &[u8]) -> Option<Profile> {
    use std::io::Read;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(256 << 20)
        .read_to_end(&mut raw)
        .ok()?;
    Profile::decode(raw.as_slice()).ok()
}

/// On-CPU samples (weights: samples): values `samples/count` and
/// `cpu/nanoseconds` (a sample stands for one period of the sampling
/// clock); label `statement` (the fingerprint) on a connection's samples
/// where `statements[i]` knows it, so `pprof -tagfocus statement=…`
/// picks one statement's CPU.
pub fn cpu_profile(
    stacks: &[(NamedStack, u64)],
    statements: &[Option<String>],
    frequency_hz: u64,
    start_ms: u64,
    duration_ns: i64,
) -> Profile {
    let period_ns = 1_000_000_000 / frequency_hz.max(1) as i64;
    let mut b = ProfileBuilder::new(&[("samples", "count"), ("cpu", "nanoseconds")]);
    b.period("cpu", "nanoseconds", period_ns)
        .time(unix_ns(start_ms), duration_ns)
        .default_sample_type("samples");
    for (i, (stack, n)) in stacks.iter().enumerate() {
        let labels: Vec<(&str, &str)> = match statements.get(i) {
            Some(Some(fp)) => vec![("statement", fp.as_str())],
            _ => Vec::new(),
        };
        b.add(stack, &[*n as i64, *n as i64 * period_ns], &labels);
    }
    b.build()
}

/// Off-CPU time (weights: microseconds blocked): value
/// `offcpu/nanoseconds`.
pub fn offcpu_profile(stacks: &[(NamedStack, u64)], start_ms: u64, duration_ns: i64) -> Profile {
    let mut b = ProfileBuilder::new(&[("offcpu", "nanoseconds")]);
    b.time(unix_ns(start_ms), duration_ns);
    for (stack, us) in stacks {
        b.add(stack, &[*us as i64 * 1000], &[]);
    }
    b.build()
}

/// One probe's stacks for [`waits_profile`], with what its numbers stand
/// for when they are not every call (the governor detached it part of the
/// time): a comment of the profile.
pub struct ProbeStacks<'a> {
    pub set: &'a ProbeStackSet,
    pub note: Option<String>,
}

/// Every probe's wait stacks in one profile: values `calls/count` and
/// `wait/nanoseconds`, under a root frame `probe: NAME` (a probe is often
/// named like its function, which is the leaf) and with label `probe`
/// (so `pprof -tagfocus probe=NAME` picks one).
pub fn waits_profile(probes: &[ProbeStacks], start_ms: u64, duration_ns: i64) -> Profile {
    let mut b = ProfileBuilder::new(&[("calls", "count"), ("wait", "nanoseconds")]);
    b.time(unix_ns(start_ms), duration_ns)
        .default_sample_type("wait");
    for note in probes.iter().filter_map(|p| p.note.as_deref()) {
        b.comment(note);
    }
    for p in probes {
        let root = StackFrame::Marker(Frame::new(
            format!("probe: {}", p.set.probe),
            "",
            FrameKind::Unknown,
        ));
        for (i, (stack, calls, wait)) in p.set.stacks.iter().enumerate() {
            let mut rooted = NamedStack {
                frames: vec![root.clone()],
                thread: stack.thread.clone(),
            };
            rooted.frames.extend(stack.frames.iter().cloned());
            let mut labels = vec![("probe", p.set.probe.as_str())];
            if let Some(more) = p.set.labels.get(i) {
                labels.extend(more.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            }
            b.add(&rooted, &[*calls as i64, *wait as i64], &labels);
        }
    }
    b.build()
}

fn unix_ns(ms: u64) -> i64 {
    i64::try_from(ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn decode(gz: &[u8]) -> Profile {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut raw)
            .unwrap();
        Profile::decode(raw.as_slice()).unwrap()
    }

    fn mysqld() -> Arc<crate::symbolize::Mapping> {
        Arc::new(crate::symbolize::Mapping {
            start: 0x40_0000,
            limit: 0x80_0000,
            file_offset: 0,
            path: "/opt/mysql/bin/mysqld".into(),
            build_id: Some("abcd01".into()),
        })
    }

    fn frame(name: &str, kind: FrameKind, line: u32) -> Frame {
        Frame {
            source: (line > 0).then(|| crate::symbolize::SourceLine {
                file: Arc::from("storage/innobase/x.cc"),
                line,
            }),
            ..Frame::new(name, "mysqld", kind)
        }
    }

    fn at(address: u64, frames: Vec<Frame>) -> StackFrame {
        let mapping = (address < KERNEL_START).then(mysqld);
        StackFrame::At(Arc::new(crate::symbolize::Location {
            address,
            mapping,
            frames,
        }))
    }

    fn string(p: &Profile, i: i64) -> &str {
        &p.string_table[i as usize]
    }

    /// Every function of a location, innermost first, as "name:line".
    fn lines(p: &Profile, loc: u64) -> Vec<String> {
        p.location[loc as usize - 1]
            .line
            .iter()
            .map(|l| {
                let f = &p.function[l.function_id as usize - 1];
                format!("{}:{}", string(p, f.name), l.line)
            })
            .collect()
    }

    /// An address with a function inlined into its function is one
    /// location of two lines (innermost first), in its mapping with the
    /// file's build id; kernel addresses fall in the kernel's mapping;
    /// locations, functions and mappings are interned; the thread is a label.
    #[test]
    fn cpu_samples_are_located_with_lines_inlines_and_threads() {
        let main = at(0x40_1000, vec![frame("main", FrameKind::User, 12)]);
        let spin = at(
            0x40_2000,
            vec![
                frame("row_search_mvcc", FrameKind::User, 40),
                frame("rec_get_offsets", FrameKind::Inlined, 7),
            ],
        );
        let idle = at(
            0xffff_ffff_8100_0000,
            vec![Frame::new("idle", KERNEL_MODULE, FrameKind::Kernel)],
        );
        let stacks = vec![
            (
                NamedStack {
                    frames: vec![main.clone(), spin],
                    thread: Some("connection".into()),
                },
                99,
            ),
            (
                NamedStack {
                    frames: vec![main, idle],
                    thread: None,
                },
                1,
            ),
        ];
        // The first stack's statement known, the second's not (and the
        // list may be shorter than the stacks).
        let statements = [Some("SELECT c FROM t WHERE id=?".to_string())];
        let p = decode(&encode_gz(&cpu_profile(
            &stacks,
            &statements,
            100,
            1_000,
            2_000_000_000,
        )));
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.sample.len(), 2);
        let leaf = p.sample[0].location_id[0];
        assert_eq!(lines(&p, leaf), ["rec_get_offsets:7", "row_search_mvcc:40"]);
        assert_eq!(lines(&p, p.sample[0].location_id[1]), ["main:12"]);
        assert_eq!(p.location[leaf as usize - 1].address, 0x40_2000);
        assert_eq!(p.sample[0].value, [99, 99 * 10_000_000]);
        assert_eq!(p.period, 10_000_000);
        assert_eq!(p.time_nanos, 1_000_000_000);
        assert_eq!(p.location.len(), 3, "main located once");
        assert_eq!(
            p.mapping.len(),
            2,
            "mysqld's mapping once, and the kernel's"
        );
        let m = &p.mapping[0];
        assert_eq!(string(&p, m.filename), "/opt/mysql/bin/mysqld");
        assert_eq!(string(&p, m.build_id), "abcd01");
        assert_eq!((m.memory_start, m.memory_limit), (0x40_0000, 0x80_0000));
        assert!(m.has_functions && m.has_filenames && m.has_line_numbers && m.has_inline_frames);
        assert_eq!(string(&p, p.mapping[1].filename), KERNEL_MODULE);
        let f = &p.function[0];
        assert_eq!(string(&p, f.filename), "storage/innobase/x.cc");
        let label = |s: &Sample| -> Vec<(String, String)> {
            s.label
                .iter()
                .map(|l| (string(&p, l.key).to_string(), string(&p, l.str).to_string()))
                .collect()
        };
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        let mut first = label(&p.sample[0]);
        first.sort();
        assert_eq!(
            first,
            [
                pair("statement", "SELECT c FROM t WHERE id=?"),
                pair("thread", "connection"),
            ]
        );
        assert!(label(&p.sample[1]).is_empty());
    }

    #[test]
    fn waits_join_counts_and_times_under_the_probe() {
        let stack = NamedStack {
            frames: vec![
                at(0x40_1000, vec![frame("main", FrameKind::User, 3)]),
                at(0x40_3000, vec![frame("commit", FrameKind::User, 9)]),
                StackFrame::Marker(Frame::new("fil_flush", "", FrameKind::User)),
            ],
            thread: Some("mysqld".into()),
        };
        let set = ProbeStackSet {
            probe: "innodb.redo.flush".into(),
            stacks: vec![(stack.clone(), 4, 4000), (stack, 1, 0)],
            labels: vec![vec![("callsite".into(), "log0log.cc:12".into())], vec![]],
        };
        let p = waits_profile(
            &[ProbeStacks {
                set: &set,
                note: Some("innodb.redo.flush: unscaled".into()),
            }],
            0,
            1,
        );
        let names: Vec<String> = p.sample[0]
            .location_id
            .iter()
            .flat_map(|id| lines(&p, *id))
            .collect();
        assert_eq!(
            names,
            [
                "fil_flush:0",
                "commit:9",
                "main:3",
                "probe: innodb.redo.flush:0"
            ]
        );
        assert_eq!(p.sample[0].value, [4, 4000]);
        assert_eq!(p.sample[1].value, [1, 0]);
        let labels: Vec<(&str, &str)> = p.sample[0]
            .label
            .iter()
            .map(|l| (string(&p, l.key), string(&p, l.str)))
            .collect();
        assert_eq!(
            labels,
            [
                ("probe", "innodb.redo.flush"),
                ("callsite", "log0log.cc:12"),
                ("thread", "mysqld")
            ]
        );
        assert_eq!(string(&p, p.default_sample_type), "wait");
        let comments: Vec<&str> = p.comment.iter().map(|c| string(&p, *c)).collect();
        assert_eq!(comments, ["innodb.redo.flush: unscaled"]);
    }
}
