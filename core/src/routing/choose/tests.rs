use super::*;
use crate::config::Config;
use crate::mig::Catalogue;
use crate::routing::snapshot::TypeState;

const NOW: i64 = 1_700_000_000;

fn models(keys: &[&str]) -> Vec<GpuModel> {
    let c = Catalogue::embedded();
    keys.iter().map(|k| c.model(k).unwrap().clone()).collect()
}

fn router_with(toml_routing: &str, keys: &[&str]) -> Router {
    let text = format!("version = 1\n[routing]\n{toml_routing}\n");
    let cfg = Config::parse(&text, "t.toml").unwrap();
    Router::new(&cfg.routing, &models(keys)).unwrap()
}

fn router() -> Router {
    router_with("", &["a100-40gb"])
}

fn job<'a>(node: &'a str, comment: Option<&'a str>) -> Job<'a> {
    Job {
        tres: TresStrings([Some(node), None, None, None]),
        comment,
        now: NOW,
        ..Job::default()
    }
}

fn routed(r: &Router, j: &Job<'_>, s: Option<&Snapshot>) -> Routed {
    match r.route(j, s).unwrap() {
        Outcome::Routed(x) => x,
        other => panic!("not routed: {other:?}"),
    }
}

fn class(r: &Router, name: &str) -> JobClass {
    r.classes.iter().find(|c| c.name == name).unwrap().clone()
}

/// The slowest candidate (by compute) whose estimated time meets `due`, computed directly.
fn slowest_meeting(r: &Router, need: &Need, due: f64) -> String {
    r.candidates()
        .iter()
        .find(|c| c.memory_gb >= need.gpumem_gb && need.run_on(c.compute) <= due)
        .map(|c| c.name.clone())
        .unwrap()
}

#[test]
fn without_deadline_the_slack_rule_picks_the_slowest_slice_within_slack() {
    let r = router();
    let out = routed(
        &r,
        &job("gres:gpu:mig:1", Some("smartmig:class=bert-train")),
        None,
    );
    let c = class(&r, "bert-train");
    let need = Need {
        speedup: c.speedup,
        gpumem_gb: c.gpumem_gb,
        ref_compute: 7,
        run_min: 60.0,
        due_in_min: None,
        count: 1,
        on_one_gpu: 1,
    };
    // Default soft due time: 1.5 × the 60 min on 7g, plus the 60-minute grace.
    let expected = slowest_meeting(&r, &need, 1.5 * 60.0 + 60.0);
    assert_eq!(out.gpu_type, expected);
    assert_eq!(expected, "3g.20gb", "bert-train needs 109 min on 3g, 154 on 2g");
    assert_eq!(
        out.tres,
        vec![(TresField::PerNode, format!("gres:gpu:{expected}:1"))]
    );
    assert_eq!(out.time_limit_min, None, "no --time: limit left to the partition");
}

#[test]
fn a_deadline_picks_a_smaller_slice_and_rescales_the_time_limit() {
    let r = router();
    let mut j = job("gres:gpu:mig:1", Some("smartmig:class=bert-infer"));
    j.time_limit_min = Some(60);
    j.deadline = Some(NOW + 400 * 60);
    let out = routed(&r, &j, None);
    // Linear job: 60 min on 7g is 420 on 1g (misses 400) and 210 on 2g (meets).
    assert_eq!(out.gpu_type, "2g.10gb");
    assert_eq!(out.time_limit_min, Some(210));
    assert!(
        out.message.contains("time limit 60 -> 210 min"),
        "{}",
        out.message
    );
}

#[test]
fn memory_need_excludes_small_slices() {
    let r = router();
    let mut j = job("gres:gpu:mig:1", Some("smartmig:class=bert-infer;gpumem=12G"));
    j.deadline = Some(NOW + 10_000 * 60);
    let out = routed(&r, &j, None);
    assert_eq!(out.gpu_type, "3g.20gb", "1g/2g have 5-10 GB on an A100-40GB");
}

#[test]
fn an_unmeetable_due_time_gets_the_fastest_slice() {
    let r = router();
    let mut j = job("gres:gpu:mig:1", Some("smartmig:due=30m"));
    j.time_limit_min = Some(120);
    let out = routed(&r, &j, None);
    assert_eq!(out.gpu_type, "7g.40gb");
    assert!(out.message.contains("cannot be met"), "{}", out.message);
}

#[test]
fn a_job_no_slice_can_finish_by_its_deadline_is_refused_naming_the_fastest() {
    // Slurm from 23.02.5 refuses a time limit past the deadline ("Requested time limit is
    // invalid"); the refusal says which slice and how long.
    let r = router();
    let mut j = job("gres:gpu:mig:1", None);
    j.time_limit_min = Some(120);
    j.deadline = Some(NOW + 30 * 60);
    let e = r.route(&j, None).unwrap_err();
    assert_eq!(
        e,
        RouteError::PastDeadline {
            gpu_type: "7g.40gb".into(),
            need_min: 120,
            left_min: 30
        }
    );
    assert!(
        e.to_string()
            .starts_with("--deadline: no MIG slice present can finish"),
        "{e}"
    );
    // With `--time-min`, Slurm checks that instead: 25 minutes fit in 30.
    j.time_min_min = Some(25);
    assert_eq!(routed(&r, &j, None).gpu_type, "7g.40gb");
}

#[test]
fn a_slice_whose_rounded_up_time_limit_would_miss_the_deadline_is_not_chosen() {
    // 60 min on 7g runs 105 min on 4g: 105 minutes left fit its limit only to the
    // second, and Slurm checks it a moment after the plugin: 7g is chosen.
    let r = router();
    let mut j = job("gres:gpu:mig:1", None);
    j.time_limit_min = Some(60);
    j.deadline = Some(NOW + 105 * 60);
    let out = routed(&r, &j, None);
    assert_eq!(out.gpu_type, "7g.40gb", "{}", out.message);
    assert!(out.message.contains("due in 105 min"), "{}", out.message);
    j.deadline = Some(NOW + 106 * 60);
    assert_eq!(routed(&r, &j, None).gpu_type, "4g.20gb");
}

#[test]
fn a_deadline_counts_from_the_jobs_begin_time() {
    let r = router();
    let mut j = job("gres:gpu:mig:1", None);
    j.time_limit_min = Some(60);
    j.deadline = Some(NOW + 100 * 60);
    let now_due = routed(&r, &j, None);
    assert!(now_due.message.contains("due in 100 min"), "{}", now_due.message);
    // `--begin=now+30minutes`: 70 minutes left.
    j.begin = Some(NOW + 30 * 60);
    let out = routed(&r, &j, None);
    assert!(out.message.contains("due in 70 min"), "{}", out.message);
    // A begin time already past counts as now.
    j.begin = Some(NOW - 3600);
    assert!(routed(&r, &j, None).message.contains("due in 100 min"));
    // A time limit rescaled below `--time-min` is raised to it (Slurm refuses less).
    let mut j = job("gres:gpu:mig:1", Some("smartmig:time-on=1g"));
    j.time_limit_min = Some(60);
    j.time_min_min = Some(50);
    let out = routed(&r, &j, None);
    assert!(out.time_limit_min.is_some_and(|t| t >= 50), "{out:?}");
}

#[test]
fn a_past_deadline_gets_the_fastest_slice() {
    let r = router();
    let mut j = job("gres:gpu:mig:1", None);
    j.deadline = Some(NOW - 60);
    assert_eq!(routed(&r, &j, None).gpu_type, "7g.40gb");
}

fn snapshot(types: &[(&str, u32, u32)]) -> Snapshot {
    Snapshot {
        version: 1,
        generated_at: NOW as f64,
        soon_free_within_s: 600.0,
        queue_pressure: 0.5,
        types: types
            .iter()
            .map(|(n, f, s)| {
                (
                    n.to_string(),
                    TypeState {
                        free: *f,
                        soon_free: *s,
                    },
                )
            })
            .collect(),
    }
}

#[test]
fn a_free_type_is_preferred_over_a_slower_busy_one() {
    let r = router();
    let mut j = job("gres:gpu:mig:1", Some("smartmig:class=bert-infer"));
    j.time_limit_min = Some(60);
    j.deadline = Some(NOW + 400 * 60);
    let s = snapshot(&[("2g.10gb", 0, 0), ("3g.20gb", 1, 0)]);
    let out = routed(&r, &j, Some(&s));
    assert_eq!(out.gpu_type, "3g.20gb");
    assert!(out.message.contains("free now"), "{}", out.message);
    assert_eq!(out.time_limit_min, Some(140), "60 × 7/3 rounded up");
}

#[test]
fn soon_free_waits_count_against_the_deadline() {
    let r = router();
    let mut j = job("gres:gpu:mig:1", Some("smartmig:class=bert-infer"));
    j.time_limit_min = Some(60);
    // 2g needs 210 min; soon-free adds 10 min of wait: 220 fits in 215? no.
    j.deadline = Some(NOW + 215 * 60);
    let s = snapshot(&[("2g.10gb", 0, 1), ("4g.20gb", 1, 0)]);
    assert_eq!(routed(&r, &j, Some(&s)).gpu_type, "4g.20gb");
    j.deadline = Some(NOW + 225 * 60);
    assert_eq!(routed(&r, &j, Some(&s)).gpu_type, "2g.10gb");
}

#[test]
fn time_limits_are_capped_by_the_partition_limit() {
    let r = router_with(
        "max_time_min = 1000\npartition_max_time_min = { short = 100 }",
        &["a100-40gb"],
    );
    let mut j = job("gres:gpu:mig:1", Some("smartmig:class=bert-infer"));
    j.time_limit_min = Some(60);
    j.deadline = Some(NOW + 400 * 60);
    j.partition = Some("short");
    let out = routed(&r, &j, None);
    assert_eq!(out.time_limit_min, Some(100));
    assert!(out.message.contains("capped"), "{}", out.message);
    j.partition = Some("long");
    assert_eq!(routed(&r, &j, None).time_limit_min, Some(210));
}

#[test]
fn a_partition_cap_of_zero_is_no_cap_of_its_own_not_a_zero_limit() {
    let r = router_with(
        "max_time_min = 150
partition_max_time_min = { gpu = 0, short = 0 }",
        &["a100-40gb"],
    );
    let mut j = job("gres:gpu:mig:1", Some("smartmig:class=bert-infer"));
    j.time_limit_min = Some(60);
    j.deadline = Some(NOW + 400 * 60);
    j.partition = Some("gpu");
    assert_eq!(routed(&r, &j, None).time_limit_min, Some(150), "the global cap");
    let r = router_with("partition_max_time_min = { gpu = 0 }", &["a100-40gb"]);
    assert_eq!(routed(&r, &j, None).time_limit_min, Some(210), "no cap");
}

#[test]
fn a_rescaled_limit_stays_below_slurms_unset_and_unlimited_values() {
    let r = router();
    // Half the largest limit on a 7g; several times it on the slice a far deadline lets
    // the job take.
    let mut j = job("gres:gpu:mig:1", Some("smartmig:class=bert-infer;time-on=7g"));
    j.time_limit_min = Some(u32::MAX / 2);
    j.deadline = Some(NOW + 60 * 10 * i64::from(u32::MAX));
    let t = routed(&r, &j, None).time_limit_min.expect("a limit");
    assert!(t < u32::MAX - 1, "{t} is NO_VAL or INFINITE");
}

#[test]
fn time_on_hint_changes_what_time_refers_to() {
    let r = router_with("grace_min = 0", &["a100-40gb"]);
    let mut j = job("gres:gpu:mig:1", Some("smartmig:class=bert-infer;time-on=1g"));
    j.time_limit_min = Some(70);
    // 70 min on 1g is 10 on 7g; slack 1.5 → due 15 min: only 7g meets it.
    let out = routed(&r, &j, None);
    assert_eq!(out.gpu_type, "7g.40gb");
    assert_eq!(out.time_limit_min, Some(10));
}

#[test]
fn a_due_hint_acts_as_a_soft_deadline() {
    let r = router();
    let mut j = job("gres:gpu:mig:1", Some("smartmig:class=bert-infer;due=400m"));
    j.time_limit_min = Some(60);
    assert_eq!(routed(&r, &j, None).gpu_type, "2g.10gb");
}

#[test]
fn a_speedup_hint_overrides_the_class_curve() {
    let r = router();
    let mut j = job("gres:gpu:mig:1", Some("smartmig:speedup=1,1,1,1,1"));
    j.time_limit_min = Some(60);
    // A job that does not speed up at all belongs on the smallest slice.
    assert_eq!(routed(&r, &j, None).gpu_type, "1g.5gb");
}

#[test]
fn rules_match_name_account_and_partition_globs() {
    let r = router_with(
        "[[routing.rule]]\nclass = \"resnet-train\"\nname = \"rn-*\"\n\
         [[routing.rule]]\nclass = \"bert-infer\"\naccount = \"nlp\"\npartition = \"gpu?\"\n",
        &["a100-40gb"],
    );
    let mut j = job("gres:gpu:mig:1", None);
    j.name = Some("rn-50");
    assert_eq!(routed(&r, &j, None).class, "resnet-train");
    j.name = Some("other");
    j.account = Some("nlp");
    j.partition = Some("cpu,gpu1");
    assert_eq!(routed(&r, &j, None).class, "bert-infer");
    j.partition = Some("cpu");
    assert_eq!(routed(&r, &j, None).class, "default");
}

#[test]
fn a_site_class_is_usable_from_hints_and_replaces_builtins_by_name() {
    let r = router_with(
        "[[routing.class]]\nname = \"cfd\"\nspeedup = [1, 1, 1, 1, 1]\ngpumem_gb = 15\n\
         [[routing.class]]\nname = \"bert-infer\"\nspeedup = [1, 1, 1, 1, 1]\n",
        &["a100-40gb"],
    );
    let out = routed(&r, &job("gres:gpu:mig:1", Some("smartmig:class=cfd")), None);
    assert_eq!((out.class.as_str(), out.gpu_type.as_str()), ("cfd", "3g.20gb"));
    assert_eq!(class(&r, "bert-infer").speedup, [1.0; 5]);
}

#[test]
fn an_unknown_class_hint_is_refused_with_the_known_ones() {
    let e = router()
        .route(&job("gres:gpu:mig:1", Some("smartmig:class=bert")), None)
        .unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("unknown class `bert`") && s.contains("bert-train"),
        "{s}"
    );
}

#[test]
fn concrete_and_non_gpu_requests_are_left_alone() {
    let r = router();
    assert!(matches!(
        r.route(&job("gres:gpu:3g.20gb:1", Some("smartmig:nonsense=1")), None),
        Ok(Outcome::Unchanged(_))
    ));
    assert!(matches!(
        r.route(&job("gres:shard:1", None), None),
        Ok(Outcome::Unchanged(_))
    ));
}

#[test]
fn untyped_requests_are_routed_only_when_configured() {
    assert!(matches!(
        router().route(&job("gres:gpu:2", None), None),
        Ok(Outcome::Unchanged(_))
    ));
    let r = router_with("route_untyped = true", &["a100-40gb"]);
    let out = routed(&r, &job("gres:gpu:2", Some("smartmig:class=resnet-train")), None);
    assert!(out.tres[0].1.ends_with(":2"), "{:?}", out.tres);
    assert!(r.route(&job("gres:gpu:8", None), None).is_err());
}

#[test]
fn untyped_requests_are_refused_on_padded_nodes_unless_routed_and_padding_types_by_name_always() {
    let padded = router().with_padding(true);
    let e = padded.route(&job("gres:gpu:2", None), None).unwrap_err();
    assert!(matches!(e, RouteError::UntypedPadded(_)), "{e}");
    assert!(
        e.to_string().contains("gpu:2") && e.to_string().contains("padding records"),
        "{e}"
    );
    // Routed untyped requests are typed by then: nothing to refuse.
    let routing = router_with("route_untyped = true", &["a100-40gb"]).with_padding(true);
    assert!(routing.route(&job("gres:gpu:1", None), None).is_ok());
    // Nobody can ask for a padding record by name, padded or not (a node keeps its padding
    // until its next re-layout after `padding` is turned off).
    for r in [&padded, &router()] {
        let e = r.route(&job("gres:gpu:pad-3g.20gb:1", None), None).unwrap_err();
        assert!(
            matches!(e, RouteError::Request(RequestError::PaddingType(_))),
            "{e}"
        );
        assert!(e.to_string().contains("pad-3g.20gb"), "{e}");
    }
    // A 0-count request asks for no GPU: nothing Slurm could pad.
    assert_eq!(
        padded.route(&job("gres:gpu:0", None), None),
        Ok(Outcome::Unchanged("no GPU request"))
    );
}

#[test]
fn concrete_requests_of_any_type_and_count_are_left_to_slurm() {
    let r = router();
    // Not in the catalogue (a V100 partition), two 7g on one node (one per GPU), more
    // 3g.20gb per job than one GPU holds.
    for (node, per_job) in [
        (Some("gres:gpu:v100:1"), None),
        (Some("gres/gpu:7g.40gb:2"), None),
        (None, Some("gres/gpu:3g.20gb:4")),
    ] {
        let j = Job {
            tres: TresStrings([node, per_job, None, None]),
            now: NOW,
            ..Job::default()
        };
        assert_eq!(
            r.route(&j, None),
            Ok(Outcome::Unchanged("concrete GPU type")),
            "{node:?} {per_job:?}"
        );
    }
}

#[test]
fn zero_count_gpu_requests_pass_unchanged() {
    // `sbatch --gres=gpu:0`, `scontrol update jobid=N Gres=gpu:0` (job_modify routes the
    // update's fields the same way): Slurm drops 0-count entries.
    let r = router_with("route_untyped = true", &["a100-40gb"]);
    for t in ["gres:gpu:0", "gres/gpu:mig:0", "gres:gpu:mig:0,gres:shard:1"] {
        assert_eq!(
            r.route(&job(t, None), None),
            Ok(Outcome::Unchanged("no GPU request")),
            "{t}"
        );
    }
    // Beside a real request it is skipped and kept as written.
    let out = routed(&r, &job("gres:gpu:mig:0,gres:gpu:mig:1", None), None);
    assert!(
        out.tres[0].1.starts_with("gres:gpu:mig:0,gres:gpu:") && out.tres[0].1.ends_with(":1"),
        "{:?}",
        out.tres
    );
}

#[test]
fn more_memory_than_any_slice_is_refused() {
    let e = router()
        .route(&job("gres:gpu:mig:1", Some("smartmig:gpumem=80G")), None)
        .unwrap_err();
    assert!(
        matches!(e, RouteError::NoMemory { largest_gb, .. } if largest_gb == 40.0),
        "{e}"
    );
}

#[test]
fn counts_above_a_types_maximum_skip_that_type() {
    let r = router();
    let mut j = job("gres:gpu:mig:3", Some("smartmig:speedup=1,1,1,1,1"));
    j.time_limit_min = Some(60);
    let out = routed(&r, &j, None);
    // 1g.10gb holds 4 per GPU and 1g.5gb 7: both fit 3; 3g (2 per GPU) would not.
    assert_eq!(out.gpu_type, "1g.5gb");
    let j = job("gres:gpu:mig:5", Some("smartmig:class=bert-infer;gpumem=6"));
    let e = r.route(&j, None).unwrap_err();
    assert!(matches!(e, RouteError::NoRoom { count: 5, .. }), "{e}");
    let s = e.to_string();
    assert!(
        s.contains("1g.10gb holds at most 4 per GPU") && !s.contains("GB of memory"),
        "the message names the count, not memory: {s}"
    );
}

#[test]
fn names_shared_by_two_models_keep_the_weaker_promise() {
    let cands = candidates(&models(&["a100-40gb", "a100-80gb"]));
    let c = cands.iter().find(|c| c.name == "1g.10gb").unwrap();
    assert_eq!((c.compute, c.memory_gb, c.max_count), (1, 10.0, 7));
    assert!(cands.windows(2).all(|w| w[0].compute <= w[1].compute));
    assert!(!cands.iter().any(|c| c.name.ends_with("+me")));
}

#[test]
fn bad_routing_config_names_key_and_line() {
    let e = Config::parse(
        "version = 1\n[routing]\n[[routing.rule]]\nclass = \"nope\"\nname = \"x\"\n",
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("t.toml:4") && e.contains("routing.class") && e.contains("nope"),
        "{e}"
    );
    let e = Config::parse(
        "version = 1\n[[routing.class]]\nname = \"a\"\nspeedup = [1, 2, 1, 4, 7]\n",
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("t.toml:4") && e.contains("decrease"), "{e}");
    let e = Config::parse("version = 1\n[routing]\ntime_refers_to = \"5g\"\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.toml:3") && e.contains("5g"), "{e}");
    let e = Config::parse("version = 1\n[routing]\nslak = 2\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("slak"), "{e}");
}

#[test]
fn a_rule_without_matchers_is_refused() {
    let e = Config::parse("version = 1\n[[routing.rule]]\nclass = \"default\"\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("no name, account or partition"), "{e}");
}

fn resolved_router(extra: &str) -> Router {
    let text = format!("version = 1\n[policy]\nstatic_layout = [\"c2\", \"c7\"]\n{extra}");
    let r = Config::parse(&text, "t.toml").unwrap().resolve(None).unwrap();
    Router::from_resolved(&r).unwrap()
}

#[test]
fn without_a_snapshot_only_static_layout_types_are_chosen() {
    let r = resolved_router("");
    let mut types = r.static_types().to_vec();
    types.sort();
    assert_eq!(types, ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb"]);
    // An unmeetable deadline asks for the fastest slice: 4g here, as no GPU is in 7g.
    let mut j = job("gres:gpu:mig:1", None);
    j.deadline = Some(NOW - 60);
    assert_eq!(routed(&r, &j, None).gpu_type, "4g.20gb");
    let e = r
        .route(&job("gres:gpu:mig:1", Some("smartmig:gpumem=30")), None)
        .unwrap_err();
    assert!(
        matches!(e, RouteError::NoMemory { largest_gb, .. } if largest_gb == 20.0),
        "{e}"
    );
}

#[test]
fn with_a_snapshot_only_listed_types_are_chosen() {
    let r = resolved_router("");
    let mut j = job("gres:gpu:mig:1", None);
    j.deadline = Some(NOW - 60);
    let s = snapshot(&[("7g.40gb", 0, 0), ("1g.5gb", 3, 0)]);
    assert_eq!(routed(&r, &j, Some(&s)).gpu_type, "7g.40gb");
}

#[test]
fn on_a30s_jobs_route_to_the_a30s_profiles_and_its_whole_gpu_is_the_fastest() {
    let r = router_with("", &["a30-24gb"]);
    let names: Vec<&str> = r.candidates().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["1g.6gb", "2g.12gb", "4g.24gb"],
        "no +me profile is a candidate"
    );
    let mut j = job("gres:gpu:mig:1", Some("smartmig:class=bert-infer;gpumem=8G"));
    j.deadline = Some(NOW + 10_000 * 60);
    assert_eq!(routed(&r, &j, None).gpu_type, "2g.12gb", "1g.6gb has 6 GB");
    let mut j = job("gres:gpu:mig:1", Some("smartmig:due=30m"));
    j.time_limit_min = Some(120);
    assert_eq!(routed(&r, &j, None).gpu_type, "4g.24gb");
    let mixed = router_with("", &["a100-40gb", "a30-24gb", "h100-80gb"]);
    let names: Vec<&str> = mixed.candidates().iter().map(|c| c.name.as_str()).collect();
    assert!(
        names.contains(&"1g.6gb") && names.contains(&"7g.80gb") && names.contains(&"3g.20gb"),
        "{names:?}"
    );
}

/// Issue 17: `--gpus=mig:2` (a per-job count) was checked against one GPU's maximum and
/// refused with "no MIG slice in the cluster has 0 GB for 2 instance(s)".
#[test]
fn a_per_job_count_may_spread_over_gpus() {
    // The default static layout: every GPU whole (c1), 7g.40gb holds one per GPU.
    let text = "version = 1\n";
    let r = Router::from_resolved(&Config::parse(text, "t.toml").unwrap().resolve(None).unwrap()).unwrap();
    for n in [2, 8] {
        let tres = format!("gres:gpu:mig:{n}");
        let j = Job {
            tres: TresStrings([None, Some(&tres), None, None]),
            now: NOW,
            ..Job::default()
        };
        let out = routed(&r, &j, None);
        assert_eq!(
            out.tres,
            vec![(TresField::PerJob, format!("gres:gpu:7g.40gb:{n}"))]
        );
    }
    // Per node, the instances share a GPU: two 7g do not fit, and the message says so.
    let e = r.route(&job("gres:gpu:mig:2", None), None).unwrap_err();
    let s = e.to_string();
    assert!(
        matches!(e, RouteError::NoRoom { count: 2, .. })
            && s.contains("7g.40gb holds at most 1 per GPU")
            && s.contains("--gpus=mig:2"),
        "{s}"
    );
}

/// Issue 17: without a snapshot every linear job landed on 7g, because 1.5 × its time on
/// a whole GPU is met by no smaller slice. The grace lets short jobs take small slices.
#[test]
fn without_a_deadline_short_jobs_take_small_slices_and_long_jobs_whole_gpus() {
    let r = resolved_router("");
    let r_all = Router::new(&RoutingConfig::default(), &models(&["a100-40gb"])).unwrap();
    let at = |r: &Router, minutes: u32| {
        let mut j = job("gres:gpu:mig:1", None);
        j.time_limit_min = Some(minutes);
        routed(r, &j, None)
    };
    // 10 min on 7g: due in 1.5 × 10 + 60 = 75 min; 70 min on 1g meets it.
    let short = at(&r_all, 10);
    assert_eq!(
        (short.gpu_type.as_str(), short.time_limit_min),
        ("1g.5gb", Some(70))
    );
    // 60 min: due in 150; 3g needs 140.
    assert_eq!(at(&r_all, 60).gpu_type, "3g.20gb");
    // 600 min: due in 960; 4g needs 1050, so the whole GPU.
    assert_eq!(at(&r_all, 600).gpu_type, "7g.40gb");
    // The same rule among a static layout's types (c2, c7: no 7g).
    assert_eq!(at(&r, 10).gpu_type, "1g.5gb");
    // grace_min = 0 restores the paper's 1.5 × rule: linear jobs need a whole GPU.
    let strict = router_with("grace_min = 0", &["a100-40gb"]);
    assert_eq!(at(&strict, 10).gpu_type, "7g.40gb");
}
