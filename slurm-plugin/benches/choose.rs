//! Cost of one routing decision (the work `job_submit` does under slurmctld's job lock).
//! Target: well under 20 µs per call. Run: `cargo bench -p smartmig-slurm-plugin`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use smartmig_core::config::Config;
use smartmig_core::routing::{Job, Router, Snapshot, TresStrings};

fn router() -> Router {
    let text = include_str!("../../etc/smartmig.toml").replace(
        "models = [\"a100-40gb\"]",
        "models = [\"a100-40gb\", \"a100-80gb\", \"h100-80gb\"]",
    );
    let resolved = Config::parse(&text, "smartmig.toml")
        .and_then(|c| c.resolve(None))
        .expect("the shipped config is valid");
    Router::from_resolved(&resolved).expect("router")
}

fn bench(c: &mut Criterion) {
    let r = router();
    let snap = Snapshot::parse(
        br#"{"version":1,"generated_at":1700000000,"soon_free_within_s":300,"queue_pressure":0.7,
        "types":{"1g.5gb":{"free":0,"soon_free":2},"2g.10gb":{"free":1,"soon_free":0},"3g.40gb":{"free":2,"soon_free":1}}}"#,
    )
    .expect("snapshot");
    let job = Job {
        tres: TresStrings([Some("gres:gpu:mig:1"), None, None, None]),
        name: Some("bert-finetune"),
        account: Some("nlp"),
        partition: Some("gpu"),
        comment: Some("nightly smartmig:class=bert-train;gpumem=8G"),
        time_limit_min: Some(60),
        deadline: Some(1_700_000_000 + 3 * 3600),
        now: 1_700_000_000,
        ..Job::default()
    };
    c.bench_function("route gpu:mig with hints and snapshot", |b| {
        b.iter(|| r.route(black_box(&job), black_box(Some(&snap))))
    });
    c.bench_function("route concrete type (left to Slurm: parse only)", |b| {
        let j = Job {
            tres: TresStrings([Some("gres:gpu:3g.40gb:1"), None, None, None]),
            ..job.clone()
        };
        b.iter(|| r.route(black_box(&j), None))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
