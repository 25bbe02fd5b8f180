//! A recording from start to finish: check, plan, attach, wait and govern
//! (the caller decides how long), collect, detach. [`crate::record::results`]
//! builds the results; [`crate::bundle`] writes them.

pub mod cpu_profile;
mod govern;
mod looks;
pub mod options;
pub mod ready;
pub mod recorder;
pub mod recording;
pub mod recording_plan;
pub mod results;
pub mod segments;
pub mod stack_window;
pub mod statements;

pub use options::{RecordError, RecordOptions, StackCapture};
pub use recorder::Recorder;
pub use recording_plan::RecordingPlan;
pub use stack_window::StackWindow;
