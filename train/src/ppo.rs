//! PPO for the central mean-field controller (docs/model.md §6): clipped surrogate, a value
//! function on the same mean field, GAE. The actor's output is the K×K transition logits;
//! the log-probability of a joint action is Σ over GPUs of log h[c_i, c'_i] under the
//! top-k renormalised rows the rollout sampled from (the top-k sets are kept fixed
//! within an update, so the surrogate is that of the distribution actually used).

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{linear, AdamW, Linear, Module, Optimizer, ParamsAdamW, VarBuilder, VarMap};

use smartmig_policy::{Activation, Dense, PolicyNetwork};

use super::rollout::Episode;
use super::TrainError;

/// Hyper-parameters of the learner.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PpoConfig {
    /// Hidden layer widths of actor and critic.
    pub hidden: Vec<usize>,
    /// Adam learning rate.
    pub lr: f64,
    /// Adam's ε. Large on purpose: most decisions keep every GPU where it is, so most
    /// gradients are tiny noise, which Adam with a small ε would blow up to full-size
    /// steps (the policy then drifts into random repartitions). A large ε keeps steps
    /// proportional to the gradient below that scale.
    #[serde(default = "default_adam_eps")]
    pub adam_eps: f64,
    /// Discount per decision.
    pub gamma: f64,
    /// GAE λ.
    pub lambda: f64,
    /// Surrogate clip ε.
    pub clip: f64,
    /// Passes over each batch.
    pub epochs: usize,
    /// Minibatch size (decisions).
    pub minibatch: usize,
    /// Entropy bonus weight.
    pub entropy: f64,
    /// Value loss weight.
    pub value_coef: f64,
    /// Initial logit bonus of staying in the current configuration.
    pub stay_bias: f32,
    /// Stop an update's epochs once the approximate KL divergence from the rollout
    /// policy (per decision) exceeds this: it keeps rarely sampled moves from drifting.
    pub target_kl: f64,
}

impl Default for PpoConfig {
    fn default() -> Self {
        PpoConfig {
            hidden: vec![64, 64],
            lr: 1e-4,
            adam_eps: default_adam_eps(),
            gamma: 0.999,
            lambda: 0.95,
            clip: 0.2,
            epochs: 4,
            minibatch: 512,
            entropy: 1e-3,
            value_coef: 0.5,
            stay_bias: 9.0,
            target_kl: 0.02,
        }
    }
}

fn default_adam_eps() -> f64 {
    1e-3
}

/// A tanh MLP in candle.
struct Mlp {
    layers: Vec<Linear>,
}

impl Mlp {
    fn new(vb: VarBuilder<'_>, dims: &[usize]) -> candle_core::Result<Mlp> {
        let layers = dims
            .windows(2)
            .enumerate()
            .map(|(i, io)| linear(io[0], io[1], vb.pp(format!("l{i}"))))
            .collect::<candle_core::Result<_>>()?;
        Ok(Mlp { layers })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let mut h = x.clone();
        for (i, l) in self.layers.iter().enumerate() {
            h = l.forward(&h)?;
            if i + 1 < self.layers.len() {
                h = h.tanh()?;
            }
        }
        Ok(h)
    }

    fn export(&self) -> candle_core::Result<PolicyNetwork> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let (out_dim, in_dim) = l.weight().dims2()?;
                let w = l.weight().flatten_all()?.to_vec1::<f32>()?;
                let b = match l.bias() {
                    Some(b) => b.to_vec1::<f32>()?,
                    None => vec![0.0; out_dim],
                };
                Ok(Dense {
                    in_dim,
                    out_dim,
                    w,
                    b,
                })
            })
            .collect::<candle_core::Result<_>>()?;
        Ok(PolicyNetwork {
            layers,
            hidden: Activation::Tanh,
        })
    }
}

/// Actor, critic and optimiser.
pub struct Learner {
    varmap: VarMap,
    actor: Mlp,
    critic: Mlp,
    opt: AdamW,
    cfg: PpoConfig,
    k: usize,
    dim: usize,
    device: Device,
}

/// Statistics of one update.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct UpdateStats {
    /// Mean clipped-surrogate loss.
    pub policy_loss: f64,
    /// Mean value loss.
    pub value_loss: f64,
    /// Mean occupancy-weighted row entropy.
    pub entropy: f64,
    /// Decisions learned from.
    pub samples: usize,
}

impl Learner {
    /// A fresh learner for `dim` features and `k` configurations, its weights drawn
    /// from a stream seeded by `seed` (candle's own initialiser is not seedable on CPU).
    pub fn new(dim: usize, k: usize, cfg: PpoConfig, seed: u64) -> Result<Learner, TrainError> {
        let device = Device::Cpu;
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
        let mut adims = vec![dim];
        adims.extend(&cfg.hidden);
        adims.push(k * k);
        let mut cdims = vec![dim];
        cdims.extend(&cfg.hidden);
        cdims.push(1);
        let actor = Mlp::new(vb.pp("actor"), &adims)?;
        let critic = Mlp::new(vb.pp("critic"), &cdims)?;
        // Start near "stay": small output weights, a bonus on the diagonal, so the first
        // rollouts keep the starting layout and learning explores moves from there.
        let last = actor.layers.len() - 1;
        {
            let data = varmap
                .data()
                .lock()
                .map_err(|_| TrainError::Internal("varmap lock".into()))?;
            let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed);
            let mut names: Vec<&String> = data.keys().collect();
            names.sort();
            for name in names {
                let var = &data[name];
                // PyTorch's default: U(±1/√fan_in) for weights and biases alike.
                let fan_in = if name.ends_with(".weight") {
                    var.as_tensor().dims2()?.1
                } else {
                    let layer = name.trim_end_matches(".bias");
                    data.get(&format!("{layer}.weight"))
                        .map(|w| w.as_tensor().dims2())
                        .transpose()?
                        .map_or(1, |d| d.1)
                };
                let bound = 1.0 / (fan_in.max(1) as f32).sqrt();
                let values: Vec<f32> = (0..var.as_tensor().elem_count())
                    .map(|_| rand::Rng::random_range(&mut rng, -bound..bound))
                    .collect();
                var.set(&Tensor::from_vec(values, var.as_tensor().shape(), &device)?)?;
            }
            if let Some(w) = data.get(&format!("actor.l{last}.weight")) {
                w.set(&(w.as_tensor() * 0.1)?)?;
            }
            if let Some(b) = data.get(&format!("actor.l{last}.bias")) {
                let diag: Vec<f32> = (0..k * k)
                    .map(|i| if i / k == i % k { cfg.stay_bias } else { 0.0 })
                    .collect();
                b.set(&Tensor::from_vec(diag, k * k, &device)?)?;
            }
        }
        let opt = AdamW::new(
            varmap.all_vars(),
            ParamsAdamW {
                lr: cfg.lr,
                eps: cfg.adam_eps,
                weight_decay: 0.0,
                ..Default::default()
            },
        )?;
        Ok(Learner {
            varmap,
            actor,
            critic,
            opt,
            cfg,
            k,
            dim,
            device,
        })
    }

    /// The actor as plain weights (for rollouts and the ONNX writer).
    pub fn policy(&self) -> Result<PolicyNetwork, TrainError> {
        Ok(self.actor.export()?)
    }

    /// Saves every weight (safetensors).
    pub fn save(&self, path: &std::path::Path) -> Result<(), TrainError> {
        Ok(self.varmap.save(path)?)
    }

    /// Loads weights saved by [`Learner::save`].
    pub fn load(&mut self, path: &std::path::Path) -> Result<(), TrainError> {
        Ok(self.varmap.load(path)?)
    }

    /// Log-probabilities of the recorded joint actions and the row entropies.
    fn log_probs(&self, x: &Tensor, mask: &Tensor, counts: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let b = x.dim(0)?;
        let k = self.k;
        let logits = self.actor.forward(x)?.reshape((b, k, k))?;
        let m = mask.reshape((b, k, k))?;
        let off = ((m.ones_like()? - &m)? * -1e9)?;
        let masked = ((logits * &m)? + off)?;
        let lsm = candle_nn::ops::log_softmax(&masked, D::Minus1)?;
        let c = counts.reshape((b, k, k))?;
        let lp = (&lsm * &c)?.sum((1, 2))?;
        let h_row = (lsm.exp()? * &lsm)?.sum(D::Minus1)?.neg()?;
        let occ = c.sum(D::Minus1)?;
        let tot = occ.sum(1)?.clamp(1.0, f64::MAX)?;
        let ent = ((h_row * occ)?.sum(1)? / tot)?;
        Ok((lp, ent))
    }

    /// Supervised epochs towards target rows (imitation): minimises, per sample, the
    /// cross-entropy of each row's softmax (over the `mask`ed configurations) against the
    /// target row, weighted by `weights` (one per row, e.g. the share of GPUs in it).
    /// `x` is `[n, D]`, `targets` `[n, K, K]`, `weights` `[n, K]`, `mask` `[K, K]`
    /// (1: the configuration is available). Returns the mean loss of the last epoch.
    pub fn imitate(
        &mut self,
        x: &[f32],
        targets: &[f32],
        weights: &[f32],
        mask: &[f32],
        epochs: usize,
        rng: &mut impl rand::Rng,
    ) -> Result<f64, TrainError> {
        let (k, d) = (self.k, self.dim);
        let n = x.len() / d.max(1);
        if n == 0 || targets.len() != n * k * k || weights.len() != n * k || mask.len() != k * k {
            return Err(TrainError::Internal(
                "imitation batch shapes do not match the network".into(),
            ));
        }
        let x = Tensor::from_vec(x.to_vec(), (n, d), &self.device)?;
        let t = Tensor::from_vec(targets.to_vec(), (n, k, k), &self.device)?;
        let w = Tensor::from_vec(weights.to_vec(), (n, k), &self.device)?;
        let m = Tensor::from_vec(mask.to_vec(), (1, k, k), &self.device)?;
        let off = ((m.ones_like()? - &m)? * -1e9)?;
        let mut order: Vec<u32> = (0..n as u32).collect();
        let mut last = 0.0;
        for _ in 0..epochs {
            rand::seq::SliceRandom::shuffle(order.as_mut_slice(), rng);
            let (mut total, mut batches) = (0.0f64, 0.0f64);
            for chunk in order.chunks(self.cfg.minibatch.max(1)) {
                let idx = Tensor::from_slice(chunk, chunk.len(), &self.device)?;
                let b = chunk.len();
                let logits = self
                    .actor
                    .forward(&x.index_select(&idx, 0)?)?
                    .reshape((b, k, k))?;
                let masked = (logits.broadcast_mul(&m)? + off.broadcast_as((b, k, k))?)?;
                let lsm = candle_nn::ops::log_softmax(&masked, D::Minus1)?;
                let ce = (t.index_select(&idx, 0)? * lsm)?.sum(D::Minus1)?.neg()?;
                let wb = w.index_select(&idx, 0)?;
                let loss = ((ce * &wb)?.sum_all()? / wb.sum_all()?.to_scalar::<f32>()?.max(1e-9) as f64)?;
                self.opt.backward_step(&loss)?;
                total += f64::from(loss.to_scalar::<f32>()?);
                batches += 1.0;
            }
            last = total / batches.max(1.0);
        }
        Ok(last)
    }

    /// One PPO update on a batch of episodes.
    pub fn update(
        &mut self,
        episodes: &[Episode],
        rng: &mut impl rand::Rng,
    ) -> Result<UpdateStats, TrainError> {
        let kk = self.k * self.k;
        let mut xs = Vec::new();
        let mut masks = Vec::new();
        let mut counts = Vec::new();
        for ep in episodes {
            for s in &ep.steps {
                if s.features.len() != self.dim || s.counts.len() != kk {
                    return Err(TrainError::Internal(
                        "a step's shape does not match the network".into(),
                    ));
                }
                xs.extend_from_slice(&s.features);
                masks.extend(s.mask.iter().map(|&m| if m { 1f32 } else { 0.0 }));
                counts.extend(s.counts.iter().map(|&c| c as f32));
            }
        }
        let n = xs.len() / self.dim;
        if n == 0 {
            return Ok(UpdateStats::default());
        }
        let x = Tensor::from_vec(xs, (n, self.dim), &self.device)?;
        let mask = Tensor::from_vec(masks, (n, kk), &self.device)?;
        let cnt = Tensor::from_vec(counts, (n, kk), &self.device)?;
        let (old_lp, _) = self.log_probs(&x, &mask, &cnt)?;
        let old_lp = old_lp.detach();
        let values: Vec<f32> = self.critic.forward(&x)?.squeeze(1)?.to_vec1()?;
        let (mut adv, ret) = gae(
            episodes.iter().map(|ep| ep.rewards.as_slice()),
            &values,
            self.cfg.gamma,
            self.cfg.lambda,
        );
        let mean = adv.iter().map(|&a| f64::from(a)).sum::<f64>() / n as f64;
        let sd = (adv.iter().map(|&a| (f64::from(a) - mean).powi(2)).sum::<f64>() / n as f64)
            .sqrt()
            .max(1e-8);
        for a in &mut adv {
            *a = ((f64::from(*a) - mean) / sd) as f32;
        }
        let adv = Tensor::from_vec(adv, n, &self.device)?;
        let ret = Tensor::from_vec(ret, n, &self.device)?;
        let mut stats = UpdateStats {
            samples: n,
            ..Default::default()
        };
        let mut batches = 0f64;
        let mut order: Vec<u32> = (0..n as u32).collect();
        'epochs: for _ in 0..self.cfg.epochs {
            rand::seq::SliceRandom::shuffle(order.as_mut_slice(), rng);
            for chunk in order.chunks(self.cfg.minibatch.max(1)) {
                let idx = Tensor::from_slice(chunk, chunk.len(), &self.device)?;
                let (xb, mb, cb) = (
                    x.index_select(&idx, 0)?,
                    mask.index_select(&idx, 0)?,
                    cnt.index_select(&idx, 0)?,
                );
                let (lp, ent) = self.log_probs(&xb, &mb, &cb)?;
                let log_ratio = (&lp - old_lp.index_select(&idx, 0)?)?.clamp(-20.0, 20.0)?;
                let approx_kl = f64::from(log_ratio.neg()?.mean_all()?.to_scalar::<f32>()?);
                if approx_kl > self.cfg.target_kl {
                    break 'epochs;
                }
                let ratio = log_ratio.exp()?;
                let ab = adv.index_select(&idx, 0)?;
                let s1 = (&ratio * &ab)?;
                let s2 = (ratio.clamp(1.0 - self.cfg.clip, 1.0 + self.cfg.clip)? * &ab)?;
                let pg = s1.minimum(&s2)?.mean_all()?.neg()?;
                let v = self.critic.forward(&xb)?.squeeze(1)?;
                let vl = (v - ret.index_select(&idx, 0)?)?.sqr()?.mean_all()?;
                let em = ent.mean_all()?;
                let loss = ((&pg + (&vl * self.cfg.value_coef)?)? - (&em * self.cfg.entropy)?)?;
                self.opt.backward_step(&loss)?;
                stats.policy_loss += f64::from(pg.to_scalar::<f32>()?);
                stats.value_loss += f64::from(vl.to_scalar::<f32>()?);
                stats.entropy += f64::from(em.to_scalar::<f32>()?);
                batches += 1.0;
            }
        }
        let batches = batches.max(1.0);
        stats.policy_loss /= batches;
        stats.value_loss /= batches;
        stats.entropy /= batches;
        Ok(stats)
    }
}

/// Generalised advantage estimation, episode by episode (each episode's end terminal):
/// the advantages and the critic's targets (advantage + value), in the order the
/// episodes' steps are laid out in `values`.
pub fn gae<'a>(
    episodes: impl IntoIterator<Item = &'a [f32]>,
    values: &[f32],
    gamma: f64,
    lambda: f64,
) -> (Vec<f32>, Vec<f32>) {
    let mut adv = vec![0f32; values.len()];
    let mut ret = vec![0f32; values.len()];
    let mut base = 0;
    for rewards in episodes {
        let len = rewards.len();
        let mut next_adv = 0f64;
        for t in (0..len).rev() {
            let v = f64::from(values[base + t]);
            let next_v = if t + 1 < len {
                f64::from(values[base + t + 1])
            } else {
                0.0
            };
            let delta = f64::from(rewards[t]) + gamma * next_v - v;
            next_adv = delta + gamma * lambda * next_adv;
            adv[base + t] = next_adv as f32;
            ret[base + t] = (next_adv + v) as f32;
        }
        base += len;
    }
    (adv, ret)
}

#[cfg(test)]
mod tests {
    use super::gae;

    #[test]
    fn gae_with_lambda_one_is_the_discounted_return_minus_the_value() {
        let rewards = [1.0f32, 2.0, 3.0];
        let values = [0.5f32, 0.25, 0.125];
        let (adv, ret) = gae([rewards.as_slice()], &values, 0.9, 1.0);
        // Returns: G2 = 3, G1 = 2 + 0.9·3 = 4.7, G0 = 1 + 0.9·4.7 = 5.23.
        for (t, g) in [5.23f32, 4.7, 3.0].into_iter().enumerate() {
            assert!((ret[t] - g).abs() < 1e-5, "return at {t}: {} vs {g}", ret[t]);
            assert!((adv[t] - (g - values[t])).abs() < 1e-5, "advantage at {t}");
        }
    }

    #[test]
    fn gae_with_lambda_zero_is_the_one_step_td_error() {
        let rewards = [1.0f32, -1.0];
        let values = [2.0f32, 4.0];
        let (adv, _) = gae([rewards.as_slice()], &values, 0.5, 0.0);
        assert!((adv[0] - (1.0 + 0.5 * 4.0 - 2.0)).abs() < 1e-6);
        // The episode's last step is terminal: no bootstrap from a next value.
        assert!((adv[1] - (-1.0 - 4.0)).abs() < 1e-6);
    }

    #[test]
    fn gae_does_not_carry_advantage_across_episodes() {
        let (alone, _) = gae([[5.0f32].as_slice()], &[0.0], 0.99, 0.95);
        let two = [[100.0f32, 100.0].as_slice(), [5.0f32].as_slice()];
        let (both, _) = gae(two, &[0.0, 0.0, 0.0], 0.99, 0.95);
        assert_eq!(both[2], alone[0]);
        assert!(both[0] > both[1], "the first episode's own return accumulates");
    }
}
