//! The `writ` command: the demo and the history tools.

fn main() {}
