//! Path policy: read-write roots, read-only roots, sensitive names.
