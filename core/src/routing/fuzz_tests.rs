//! Fuzz-style regression tests for the parsers that see user input inside slurmctld:
//! replay of a hand-made corpus of edge cases (`corpus/*.txt`, one input per line; add
//! any crasher found later), and property tests over arbitrary input. A panic here would
//! be caught by the plugin, but must not happen: every bad input gets an error.

use proptest::prelude::*;

use super::*;
use crate::mig::{Catalogue, GpuModel};

fn models() -> Vec<GpuModel> {
    let c = Catalogue::embedded();
    vec![
        c.model("a100-40gb").unwrap().clone(),
        c.model("h200-141gb").unwrap().clone(),
    ]
}

fn router() -> Router {
    Router::new(&RoutingConfig::default(), &models()).unwrap()
}

fn corpus(text: &'static str) -> impl Iterator<Item = &'static str> {
    text.lines().filter(|l| !l.starts_with('#'))
}

/// Routes `tres` and `comment` as a job would be, at extreme times too; must not panic.
fn route_all_ways(r: &Router, tres: &str, comment: &str) {
    for (deadline, time, now) in [
        (None, None, 0),
        (Some(i64::MAX), Some(u32::MAX - 2), i64::MIN),
        (Some(i64::MIN), Some(1), i64::MAX),
    ] {
        let job = Job {
            tres: TresStrings([Some(tres), Some(tres), None, None]),
            comment: Some(comment),
            deadline,
            time_limit_min: time,
            now,
            ..Job::default()
        };
        if let Ok(Outcome::Routed(out)) = r.route(&job, None) {
            assert!(out.time_limit_min.is_none_or(|t| t >= 1), "{out:?}");
            // What the plugin writes back is a valid concrete request (non-GPU entries
            // such as `gresp:gu:mig:1` pass through untouched).
            for (_, t) in &out.tres {
                let again = parse_request(&TresStrings([Some(t), None, None, None]), 7);
                assert!(matches!(again, Ok(GpuRequest::Concrete(_))), "{t}: {again:?}");
            }
        }
    }
}

#[test]
fn the_request_corpus_parses_without_panic_and_routes_only_auto_requests() {
    let r = router();
    let mut routed = 0;
    for line in corpus(include_str!("corpus/requests.txt")) {
        let parsed = parse_request(&TresStrings([Some(line), None, None, None]), 7);
        if matches!(parsed, Ok(GpuRequest::Auto(_))) {
            routed += 1;
        }
        route_all_ways(&r, line, "");
    }
    assert!(routed >= 4, "the corpus has automatic requests");
}

#[test]
fn the_hint_corpus_parses_without_panic_and_bad_hints_are_errors() {
    let r = router();
    let mut errors = 0;
    for line in corpus(include_str!("corpus/hints.txt")) {
        if parse_hints(line).is_err() {
            errors += 1;
        }
        route_all_ways(&r, "gres:gpu:mig:1", line);
    }
    assert!(
        errors >= 20,
        "most of the corpus is malformed, got {errors} errors"
    );
}

#[test]
fn the_snapshot_corpus_parses_without_panic() {
    let mut ok = 0;
    for line in corpus(include_str!("corpus/snapshots.txt")) {
        if let Ok(s) = Snapshot::parse(line.as_bytes()) {
            ok += 1;
            assert!(s.generated_at.is_finite() && s.generated_at >= 0.0);
        }
    }
    assert!(ok >= 2, "the corpus has valid snapshots too");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_tres_and_comments_never_panic(tres in "\\PC{0,40}", comment in "\\PC{0,60}") {
        route_all_ways(&router(), &tres, &comment);
        let _ = parse_hints(&comment);
        let _ = Snapshot::parse(tres.as_bytes());
    }

    #[test]
    fn structured_garbage_never_panics(
        parts in prop::collection::vec("(gres[:/])?gpu|mig|[0-9]{1,21}|3g\\.20gb|:|,|smartmig:|[a-z-]{1,8}=[0-9a-z.,]{0,12}|;", 0..12)
    ) {
        let s = parts.concat();
        route_all_ways(&router(), &s, &s);
    }

    #[test]
    fn a_routed_request_keeps_its_count_and_becomes_concrete(count in 1u64..=7, slash in any::<bool>()) {
        let tres = format!("{}gpu:mig:{count}", if slash { "gres/" } else { "gres:" });
        let r = router();
        let job = Job { tres: TresStrings([Some(&tres), None, None, None]), ..Job::default() };
        let Ok(Outcome::Routed(out)) = r.route(&job, None) else {
            return Err(TestCaseError::fail(format!("{tres} not routed")));
        };
        let text = &out.tres[0].1;
        let again = parse_request(&TresStrings([Some(text), None, None, None]), 7);
        let Ok(GpuRequest::Concrete(e)) = again else {
            return Err(TestCaseError::fail(format!("{text} is not concrete: {again:?}")));
        };
        prop_assert_eq!(e[0].count, count);
        prop_assert_eq!(e[0].spelling, if slash { Spelling::Slash } else { Spelling::Colon });
    }
}
