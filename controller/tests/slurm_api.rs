//! The libslurm adapter against a real Slurm 22.05 (the shared harness): jobs and nodes
//! read through the API, node Extra/Comment as the channel's carrier, drain and resume,
//! a pending job's GPU request rewritten, and Slurm's device numbering of MIG instances.
//!
//! One test per process: libslurm reads its configuration once (`slurm_init`).

#[path = "../../tests/slurm/mod.rs"]
mod slurm;

use std::time::{Duration, Instant};

use slurm::{Cluster, FakeGpu, Options};
use smartmigd::channel::{Desired, GpuActual, Outcome, Phase, Report, CHANNEL_VERSION};
use smartmigd::slurm::{
    parse_gres, read_desired, read_report, write_desired, write_report, JobState, JobUpdate, Libslurm,
    NodeUpdate, SlurmApi,
};

fn wait_until<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn libslurm_reads_jobs_and_nodes_carries_the_channel_and_updates_nodes_and_jobs() {
    skip_unless_slurm!();
    if *slurm::install() != slurm::Install::Host {
        eprintln!(
            "skipped: this process links the host's libslurm, which cannot talk to {}",
            slurm::install()
        );
        return;
    }
    // 3g first in gres.conf: shows whether Slurm numbers devices in file or type order.
    let c = Cluster::start(&Options {
        gpus: vec![FakeGpu(vec![("3g.40gb", 1), ("1g.10gb", 3)])],
        more_nodes: Vec::new(),
        smartmig_toml: slurm::SMARTMIG_TOML.to_string(),
        job_submit_plugins: String::new(),
        etc_files: Vec::new(),
        extra_conf: String::new(),
        accounting: false,
        dynamic_nodes: false,
    });
    std::env::set_var("SLURM_CONF", &c.conf);
    let mut api = Libslurm::new();
    api.ping().expect("slurmctld answers");

    let nodes = api.nodes().expect("load nodes");
    let n = nodes.iter().find(|n| n.name == c.node).expect("our node");
    let gres = parse_gres(&n.gres, "Gres").unwrap();
    let mut types: Vec<(String, u32)> = gres.iter().map(|g| (g.gpu_type.clone(), g.count)).collect();
    types.sort();
    assert_eq!(types, vec![("1g.10gb".into(), 3), ("3g.40gb".into(), 1)]);
    assert!(!n.drain && n.extra.is_none() && n.comment.is_none());

    // A running job on the 3g and a held (pending) job on a 1g.
    let (run, _) = c
        .sbatch(&["--gres=gpu:3g.40gb:1", "--wrap", "sleep 300"])
        .unwrap();
    c.wait_job(run, &["RUNNING"], Duration::from_secs(20));
    let (held, _) = c
        .sbatch(&["--hold", "--gres=gpu:1g.10gb:1", "--wrap", "sleep 1"])
        .unwrap();
    let jobs = api.jobs().expect("load jobs");
    let r = jobs.iter().find(|j| j.id == run).expect("running job listed");
    assert_eq!(r.state, JobState::Running);
    assert_eq!(r.nodes, vec![c.node.clone()]);
    let detail = parse_gres(&r.gres_detail[0], "detail").unwrap();
    assert_eq!(detail[0].gpu_type, "3g.40gb");
    // Slurm sorts a node's GPU records by type name: 1g.10gb are 0-2, the 3g is 3.
    assert_eq!(detail[0].indices, vec![3], "gres detail {:?}", r.gres_detail);
    // Suspended, the job keeps its GPU: it is listed as running, on its node.
    let out = c.scontrol(&["suspend", &run.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    c.wait_job(run, &["SUSPENDED"], Duration::from_secs(20));
    let jobs = api.jobs().expect("load jobs");
    let r = jobs.iter().find(|j| j.id == run).expect("suspended job listed");
    assert_eq!(
        (r.state, r.nodes.clone()),
        (JobState::Running, vec![c.node.clone()])
    );
    assert!(c.scontrol(&["resume", &run.to_string()]).status.success());
    c.wait_job(run, &["RUNNING"], Duration::from_secs(20));
    let used = api
        .nodes()
        .unwrap()
        .into_iter()
        .find(|n| n.name == c.node)
        .unwrap()
        .gres_used;
    assert!(
        parse_gres(&used, "GresUsed")
            .unwrap()
            .iter()
            .any(|g| g.indices == vec![3]),
        "{used}"
    );
    let h = jobs.iter().find(|j| j.id == held).expect("held job listed");
    assert_eq!(h.state, JobState::Pending);
    assert_eq!(h.tres[0].as_deref(), Some("gres:gpu:1g.10gb:1"));

    // Re-route the pending job to the 3g type through the API.
    api.update_job(&JobUpdate {
        job: held,
        tres: Some((0, "gres:gpu:3g.40gb:1".into())),
        time_limit_min: Some(17),
        admin_comment: Some("ticket-4711 moved".into()),
    })
    .expect("update job");
    let h = api.jobs().unwrap().into_iter().find(|j| j.id == held).unwrap();
    assert_eq!(h.tres[0].as_deref(), Some("gres:gpu:3g.40gb:1"));
    assert_eq!(h.time_limit_min, Some(17));
    assert_eq!(h.admin_comment.as_deref(), Some("ticket-4711 moved"));
    let e = api
        .update_job(&JobUpdate {
            job: 999_999,
            tres: Some((0, "gres:gpu:3g.40gb:1".into())),
            time_limit_min: None,
            admin_comment: None,
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("999999") && e.contains("slurm errno"), "{e}");

    // The channel: Desired in Extra, Report in Comment (beside the site's keys), read back
    // through the API, the whole table and the node's own record.
    api.update_node(&NodeUpdate {
        node: c.node.clone(),
        extra: Some(r#"{"rack":"r7"}"#.into()),
        ..NodeUpdate::default()
    })
    .unwrap();
    let record = api.node(&c.node).unwrap().expect("the node's own record");
    let desired = Desired::new(3, Phase::Apply, Vec::new());
    write_desired(&mut api, &record, &desired).unwrap();
    let report = Report {
        version: CHANNEL_VERSION,
        generation: 3,
        phase: Phase::Apply,
        outcome: Outcome::Failed {
            error: "a message, with spaces and \"quotes\"".into(),
        },
        gpus: vec![GpuActual {
            index: 0,
            model: "A100-SXM4-40GB".into(),
            layout: "3g.40gb@4 1g.10gb@0 1g.10gb@1 1g.10gb@2".into(),
        }],
        read_error: None,
        gres_order: Vec::new(),
        slurmd_running: true,
        watchdog: None,
        at: 1.5,
    };
    write_report(&mut api, &c.node, None, &report).unwrap();
    let n = api
        .nodes()
        .unwrap()
        .into_iter()
        .find(|n| n.name == c.node)
        .unwrap();
    assert_eq!(read_desired(&n).unwrap().unwrap(), desired);
    assert_eq!(read_report(&n).unwrap().unwrap(), report);
    assert!(
        n.extra.as_deref().unwrap().contains(r#""rack":"r7""#),
        "{:?}",
        n.extra
    );
    assert_eq!(api.node(&c.node).unwrap().unwrap(), n);
    assert_eq!(api.node("no-such-node").unwrap(), None);
    assert_eq!(api.slurmd_timeout().unwrap(), 300, "Slurm's default");

    // Drain with a reason, then resume.
    api.update_node(&NodeUpdate {
        node: c.node.clone(),
        drain: Some("smartmig: repartition gen 3".into()),
        ..NodeUpdate::default()
    })
    .unwrap();
    let n = api
        .nodes()
        .unwrap()
        .into_iter()
        .find(|n| n.name == c.node)
        .unwrap();
    assert!(n.drain, "drained");
    assert_eq!(n.reason.as_deref(), Some("smartmig: repartition gen 3"));
    assert!(c.node_state(&c.node).contains("DRAIN"));
    api.update_node(&NodeUpdate {
        node: c.node.clone(),
        resume: true,
        ..NodeUpdate::default()
    })
    .unwrap();
    wait_until("resume", Duration::from_secs(10), || {
        let n = api.nodes().ok()?.into_iter().find(|n| n.name == c.node)?;
        (!n.drain).then_some(())
    });
    let e = api
        .update_node(&NodeUpdate {
            node: "no-such-node".into(),
            comment: Some("x".into()),
            ..NodeUpdate::default()
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("no-such-node"), "{e}");
}
