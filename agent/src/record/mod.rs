//! A recording from start to finish: check, plan, attach, wait and govern
//! (the caller decides how long), collect, detach. [`crate::record::results`]
//! builds the results; [`crate::bundle`] writes them.

pub mod cpu_profile;
pub mod options;
pub mod ready;
pub mod recorder;
pub mod recording;
pub mod recording_plan;
pub mod results;
pub mod segments;

pub use options::{RecordError, RecordOptions, StackCapture};
pub use recorder::{Recorder, StackWindow};
pub use recording_plan::RecordingPlan;
