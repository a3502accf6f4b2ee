//! GPU kernels by name: what a kernel is called across tools, which kind of work it does, and how
//! it reads in a table.
//!
//! - [`name`]: one demangled spelling for nsys's and Kineto's names (the GNU demangler), the
//!   short name (nsys's `shortName` rule, defined with the export format in
//!   [`crate::formats::nsys_sqlite`]) and variant families that fold tile sizes and precisions;
//! - [`class`]: kernel classes (GEMM, attention, softmax, elementwise, ...) by ordered rules over
//!   the demangled name, built in ([`class::BUILTIN_RULES`]) or from a user's file;
//! - [`label`]: a short readable label for tables, for display only.
//!
//! Nothing here sums times: the analyses do.

pub mod class;
pub mod label;
pub mod name;
