//! Which GPU of a node takes which configuration when the node should hold a given mix
//! (a time-of-day schedule's layout): as few GPUs move as possible, and those whose move
//! stops the fewest running jobs go first. In drain mode a GPU whose move would destroy a
//! busy instance waits, so choosing the idle ones is what lets the node change at all.

/// Targets for one node's GPUs, now in configurations `current`, that give the node the
/// configurations of `want` (one per GPU, as a multiset: which GPU takes which is free).
/// A GPU already in a configuration the node still needs keeps it; where the node has
/// more GPUs in a configuration than it needs, those dearest to move stay. The GPUs that
/// move take the missing configurations, the cheapest (GPU, configuration) pair first.
/// `cost(i, c)` is what moving the node's GPU `i` to configuration `c` stops (its busy
/// instances that `c` destroys). `want` is cycled when shorter than `current`.
pub fn assign_mix(current: &[u16], want: &[u16], cost: impl Fn(usize, u16) -> u32) -> Vec<u16> {
    if want.is_empty() {
        return current.to_vec();
    }
    let mut missing: Vec<u16> = (0..current.len()).map(|i| want[i % want.len()]).collect();
    // How dear a GPU is to move: the least its move to another wanted configuration stops.
    let dearness = |i: usize| {
        missing
            .iter()
            .filter(|&&c| c != current[i])
            .map(|&c| cost(i, c))
            .min()
            .unwrap_or(0)
    };
    let mut by_dearness: Vec<(u32, usize)> = (0..current.len()).map(|i| (dearness(i), i)).collect();
    by_dearness.sort_by_key(|&(d, i)| (std::cmp::Reverse(d), i));
    let mut movers = Vec::new();
    for (_, i) in by_dearness {
        match missing.iter().position(|&c| c == current[i]) {
            Some(p) => {
                missing.swap_remove(p);
            }
            None => movers.push(i),
        }
    }
    let mut pairs: Vec<(u32, usize, usize)> = movers
        .iter()
        .flat_map(|&i| (0..missing.len()).map(move |m| (i, m)))
        .map(|(i, m)| (cost(i, missing[m]), i, m))
        .collect();
    pairs.sort_unstable();
    let mut next = current.to_vec();
    let (mut taken, mut moved) = (vec![false; missing.len()], vec![false; current.len()]);
    for (_, i, m) in pairs {
        if !taken[m] && !moved[i] {
            taken[m] = true;
            moved[i] = true;
            next[i] = missing[m];
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::assign_mix;

    #[test]
    fn a_node_reaches_its_mix_by_moving_the_gpus_whose_move_stops_nothing() {
        // Four GPUs in c2 c2 c2 c6 (indices 1, 1, 1, 5) should hold c2 c2 c6 c6: one c2
        // goes. GPUs 0 and 1 run a job on their 4g (moving them to c6 stops it), GPU 2
        // not: GPU 2 moves.
        let cost = |i: usize, c: u16| u32::from(i < 2 && c == 5);
        assert_eq!(assign_mix(&[1, 1, 1, 5], &[1, 1, 5, 5], cost), vec![1, 1, 5, 5]);
        // The same mix in another order, and the busy GPU last: still the idle one moves.
        let cost = |i: usize, c: u16| u32::from(i != 0 && c == 5);
        assert_eq!(assign_mix(&[1, 1, 1, 5], &[5, 1, 5, 1], cost), vec![5, 1, 1, 5]);
        // Nothing is free: one GPU moves all the same (drain mode then waits).
        let next = assign_mix(&[1, 1, 1, 5], &[1, 1, 5, 5], |_, c| u32::from(c == 5));
        assert_eq!(next.iter().filter(|&&c| c == 5).count(), 2);
        assert_eq!(next.iter().filter(|&&c| c == 1).count(), 2);
    }

    #[test]
    fn gpus_in_a_wanted_configuration_stay_and_a_short_mix_is_cycled() {
        assert_eq!(assign_mix(&[0, 1], &[1, 0], |_, _| 0), vec![0, 1]);
        assert_eq!(assign_mix(&[0, 0, 0, 0], &[0, 1], |_, _| 0), vec![0, 0, 1, 1]);
        assert_eq!(assign_mix(&[3, 3], &[], |_, _| 0), vec![3, 3]);
    }
}
