//! How a table talks to etcd: its limits and timeouts, chosen when it connects.

use std::time::Duration;

/// How a table talks to etcd.
#[derive(Debug, Clone)]
pub struct TableOptions {
    pub(super) max_txn_ops: usize,
    pub(super) deadlock_check: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) call_timeout: Duration,
    pub(super) waiter_ttl: Duration,
    pub(super) fold_case: bool,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            max_txn_ops: 128,
            deadlock_check: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(2),
            waiter_ttl: Duration::from_secs(3),
            fold_case: false,
        }
    }
}

impl TableOptions {
    /// The most operations etcd accepts in one transaction (etcd's
    /// `--max-txn-ops`, 128 unless the cluster says otherwise). A request
    /// that would need more is refused with [`Error::TxnTooLarge`](crate::Error::TxnTooLarge), never
    /// split.
    ///
    /// ```
    /// let options = writ::etcd::TableOptions::default().max_txn_ops(256);
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn max_txn_ops(mut self, ops: usize) -> Self {
        self.max_txn_ops = ops;
        self
    }

    /// How often a waiting request reads its ranges again even when no
    /// watch event arrived (the bound on a missed wake-up).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let options = writ::etcd::TableOptions::default().deadlock_check(Duration::from_millis(500));
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn deadlock_check(mut self, every: Duration) -> Self {
        self.deadlock_check = every;
        self
    }

    /// How long one call to etcd may take before it fails (default 2 s),
    /// and how long a connection's HTTP/2 ping (every 5 s while a watch or
    /// lease stream is open) may go unanswered before the connection is
    /// dropped. Without it one
    /// stopped member of a cluster whose quorum still answers stalls every
    /// call routed to it. A waiting request's watch is not a call: its
    /// wait is bounded by its own deadline.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let options = writ::etcd::TableOptions::default().call_timeout(Duration::from_secs(1));
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn call_timeout(mut self, limit: Duration) -> Self {
        self.call_timeout = limit;
        self
    }

    /// The TTL of the lease this table puts its waiting requests on
    /// (default 3 s): a request waits in the table that serves it, so when
    /// that process dies its queue places go within this time, and the
    /// client, asking again through another server, is not queued behind
    /// its own dead request. The table renews the lease while it lives.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let options = writ::etcd::TableOptions::default().waiter_ttl(Duration::from_secs(5));
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn waiter_ttl(mut self, ttl: Duration) -> Self {
        self.waiter_ttl = ttl;
        self
    }

    /// Whether keys compare case-folded (`CaseMode::Insensitive`, SPEC §2):
    /// a key's index entries are under its folded path, and its record
    /// keeps the caller's spelling for the dump. A session has one answer:
    /// its first table stores it, and a table with the other one does not
    /// connect (`forbidden`).
    ///
    /// ```
    /// let options = writ::etcd::TableOptions::default().fold_case(true);
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn fold_case(mut self, fold: bool) -> Self {
        self.fold_case = fold;
        self
    }
}
