//! Benchmarks of `writ serve` (filled in below).

fn main() {}
