//! plumb-verify: the machinery that holds every backend and family to the float64 truth.
//! - `conformance`: one generic case per op and weight format, backend under test vs
//!   `RefBackend<f64>`, fresh random inputs (seed printed), poisoned outputs, bounds from `bounds`.
//! - `gate`: the whole-model gate — float64 greedy controls, the float32 floor, the backend's
//!   NRMS against a floor-relative bound, greedy agreement and batch invariance.
//! - `residency`: no file reads and no major page faults while serving.
//!
//! It never verifies a backend against itself.
#![forbid(unsafe_code)]

pub mod bounds;
pub mod conformance;
pub mod gate;
pub mod inputs;
pub mod outside;
pub mod residency;

/// ‖x − r‖ / ‖r‖ (0 when both are zero).
pub fn nrms(x: &[f64], r: &[f64]) -> f64 {
    let num: f64 = x.iter().zip(r).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f64 = r.iter().map(|b| b * b).sum();
    if den == 0.0 { num.sqrt() } else { (num / den).sqrt() }
}

/// `x ≤ limit`, false when either is NaN: every bound check goes through this, so NaN fails.
pub fn within(x: f64, limit: f64) -> bool {
    x <= limit
}
