//! `lease.keepalive` and `lease.revoke` (SPEC §13).

use std::sync::Arc;

use serde_json::{Value, json};

use super::request::LeaseParams;
use super::{App, InProcess};
use crate::server::auth::Caller;
use crate::{Error, Result};

/// The lease methods of a table.
pub(super) trait Leases {
    /// `lease.keepalive`: the lease lives another TTL.
    async fn keep_alive(&self, app: &Arc<App>, caller: &Caller, p: LeaseParams) -> Result<Value>;

    /// `lease.revoke` (the session token only): the lease's actors and
    /// holds go at once.
    async fn revoke(&self, app: &Arc<App>, caller: &Caller, p: LeaseParams) -> Result<Value>;
}

fn kept(app: &App, p: LeaseParams) -> Value {
    json!({"lease": p.lease, "ttl_ms": app.ttl.as_millis() as u64})
}

impl Leases for InProcess {
    async fn keep_alive(&self, app: &Arc<App>, caller: &Caller, p: LeaseParams) -> Result<Value> {
        let lease = app.lease_of(caller, &p.lease)?;
        if !app.registry().renew(lease, app.ttl) {
            return Err(Error::UnknownLease { lease: p.lease });
        }
        Ok(kept(app, p))
    }

    async fn revoke(&self, app: &Arc<App>, caller: &Caller, p: LeaseParams) -> Result<Value> {
        app.session_only(caller, "revoking a lease")?;
        let lease = app.lease_of(caller, &p.lease)?;
        let (actors, holds) = app.drop_lease(lease).ok_or_else(|| Error::UnknownLease {
            lease: p.lease.clone(),
        })?;
        tracing::info!(lease = %p.lease, actors, holds, "lease revoked");
        Ok(json!({"lease": p.lease, "actors": actors, "holds": holds}))
    }
}

#[cfg(feature = "etcd")]
mod on_etcd {
    use super::*;
    use crate::ActorId;
    use crate::server::rpc::EtcdBackend;

    impl Leases for EtcdBackend {
        async fn keep_alive(
            &self,
            app: &Arc<App>,
            caller: &Caller,
            p: LeaseParams,
        ) -> Result<Value> {
            let lease = app.etcd_lease(&p.lease)?;
            if let Caller::Actor(n) = caller {
                let mine = self.table.actor(ActorId(*n)).await?;
                if mine.lease() != lease {
                    return Err(Error::Forbidden {
                        reason: format!("this token's actor does not belong to lease {}", p.lease),
                    });
                }
            }
            self.table.keep_alive(lease).await?;
            Ok(kept(app, p))
        }

        async fn revoke(&self, app: &Arc<App>, caller: &Caller, p: LeaseParams) -> Result<Value> {
            app.session_only(caller, "revoking a lease")?;
            let lease = app.etcd_lease(&p.lease)?;
            let (actors, holds) = self.table.lease_contents(lease).await?;
            self.table.revoke(lease).await?;
            Ok(json!({"lease": p.lease, "actors": actors, "holds": holds}))
        }
    }
}
