//! Transactional file operations through the scheduler.
