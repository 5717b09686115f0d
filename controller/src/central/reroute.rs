//! Pending jobs whose GPU type vanished in a re-layout get a new one through the same
//! routing as at submission — only jobs the plugin routed (its mark in the admin comment),
//! from what the user asked, never to less GPU memory than the type they had, and with the
//! time limit rescaled for the new slice.
//!
//! Only from Slurm 23.02.6: before, slurmctld merges an update's GPU request into the
//! job's old one (SchedMD bug 17184), so a job moved from a vanished type keeps asking for
//! it too and cannot start ("BadConstraints"; measured on 22.05). There re-layouts keep
//! the types routed jobs wait for ([`super::strand`]); a job stranded anyway is named once
//! and left as it is.

use std::collections::HashSet;

pub use smartmig_core::routing::RETYPE_SINCE;
use smartmig_core::routing::{
    with_min_gpumem, Job as RouteJob, Outcome as RouteOutcome, RoutedFrom, TresStrings,
};

use super::view::View;
use super::{unix_now, Central, CycleReport};
use crate::slurm::{parse_gres, JobUpdate, SlurmJob};

impl Central {
    /// Re-routes the pending jobs of `view` whose type no managed GPU has any more.
    pub(super) fn reroute(&mut self, view: &View, report: &mut CycleReport) {
        // Named once while pending; forgotten once they start or leave.
        if !self.stranded.is_empty() {
            let pending: HashSet<u32> = view.pending.iter().map(|j| j.id).collect();
            self.stranded.retain(|id| pending.contains(id));
        }
        self.reroute_pending(view, report);
        let mut stranded: Vec<u32> = self.stranded.iter().copied().collect();
        stranded.sort_unstable();
        self.status.stranded_jobs = stranded;
    }

    /// [`Central::reroute`]'s work: each pending job routed to a vanished type.
    fn reroute_pending(&mut self, view: &View, report: &mut CycleReport) {
        if self.router.is_none() {
            return;
        }
        let present: HashSet<String> = view.type_counts(&self.resolved).into_keys().collect();
        if present.is_empty() {
            return;
        }
        let snapshot = self.snapshot(view, unix_now());
        let mut updates = Vec::new();
        for j in &view.pending {
            let Some(gone_gb) = self.vanished_memory(j, &present) else {
                continue;
            };
            let Some(from) = j
                .admin_comment
                .as_deref()
                .and_then(|c| RoutedFrom::find_current(c, &j.tres))
            else {
                log::debug!(
                    "job {}: its GPU type vanished, but the user chose it (at submission or by \
                     an update since it was routed); left as asked",
                    j.id
                );
                continue;
            };
            if !self.retypes_pending {
                if self.stranded.insert(j.id) {
                    log::warn!(
                        "job {}: it asks for {}, a GPU type no managed GPU has now; this Slurm keeps a \
                         pending job's old GPU type beside a new one (fixed in 23.02.6), so it is not \
                         re-routed; it cannot start while no GPU has that type (resubmitted, it is \
                         routed anew)",
                        j.id,
                        j.tres.iter().flatten().cloned().collect::<Vec<_>>().join(" ")
                    );
                }
                continue;
            }
            let comment = with_min_gpumem(j.comment.as_deref(), gone_gb);
            let tres: Vec<Option<&str>> = from.tres.iter().map(Option::as_deref).collect();
            let job = RouteJob {
                tres: TresStrings([tres[0], tres[1], tres[2], tres[3]]),
                name: j.name.as_deref(),
                account: j.account.as_deref(),
                partition: j.partition.as_deref(),
                comment: Some(&comment),
                time_limit_min: from.time_limit_min,
                deadline: j.deadline,
                // Slurm refuses an update that puts the limit below it.
                time_min_min: j.time_min_min,
                now: unix_now() as i64,
                // `--begin` is not in the job reader's view: the deadline counts from now.
                ..RouteJob::default()
            };
            let router = self.router.as_ref().expect("checked above");
            match router.route(&job, Some(&snapshot)) {
                Ok(RouteOutcome::Routed(r)) => {
                    let time_limit_min = r.time_limit_min.or(from.time_limit_min);
                    // The mark follows the job to its new type, so a later re-route sees
                    // it current.
                    let to = Some(RoutedFrom::routed_to(&j.tres, &r.tres));
                    let mark = RoutedFrom { to, ..from }.mark(j.admin_comment.as_deref());
                    for (n, (field, value)) in r.tres.into_iter().enumerate() {
                        updates.push((
                            JobUpdate {
                                job: j.id,
                                tres: Some((field as usize, value)),
                                // Once per job.
                                time_limit_min: time_limit_min.filter(|_| n == 0),
                                admin_comment: Some(mark.clone()).filter(|_| n == 0),
                            },
                            r.gpu_type.clone(),
                        ));
                    }
                }
                Ok(RouteOutcome::Unchanged(why)) => log::debug!("job {}: not re-routed: {why}", j.id),
                Err(e) => log::warn!("job {}: cannot re-route: {e}", j.id),
            }
        }
        for (u, ty) in updates {
            match self.api.update_job(&u) {
                Ok(()) => {
                    log::info!("job {}: its GPU type vanished; re-routed to {ty}", u.job);
                    report.rerouted += 1;
                    self.status.counters.reroutes += 1;
                }
                // Either way the job is safe: pending, with the old type or the new one;
                // the next cycle routes it again while its type is still gone.
                Err(e) if e.may_have_taken_effect() => self.fail(
                    report,
                    format!(
                        "job {}: re-routing to {ty} may have taken effect ({e}); the next cycle checks",
                        u.job
                    ),
                ),
                Err(e) => self.fail(report, format!("cannot re-route job {}: {e}", u.job)),
            }
        }
    }

    /// The memory (GB) of the largest managed type `j` asks for that no GPU has any more;
    /// None when every type it asks for is still there.
    fn vanished_memory(&self, j: &SlurmJob, present: &HashSet<String>) -> Option<f64> {
        let mut gone: Option<f64> = None;
        for t in j.tres.iter().flatten() {
            for g in parse_gres(t, "job").unwrap_or_default() {
                if present.contains(&g.gpu_type) {
                    continue;
                }
                let memory = self
                    .resolved
                    .models
                    .iter()
                    .flat_map(|m| m.model.profiles.iter())
                    .find(|p| p.name == g.gpu_type)
                    .map(|p| p.memory_gb);
                if let Some(gb) = memory {
                    gone = Some(gone.unwrap_or(0.0).max(gb));
                }
            }
        }
        gone
    }
}
