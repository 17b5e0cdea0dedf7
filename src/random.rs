//! Secrets and names from the operating system's random source: session
//! and actor tokens, agent handles, staging names. One reader, so every
//! secret is drawn and reported the same way.

use std::io::Read as _;

use crate::error::{Error, Result};

/// `n` random bytes from the OS.
pub(crate) fn bytes(n: usize) -> Result<Vec<u8>> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Error::io("read", "/dev/urandom", e))?;
    Ok(bytes)
}

/// `n` random bytes from the OS, as hex.
pub(crate) fn hex(n: usize) -> Result<String> {
    Ok(bytes(n)?.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn draws_are_sized_and_differ() {
        let (a, b) = (super::hex(16).unwrap(), super::hex(16).unwrap());
        assert_eq!((a.len(), b.len()), (32, 32));
        assert_ne!(a, b);
    }
}
