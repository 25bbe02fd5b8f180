//! The recording as data: what summary.json holds, the named stacks
//! beside it and the top symbols of a profile.

pub mod files;
pub mod finding;
pub mod named_stack;
pub mod raw_stacks;
pub mod server_state;
pub mod summary;
pub mod timeseries;
pub mod top_symbols;
pub mod who;

/// Defined with the estimates, the lowest stage that sums a bundle's counts.
pub use crate::cost::estimate::saturating_sum;
