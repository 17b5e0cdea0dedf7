//! The child's output: all of it to the log file, the end of it in memory.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The last `limit` bytes of the output, kept in memory.
#[derive(Debug)]
pub(crate) struct Tail {
    buf: Vec<u8>,
    limit: usize,
    /// Every byte seen, kept or not.
    pub(crate) total: u64,
}

impl Tail {
    pub(crate) fn new(limit: usize) -> Self {
        Tail {
            buf: Vec::new(),
            limit,
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.limit == 0 {
            return;
        }
        let bytes = &bytes[bytes.len().saturating_sub(self.limit)..];
        self.buf.extend_from_slice(bytes);
        // Trim in batches so a stream of small chunks stays linear.
        if self.buf.len() >= self.limit.saturating_mul(2) {
            let cut = self.buf.len() - self.limit;
            self.buf.drain(..cut);
        }
    }

    /// The kept bytes as text: at most `limit` bytes, starting on a UTF-8
    /// character boundary (never half a character); invalid sequences in the
    /// output itself become U+FFFD.
    pub(crate) fn text(&self) -> String {
        let start = self.buf.len().saturating_sub(self.limit);
        let mut bytes = &self.buf[start..];
        if start > 0 {
            // Skip continuation bytes of a character cut at the front.
            let skip = bytes
                .iter()
                .take(3)
                .take_while(|&&b| b & 0xC0 == 0x80)
                .count();
            bytes = &bytes[skip..];
        }
        let mut text = String::from_utf8_lossy(bytes).into_owned();
        // Replacement characters are wider than the bytes they replace; keep
        // the bound by dropping whole characters from the front.
        while text.len() > self.limit {
            let first = text.chars().next().map_or(1, char::len_utf8);
            text.drain(..first);
        }
        text
    }
}

/// Copies stdout and stderr, as they arrive, into `log` and `tail`, until
/// both reach end of file. Cancel-safe: dropping it loses nothing already
/// copied. A failing log stops the log (the error is kept), never the
/// reading, so the child is never blocked on a full pipe.
pub(crate) async fn pump<O, E>(
    mut out: O,
    mut err: E,
    log: &mut tokio::fs::File,
    tail: &mut Tail,
    log_error: &mut Option<std::io::Error>,
) where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let mut out_buf = vec![0u8; 16 * 1024];
    let mut err_buf = vec![0u8; 16 * 1024];
    let (mut out_open, mut err_open) = (true, true);
    while out_open || err_open {
        let chunk = tokio::select! {
            r = out.read(&mut out_buf), if out_open => match r {
                Ok(0) | Err(_) => { out_open = false; None }
                Ok(n) => Some(&out_buf[..n]),
            },
            r = err.read(&mut err_buf), if err_open => match r {
                Ok(0) | Err(_) => { err_open = false; None }
                Ok(n) => Some(&err_buf[..n]),
            },
        };
        if let Some(chunk) = chunk {
            tail.push(chunk);
            if log_error.is_none() {
                if let Err(e) = log.write_all(chunk).await {
                    *log_error = Some(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end_and_starts_on_a_character() {
        let mut tail = Tail::new(7);
        for _ in 0..100 {
            tail.push("é".as_bytes()); // two bytes each
        }
        tail.push(b"!");
        let text = tail.text();
        assert!(text.len() <= 7);
        assert_eq!(text, "ééé!");
        assert_eq!(tail.total, 201);
    }

    #[test]
    fn tail_of_a_large_chunk_and_a_zero_limit() {
        let mut tail = Tail::new(4);
        tail.push(b"0123456789");
        assert_eq!(tail.text(), "6789");
        let mut none = Tail::new(0);
        none.push(b"abc");
        assert_eq!(none.text(), "");
        assert_eq!(none.total, 3);
    }

    #[test]
    fn invalid_bytes_never_break_the_bound() {
        let mut tail = Tail::new(5);
        tail.push(&[0xff; 20]);
        let text = tail.text();
        assert!(text.len() <= 5, "{text:?}");
        assert!(text.chars().all(|c| c == '\u{fffd}'));
    }
}
