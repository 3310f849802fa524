//! The GPU twin of [`super::diffmap`]: the same checks and transition matrix (built on the host,
//! `O(nnz)`), and the same eigensolver ([`crate::eigsh::lanczos`]) with its basis and the
//! matrix on the device (`diffmap.cu`), summing and rounding as [`crate::eigsh::HostBasis`]
//! does: the host's bits.

use super::{components, prepare, Diffmap, TOLERANCE};
use crate::csr::CsrMatrix;
use crate::eigsh::{basis_len, lanczos, Basis, LANES, ROWS};
use crate::error::Result;
use crate::gpu::dense_reduce::{chunked_sums_into, PARTIAL_BYTES};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::trace::{tracing, PhaseTrace};
use crate::gpu::{blocks_for_rows, DeviceVec, GpuContext};
use faer::{Mat, MatRef};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "diffmap",
    source: include_str!("diffmap.cu"),
};

/// The module [`diffmap_gpu`] launches.
pub const KERNELS: [KernelSource; 1] = [SRC];

/// [`super::diffmap`] on `ctx`'s GPU: the same components and eigenvalues, bit for bit.
pub fn diffmap_gpu(
    ctx: &GpuContext,
    graph: &CsrMatrix<f32>,
    n_comps: usize,
    seed: u64,
) -> Result<Diffmap> {
    let mut trace = PhaseTrace::on_host("diffmap");
    let (t, k) = prepare(graph, n_comps)?;
    trace.mark("transitions (host)")?;
    ctx.bind_to_thread()?;
    let mut trace = PhaseTrace::new(ctx, "diffmap");
    let basis = DeviceBasis::new(ctx, &t, basis_len(t.n_rows, k))?;
    drop(t);
    trace.mark("upload")?;
    let pairs = if tracing() {
        // Each operation waited for and timed, to see where the iteration's time goes.
        let mut timed = Timed {
            basis,
            times: Vec::new(),
        };
        let pairs = lanczos(&mut timed, k, TOLERANCE, seed)?;
        for (what, seconds, calls) in &timed.times {
            trace.part(&format!("{what}, {calls} calls"), *seconds);
        }
        pairs
    } else {
        let mut basis = basis;
        lanczos(&mut basis, k, TOLERANCE, seed)?
    };
    trace.mark(&format!("lanczos ({} restarts)", pairs.restarts))?;
    Ok(components(pairs))
}

/// The device basis with each operation waited for and its time added up by name.
struct Timed<'a> {
    basis: DeviceBasis<'a>,
    times: Vec<(&'static str, f64, u64)>,
}

impl Timed<'_> {
    fn time<T>(
        &mut self,
        what: &'static str,
        f: impl FnOnce(&mut DeviceBasis) -> Result<T>,
    ) -> Result<T> {
        let start = std::time::Instant::now();
        let out = f(&mut self.basis)?;
        self.basis.ctx.synchronize()?;
        let seconds = start.elapsed().as_secs_f64();
        match self.times.iter_mut().find(|t| t.0 == what) {
            Some(t) => (t.1, t.2) = (t.1 + seconds, t.2 + 1),
            None => self.times.push((what, seconds, 1)),
        }
        Ok(out)
    }
}

impl Basis for Timed<'_> {
    fn rows(&self) -> usize {
        self.basis.rows()
    }
    fn apply(&mut self, j: usize) -> Result<()> {
        self.time("apply", |b| b.apply(j))
    }
    fn norm(&mut self) -> Result<f64> {
        self.time("norm", |b| b.norm())
    }
    fn orthogonalize(&mut self, cols: usize) -> Result<(Vec<f64>, f64)> {
        self.time("orthogonalize", |b| b.orthogonalize(cols))
    }
    fn store(&mut self, j: usize, d: f64) -> Result<()> {
        self.time("store", |b| b.store(j, d))
    }
    fn zero(&mut self, j: usize) -> Result<()> {
        self.time("zero", |b| b.zero(j))
    }
    fn set_w(&mut self, values: &[f64]) -> Result<()> {
        self.time("set_w", |b| b.set_w(values))
    }
    fn restart(&mut self, m: usize, coefs: &[Vec<f64>]) -> Result<()> {
        self.time("restart", |b| b.restart(m, coefs))
    }
    fn combine(&self, m: usize, coefs: &[Vec<f64>]) -> Result<Mat<f64>> {
        self.basis.combine(m, coefs)
    }
}

/// Rows a lane of `diffmap_project_dots` holds (`LANE_ROWS` in `diffmap.cu`): a thread block a
/// block of [`ROWS`] rows.
const LANE_ROWS: usize = 32;
const _: () = assert!(LANES * LANE_ROWS == ROWS);
/// Threads of a `diffmap_project_dots` block (`WARPS` in `diffmap.cu`: four warps).
const DOTS_THREADS: u32 = 4 * LANES as u32;
/// Outputs a thread of `diffmap_combine` forms (`COMBINE_OUTS` in `diffmap.cu`).
const COMBINE_OUTS: usize = 8;

/// What a pass over the rows sums after its subtraction.
enum Dots {
    /// `column[c] . w` for `c <` this.
    Columns(usize),
    /// `w . w`.
    Own,
}

/// The Lanczos basis (`m + 1` columns, column-major), the work vector (and a second one that a
/// projection writes into) and the matrix, on the device.
struct DeviceBasis<'a> {
    ctx: &'a GpuContext,
    n: usize,
    columns: DeviceVec<f64>,
    w: DeviceVec<f64>,
    w_alt: DeviceVec<f64>,
    indptr: DeviceVec<u64>,
    indices: DeviceVec<u32>,
    data: DeviceVec<f64>,
}

impl<'a> DeviceBasis<'a> {
    fn new(ctx: &'a GpuContext, t: &CsrMatrix<f64>, m: usize) -> Result<Self> {
        let n = t.n_rows;
        Ok(DeviceBasis {
            ctx,
            n,
            columns: ctx.zeros::<f64>((m + 1) * n)?,
            w: ctx.zeros::<f64>(n)?,
            w_alt: ctx.zeros::<f64>(n)?,
            indptr: ctx.upload(&t.indptr)?,
            indices: ctx.upload(&t.indices)?,
            data: ctx.upload(&t.data)?,
        })
    }

    /// One pass over the rows (`diffmap_project_dots`): with `sub` (`h`'s device address and
    /// its length `cols`), `w -= h_c column[c]` for `c < cols` in order (written into the other
    /// work vector, which becomes `w`); then `dots`' sums (at least one), in [`ROWS`]-row
    /// chunks as the host adds them, queued into the zeros at device address `total`. Nothing
    /// is waited for.
    fn pass(&mut self, sub: Option<(u64, usize)>, dots: Dots, total: u64) -> Result<()> {
        let ctx = self.ctx;
        let f = ctx.function(SRC, "diffmap_project_dots")?;
        let (h, sub_cols) = sub.map_or((0, 0), |(h, cols)| (h, cols as u64));
        let w_out = if sub.is_some() { self.w_alt.ptr() } else { 0 };
        let (dot_cols, self_dot) = match dots {
            Dots::Columns(cols) => (cols, 0i32),
            Dots::Own => (1, 1),
        };
        let (n, dot_cols64) = (self.n as u64, dot_cols as u64);
        let (columns, w) = (&self.columns, &self.w);
        let shape = (self.n, ROWS, dot_cols);
        chunked_sums_into(ctx, shape, PARTIAL_BYTES, total, |first, count, partial| {
            let mut l = ctx.launcher(&f);
            l.arg(columns)
                .arg(&n)
                .arg(&h)
                .arg(&sub_cols)
                .arg(w)
                .arg(&w_out);
            l.arg(&dot_cols64).arg(&self_dot).arg(&first).arg(partial);
            // A thread block a block of rows.
            let cfg = blocks_for_rows(count as usize, DOTS_THREADS);
            ctx.launch(l, cfg, "diffmap_project_dots")
        })?;
        if sub.is_some() {
            std::mem::swap(&mut self.w, &mut self.w_alt);
        }
        Ok(())
    }

    /// `coefs` (each `m` long) on the device, one after another.
    fn upload_coefs(&self, m: usize, coefs: &[Vec<f64>]) -> Result<DeviceVec<f64>> {
        let flat: Vec<f64> = coefs.iter().flat_map(|c| c[..m].iter().copied()).collect();
        self.ctx.upload(&flat)
    }

    /// `out = sum_j coefs[c][j] column[j]` for every `c`, column-major.
    fn combine_into(&self, m: usize, coefs: &[Vec<f64>], out: &DeviceVec<f64>) -> Result<()> {
        let ctx = self.ctx;
        let f = ctx.function(SRC, "diffmap_combine")?;
        let d = self.upload_coefs(m, coefs)?;
        let (n, m64, count) = (self.n as u64, m as u64, coefs.len() as u64);
        let mut l = ctx.launcher(&f);
        l.arg(&self.columns)
            .arg(&n)
            .arg(&m64)
            .arg(&d)
            .arg(&count)
            .arg(out);
        let threads = coefs.len().div_ceil(COMBINE_OUTS) * self.n;
        ctx.launch(l, ctx.filling_grid(threads), "diffmap_combine")
    }
}

impl Basis for DeviceBasis<'_> {
    fn rows(&self) -> usize {
        self.n
    }

    fn apply(&mut self, j: usize) -> Result<()> {
        let ctx = self.ctx;
        let f = ctx.function(SRC, "diffmap_apply")?;
        // Eight lanes a row.
        let cfg = ctx.filling_grid(self.n * 8);
        let (n, j) = (self.n as u64, j as u64);
        let mut l = ctx.launcher(&f);
        l.arg(&self.indptr)
            .arg(&self.indices)
            .arg(&self.data)
            .arg(&n);
        l.arg(&self.columns).arg(&j).arg(&mut self.w);
        ctx.launch(l, cfg, "diffmap_apply")
    }

    fn norm(&mut self) -> Result<f64> {
        let own = self.ctx.zeros::<f64>(1)?;
        self.pass(None, Dots::Own, own.ptr())?;
        Ok(self.ctx.download(&own)?[0].sqrt())
    }

    /// Three passes and one wait: the first projection's dots; its subtraction with the second
    /// projection's dots; the second's subtraction with `w . w`.
    fn orthogonalize(&mut self, cols: usize) -> Result<(Vec<f64>, f64)> {
        // Both projections' `h` and `w . w` side by side, downloaded at once.
        let sums = self.ctx.zeros::<f64>(2 * cols + 1)?;
        let at = |i: usize| sums.ptr() + (i * 8) as u64;
        self.pass(None, Dots::Columns(cols), at(0))?;
        self.pass(Some((at(0), cols)), Dots::Columns(cols), at(cols))?;
        self.pass(Some((at(cols), cols)), Dots::Own, at(2 * cols))?;
        let s = self.ctx.download(&sums)?;
        let mut h = s[..cols].to_vec();
        h.iter_mut()
            .zip(&s[cols..2 * cols])
            .for_each(|(a, b)| *a += b);
        Ok((h, s[2 * cols].sqrt()))
    }

    fn store(&mut self, j: usize, d: f64) -> Result<()> {
        let ctx = self.ctx;
        let f = ctx.function(SRC, "diffmap_store")?;
        let cfg = ctx.filling_grid(self.n);
        let (n, j) = (self.n as u64, j as u64);
        let mut l = ctx.launcher(&f);
        l.arg(&self.w)
            .arg(&n)
            .arg(&d)
            .arg(&mut self.columns)
            .arg(&j);
        ctx.launch(l, cfg, "diffmap_store")
    }

    fn zero(&mut self, j: usize) -> Result<()> {
        copy(self.ctx, None, &self.columns, j * self.n, self.n)
    }

    fn set_w(&mut self, values: &[f64]) -> Result<()> {
        self.w = self.ctx.upload(values)?;
        Ok(())
    }

    fn restart(&mut self, m: usize, coefs: &[Vec<f64>]) -> Result<()> {
        let (n, kept) = (self.n, coefs.len());
        let new = self.ctx.alloc::<f64>(kept * n)?;
        self.combine_into(m, coefs, &new)?;
        copy(self.ctx, Some((&new, 0)), &self.columns, 0, kept * n)?;
        copy(
            self.ctx,
            Some((&self.columns, m * n)),
            &self.columns,
            kept * n,
            n,
        )
    }

    fn combine(&self, m: usize, coefs: &[Vec<f64>]) -> Result<Mat<f64>> {
        let n = self.n;
        let out = self.ctx.alloc::<f64>(coefs.len() * n)?;
        self.combine_into(m, coefs, &out)?;
        let flat = self.ctx.download(&out)?;
        Ok(MatRef::from_column_major_slice(&flat, n, coefs.len()).to_owned())
    }
}

/// `dst[dst_at..][..len] = src[src_at..][..len]` (`src`: the buffer and `src_at`; the ranges
/// apart when it is `dst`), or 0 without a source.
fn copy(
    ctx: &GpuContext,
    src: Option<(&DeviceVec<f64>, usize)>,
    dst: &DeviceVec<f64>,
    dst_at: usize,
    len: usize,
) -> Result<()> {
    let f = ctx.function(SRC, "diffmap_copy")?;
    let (src_at, dst_at, len64, null) = (
        src.map_or(0, |s| s.1) as u64,
        dst_at as u64,
        len as u64,
        0u64,
    );
    let mut l = ctx.launcher(&f);
    match src {
        Some((buffer, _)) => l.arg(buffer),
        None => l.arg(&null),
    };
    l.arg(&src_at).arg(dst).arg(&dst_at).arg(&len64);
    ctx.launch(l, ctx.filling_grid(len), "diffmap_copy")
}
