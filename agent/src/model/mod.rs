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

/// The sum of counts read from a bundle (any of them may be `u64::MAX`),
/// stopping at `u64::MAX` rather than overflowing.
pub fn saturating_sum(counts: impl IntoIterator<Item = u64>) -> u64 {
    counts.into_iter().fold(0, u64::saturating_add)
}
