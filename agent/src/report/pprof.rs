//! Folded stacks as pprof profiles (`profile.proto`, gzip'd): `cpu.pb.gz`
//! for `go tool pprof`, Pyroscope, Grafana and the rest of the pprof world.
//!
//! The messages are declared here with prost's derive, field numbers as in
//! github.com/google/pprof/proto/profile.proto: prost is the maintained
//! protobuf crate, and the derive needs no protoc or build script. Only
//! the fields innoprof fills are declared (a reader skips absent ones).

use std::collections::HashMap;
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
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
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
}

/// Builds one profile: interned strings, one function and one location per
/// distinct frame name (folded stacks carry names, not addresses).
pub struct ProfileBuilder {
    profile: Profile,
    strings: HashMap<String, i64>,
    frames: HashMap<String, u64>,
}

impl ProfileBuilder {
    /// `sample_types`: (type, unit) per value of every sample.
    pub fn new(sample_types: &[(&str, &str)]) -> Self {
        let mut b = Self {
            profile: Profile::default(),
            strings: HashMap::new(),
            frames: HashMap::new(),
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

    fn location(&mut self, frame: &str) -> u64 {
        if let Some(&id) = self.frames.get(frame) {
            return id;
        }
        let id = self.frames.len() as u64 + 1;
        let name = self.string(frame);
        self.profile.function.push(Function {
            id,
            name,
            system_name: name,
        });
        self.profile.location.push(Location {
            id,
            line: vec![Line { function_id: id }],
        });
        self.frames.insert(frame.to_string(), id);
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

    /// One sample: frames root→leaf (folded order), one value per sample
    /// type, labels as (key, value).
    pub fn add(&mut self, frames: &[&str], values: &[i64], labels: &[(&str, &str)]) {
        let location_id = frames.iter().rev().map(|f| self.location(f)).collect();
        let label = labels
            .iter()
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

/// `root;…;leaf count` lines, as (frames, count); malformed lines skipped.
pub fn parse_folded(text: &str) -> impl Iterator<Item = (Vec<&str>, u64)> {
    text.lines().filter_map(|l| {
        let (stack, n) = l.trim_end().rsplit_once(' ')?;
        Some((stack.split(';').collect(), n.parse().ok()?))
    })
}

/// The profile, protobuf-encoded and gzip'd (what pprof reads).
pub fn encode_gz(profile: &Profile) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&profile.encode_to_vec())
        .expect("in-memory gzip");
    gz.finish().expect("in-memory gzip")
}

/// On-CPU samples: values `samples/count` and `cpu/nanoseconds` (a sample
/// stands for one period of the sampling clock).
pub fn cpu_profile(
    oncpu_folded: &str,
    frequency_hz: u64,
    start_ms: u64,
    duration_ns: i64,
) -> Profile {
    let period_ns = 1_000_000_000 / frequency_hz.max(1) as i64;
    let mut b = ProfileBuilder::new(&[("samples", "count"), ("cpu", "nanoseconds")]);
    b.period("cpu", "nanoseconds", period_ns)
        .time(unix_ns(start_ms), duration_ns)
        .default_sample_type("samples");
    for (frames, n) in parse_folded(oncpu_folded) {
        b.add(&frames, &[n as i64, n as i64 * period_ns], &[]);
    }
    b.build()
}

/// Off-CPU time (`offcpu.folded`, weighted by microseconds blocked):
/// value `offcpu/nanoseconds`.
pub fn offcpu_profile(offcpu_folded: &str, start_ms: u64, duration_ns: i64) -> Profile {
    let mut b = ProfileBuilder::new(&[("offcpu", "nanoseconds")]);
    b.time(unix_ns(start_ms), duration_ns);
    for (frames, us) in parse_folded(offcpu_folded) {
        b.add(&frames, &[us as i64 * 1000], &[]);
    }
    b.build()
}

/// One probe's stacks for [`waits_profile`]: its name and its folded files
/// (by call count, and by wait time for a latency probe).
pub struct ProbeStacks<'a> {
    pub probe: &'a str,
    pub by_count: &'a str,
    pub by_wait: Option<&'a str>,
    /// What its numbers stand for when they are not every call (the
    /// governor detached it part of the time): a comment of the profile.
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
        let root = format!("probe: {}", p.probe);
        let waits: HashMap<Vec<&str>, u64> = p
            .by_wait
            .map(|w| parse_folded(w).collect())
            .unwrap_or_default();
        for (frames, calls) in parse_folded(p.by_count) {
            let wait = waits.get(&frames).copied().unwrap_or(0);
            let mut rooted = vec![root.as_str()];
            rooted.extend(frames);
            b.add(&rooted, &[calls as i64, wait as i64], &[("probe", p.probe)]);
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

    fn names(p: &Profile, s: &Sample) -> Vec<String> {
        s.location_id
            .iter()
            .map(|id| {
                let f = &p.function[*id as usize - 1];
                p.string_table[f.name as usize].clone()
            })
            .collect()
    }

    #[test]
    fn cpu_samples_leaf_first_with_period() {
        let p = decode(&encode_gz(&cpu_profile(
            "main;spin 99\nmain;idle_[k] 1\n",
            100,
            1_000,
            2_000_000_000,
        )));
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.sample.len(), 2);
        assert_eq!(names(&p, &p.sample[0]), ["spin", "main"]);
        assert_eq!(p.sample[0].value, [99, 99 * 10_000_000]);
        assert_eq!(p.period, 10_000_000);
        assert_eq!(p.time_nanos, 1_000_000_000);
        assert_eq!(p.function.len(), 3, "main interned once");
    }

    #[test]
    fn waits_join_counts_and_times_under_the_probe() {
        let p = waits_profile(
            &[ProbeStacks {
                probe: "innodb.redo.flush",
                by_count: "main;commit;fil_flush 4\nmain;bg;fil_flush 1\n",
                by_wait: Some("main;commit;fil_flush 4000\n"),
                note: Some("innodb.redo.flush: unscaled".into()),
            }],
            0,
            1,
        );
        assert_eq!(
            names(&p, &p.sample[0]),
            ["fil_flush", "commit", "main", "probe: innodb.redo.flush"]
        );
        assert_eq!(p.sample[0].value, [4, 4000]);
        assert_eq!(p.sample[1].value, [1, 0]);
        let l = &p.sample[0].label[0];
        assert_eq!(
            (
                p.string_table[l.key as usize].as_str(),
                p.string_table[l.str as usize].as_str()
            ),
            ("probe", "innodb.redo.flush")
        );
        assert_eq!(p.string_table[p.default_sample_type as usize], "wait");
        let comments: Vec<&str> = p
            .comment
            .iter()
            .map(|c| p.string_table[*c as usize].as_str())
            .collect();
        assert_eq!(comments, ["innodb.redo.flush: unscaled"]);
    }
}
