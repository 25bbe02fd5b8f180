//! The rules, one per file. A rule reads a recording and returns at most
//! one finding; thresholds are constants at the top of its file, each with
//! the measurement it came from.

mod latch_hotspot;
mod many_row_versions;
mod performance_schema;
mod purge_held_back;
mod redo_flush_latency;
mod tables_without_primary_key;

use crate::model::finding::Finding;
use crate::model::summary::Summary;

pub(super) type Rule = fn(&Summary) -> Option<Finding>;

/// Every rule, evaluated in this order (ranking sorts the results).
pub(super) const ALL: &[Rule] = &[
    many_row_versions::check,
    purge_held_back::check,
    tables_without_primary_key::check,
    latch_hotspot::check,
    redo_flush_latency::check,
    performance_schema::check,
];
