//! The conformance suite, one test binary: golden fixtures from torch.masked and numpy,
//! and cross-layout properties (every sparse layout against the dense oracle). One
//! binary, so the op table is compiled once per layout and dtype rather than once per
//! test file.

mod api;
mod cast;
mod concurrency;
mod elementwise;
mod example_mle;
mod examples_algebra;
mod fused;
mod golden_binary;
mod golden_coo;
mod golden_csr;
mod golden_dense;
mod golden_grad;
mod golden_unary;
mod no_panic;
mod props_binary;
mod props_coo;
mod props_csr;
mod props_dense;
mod serde;
mod vjp;
