//! `dump` (SPEC §5): the table as one `Dump`, as JSON or as a text table.

use std::sync::Arc;

use serde_json::{Value, json};

use super::request::DumpFormat;
use super::{App, InProcess};
use crate::{Error, ProtocolError, Result};

/// The dump of a table.
pub(super) trait Dumps {
    async fn dump(&self, app: &Arc<App>, format: DumpFormat) -> Result<Value>;
}

fn encoded(dump: &crate::Dump) -> Result<Value> {
    serde_json::to_value(dump).map_err(|e| Error::Protocol {
        kind: ProtocolError::Internal,
        detail: format!("the dump did not encode: {e}"),
    })
}

impl Dumps for InProcess {
    async fn dump(&self, app: &Arc<App>, format: DumpFormat) -> Result<Value> {
        let dump = app.sched.dump();
        match format {
            DumpFormat::Json => encoded(&dump),
            DumpFormat::Table => Ok(json!({"table": dump.to_string()})),
        }
    }
}

#[cfg(feature = "etcd")]
mod on_etcd {
    use super::*;
    use crate::etcd::TableDump;
    use crate::server::rpc::EtcdBackend;

    impl Dumps for EtcdBackend {
        async fn dump(&self, app: &Arc<App>, format: DumpFormat) -> Result<Value> {
            let dump = self.table.dump().await?;
            match format {
                DumpFormat::Json => dump_json(app, &dump),
                DumpFormat::Table => Ok(json!({
                    "table": format!("{}\netcd revision {}", dump.table, dump.revision)
                })),
            }
        }
    }

    /// SPEC §5's dump as the in-process table gives it, plus what only a
    /// session in etcd has: the revision it was read at, each actor's
    /// lease and each waiter's queue revision (holds carry their fencing
    /// token as `revision`).
    fn dump_json(app: &App, dump: &TableDump) -> Result<Value> {
        let mut value = encoded(&dump.table)?;
        value["backend"] = json!("etcd");
        value["revision"] = json!(dump.revision);
        if let Some(actors) = value["actors"].as_array_mut() {
            for (entry, lease) in actors.iter_mut().zip(&dump.leases) {
                entry["lease"] = json!(app.lease_handle(*lease));
            }
        }
        if let Some(waiters) = value["waiters"].as_array_mut() {
            for (entry, queued) in waiters.iter_mut().zip(&dump.queued) {
                entry["revision"] = json!(queued);
            }
        }
        Ok(value)
    }
}
