//! The recording as data: what summary.json holds, the named stacks
//! beside it and the top symbols of a profile.

pub mod named_stack;
pub mod summary;
pub mod top_symbols;
