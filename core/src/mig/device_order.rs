//! The order of a padded node's devices within each MIG type, kept across re-layouts.
//!
//! Slurm numbers a node's devices type by type, and within a type in gres.conf's order;
//! with padding every type's block stays where it is, so a running job keeps its device
//! index exactly when its device keeps its *position within its type*. Writing gres.conf
//! in GPU and placement order moves a busy device whenever a new instance of its type
//! comes before it; [`kept_order`] instead keeps each busy device that survives a
//! re-layout at its position and gives the others the positions left free, in GPU and
//! placement order (docs/admin-guide.md, "Padding"). The idle devices may move: no job
//! holds them, and the controller drains the node in Slurm while the re-layout runs, so
//! none starts on them before the new order is in place. Keeping the idle ones in place
//! too was measured worse (BENCHMARKS.md, "gres.conf's order within a type"). The
//! controller computes the order, the node agent writes it, and the simulator models it
//! with this one function.

/// The devices `then` (one node's, after a re-layout, grouped by type in the order the
/// types are to be written, each type in GPU and placement order) in the order that keeps
/// each device of `now` (the node's devices in gres.conf's order before it) that is
/// `busy` at its position within its type (`kind`): a busy device still there whose
/// position is below its type's new count keeps it; the other positions go to the
/// remaining devices of the type in `then`'s order. The types come out in `then`'s order.
pub fn kept_order<D, K>(now: &[D], then: &[D], kind: impl Fn(&D) -> K, busy: impl Fn(&D) -> bool) -> Vec<D>
where
    D: PartialEq + Clone,
    K: PartialEq,
{
    let mut out = Vec::with_capacity(then.len());
    let mut rest = then;
    while let Some(first) = rest.first() {
        let k = kind(first);
        let n = rest.iter().take_while(|d| kind(d) == k).count();
        let (devices, tail) = rest.split_at(n);
        rest = tail;
        let before: Vec<&D> = now.iter().filter(|d| kind(d) == k).collect();
        let mut slots: Vec<Option<&D>> = vec![None; n];
        for (p, d) in before.iter().enumerate().take(n) {
            if busy(d) && devices.contains(d) {
                slots[p] = Some(d);
            }
        }
        let kept: Vec<&D> = slots.iter().flatten().copied().collect();
        let mut others = devices.iter().filter(|d| !kept.contains(d));
        for slot in &mut slots {
            if slot.is_none() {
                *slot = others.next();
            }
        }
        out.extend(slots.into_iter().flatten().cloned());
    }
    out
}

/// The position of `device` within its type (`kind`) in `order`, if it is there.
pub fn position_within_type<D, K>(order: &[D], device: &D, kind: impl Fn(&D) -> K) -> Option<usize>
where
    D: PartialEq,
    K: PartialEq,
{
    let k = kind(device);
    order.iter().filter(|d| kind(d) == k).position(|d| d == device)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device: (GPU, type, placement start).
    type Dev = (u32, &'static str, u8);

    fn ty(d: &Dev) -> &'static str {
        d.1
    }

    #[test]
    fn a_busy_device_keeps_its_position_and_the_others_fill_the_rest_in_gpu_order() {
        // GPU 0's 3g@4 (busy) and GPU 1's 3g@4 (busy) are the 3g's first and third, GPU 1's
        // 3g@0 (idle) the second; GPU 0 gets a new 3g@0, which comes first in GPU and
        // placement order. The busy ones stay first and third; the idle one and the new
        // one take the second and fourth, in GPU and placement order.
        let now: Vec<Dev> = vec![(0, "3g", 4), (1, "3g", 0), (1, "3g", 4), (1, "4g", 0)];
        let then: Vec<Dev> = vec![
            (0, "3g", 0),
            (0, "3g", 4),
            (1, "3g", 0),
            (1, "3g", 4),
            (1, "4g", 0),
        ];
        let busy = |d: &Dev| matches!(d, (0, "3g", 4) | (1, "3g", 4));
        let order = kept_order(&now, &then, ty, busy);
        assert_eq!(
            order,
            vec![
                (0, "3g", 4),
                (0, "3g", 0),
                (1, "3g", 4),
                (1, "3g", 0),
                (1, "4g", 0)
            ]
        );
        for d in now.iter().filter(|d| busy(d)) {
            assert_eq!(
                position_within_type(&order, d, ty),
                position_within_type(&now, d, ty),
                "{d:?}"
            );
        }
    }

    #[test]
    fn a_busy_device_beyond_its_types_new_count_moves_and_the_others_fill_the_gaps() {
        // Three 2g; GPU 0's two go, so the node has one left: GPU 1's busy 2g (position 2
        // now) cannot keep its position and takes position 0.
        let now: Vec<Dev> = vec![(0, "2g", 0), (0, "2g", 2), (1, "2g", 0)];
        let then: Vec<Dev> = vec![(1, "2g", 0), (0, "7g", 0)];
        let order = kept_order(&now, &then, ty, |_| true);
        assert_eq!(order, then);
        assert_eq!(position_within_type(&order, &(1, "2g", 0), ty), Some(0));
        assert_eq!(position_within_type(&now, &(1, "2g", 0), ty), Some(2));
    }

    #[test]
    fn with_nothing_busy_the_order_is_the_given_one() {
        let then: Vec<Dev> = vec![(0, "1g", 0), (0, "1g", 1), (1, "3g", 4)];
        assert_eq!(kept_order(&[], &then, ty, |_| true), then);
        // The same devices again: busy, the order of `now` within each type (types as in
        // `then`); idle, the order of `then`.
        let now: Vec<Dev> = vec![(1, "3g", 4), (0, "1g", 1), (0, "1g", 0)];
        assert_eq!(
            kept_order(&now, &then, ty, |_| true),
            vec![(0, "1g", 1), (0, "1g", 0), (1, "3g", 4)]
        );
        assert_eq!(kept_order(&now, &then, ty, |_| false), then);
    }
}
