//! Delegated writers: opaque child processes run under a fence.
