//! End-to-end and benchmark harnesses for highwater. Not written yet.
#![forbid(unsafe_code)]
