//! What to probe and where: the server and its catalog, the probe set a
//! request resolves to (symbols, latches, call sites, in-memory counters),
//! the kept plan of an earlier recording, the links it needs, and the
//! thread roles' code ranges, and where a connection's THD is.

pub mod catalog;
pub mod counter;
pub mod inspect;
pub mod kept_plan;
pub mod latch;
pub mod links;
pub mod memcounters;
pub mod probeset;
pub mod server;
pub mod thd;
pub mod thread_role;
