//! Routes arbitrary tres text (both job fields) through the full decision.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

use smartmig_core::mig::Catalogue;
use smartmig_core::routing::{parse_request, GpuRequest, Job, Outcome, Router, RoutingConfig, TresStrings};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (tres, comment) = text.split_once('\n').unwrap_or((text, ""));
    // Built once: the catalogue parse would otherwise dominate every run.
    static SETUP: OnceLock<Router> = OnceLock::new();
    let router = SETUP.get_or_init(|| {
        let cat = Catalogue::embedded();
        let models = vec![
            cat.model("a100-40gb").unwrap().clone(),
            cat.model("h200-141gb").unwrap().clone(),
        ];
        let cfg = RoutingConfig {
            route_untyped: true,
            ..RoutingConfig::default()
        };
        Router::new(&cfg, &models).unwrap()
    });
    let job = Job {
        tres: TresStrings([Some(tres), Some(tres), Some(tres), None]),
        comment: Some(comment),
        time_limit_min: Some(u32::MAX - 2),
        deadline: Some(i64::MIN),
        now: i64::MAX,
        ..Job::default()
    };
    if let Ok(Outcome::Routed(r)) = router.route(&job, None) {
        // What the plugin writes back is a valid concrete request.
        for (_, t) in &r.tres {
            let again = parse_request(&TresStrings([Some(t), None, None, None]), 7);
            assert!(matches!(again, Ok(GpuRequest::Concrete(_))), "{t}: {again:?}");
        }
    }
});
