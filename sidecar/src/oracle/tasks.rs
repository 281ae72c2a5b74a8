//! The oracle's elector (its background task that holds, follows and takes the oracle
//! Lease) and its stop.

use futures::StreamExt;

use super::pod_lock::TermRecord;
use super::*;

impl Oracle {
    /// The elector: renews while this sidecar holds the Lease, else follows it through a
    /// watch and takes it over when free or unchanged for `D·(1+ρ)`. While the watch does
    /// not know the Lease (starting, broken, listing again), it reads the Lease instead,
    /// every `D/12`.
    pub(super) async fn elect(self: Arc<Self>) {
        let mut stop = self.stop_tx.subscribe();
        let mut changes = self.leases.changes();
        let mut watch_open = true;
        let mut follow = Follow::default();
        let mut next = tokio::time::Instant::now();
        loop {
            if self.lock().requests.is_stopped() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {
                    let pause = self.elect_once(&mut follow).await;
                    next = tokio::time::Instant::now() + pause;
                }
                change = changes.next(), if watch_open => {
                    if change.is_none() {
                        tracing::warn!("strict: the oracle lease's watch ended; reading the lease instead");
                        watch_open = false;
                    }
                    follow.watched = change.flatten();
                    let watched = follow.watched.is_some();
                    self.metrics.strict_lease_watched.set(i64::from(watched));
                    // Acted on at once, unless this sidecar holds the Lease: its renewals
                    // keep their own pace.
                    if !self.is_oracle() {
                        next = tokio::time::Instant::now();
                    }
                }
                // (The guard `wait_for` returns is not `Send`: dropped inside.)
                _ = async { stop.wait_for(|s| *s).await.is_ok() } => return,
            }
        }
    }

    /// One step of the elector; returns how long to wait before the next.
    async fn elect_once(&self, follow: &mut Follow) -> Duration {
        let held = match &self.lock().role {
            Role::Oracle { lease, .. } => Some(lease.clone()),
            _ => None,
        };
        if let Some(lease) = held {
            return self.renew(lease).await;
        }
        let lease = match follow.watched.clone() {
            Some(lease) => lease,
            None => match self.read_lease().await {
                Ok(lease) => lease,
                Err(e) => {
                    tracing::warn!(error = %e, "strict: reading the oracle lease failed");
                    if !matches!(self.lock().role, Role::Follower { .. }) {
                        self.set_role(Role::Unknown { why: e.to_string() });
                    }
                    return Duration::from_millis(500);
                }
            },
        };
        let timing = lease.timing;
        let waited = follow.unchanged_for(&lease);
        let lapsed = waited >= timing.take_over_after();
        // Until the next read, or the moment the Lease would have lapsed if nothing changes.
        let pause = timing
            .poll_every()
            .min(timing.take_over_after().saturating_sub(waited));
        let Some(holder) = lease.holder.clone() else {
            // Released by an oracle that stopped serving first (a term was held): take it
            // at once. Never held (term 0): a new sequence, or a Lease deleted and
            // re-created while an oracle may still serve from the old one: wait as for a
            // silent holder.
            if lease.term > 0 || lapsed || self.config.take_over_without_waiting {
                follow.forget();
                self.try_take(lease).await;
                return timing.poll_every();
            }
            self.set_role(Role::Unknown {
                why: format!(
                    "a new oracle lease: the first term begins {:?} after it was first seen",
                    timing.take_over_after()
                ),
            });
            return pause;
        };
        let ours = holder == self.config.uid;
        // This pod's earlier process took the current term and has ended (its lock is now
        // ours): nothing serves from the term, there is nothing to wait for (pod_lock.rs).
        let ended_here = ours
            && self
                .pod_lock
                .as_ref()
                .is_some_and(|l| l.earlier_process_held(&lease, &self.config.uid));
        let take_now = if ended_here {
            Some(
                "the oracle lease names this pod, taken by the earlier process of this sidecar, \
                 which has ended (its pod lock is free): taking it back at once",
            )
        } else if lapsed || (self.config.take_over_without_waiting && !ours) {
            Some("the oracle lease was not renewed: taking it over")
        } else {
            None
        };
        if let Some(why) = take_now {
            tracing::info!(holder, term = lease.term, ?waited, "strict: {why}");
            follow.forget();
            self.try_take(lease).await;
            return timing.poll_every();
        }
        match (&lease.address, ours) {
            (Some(address), false) => self.set_role(Role::Follower {
                address: address.clone(),
                term: lease.term,
                holder: holder.clone(),
            }),
            (_, true) => self.set_role(Role::Unknown {
                why: "the oracle lease names this pod from an earlier start of this sidecar; \
                      waiting until it lapses"
                    .into(),
            }),
            (None, false) => self.set_role(Role::Unknown {
                why: format!("the oracle lease names pod {holder} but no address"),
            }),
        }
        pause
    }

    /// A quorum read of the Lease, counted.
    async fn read_lease(&self) -> Result<OracleLease, OracleStoreError> {
        self.metrics.strict_lease_reads.inc();
        self.leases.read().await
    }

    fn set_role(&self, role: Role) {
        let mut s = self.lock();
        if !s.requests.is_stopped() {
            s.role = role;
            s.started |= !matches!(s.role, Role::Unknown { .. });
            self.metrics
                .strict_oracle
                .set(i64::from(matches!(s.role, Role::Oracle { .. })));
        }
    }

    /// Takes the Lease (a compare-and-swap on the version read) and begins a term.
    async fn try_take(&self, lease: OracleLease) {
        let Some(address) = self.address.clone() else {
            self.set_role(Role::Unknown {
                why: "no oracle serves, and this sidecar cannot (no forwarding listener)".into(),
            });
            return;
        };
        if self.lock().requests.is_stopped() {
            return;
        }
        let sent = Instant::now();
        match self
            .leases
            .replace(lease.take(&self.config.uid, &address, Utc::now()))
            .await
        {
            Ok(taken) => self.begin_term(taken, sent).await,
            Err(OracleStoreError::Conflict) => {
                tracing::debug!("strict: another sidecar took the oracle lease first");
            }
            Err(e) => tracing::warn!(error = %e, "strict: taking the oracle lease failed"),
        }
    }

    /// This sidecar holds the Lease since a write sent at `sent`: reserve the first window
    /// (from the counter's `next`, above everything an earlier oracle served), then serve.
    async fn begin_term(&self, taken: OracleLease, sent: Instant) {
        let why_not = match self.counter.read().await {
            Ok(c) if c.format == COUNTER_FORMAT_ORACLE => None,
            Ok(c) => Some(format!(
                "the segment counter is in format {} and an oracle serves only a counter in \
                 format {COUNTER_FORMAT_ORACLE} (the operator writes it for a strict sequence: \
                 is the operator of this release running?)",
                c.format
            )),
            Err(e) => Some(format!("reading the segment counter: {e}")),
        };
        let first = match why_not {
            Some(why) => Err(SegmentRefusal::NoBlock(why)),
            None => {
                let floor = self.lock().top;
                self.reserve(WINDOW, floor, 0).await
            }
        };
        let block = match first {
            Ok(block) => block,
            Err(e) => {
                tracing::error!(error = %e, "strict: took the oracle lease but cannot serve: releasing it");
                self.set_role(Role::Unknown { why: e.to_string() });
                self.release(taken).await;
                return;
            }
        };
        let term = taken.term;
        if let Err(e) = self.record_term(&taken) {
            // Serving is as safe without it; only a restart of this sidecar waits longer.
            tracing::warn!(error = %e, "strict: cannot record the term in the pod lock file; a restart of this sidecar will wait for the lease to lapse");
        }
        {
            let mut s = self.lock();
            s.top = s.top.max(block.end);
            if !s.requests.is_stopped() {
                s.role = Role::Oracle {
                    term: Term::new(term, sent, taken.timing.serve_for(), block),
                    lease: taken,
                };
                s.started = true;
                self.metrics.strict_oracle.set(1);
                self.metrics.strict_terms.inc();
                drop(s);
                tracing::info!(
                    term,
                    window_start = block.start,
                    window_end = block.end,
                    "strict: this sidecar is the oracle"
                );
                return;
            }
        }
        self.release(taken).await;
    }

    /// Writes the term just taken in the pod lock file, before serving from it: a restart
    /// of this sidecar in this pod then knows whose term it is (pod_lock.rs).
    fn record_term(&self, taken: &OracleLease) -> std::io::Result<()> {
        let (Some(lock), Some(record)) = (&self.pod_lock, TermRecord::of(taken)) else {
            return Ok(());
        };
        // A few bytes into the page cache, once per term: no fsync, since the record must
        // outlive this process, not the node, and a record lost to a crash of the node
        // names an older term, which makes a restart wait (never the reverse).
        lock.record(&record)
    }

    /// Renews the Lease this sidecar holds; steps down when it was taken over.
    async fn renew(&self, lease: OracleLease) -> Duration {
        let timing = lease.timing;
        let sent = Instant::now();
        let next = match lease.renew(&self.config.uid, Utc::now()) {
            Ok(next) => next,
            Err(e) => {
                self.step_down(e.to_string());
                return timing.poll_every();
            }
        };
        match self.leases.replace(next).await {
            Ok(renewed) => {
                let mut s = self.lock();
                if let Role::Oracle { term, lease } = &mut s.role {
                    term.renewed(sent);
                    *lease = renewed;
                }
                timing.renew_every()
            }
            Err(OracleStoreError::Conflict) => {
                match self.read_lease().await {
                    // Changed by the operator (its claimants list): still ours, renew it.
                    Ok(read) if read.holder.as_deref() == Some(self.config.uid.as_str()) => {
                        let mut s = self.lock();
                        if let Role::Oracle { lease, .. } = &mut s.role {
                            *lease = read;
                        }
                        Duration::from_millis(10)
                    }
                    Ok(read) => {
                        self.step_down(format!(
                            "the oracle lease was taken over by pod {}",
                            read.holder.as_deref().unwrap_or("none")
                        ));
                        timing.poll_every()
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "strict: re-reading the oracle lease failed");
                        timing.renew_every() / 2
                    }
                }
            }
            Err(e) => {
                // Serving stops by itself when no renewal succeeds for serve_for.
                tracing::warn!(error = %e, "strict: renewing the oracle lease failed");
                timing.renew_every() / 2
            }
        }
    }

    /// Stops serving at once: the term and its window are dropped (a gap).
    fn step_down(&self, why: String) {
        tracing::warn!(%why, "strict: this sidecar is no longer the oracle");
        self.set_role(Role::Unknown { why });
    }

    /// Frees the Lease this sidecar held and no longer serves from, so that another
    /// takes over without waiting. Best effort: if it fails, others wait `D·(1+ρ)`.
    async fn release(&self, lease: OracleLease) {
        let mut lease = lease;
        for _ in 0..2 {
            let Ok(freed) = lease.release(&self.config.uid) else {
                return;
            };
            match self.leases.replace(freed).await {
                Ok(_) => {
                    tracing::info!("strict: released the oracle lease");
                    return;
                }
                Err(OracleStoreError::Conflict) => match self.read_lease().await {
                    Ok(read) => lease = read,
                    Err(e) => {
                        tracing::warn!(error = %e, "strict: releasing the oracle lease failed");
                        return;
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "strict: releasing the oracle lease failed");
                    return;
                }
            }
        }
    }

    /// Stops serving for good, answers the queued requests, closes the listener, and frees
    /// the Lease if this sidecar held it (it served its last value before that).
    pub(crate) async fn stop(&self) {
        let (waiting, held) = {
            let mut s = self.lock();
            let waiting = s.requests.stop();
            let role = std::mem::replace(
                &mut s.role,
                Role::Unknown {
                    why: "stopping".into(),
                },
            );
            let held = match role {
                Role::Oracle { lease, .. } => Some(lease),
                _ => None,
            };
            self.metrics.strict_oracle.set(0);
            (waiting, held)
        };
        group::refuse(waiting, &SegmentRefusal::Stopping);
        let _ = self.stop_tx.send(true);
        self.wake.notify_one();
        if let Some(lease) = held {
            self.release(lease).await;
        }
    }
}
