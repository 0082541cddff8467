//! # layout-coo
//!
//! The n-D COO layout of the `masked` engine (coordinates + values, the mask a COO index
//! pattern). Its type and kernels arrive with the COO issue; until then this crate holds
//! no public items, so nothing here pretends to work. The dense layout
//! (`layout-dense`) and the CSR row reductions (`layout-csr`) are available.
#![deny(missing_docs)]
