//! Sorting permutations of index keys.

/// The permutation that sorts `keys` stably (entry `k` of the result is the `k`-th
/// entry in key order; entries of one key keep their order), where every key is below
/// `nkeys`: a counting sort, O(len + nkeys). The sparse layouts order entries by lane
/// with it (their keys are positions over the kept dims, rarely many more than the
/// entries); a comparison sort of a million keys took ten times as long.
///
/// ```
/// use masked_kernels::order::counting_order;
/// assert_eq!(counting_order(&[2, 0, 2, 1, 0], 3), [1, 4, 3, 0, 2]);
/// ```
///
/// # Panics
/// When a key is not below `nkeys`.
pub fn counting_order(keys: &[usize], nkeys: usize) -> Vec<usize> {
    let mut start = vec![0usize; nkeys + 1];
    for &k in keys {
        start[k + 1] += 1;
    }
    for g in 0..nkeys {
        start[g + 1] += start[g];
    }
    let mut perm = vec![0usize; keys.len()];
    for (e, &k) in keys.iter().enumerate() {
        perm[start[k]] = e;
        start[k] += 1;
    }
    perm
}

/// Whether a counting sort over `nkeys` keys suits `len` entries (its O(nkeys) count
/// array is not much larger than the entries).
pub fn counting_suits(nkeys: usize, len: usize) -> bool {
    nkeys <= 4 * len + 4096
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_order_is_the_stable_sort() {
        let mut x = 7u64;
        let keys: Vec<usize> = (0..5000)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (x >> 54) as usize
            })
            .collect();
        let mut want: Vec<usize> = (0..keys.len()).collect();
        want.sort_by_key(|&e| keys[e]);
        assert_eq!(counting_order(&keys, 1024), want);
        assert!(counting_order(&[], 0).is_empty());
        assert!(counting_suits(4096, 0) && !counting_suits(5000, 100));
    }
}
