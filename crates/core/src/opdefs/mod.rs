//! The op definitions, by family: the `Fold` contract and the monoid folds (`ops`), the
//! statistics folds (`stats`), lane statistics and maps (`lane`) and their column forms
//! (`columns`) and sparse forms (`scattered`), elementwise unary and binary ops (`unary`, `binary`), casts (`cast`) and
//! the gradient of each (`grad`).
//! Each op is a value; the layouts run them, the registry names them.

pub mod binary;
pub mod cast;
pub mod columns;
pub mod fold;
pub mod grad;
pub mod lane;
pub mod ops;
pub mod scattered;
pub mod stats;
pub mod unary;
