//! The tool protocol's frames (version 1): decode and encode, with no I/O.
mod value;
pub use value::{Map, Value};
