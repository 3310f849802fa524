//! Items grouped by a small integer key, each group's items in their order: a stable counting
//! sort (harmony's cells by batch, the inverted file's training points by list).

/// The group of an item that belongs to none.
pub const NO_GROUP: u32 = u32::MAX;

/// Refuses a label of `n_groups` or more (other than [`NO_GROUP`]), naming the parameter
/// `name` the labels came from.
pub fn check_labels(groups: &[u32], n_groups: usize, name: &'static str) -> crate::Result<()> {
    match groups
        .iter()
        .find(|&&g| g != NO_GROUP && g as usize >= n_groups)
    {
        Some(&g) => Err(crate::KernelError::param(
            name,
            format!("group {g} of {n_groups} groups"),
        )),
        None => Ok(()),
    }
}

/// [`group_by_key`] of group labels (`< n_groups` or [`NO_GROUP`]): the items of no group
/// go last, after `starts[n_groups]`. A label of `n_groups` or more (not `NO_GROUP`) panics.
pub fn group_members(groups: &[u32], n_groups: usize) -> (Vec<u32>, Vec<usize>) {
    let keys: Vec<u32> = groups
        .iter()
        .map(|&g| if g == NO_GROUP { n_groups as u32 } else { g })
        .collect();
    group_by_key(&keys, n_groups + 1)
}

/// The positions of `keys` grouped by key (`0..n_groups`), each group in increasing position,
/// and where each group starts (`n_groups + 1` offsets). A key of `n_groups` or more panics.
pub fn group_by_key(keys: &[u32], n_groups: usize) -> (Vec<u32>, Vec<usize>) {
    let mut starts = vec![0usize; n_groups + 1];
    for &k in keys {
        starts[k as usize + 1] += 1;
    }
    for g in 0..n_groups {
        starts[g + 1] += starts[g];
    }
    let mut fill = starts.clone();
    let mut order = vec![0u32; keys.len()];
    for (p, &k) in keys.iter().enumerate() {
        order[fill[k as usize]] = p as u32;
        fill[k as usize] += 1;
    }
    (order, starts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_their_items_in_order() {
        let (order, starts) = group_by_key(&[2, 0, 2, 1, 2, 0], 4);
        assert_eq!(order, vec![1, 5, 3, 0, 2, 4]);
        assert_eq!(starts, vec![0, 2, 3, 6, 6]);
        assert_eq!(group_by_key(&[], 2), (vec![], vec![0, 0, 0]));
    }
}
