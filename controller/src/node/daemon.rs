//! `smartmigd node`: the agent loop, built from `smartmig.toml`.

use std::path::Path;

use anyhow::Context;
use smartmig_core::config::node::{short_hostname, Backend, ChannelKind, NodeConfig};
use smartmig_core::config::{Config, Resolved};
use smartmig_gpu::nvml::{Nvml, NvmlOptions};
use smartmig_gpu::simulated::Simulated;
use smartmig_gpu::GpuBackend;

use crate::slurm::Libslurm;

use super::slurm_channel::SlurmChannel;
use super::spool::SpoolChannel;
use super::{boot, Agent, AgentConfig, NodeChannel, NodeError};

/// Opens the configured GPU backend.
fn open_backend(n: &NodeConfig) -> anyhow::Result<Box<dyn GpuBackend + Send>> {
    Ok(match n.backend {
        Backend::Nvml => Box::new(Nvml::open_with(&NvmlOptions::from(n))?),
        Backend::Simulated => Box::new(
            Simulated::open(&n.simulated_dir)
                .with_context(|| format!("opening the simulated node in {}", n.simulated_dir.display()))?,
        ),
    })
}

/// Serves the node's metrics on `[node] metrics_listen` from a backend of its own, so a
/// scrape never waits for the agent's driver calls.
fn serve_metrics(resolved: &Resolved) -> anyhow::Result<()> {
    let listen = resolved.config.node.metrics_listen.clone();
    if listen.is_empty() {
        return Ok(());
    }
    // Scrapes run on threads of their own: one backend handle, one scrape at a time.
    let backend = std::sync::Mutex::new(open_backend(&resolved.config.node)?);
    let catalogue = resolved.catalogue.clone();
    let addr = crate::metrics::serve(&listen, move || {
        let backend = backend.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        super::metrics::render(backend.as_ref(), &catalogue)
    })
    .with_context(|| format!("node.metrics_listen = \"{listen}\""))?;
    if let Some(addr) = addr {
        log::info!("metrics on http://{addr}/metrics");
    }
    Ok(())
}

/// Reads and resolves the node's `smartmig.toml`.
fn read_config(config: &Path) -> anyhow::Result<Resolved> {
    Ok(Config::from_file(config)?.resolve(config.parent())?)
}

/// Builds the agent that a resolved configuration describes.
fn agent_from_config(resolved: &Resolved) -> anyhow::Result<Agent> {
    let c = &resolved.config;
    let n = &c.node;
    let node = if n.name.is_empty() {
        short_hostname().context("reading the host name")?
    } else {
        n.name.clone()
    };
    let backend = open_backend(n)?;
    let channel: Box<dyn NodeChannel> = match n.channel {
        ChannelKind::Spool => Box::new(SpoolChannel::open(&n.spool_dir, &node)?),
        ChannelKind::Slurm => {
            let api =
                crate::slurm::faults::from_env(Box::new(Libslurm::new())).map_err(anyhow::Error::msg)?;
            Box::new(SlurmChannel::with_api(api, &node))
        }
    };
    let agent = Agent::new(
        AgentConfig {
            node,
            driver: c.gpu.driver,
            catalogue: resolved.catalogue.clone(),
            state_dir: c.controller.state_dir.clone(),
            gres_conf: n.gres_conf.clone(),
            slurmd_stop: n.slurmd_stop.clone(),
            slurmd_start: n.slurmd_start.clone(),
            announce_interval_s: n.announce_interval_s,
            poll_interval_s: n.poll_interval_s,
            idle_poll_interval_s: n.idle_poll_interval_s,
        },
        backend,
        channel,
    )?;
    Ok(agent)
}

/// Runs the node role: recover what a previous run left open, announce, then poll the
/// channel (once with `once`), re-announcing the layouts when needed ([`Agent::tick`]),
/// at the agent's own pace ([`Agent::poll_delay`]). Errors of one poll are logged and the
/// loop goes on.
pub fn run(config: &Path, once: bool) -> anyhow::Result<()> {
    let resolved = read_config(config)?;
    let mut agent = agent_from_config(&resolved)?;
    if let Some(r) = agent.recover().context("recovering from the journal")? {
        log::info!("recovered generation {}: {:?}", r.generation, r.outcome);
    }
    if !once {
        serve_metrics(&resolved)?;
    }
    let state_dir = &resolved.config.controller.state_dir;
    let mut catch_up = if once { None } else { CatchUp::due(state_dir) };
    if let Err(e) = agent.announce() {
        log::error!("cannot announce the node's layouts: {e}");
    }
    loop {
        if let Some(c) = catch_up.as_mut() {
            if c.step(&mut agent, state_dir) {
                catch_up = None;
            } else {
                std::thread::sleep(agent.poll_delay());
                continue;
            }
        }
        match agent.tick(super::agent::unix_now()) {
            Ok(_) => {}
            Err(e) if once => return Err(e.into()),
            Err(e) => log::error!("{e}"),
        }
        if once {
            return Ok(());
        }
        std::thread::sleep(agent.poll_delay());
    }
}

/// The restore the agent owes a boot whose `--restore` failed (or did not run): slurmd did
/// not start, and every start of it runs the restore unit again, which the running agent's
/// lock refuses until the agent has restored the layouts itself.
struct CatchUp {
    /// The boot to mark restored.
    boot: String,
    /// The layouts are restored; slurmd still to start.
    restored: bool,
}

impl CatchUp {
    /// Due when the layouts were not restored on this boot.
    fn due(state_dir: &Path) -> Option<CatchUp> {
        let boot = boot::current()?;
        (!boot::restored_on(state_dir, &boot)).then_some(CatchUp {
            boot,
            restored: false,
        })
    }

    /// Restores the layouts (as `--restore` does), marks the boot, then starts slurmd;
    /// whether all is done (else it is tried again at the next poll).
    fn step(&mut self, agent: &mut super::Agent, state_dir: &Path) -> bool {
        if !self.restored {
            let restored = agent.recover_at_boot().and_then(|_| agent.restore());
            match restored.and_then(|gpus| boot::mark_restored_on(state_dir, &self.boot).map(|()| gpus)) {
                Ok(gpus) => {
                    log::warn!(
                        "this boot's restore before slurmd did not run or failed: restored {} GPU(s) and gres.conf; starting slurmd",
                        gpus.len()
                    );
                    self.restored = true;
                }
                Err(e) => {
                    log::error!(
                        "cannot restore the node's layouts ({e}); slurmd stays stopped; trying again"
                    );
                    return false;
                }
            }
        }
        match agent.start_slurmd_only() {
            Ok(()) => true,
            Err(e) => {
                log::error!("cannot start slurmd after the restore ({e}); trying again");
                false
            }
        }
    }
}

/// `smartmigd node --restore`: after a reboot, before slurmd starts.
pub fn restore(config: &Path) -> anyhow::Result<()> {
    let resolved = read_config(config)?;
    let state_dir = &resolved.config.controller.state_dir;
    let boot = boot::current();
    let mut agent = match agent_from_config(&resolved) {
        Ok(a) => a,
        // Run again by a start of slurmd after it failed at boot, beside the agent, which
        // restored the layouts itself since.
        Err(e) if is_locked(&e) && boot.as_deref().is_some_and(|b| boot::restored_on(state_dir, b)) => {
            println!("the running node agent restored this boot's layouts and gres.conf");
            return Ok(());
        }
        Err(e) if is_locked(&e) => {
            return Err(e.context(
                "this boot's layouts are not restored yet: the running node agent restores them and starts slurmd itself",
            ))
        }
        Err(e) => return Err(e),
    };
    agent.recover_at_boot().context("recovering from the journal")?;
    let gpus = agent.restore().context("restoring the layouts")?;
    if let Some(b) = &boot {
        boot::mark_restored_on(state_dir, b)?;
    }
    println!("restored {} GPU(s); gres.conf written", gpus.len());
    Ok(())
}

/// Whether `e` is another agent's hold on the state directory.
fn is_locked(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<NodeError>(), Some(NodeError::Locked { .. }))
}

/// `smartmigd node --release`: before uninstalling.
pub fn release(config: &Path) -> anyhow::Result<()> {
    let resolved = read_config(config)?;
    let mut agent = agent_from_config(&resolved)?;
    agent.release().context("releasing the node")?;
    println!("released: gres.conf keeps its lines without smartmig's markers; the node's Comment has no smartmig key");
    Ok(())
}
