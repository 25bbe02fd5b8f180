//! What probes cost and how much of it to spend: the calibrated hit cost
//! (kept per boot), the cost measured in the target, past hits priced,
//! the in-target fit, the estimates of what the governor did not watch,
//! and the governor itself.

pub mod bench_toggle;
pub mod calibrate;
pub mod estimate;
pub mod governor;
pub mod hit_cost;
pub mod in_target;
pub mod kept_hit_cost;
pub mod live;
pub mod price;
