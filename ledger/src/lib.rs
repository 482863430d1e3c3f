//! The gpuslice ledger: one shared-memory file per tenant, holding the
//! tenant's policy, its usage and one slot per process.
//!
//! Used by the shim (in every tenant process) and by the monitor.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod units;
