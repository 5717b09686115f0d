//! Averaging policies: M networks of one contract become one network whose logits are the
//! mean of theirs, so an ensemble runs through the same file format, runtime and daemon as
//! a single policy.
//!
//! Why: trainings of one recipe that differ only in their seed land on validation scores
//! several times further apart than the recipes being compared; the mean of several
//! trainings' logits is a lower-variance policy than any one of them.
//!
//! How: the members' hidden layers sit side by side (the first layer stacks their rows,
//! each later hidden layer is block-diagonal, so each block sees only its own member), and
//! the last layer sums the blocks, each scaled by its share of the trainings. The
//! activation is element-wise, so the blocks never mix: the result computes exactly the
//! mean of the trainings' logits.
//!
//! A member that is itself an average counts as the trainings it holds, so a fourth
//! training averaged with an average of three gives the mean of the four (its network as
//! wide as the four members side by side), not an even split between the two files.

use thiserror::Error;

use super::contract::{ContractError, PolicyMetadata, TrainingRef, Trainings};
use super::network::{Dense, NetworkError, PolicyNetwork};

/// Why policies cannot be averaged.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum EnsembleError {
    /// Fewer than two members.
    #[error("an average needs at least two policies, got {0}")]
    TooFew(usize),
    /// A member's network is malformed.
    #[error("member {member}: {source}")]
    Network {
        /// Index of the member.
        member: usize,
        /// What the network check found.
        source: NetworkError,
    },
    /// A member whose contract is not member 0's.
    #[error("member {member} has another contract than member 0: {source}")]
    Contract {
        /// Index of the member.
        member: usize,
        /// What the contract check found.
        source: ContractError,
    },
    /// A member that differs from the first in something the average needs equal.
    #[error("member {member} differs from member 0 in its {what}: {found} against {expected}")]
    Differs {
        /// Index of the member.
        member: usize,
        /// What differs.
        what: &'static str,
        /// The member's.
        found: String,
        /// Member 0's.
        expected: String,
    },
}

/// The network computing the mean of the logits of the trainings `members` hold (a member
/// that is an average counts as its trainings), with member 0's metadata (its guard dropped:
/// the average must be validated on its own) naming every training. The members must share
/// their contract, semantics, draw, requeued, padding and requeue-limit assumptions and
/// decision cadence,
/// their depth and activation.
pub fn average(
    members: &[(PolicyNetwork, PolicyMetadata)],
) -> Result<(PolicyNetwork, PolicyMetadata), EnsembleError> {
    let [(first_net, first_meta), rest @ ..] = members else {
        return Err(EnsembleError::TooFew(0));
    };
    if rest.is_empty() {
        return Err(EnsembleError::TooFew(1));
    }
    let mut shapes = Vec::with_capacity(members.len());
    for (member, (net, meta)) in members.iter().enumerate() {
        shapes.push(
            net.validate()
                .map_err(|source| EnsembleError::Network { member, source })?,
        );
        let differs = |what, found: String, expected: String| EnsembleError::Differs {
            member,
            what,
            found,
            expected,
        };
        meta.check_against(first_meta)
            .map_err(|source| EnsembleError::Contract { member, source })?;
        let checks = [
            (
                "semantics",
                meta.semantics.as_str().to_string(),
                first_meta.semantics.as_str().to_string(),
            ),
            (
                "draw",
                meta.draw.as_str().to_string(),
                first_meta.draw.as_str().to_string(),
            ),
            (
                "requeued",
                meta.requeued.as_str().to_string(),
                first_meta.requeued.as_str().to_string(),
            ),
            (
                "padding",
                meta.padding.to_string(),
                first_meta.padding.to_string(),
            ),
            (
                "requeue_max_run_s",
                crate::contract::requeue_limit_text(meta.requeue_max_run_s),
                crate::contract::requeue_limit_text(first_meta.requeue_max_run_s),
            ),
            (
                "decision cadence",
                format!("{:?}", meta.decision),
                format!("{:?}", first_meta.decision),
            ),
            ("top-k", meta.top_k.to_string(), first_meta.top_k.to_string()),
            (
                "depth",
                net.layers.len().to_string(),
                first_net.layers.len().to_string(),
            ),
            (
                "activation",
                format!("{:?}", net.hidden),
                format!("{:?}", first_net.hidden),
            ),
        ];
        if let Some((what, found, expected)) = checks.into_iter().find(|(_, f, e)| f != e) {
            return Err(differs(what, found, expected));
        }
    }
    let held: Vec<Vec<TrainingRef>> = members.iter().map(|(_, m)| trainings_held(m)).collect();
    let total = held.iter().map(Vec::len).sum::<usize>() as f32;
    let nets: Vec<(&PolicyNetwork, f32)> = members
        .iter()
        .zip(&held)
        .map(|((n, _), h)| (n, h.len() as f32 / total))
        .collect();
    let net = average_networks(&nets);
    let mut meta = first_meta.clone();
    meta.guard = None;
    meta.averaged_from = Some(Trainings(held.into_iter().flatten().collect()));
    Ok((net, meta))
}

/// The trainings a policy holds: those it averages, or its own.
fn trainings_held(meta: &PolicyMetadata) -> Vec<TrainingRef> {
    match &meta.averaged_from {
        Some(Trainings(list)) => list.clone(),
        None => vec![TrainingRef {
            scenario: meta.training_scenario.clone(),
            seed: meta.training_seed,
        }],
    }
}

/// The block construction of the module doc, each network's output scaled by its weight;
/// the members are already checked to chain.
fn average_networks(nets: &[(&PolicyNetwork, f32)]) -> PolicyNetwork {
    let depth = nets[0].0.layers.len();
    let layers = (0..depth)
        .map(|l| {
            let first = l == 0;
            let last = l + 1 == depth;
            let members: Vec<(&Dense, f32)> = nets.iter().map(|&(n, w)| (&n.layers[l], w)).collect();
            // The first layer's input and the last layer's output are shared by all members.
            let in_dim = if first {
                members[0].0.in_dim
            } else {
                members.iter().map(|(d, _)| d.in_dim).sum()
            };
            let out_dim = if last {
                members[0].0.out_dim
            } else {
                members.iter().map(|(d, _)| d.out_dim).sum()
            };
            let mut w = vec![0.0f32; in_dim * out_dim];
            let mut b = vec![0.0f32; out_dim];
            let (mut in_off, mut out_off) = (0, 0);
            for (d, weight) in members {
                let s = if last { weight } else { 1.0 };
                for o in 0..d.out_dim {
                    let row = (out_off + o) * in_dim + in_off;
                    for (x, v) in w[row..row + d.in_dim]
                        .iter_mut()
                        .zip(&d.w[o * d.in_dim..(o + 1) * d.in_dim])
                    {
                        *x += s * v;
                    }
                    b[out_off + o] += s * d.b[o];
                }
                if !first {
                    in_off += d.in_dim;
                }
                if !last {
                    out_off += d.out_dim;
                }
            }
            Dense {
                in_dim,
                out_dim,
                w,
                b,
            }
        })
        .collect();
    PolicyNetwork {
        layers,
        hidden: nets[0].0.hidden,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::tests::sample_metadata;
    use crate::network::Activation;
    use crate::Semantics;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn member(dims: &[usize], seed: u64) -> (PolicyNetwork, PolicyMetadata) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut net = PolicyNetwork::init(dims, Activation::Tanh, &mut rng);
        // Non-zero biases, so that their averaging is checked too.
        for l in &mut net.layers {
            l.b.iter_mut().for_each(|b| *b = rng.random_range(-0.5..0.5));
        }
        (net, sample_metadata())
    }

    #[test]
    fn the_average_computes_the_mean_of_the_members_logits() {
        // Members of different widths and depth 3, as trainings with other hidden sizes.
        let members = [
            member(&[34, 16, 8, 144], 1),
            member(&[34, 8, 8, 144], 2),
            member(&[34, 4, 12, 144], 3),
        ];
        let (avg, meta) = average(&members).unwrap();
        assert_eq!(avg.validate(), Ok((34, 12)));
        let one = TrainingRef {
            scenario: "etc/scenarios/paper-a100x8.toml".into(),
            seed: 42,
        };
        let averaged_from = Some(Trainings(vec![one; 3]));
        assert_eq!(
            meta,
            PolicyMetadata {
                averaged_from,
                ..sample_metadata()
            }
        );
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let batch = 5;
        let x: Vec<f32> = (0..batch * 34).map(|_| rng.random_range(-1.0..1.0)).collect();
        let got = avg.forward(&x, batch).unwrap();
        let outs: Vec<Vec<f32>> = members
            .iter()
            .map(|(n, _)| n.forward(&x, batch).unwrap())
            .collect();
        for (i, g) in got.iter().enumerate() {
            let want = outs.iter().map(|o| o[i]).sum::<f32>() / 3.0;
            assert!((g - want).abs() < 1e-5, "logit {i}: {g} vs {want}");
        }
    }

    #[test]
    fn an_average_of_one_network_with_itself_is_that_network() {
        let m = member(&[34, 16, 144], 4);
        let (avg, _) = average(&[m.clone(), m.clone()]).unwrap();
        let x = vec![0.25f32; 34];
        let (a, b) = (avg.forward(&x, 1).unwrap(), m.0.forward(&x, 1).unwrap());
        assert!(a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-5));
    }

    /// The largest difference between two networks' logits on a few random inputs.
    fn largest_difference(a: &PolicyNetwork, b: &PolicyNetwork) -> f32 {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let x: Vec<f32> = (0..4 * 34).map(|_| rng.random_range(-1.0..1.0)).collect();
        let (a, b) = (a.forward(&x, 4).unwrap(), b.forward(&x, 4).unwrap());
        a.iter().zip(&b).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
    }

    #[test]
    fn an_average_counts_a_member_that_is_an_average_as_the_trainings_it_holds() {
        let seeded = |seed, scenario: &str| {
            let mut m = member(&[34, 8, 144], seed);
            m.1.training_seed = seed;
            m.1.training_scenario = scenario.into();
            m
        };
        let (s0, s1, s7) = (seeded(0, "a.toml"), seeded(1, "a.toml"), seeded(7, "b.toml"));
        let pair = average(&[s0.clone(), s1.clone()]).unwrap();
        assert_eq!(pair.1.training_seed, 0, "the training keys stay member 0's");
        assert_eq!(
            pair.1.averaged_from.as_ref().map(ToString::to_string).as_deref(),
            Some("2 trainings of a.toml: seeds 0, 1")
        );
        // The pair and a third training: the mean of all three, not half and half.
        let (nested, meta) = average(&[pair, s7.clone()]).unwrap();
        let (flat, _) = average(&[s0, s1, s7.clone()]).unwrap();
        assert!(largest_difference(&nested, &flat) < 1e-5);
        let (half, _) = average(&[s7.clone(), s7.clone()]).unwrap();
        assert!(
            largest_difference(&nested, &half) > 1e-3,
            "the check can tell them apart"
        );
        assert_eq!(nested.layers[0].out_dim, 3 * 8, "three members side by side");
        assert_eq!(
            meta.averaged_from.as_ref().map(ToString::to_string).as_deref(),
            Some("3 trainings: a.toml seed 0; a.toml seed 1; b.toml seed 7")
        );
    }

    #[test]
    fn members_that_cannot_be_averaged_are_named() {
        let a = member(&[34, 16, 144], 1);
        assert_eq!(average(std::slice::from_ref(&a)), Err(EnsembleError::TooFew(1)));
        let deeper = member(&[34, 16, 16, 144], 2);
        assert!(matches!(
            average(&[a.clone(), deeper]),
            Err(EnsembleError::Differs {
                member: 1,
                what: "depth",
                ..
            })
        ));
        let mut drain = member(&[34, 16, 144], 3);
        drain.1.semantics = Semantics::Drain;
        assert!(matches!(
            average(&[a.clone(), drain]),
            Err(EnsembleError::Differs {
                member: 1,
                what: "semantics",
                ..
            })
        ));
        let mut limited = member(&[34, 16, 144], 3);
        limited.1.requeue_max_run_s = Some(60.0);
        assert_eq!(
            average(&[a.clone(), limited]),
            Err(EnsembleError::Differs {
                member: 1,
                what: "requeue_max_run_s",
                found: "60 s".into(),
                expected: "none".into(),
            })
        );
        let mut other_gpu = member(&[34, 16, 144], 4);
        other_gpu.1.gpu_model = "h100-80gb".into();
        assert!(matches!(
            average(&[a.clone(), other_gpu]),
            Err(EnsembleError::Contract { member: 1, .. })
        ));
        let mut broken = member(&[34, 16, 144], 5);
        broken.0.layers[0].b.pop();
        assert!(matches!(
            average(&[a, broken]),
            Err(EnsembleError::Network { member: 1, .. })
        ));
    }
}
