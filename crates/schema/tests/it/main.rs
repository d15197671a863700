//! The schema crate's one integration binary.

mod differential;
mod support;
mod table;
mod bombs;
