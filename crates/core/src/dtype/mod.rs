//! The dtype table: the element types (`Element`: storage, accumulation and compute
//! types, the `dtypes!` table with its run-time `DType` and `ByDType` erasure), their
//! scalar functions (`Math`), and their wire form (`Num`: NaN and infinities through
//! serde).

pub mod element;
pub mod math;
pub mod wire;
