//! The policy network as plain data: a dense MLP `D → H → … → K·K` and its forward pass.
//!
//! This is the single description of the network shared by the trainer (which fills the
//! weights), the ONNX writer (which serialises them) and the tests (which check that ONNX
//! Runtime computes the same logits as [`PolicyNetwork::forward`]).

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

/// Activation applied after every hidden layer (never after the last one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// Hyperbolic tangent, the policy's default.
    Tanh,
    /// No activation (a purely linear network; mostly for tests).
    Identity,
}

impl Activation {
    /// The ONNX operator implementing it, if any.
    pub fn onnx_op(self) -> Option<&'static str> {
        match self {
            Activation::Tanh => Some("Tanh"),
            Activation::Identity => None,
        }
    }

    fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Tanh => x.tanh(),
            Activation::Identity => x,
        }
    }
}

/// One fully connected layer: `y = W·x + b`.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    /// Input width.
    pub in_dim: usize,
    /// Output width.
    pub out_dim: usize,
    /// Weights `[out_dim, in_dim]`, row-major (candle's and PyTorch's `Linear` layout).
    pub w: Vec<f32>,
    /// Bias `[out_dim]`.
    pub b: Vec<f32>,
}

/// A network whose shapes or values cannot make a policy.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum NetworkError {
    /// No layers at all.
    #[error("the network has no layers")]
    Empty,
    /// A weight or bias vector of the wrong length.
    #[error("layer {layer}: {what} has {found} values, expected {expected}")]
    Size {
        /// Layer index.
        layer: usize,
        /// `w` or `b`.
        what: &'static str,
        /// Length found.
        found: usize,
        /// Length the dimensions require.
        expected: usize,
    },
    /// Consecutive layers whose widths do not chain.
    #[error("layer {layer} takes {found} inputs but the previous layer gives {expected}")]
    Chain {
        /// Layer index.
        layer: usize,
        /// `in_dim` of this layer.
        found: usize,
        /// `out_dim` of the previous layer.
        expected: usize,
    },
    /// A zero-width layer.
    #[error("layer {layer} has a zero dimension")]
    ZeroDim {
        /// Layer index.
        layer: usize,
    },
    /// The last layer's width is not K·K for any K.
    #[error("the output width {0} is not K·K for an integer K")]
    NotSquare(usize),
    /// NaN or infinite parameter.
    #[error("layer {layer}: {what}[{index}] is not finite")]
    NotFinite {
        /// Layer index.
        layer: usize,
        /// `w` or `b`.
        what: &'static str,
        /// Position in the vector.
        index: usize,
    },
    /// Input of the wrong length for the batch.
    #[error("input has {found} values, expected batch {batch} × {dim} = {}", batch * dim)]
    Input {
        /// Values given.
        found: usize,
        /// Batch size asked for.
        batch: usize,
        /// Input width of the network.
        dim: usize,
    },
}

/// The policy MLP: dense layers, `hidden` activation between them, linear output of
/// width K·K read as a `[K, K]` matrix of transition logits (row = current configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyNetwork {
    /// Layers, input first.
    pub layers: Vec<Dense>,
    /// Activation after every layer but the last.
    pub hidden: Activation,
}

impl PolicyNetwork {
    /// A network with Xavier-uniform weights and zero biases; `dims` = `[D, H…, K·K]`.
    ///
    /// Used for tests, benchmarks and as the trainer's starting point.
    pub fn init(dims: &[usize], hidden: Activation, rng: &mut ChaCha8Rng) -> PolicyNetwork {
        let layers = dims
            .windows(2)
            .map(|io| {
                let (in_dim, out_dim) = (io[0], io[1]);
                let limit = (6.0 / (in_dim + out_dim).max(1) as f32).sqrt();
                Dense {
                    in_dim,
                    out_dim,
                    w: (0..in_dim * out_dim)
                        .map(|_| rng.random_range(-limit..=limit))
                        .collect(),
                    b: vec![0.0; out_dim],
                }
            })
            .collect();
        PolicyNetwork { layers, hidden }
    }

    /// Checks shapes and that every parameter is finite; returns `(D, K)`.
    pub fn validate(&self) -> Result<(usize, usize), NetworkError> {
        let dk = self.check_shapes()?;
        for (i, l) in self.layers.iter().enumerate() {
            for (what, v) in [("w", &l.w), ("b", &l.b)] {
                if let Some(index) = v.iter().position(|x| !x.is_finite()) {
                    return Err(NetworkError::NotFinite {
                        layer: i,
                        what,
                        index,
                    });
                }
            }
        }
        Ok(dk)
    }

    /// Checks shapes only (cheap enough for every forward pass); returns `(D, K)`.
    fn check_shapes(&self) -> Result<(usize, usize), NetworkError> {
        let first = self.layers.first().ok_or(NetworkError::Empty)?;
        let mut prev = first.in_dim;
        for (i, l) in self.layers.iter().enumerate() {
            if l.in_dim == 0 || l.out_dim == 0 {
                return Err(NetworkError::ZeroDim { layer: i });
            }
            if l.in_dim != prev {
                return Err(NetworkError::Chain {
                    layer: i,
                    found: l.in_dim,
                    expected: prev,
                });
            }
            for (what, v, expected) in [("w", &l.w, l.in_dim * l.out_dim), ("b", &l.b, l.out_dim)] {
                if v.len() != expected {
                    return Err(NetworkError::Size {
                        layer: i,
                        what,
                        found: v.len(),
                        expected,
                    });
                }
            }
            prev = l.out_dim;
        }
        let k = square_root(prev).ok_or(NetworkError::NotSquare(prev))?;
        Ok((first.in_dim, k))
    }

    /// Input width D (0 for an empty network).
    pub fn input_dim(&self) -> usize {
        self.layers.first().map_or(0, |l| l.in_dim)
    }

    /// Number of configurations K, if the output width is a square.
    pub fn configurations(&self) -> Option<usize> {
        self.layers.last().and_then(|l| square_root(l.out_dim))
    }

    /// Forward pass on a batch: `x` is `[batch, D]` row-major, the result `[batch, K, K]`.
    pub fn forward(&self, x: &[f32], batch: usize) -> Result<Vec<f32>, NetworkError> {
        let (dim, _) = self.check_shapes()?;
        if x.len() != batch * dim {
            return Err(NetworkError::Input {
                found: x.len(),
                batch,
                dim,
            });
        }
        let mut cur = x.to_vec();
        let last = self.layers.len() - 1;
        for (i, l) in self.layers.iter().enumerate() {
            let mut next = vec![0.0f32; batch * l.out_dim];
            for (xr, yr) in cur.chunks_exact(l.in_dim).zip(next.chunks_exact_mut(l.out_dim)) {
                for (o, y) in yr.iter_mut().enumerate() {
                    let row = &l.w[o * l.in_dim..(o + 1) * l.in_dim];
                    let dot: f32 = row.iter().zip(xr).map(|(w, v)| w * v).sum();
                    let z = dot + l.b[o];
                    *y = if i < last { self.hidden.apply(z) } else { z };
                }
            }
            cur = next;
        }
        Ok(cur)
    }
}

/// The integer square root of `n`, if `n` is a perfect square.
fn square_root(n: usize) -> Option<usize> {
    let r = (n as f64).sqrt().round() as usize;
    (r * r == n).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn tiny() -> PolicyNetwork {
        // 2 → 2 → 4 with hand-picked weights so the expected output is computed by hand.
        PolicyNetwork {
            layers: vec![
                Dense {
                    in_dim: 2,
                    out_dim: 2,
                    w: vec![1.0, 0.0, 0.5, -1.0],
                    b: vec![0.0, 0.1],
                },
                Dense {
                    in_dim: 2,
                    out_dim: 4,
                    w: vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0, -1.0, 2.0],
                    b: vec![0.0, 0.0, 0.5, 0.0],
                },
            ],
            hidden: Activation::Tanh,
        }
    }

    #[test]
    fn forward_matches_a_hand_computation() {
        let net = tiny();
        assert_eq!(net.validate(), Ok((2, 2)));
        let x = [0.3f32, -0.2, 0.0, 0.0];
        let y = net.forward(&x, 2).unwrap();
        let h0 = 0.3f32.tanh();
        let h1 = (0.5f32 * 0.3 + 0.2 + 0.1).tanh();
        let want0 = [h0, h1, h0 + h1 + 0.5, -h0 + 2.0 * h1];
        for (a, b) in y[..4].iter().zip(want0) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        let z1 = 0.1f32.tanh();
        let want1 = [0.0, z1, z1 + 0.5, 2.0 * z1];
        for (a, b) in y[4..].iter().zip(want1) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn bad_shapes_are_named() {
        let mut net = tiny();
        net.layers[1].in_dim = 3;
        net.layers[1].w.push(0.0);
        net.layers[1].w.extend([0.0; 3]);
        assert!(matches!(
            net.validate(),
            Err(NetworkError::Chain { layer: 1, .. })
        ));
        let mut net = tiny();
        net.layers[0].b.pop();
        assert!(matches!(
            net.validate(),
            Err(NetworkError::Size {
                layer: 0,
                what: "b",
                ..
            })
        ));
        let mut net = tiny();
        net.layers[1].out_dim = 3;
        net.layers[1].w.truncate(6);
        net.layers[1].b.truncate(3);
        assert_eq!(net.validate(), Err(NetworkError::NotSquare(3)));
        let mut net = tiny();
        net.layers[0].w[2] = f32::NAN;
        assert!(matches!(
            net.validate(),
            Err(NetworkError::NotFinite { index: 2, .. })
        ));
        assert!(matches!(
            tiny().forward(&[0.0; 3], 2),
            Err(NetworkError::Input { .. })
        ));
        assert_eq!(
            PolicyNetwork {
                layers: vec![],
                hidden: Activation::Tanh
            }
            .validate(),
            Err(NetworkError::Empty)
        );
    }

    #[test]
    fn init_gives_the_requested_shapes_and_bounded_weights() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let net = PolicyNetwork::init(&[34, 64, 64, 144], Activation::Tanh, &mut rng);
        assert_eq!(net.validate(), Ok((34, 12)));
        let limit = (6.0f32 / (34.0 + 64.0)).sqrt();
        assert!(net.layers[0].w.iter().all(|w| w.abs() <= limit));
        assert!(net.layers[0].w.iter().any(|w| *w != 0.0));
    }
}
