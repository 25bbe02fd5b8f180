//! Zero-cost counters: where InnoDB already counts an event in memory
//! (row ids handed out, transaction ids, redo bytes), innoprof reads the
//! counter from the target at start, at each `--interval` and at the end,
//! instead of probing every increment. The count is exact (end − start of
//! the server's own monotonic counter) and costs the server nothing per
//! event: a few 8-byte reads of `/proc/PID/mem` per recording.
//!
//! Only reads: `/proc/PID/mem` is opened read-only, and only the bytes the
//! DWARF layout names are read (a pointer, then the integer). A failed
//! read (the target exited, a pointer not yet set) is recorded as that,
//! never fatal.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use object::{Object, ObjectSegment};
use serde::{Deserialize, Serialize};

use crate::persist::{self, FileKey};
use crate::plan::catalog::{CounterPath, CounterSpec};
use crate::plan::counter::{resolve_counters_in, CounterError, CounterLayout, Step};
use crate::resolve::ElfImage;

/// A counter the catalog asked for, and where it lives in this binary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlannedCounter {
    pub spec: CounterSpec,
    /// Why it cannot be read in this binary, when it cannot.
    pub layout: Result<CounterLayout, String>,
}

impl PlannedCounter {
    /// The global and path as they resolved (`dict_sys -> +0x48 (8 bytes, row_id_t)`),
    /// or why not.
    pub fn describe(&self) -> String {
        match &self.layout {
            Ok(l) => l.describe(&self.spec.counter.global),
            Err(why) => why.clone(),
        }
    }
}

/// Resolves each counter against the binary's DWARF, reusing the layouts
/// kept earlier for the same DWARF file ([`KeptLayouts`]).
pub fn plan_counters(image: &ElfImage, specs: Vec<CounterSpec>) -> Vec<PlannedCounter> {
    plan_counters_in(image, specs, persist::kept_dir())
}

fn plan_counters_in(image: &ElfImage, specs: Vec<CounterSpec>, dir: &Path) -> Vec<PlannedCounter> {
    if specs.is_empty() {
        return Vec::new();
    }
    if !image.has_debug_info {
        let why = CounterError::NoDebugInfo.to_string();
        return specs
            .into_iter()
            .map(|spec| PlannedCounter {
                spec,
                layout: Err(why.clone()),
            })
            .collect();
    }
    let kept = KeptLayouts::load(image, dir);
    let mut layouts: Vec<Option<Result<CounterLayout, String>>> = specs
        .iter()
        .map(|s| kept.as_ref().and_then(|k| k.get(&s.counter)))
        .collect();
    let todo: Vec<&CounterPath> = specs
        .iter()
        .zip(&layouts)
        .filter(|(_, l)| l.is_none())
        .map(|(s, _)| &s.counter)
        .collect();
    if !todo.is_empty() {
        match resolve_counters_in(image, &todo) {
            Ok(each) => {
                let mut each = each.into_iter().map(|r| r.map_err(|e| e.to_string()));
                let mut resolved = Vec::new();
                for (spec, layout) in specs.iter().zip(layouts.iter_mut()) {
                    if layout.is_none() {
                        let l = each.next().expect("one result per counter");
                        resolved.push((spec.counter.clone(), l.clone()));
                        *layout = Some(l);
                    }
                }
                if let Some(mut kept) = kept {
                    kept.layouts.extend(resolved);
                    kept.store(dir);
                }
            }
            // The file as a whole failed (its DWARF does not parse): said
            // for each counter, and not kept.
            Err(e) => {
                for layout in layouts.iter_mut().filter(|l| l.is_none()) {
                    *layout = Some(Err(e.to_string()));
                }
            }
        }
    }
    specs
        .into_iter()
        .zip(layouts)
        .map(|(spec, layout)| PlannedCounter {
            spec,
            layout: layout.expect("every counter resolved or kept"),
        })
        .collect()
}

/// Counter layouts kept across boots, per DWARF file
/// (`counters-MAJOR-MINOR-INODE.json` in the kept directory, see
/// [`crate::persist`]). Finding a global's definition walks the DWARF
/// units: MariaDB 11.4.5 has no `.debug_pubnames` to say where, and
/// walking its 216 MB of `.debug_info` was ~0.35 s of CPU at the start of
/// every recording. A layout depends only on the file and innoprof's code,
/// so it is reused for the very same file by the same innoprof binary;
/// "not in this build" answers are kept too, they are as fixed.
struct KeptLayouts {
    key: FileKey,
    layouts: Vec<(CounterPath, Result<CounterLayout, String>)>,
}

/// A kept file larger than this is not read (a few KB in practice).
const MAX_KEPT_BYTES: u64 = 1 << 20;
/// Past this many kept files, the least recently used makes room.
const MAX_KEPT_FILES: usize = 256;
const KEPT_PREFIX: &str = "counters";

impl KeptLayouts {
    /// What was kept for `image`'s DWARF file, or an empty set to fill;
    /// None when nothing can be kept (no boot id, no file identity).
    fn load(image: &ElfImage, dir: &Path) -> Option<Self> {
        let key = image.dwarf_file_key()?;
        let layouts = persist::load_json(dir, &key, KEPT_PREFIX, MAX_KEPT_BYTES);
        Some(Self {
            key,
            layouts: layouts.unwrap_or_default(),
        })
    }

    fn get(&self, path: &CounterPath) -> Option<Result<CounterLayout, String>> {
        self.layouts
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, l)| l.clone())
    }

    fn store(&self, dir: &Path) {
        persist::store_json(dir, &self.key, KEPT_PREFIX, MAX_KEPT_FILES, &self.layouts);
    }
}

/// The target's memory, read-only, with the binary's load bias.
#[derive(Debug)]
pub(crate) struct TargetMemory {
    mem: std::fs::File,
    /// Added to link-time addresses (0 unless position independent).
    bias: u64,
}

impl TargetMemory {
    pub(crate) fn open(pid: u32, image: &ElfImage) -> Result<Self, String> {
        let mem = std::fs::File::open(format!("/proc/{pid}/mem"))
            .map_err(|e| format!("cannot open /proc/{pid}/mem: {e}"))?;
        let bias = if image.position_independent {
            load_bias(pid, image)?
        } else {
            0
        };
        Ok(Self { mem, bias })
    }

    /// Bytes at a link-time address (the load bias added).
    pub(crate) fn read_linked(&self, address: u64, buf: &mut [u8]) -> Result<(), String> {
        self.read(
            address.checked_add(self.bias).ok_or("address overflow")?,
            buf,
        )
    }

    fn read(&self, address: u64, buf: &mut [u8]) -> Result<(), String> {
        match self.mem.read_at(buf, address) {
            Ok(n) if n == buf.len() => Ok(()),
            Ok(n) => Err(format!(
                "short read at {address:#x} ({n} of {} bytes)",
                buf.len()
            )),
            Err(e) => Err(format!("cannot read {address:#x}: {e}")),
        }
    }

    /// The counter's value now: the layout's pointer reads and offsets from
    /// the global, then the integer.
    fn value(&self, layout: &CounterLayout) -> Result<u64, String> {
        let mut address = layout
            .global_address
            .checked_add(self.bias)
            .ok_or("address overflow")?;
        for step in &layout.steps {
            match *step {
                Step::Offset(o) => address = address.checked_add(o).ok_or("address overflow")?,
                Step::Deref => {
                    let mut p = [0u8; 8];
                    self.read(address, &mut p)?;
                    address = u64::from_le_bytes(p);
                    if address == 0 {
                        return Err("null pointer on the way (not initialised yet?)".into());
                    }
                }
            }
        }
        let size = usize::from(layout.size);
        if !matches!(size, 1 | 2 | 4 | 8) {
            return Err(format!("unsupported integer size {size}"));
        }
        if layout.elements > 1 {
            return self.sum(address, size, layout.elements as usize);
        }
        let mut bytes = [0u8; 8];
        self.read(address, &mut bytes[..size])?;
        let raw = u64::from_le_bytes(bytes);
        // A negative signed counter is no monotonic count.
        if layout.signed && raw >> (size * 8 - 1) & 1 == 1 {
            return Err(format!("negative value in a signed {size}-byte counter"));
        }
        Ok(raw)
    }
}

impl TargetMemory {
    /// A sharded counter's value: its `n` unsigned slots of `size` bytes,
    /// read in one go and summed (each slot is only ever added to).
    fn sum(&self, address: u64, size: usize, n: usize) -> Result<u64, String> {
        let mut bytes = vec![0u8; size * n];
        self.read(address, &mut bytes)?;
        Ok(bytes
            .chunks_exact(size)
            .map(|slot| {
                let mut b = [0u8; 8];
                b[..size].copy_from_slice(slot);
                u64::from_le_bytes(b)
            })
            .fold(0u64, u64::wrapping_add))
    }
}

/// Where a position-independent binary was loaded: the start of its
/// mapping at file offset 0, minus the link-time address of that offset.
pub(crate) fn load_bias(pid: u32, image: &ElfImage) -> Result<u64, String> {
    let link_base = object::File::parse(image.dwarf_data())
        .ok()
        .and_then(|f| {
            f.segments()
                .filter(|s| s.file_range().0 == 0)
                .map(|s| s.address())
                .min()
        })
        .unwrap_or(0)
        & !0xfff;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map_err(|e| format!("cannot read /proc/{pid}/exe: {e}"))?;
    let exe = exe.to_string_lossy();
    let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
    let maps =
        crate::target::maps::of(pid).map_err(|e| format!("cannot read /proc/{pid}/maps: {e}"))?;
    maps.iter()
        .find(|m| m.path == exe && m.offset == 0)
        .and_then(|m| m.start.checked_sub(link_base))
        .ok_or_else(|| format!("{exe} is not mapped in pid {pid} (load address unknown)"))
}

/// Readings of every counter at one moment: a value or why not.
pub type Readings = Vec<Result<u64, String>>;

/// The counters of one recording: read at start, on demand, and once at
/// the end.
#[derive(Debug)]
pub struct CounterRecorder {
    counters: Vec<PlannedCounter>,
    /// Why the target's memory cannot be read at all, if it cannot.
    memory: Result<TargetMemory, String>,
    start: Readings,
    started: Instant,
    end: Option<(Readings, Instant)>,
}

impl CounterRecorder {
    /// Opens the target's memory and takes the start readings.
    pub fn start(pid: u32, image: &ElfImage, counters: &[PlannedCounter]) -> Self {
        let memory = if counters.iter().any(|c| c.layout.is_ok()) {
            TargetMemory::open(pid, image)
        } else {
            Err("no counter resolved".into())
        };
        let mut me = Self {
            counters: counters.to_vec(),
            memory,
            start: Vec::new(),
            started: Instant::now(),
            end: None,
        };
        me.start = me.read_now();
        me
    }

    pub fn counters(&self) -> &[PlannedCounter] {
        &self.counters
    }

    /// The readings at start.
    pub fn start_readings(&self) -> &Readings {
        &self.start
    }

    fn read_now(&self) -> Readings {
        self.counters
            .iter()
            .map(|c| {
                let layout = c.layout.as_ref().map_err(Clone::clone)?;
                let mem = self.memory.as_ref().map_err(Clone::clone)?;
                mem.value(layout)
            })
            .collect()
    }

    /// Counter `index`'s value now (None where it cannot be read).
    pub fn read_one(&self, index: usize) -> Option<u64> {
        let layout = self.counters.get(index)?.layout.as_ref().ok()?;
        self.memory.as_ref().ok()?.value(layout).ok()
    }

    /// Takes the end readings, once: later calls keep the first.
    pub fn finish(&mut self) {
        if self.end.is_none() {
            self.end = Some((self.read_now(), Instant::now()));
        }
    }

    /// The end readings once taken, else the values now.
    pub fn current(&self) -> Readings {
        match &self.end {
            Some((r, _)) => r.clone(),
            None => self.read_now(),
        }
    }

    /// Counts over the recording (takes the end readings if not yet taken).
    pub fn results(&mut self) -> Vec<CounterResult> {
        self.finish();
        let (end, ended) = self.end.as_ref().expect("finished above");
        let window_s = ended.duration_since(self.started).as_secs_f64();
        self.counters
            .iter()
            .zip(&self.start)
            .zip(end)
            .map(|((c, start), end)| CounterResult::new(c, start, end, window_s))
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CounterStatus {
    /// Read at start and end: `count` is exact.
    Read,
    /// Not in this build, or its layout unknown (no DWARF): see `reason`.
    Unavailable,
    /// Resolved, but a read failed or went backwards: see `reason`.
    ReadFailed,
}

/// One counter in `summary.json`'s `counters` list.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CounterResult {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub status: CounterStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where it was read: global, offsets, pointer reads, size and type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The server's counter at start and at end.
    pub start: Option<u64>,
    pub end: Option<u64>,
    /// `end − start`: events during the recording, exact.
    pub count: Option<u64>,
    pub per_sec: Option<f64>,
    /// Seconds between the start and end readings.
    pub window_s: f64,
}

impl CounterResult {
    fn new(
        c: &PlannedCounter,
        start: &Result<u64, String>,
        end: &Result<u64, String>,
        window_s: f64,
    ) -> Self {
        let mut r = Self {
            name: c.spec.name.clone(),
            description: c.spec.description.clone(),
            status: CounterStatus::Read,
            reason: None,
            location: c.layout.is_ok().then(|| c.describe()),
            start: start.as_ref().ok().copied(),
            end: end.as_ref().ok().copied(),
            count: None,
            per_sec: None,
            window_s,
        };
        match (&c.layout, start, end) {
            (Err(why), _, _) => {
                r.status = CounterStatus::Unavailable;
                r.reason = Some(why.clone());
            }
            (Ok(_), Err(why), _) => {
                r.status = CounterStatus::ReadFailed;
                r.reason = Some(format!("at start: {why}"));
            }
            (Ok(_), _, Err(why)) => {
                r.status = CounterStatus::ReadFailed;
                r.reason = Some(format!("at end: {why}"));
            }
            (Ok(_), Ok(s), Ok(e)) if e < s => {
                r.status = CounterStatus::ReadFailed;
                r.reason = Some(format!(
                    "went backwards ({s} to {e}): the server restarted or the counter was reset"
                ));
            }
            (Ok(_), Ok(s), Ok(e)) => {
                r.count = Some(e - s);
                r.per_sec = Some(if window_s > 0.0 {
                    (e - s) as f64 / window_s
                } else {
                    0.0
                });
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::catalog::CounterMeasure;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Shaped like InnoDB's: a struct holding a sharded counter (as
    /// `srv_stats.n_rows_read`'s slots), a plain counter and an atomic one,
    /// reached through a global pointer (MySQL 5.6's `dict_sys`) and as a
    /// global object (MariaDB 11.4's `log_sys`); and signed slots, which
    /// are no counter.
    #[repr(C)]
    pub struct FakeSys {
        shards: [u64; 9],
        row_id: u64,
        lsn: AtomicU64,
        signed_shards: [i32; 2],
    }

    #[no_mangle]
    #[used]
    pub static mut innoprof_test_sys: FakeSys = FakeSys {
        shards: [0, 1, 0, 0, 0, 0, 0, 0, 2],
        row_id: 7,
        lsn: AtomicU64::new(1000),
        signed_shards: [0; 2],
    };

    #[no_mangle]
    #[used]
    pub static innoprof_test_sys_ptr: &FakeSys = unsafe { &*std::ptr::addr_of!(innoprof_test_sys) };

    fn spec(global: &str, path: &str) -> CounterSpec {
        CounterSpec {
            name: format!("test.{path}"),
            description: String::new(),
            measure: CounterMeasure::Counter,
            counter: CounterPath {
                global: global.into(),
                path: path.into(),
            },
        }
    }

    /// Layouts are kept per DWARF file: a second plan reads them from the
    /// kept file (marked here, so a fresh resolution would show), resolves
    /// only what the file lacks, and adds it.
    #[test]
    fn counter_layouts_are_kept_for_the_same_file() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("run");
        let image = ElfImage::open(&std::env::current_exe().unwrap()).unwrap();
        let first = plan_counters_in(&image, vec![spec("innoprof_test_sys", "lsn")], &dir);
        let lsn = first[0].layout.clone().unwrap();
        let kept: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(kept.len(), 1);
        let kept = kept[0].as_ref().unwrap().path();
        let text = std::fs::read_to_string(&kept).unwrap();
        assert!(text.contains("innoprof_test_sys"), "{text}");
        let marked = text.replace(
            &format!("\"type_name\":\"{}\"", lsn.type_name),
            "\"type_name\":\"kept\"",
        );
        assert_ne!(marked, text);
        std::fs::write(&kept, marked).unwrap();
        let second = plan_counters_in(
            &image,
            vec![
                spec("innoprof_test_sys", "lsn"),
                spec("innoprof_test_sys_ptr", "row_id"),
            ],
            &dir,
        );
        assert_eq!(second[0].layout.as_ref().unwrap().type_name, "kept");
        let row = second[1].layout.as_ref().unwrap();
        assert_eq!(row.steps, [Step::Deref, Step::Offset(72)]);
        let text = std::fs::read_to_string(&kept).unwrap();
        assert!(text.contains("innoprof_test_sys_ptr"), "added: {text}");
    }

    /// Resolves fields of this test binary's own statics from its DWARF,
    /// then reads them from its own memory through /proc/self/mem, as the
    /// recorder reads a server's: through a pointer, through an atomic's
    /// wrappers, with the PIE load bias.
    #[test]
    fn resolves_and_reads_counters_in_this_process() {
        let image = ElfImage::open(&std::env::current_exe().unwrap()).unwrap();
        assert!(image.has_debug_info, "tests are built with debug info");
        let planned = plan_counters(
            &image,
            vec![
                spec("innoprof_test_sys_ptr", "row_id"),
                spec("innoprof_test_sys", "lsn"),
                spec("innoprof_test_sys", "no_such_member"),
                spec("innoprof_test_no_such_global", "row_id"),
                spec("innoprof_test_sys", "signed_shards"),
                spec("innoprof_test_sys", "shards"),
            ],
        );
        let row = planned[0].layout.as_ref().unwrap();
        assert_eq!(row.steps, [Step::Deref, Step::Offset(72)]);
        assert_eq!((row.size, row.signed), (8, false));
        let lsn = planned[1].layout.as_ref().unwrap();
        assert_eq!(
            lsn.steps,
            [Step::Offset(80)],
            "the atomic's wrappers add nothing"
        );
        assert_eq!(lsn.size, 8);
        assert!(
            planned[2]
                .layout
                .as_ref()
                .unwrap_err()
                .contains("no member `no_such_member`"),
            "{:?}",
            planned[2].layout
        );
        assert!(
            planned[3]
                .layout
                .as_ref()
                .unwrap_err()
                .contains("no variable"),
            "{:?}",
            planned[3].layout
        );
        assert!(
            planned[4]
                .layout
                .as_ref()
                .unwrap_err()
                .contains("not an integer"),
            "{:?}",
            planned[4].layout
        );

        let shards = planned[5].layout.as_ref().unwrap();
        assert_eq!(
            (&shards.steps[..], shards.size, shards.elements),
            (&[Step::Offset(0)][..], 8, 9)
        );

        let mut rec = CounterRecorder::start(std::process::id(), &image, &planned);
        assert_eq!(rec.start_readings()[0], Ok(7));
        assert_eq!(rec.start_readings()[5], Ok(3), "the slots summed");
        // SAFETY: only this test touches these statics.
        unsafe {
            (*std::ptr::addr_of_mut!(innoprof_test_sys)).row_id += 5;
            (*std::ptr::addr_of_mut!(innoprof_test_sys)).shards[0] += 10;
            (*std::ptr::addr_of_mut!(innoprof_test_sys)).shards[8] += 4;
            (*std::ptr::addr_of!(innoprof_test_sys))
                .lsn
                .fetch_add(4096, Ordering::SeqCst);
        }
        let results = rec.results();
        assert_eq!(results[0].status, CounterStatus::Read);
        assert_eq!((results[0].start, results[0].count), (Some(7), Some(5)));
        assert_eq!(
            (results[1].start, results[1].count),
            (Some(1000), Some(4096))
        );
        assert_eq!(results[2].status, CounterStatus::Unavailable);
        assert!(results[2].count.is_none() && results[2].reason.is_some());
        assert_eq!((results[5].start, results[5].count), (Some(3), Some(14)));
        // The end readings are taken once.
        unsafe { (*std::ptr::addr_of_mut!(innoprof_test_sys)).row_id += 1 };
        assert_eq!(rec.current()[0], Ok(12));
        assert_eq!(rec.results()[0].count, Some(5));
    }

    #[test]
    fn a_counter_that_goes_backwards_is_a_failed_read() {
        let c = PlannedCounter {
            spec: spec("g", "x"),
            layout: Ok(CounterLayout {
                global_address: 0,
                steps: vec![],
                size: 8,
                signed: false,
                type_name: "u64".into(),
                elements: 1,
            }),
        };
        let r = CounterResult::new(&c, &Ok(10), &Ok(3), 1.0);
        assert_eq!(r.status, CounterStatus::ReadFailed);
        assert!(r.count.is_none() && r.reason.unwrap().contains("backwards"));
        let r = CounterResult::new(&c, &Ok(10), &Ok(13), 2.0);
        assert_eq!((r.count, r.per_sec), (Some(3), Some(1.5)));
        let r = CounterResult::new(&c, &Err("gone".into()), &Ok(13), 2.0);
        assert_eq!(r.status, CounterStatus::ReadFailed);
        assert_eq!(r.reason.as_deref(), Some("at start: gone"));
    }
}
