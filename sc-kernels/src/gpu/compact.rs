//! Row and column selection of a device CSR matrix (AnnData's `adata[mask]` and
//! `adata[:, mask]`), entirely on the device: row lengths, a prefix sum, then the copy.

use super::module_cache::KernelSource;
use super::reduce::warps_for_rows;
use super::{grid_for, scan, DeviceCsr, GpuContext};
use crate::error::{KernelError, Result};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "compact",
    source: include_str!("compact.cu"),
};

/// The positions of the true entries (the rows to gather).
pub fn kept_positions(keep: &[bool]) -> Vec<u64> {
    keep.iter()
        .enumerate()
        .filter(|(_, &k)| k)
        .map(|(i, _)| i as u64)
        .collect()
}

/// New index of each column (`-1`: dropped).
pub fn column_map(keep: &[bool]) -> Vec<i32> {
    let mut next = 0i32;
    keep.iter()
        .map(|&k| {
            if k {
                next += 1;
                next - 1
            } else {
                -1
            }
        })
        .collect()
}

fn check_len(what: &str, got: usize, expected: usize) -> Result<()> {
    if got != expected {
        return Err(KernelError::Shape(format!(
            "{what} mask has {got} entries for {expected}"
        )));
    }
    Ok(())
}

/// The rows whose mask entry is true.
pub fn select_rows(ctx: &GpuContext, x: &DeviceCsr, keep: &[bool]) -> Result<DeviceCsr> {
    check_len("row", keep.len(), x.n_rows)?;
    let rows_h = kept_positions(keep);
    let m = rows_h.len();
    let rows = ctx.upload(if rows_h.is_empty() {
        &[0u64][..]
    } else {
        &rows_h
    })?;
    let lens = ctx.alloc::<u64>(m.max(1))?;
    let m64 = m as u64;
    let f = ctx.function(SRC, "gathered_row_lengths")?;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr).arg(&rows).arg(&m64).arg(&lens);
    ctx.launch(l, grid_for(m), "gathered_row_lengths")?;
    let mut lens = lens;
    lens.resize(m)?;
    let (indptr, nnz) = scan::exclusive_scan(ctx, &lens)?;
    drop(lens);
    let indices = ctx.alloc::<u32>(nnz as usize)?;
    let data = ctx.alloc::<f32>(nnz as usize)?;
    let f = ctx.function(SRC, "gather_rows")?;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&x.data)
        .arg(&rows)
        .arg(&m64)
        .arg(&indptr)
        .arg(&indices)
        .arg(&data);
    ctx.launch(l, warps_for_rows(m), "gather_rows")?;
    Ok(DeviceCsr {
        n_rows: m,
        n_cols: x.n_cols,
        indptr,
        indices,
        data,
    })
}

/// The columns whose mask entry is true, renumbered in order.
pub fn select_cols(ctx: &GpuContext, x: &DeviceCsr, keep: &[bool]) -> Result<DeviceCsr> {
    check_len("column", keep.len(), x.n_cols)?;
    let map_h = column_map(keep);
    let n_new = keep.iter().filter(|&&k| k).count();
    let map = ctx.upload(if map_h.is_empty() {
        &[-1i32][..]
    } else {
        &map_h
    })?;
    let n = x.n_rows as u64;
    let lens = ctx.alloc::<u64>(x.n_rows)?;
    let f = ctx.function(SRC, "kept_col_lengths")?;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&n)
        .arg(&map)
        .arg(&lens);
    ctx.launch(l, warps_for_rows(x.n_rows), "kept_col_lengths")?;
    let (indptr, nnz) = scan::exclusive_scan(ctx, &lens)?;
    drop(lens);
    let indices = ctx.alloc::<u32>(nnz as usize)?;
    let data = ctx.alloc::<f32>(nnz as usize)?;
    let f = ctx.function(SRC, "compact_cols")?;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&x.data)
        .arg(&n)
        .arg(&map)
        .arg(&indptr)
        .arg(&indices)
        .arg(&data);
    ctx.launch(l, warps_for_rows(x.n_rows), "compact_cols")?;
    Ok(DeviceCsr {
        n_rows: x.n_rows,
        n_cols: n_new,
        indptr,
        indices,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_maths() {
        assert_eq!(kept_positions(&[true, false, true, true]), vec![0, 2, 3]);
        assert_eq!(column_map(&[false, true, false, true]), vec![-1, 0, -1, 1]);
        assert!(kept_positions(&[]).is_empty());
    }
}
