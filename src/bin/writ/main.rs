//! The `writ` command: the demo and the history tools.

#[allow(dead_code)]
mod demo_files;

fn main() {}
