//! Trace recording: one traced run ([`session`]) collects CUPTI's activity records ([`cupti`])
//! and the NVTX ranges opened meanwhile ([`ranges`]), with kernel names spelled as nsys spells
//! them ([`demangle`]), into the records `analyze::formats::nsys_sqlite::write` writes as an
//! nsys-schema SQLite file.
//!
//! Writing the file is the caller's ([`crate::bench`]); the schema and the `shortName` rule are
//! `analyze`'s, defined once there.

pub mod cupti;
pub mod demangle;
pub mod ranges;
pub mod session;
