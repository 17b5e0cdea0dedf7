//! Plan validation: unordered tasks must not write overlapping paths.
