//! The DWARF units of a binary by source file, as data: the image keeps
//! one (built by [`super::lines`], which reads the DWARF through the image).

use std::collections::HashMap;

/// Units by the base name of the file they were compiled from. Building
/// it reads every unit's header (58 MiB of `.debug_info` in MariaDB
/// 10.2.11), so an image builds it once ([`super::lines::unit_index`]) and
/// keeps it: `serve` names new latch sites window after window, and after
/// a restart of the same binary its plan, image and index are reused.
///
/// The index depends only on the DWARF file and innoprof's code, and a
/// recording that names latch sites spent ~25 ms building it (the headers'
/// page faults besides), so it is also kept across boots in
/// the kept directory ([`crate::persist`], `units-MAJOR-MINOR-INODE.json`)
/// and reused for the very same DWARF file by the same innoprof binary.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct UnitIndex {
    pub(super) units: HashMap<String, Vec<gimli::DebugInfoOffset>>,
}
