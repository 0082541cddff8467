//! Which dims an op reduces, and the shapes that follow.

use crate::error::{MaskedError, Result};

/// The dims an op acts on: all of them, or a set of (possibly negative) indices.
///
/// Order does not matter and negative indices wrap; a duplicate or out-of-range index is
/// an error when the set is checked against an input rank. An empty set means all dims,
/// as in `torch.masked`.
///
/// ```
/// use masked::Dims;
/// assert_eq!(Dims::from(-1).canonical(3).unwrap(), vec![2]);
/// assert_eq!(Dims::from([2, 0]).canonical(3).unwrap(), vec![0, 2]);
/// assert_eq!(Dims::All.canonical(2).unwrap(), vec![0, 1]);
/// assert!(Dims::from([1, -1]).canonical(2).is_err()); // the same dim twice
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Dims {
    /// Every dim.
    #[default]
    All,
    /// These dims.
    Set(Vec<isize>),
}

impl Dims {
    /// Every dim.
    pub fn all() -> Self {
        Dims::All
    }

    /// How many dims were named (`None` for all).
    pub fn given_len(&self) -> Option<usize> {
        match self {
            Dims::All => None,
            Dims::Set(v) if v.is_empty() => None,
            Dims::Set(v) => Some(v.len()),
        }
    }

    /// The sorted, non-negative, duplicate-free dims for an input of rank `ndim`.
    ///
    /// # Errors
    /// [`MaskedError::DimOutOfRange`] and [`MaskedError::DuplicateDim`].
    pub fn canonical(&self, ndim: usize) -> Result<Vec<usize>> {
        match self {
            Dims::All => Ok((0..ndim).collect()),
            Dims::Set(v) if v.is_empty() => Ok((0..ndim).collect()),
            Dims::Set(v) => {
                let mut out = Vec::with_capacity(v.len());
                for &d in v {
                    let c = wrap_dim(d, ndim)?;
                    if ndim == 0 {
                        // a 0-d input accepts 0 and -1, which name no real dim
                        continue;
                    }
                    if out.contains(&c) {
                        return Err(MaskedError::DuplicateDim { dim: c });
                    }
                    out.push(c);
                }
                out.sort_unstable();
                Ok(out)
            }
        }
    }

    /// The one dim of an op that takes exactly one (softmax, cumsum, ...).
    ///
    /// # Errors
    /// [`MaskedError::DimCount`] when not exactly one dim was named, and the errors of
    /// [`Dims::canonical`].
    pub fn single(&self, op: &'static str, ndim: usize) -> Result<usize> {
        match self.given_len() {
            Some(1) => {
                let Dims::Set(v) = self else { unreachable!() };
                let c = wrap_dim(v[0], ndim)?;
                Ok(c)
            }
            n => Err(MaskedError::DimCount {
                op,
                expected: "exactly one dim",
                got: n.unwrap_or(0),
            }),
        }
    }
}

/// Wraps a possibly negative dim into `[0, max(ndim, 1))`.
///
/// # Errors
/// [`MaskedError::DimOutOfRange`].
pub fn wrap_dim(d: isize, ndim: usize) -> Result<usize> {
    let n = ndim.max(1) as isize;
    if d < -n || d >= n {
        return Err(MaskedError::DimOutOfRange {
            dim: d,
            ndim,
            lo: -n,
            hi: n - 1,
        });
    }
    Ok(if d < 0 { (d + n) as usize } else { d as usize })
}

impl From<isize> for Dims {
    fn from(d: isize) -> Self {
        Dims::Set(vec![d])
    }
}
impl From<i32> for Dims {
    fn from(d: i32) -> Self {
        Dims::Set(vec![d as isize])
    }
}
impl From<usize> for Dims {
    fn from(d: usize) -> Self {
        Dims::Set(vec![d as isize])
    }
}
impl From<Vec<isize>> for Dims {
    fn from(v: Vec<isize>) -> Self {
        Dims::Set(v)
    }
}
impl From<&[isize]> for Dims {
    fn from(v: &[isize]) -> Self {
        Dims::Set(v.to_vec())
    }
}
impl<const N: usize> From<[isize; N]> for Dims {
    fn from(v: [isize; N]) -> Self {
        Dims::Set(v.to_vec())
    }
}
impl<const N: usize> From<[i32; N]> for Dims {
    fn from(v: [i32; N]) -> Self {
        Dims::Set(v.iter().map(|&d| d as isize).collect())
    }
}
impl From<Vec<usize>> for Dims {
    fn from(v: Vec<usize>) -> Self {
        Dims::Set(v.into_iter().map(DimLike::dim_index).collect())
    }
}
impl From<&[usize]> for Dims {
    fn from(v: &[usize]) -> Self {
        Dims::Set(v.iter().map(|&d| d.dim_index()).collect())
    }
}
impl<const N: usize> From<[usize; N]> for Dims {
    fn from(v: [usize; N]) -> Self {
        Dims::from(&v[..])
    }
}
impl From<Vec<i32>> for Dims {
    fn from(v: Vec<i32>) -> Self {
        Dims::Set(v.into_iter().map(DimLike::dim_index).collect())
    }
}
impl From<&Dims> for Dims {
    fn from(d: &Dims) -> Self {
        d.clone()
    }
}

/// One dim, possibly negative (counted from the end): the argument of ops along a single
/// dim (softmax, cumsum, `median_with_index`). Every primitive integer type is one, so a
/// `usize` loop variable and a literal `-1` both work.
///
/// ```
/// use masked::DimLike;
/// assert_eq!((-1i32).dim_index(), -1);
/// assert_eq!(2usize.dim_index(), 2);
/// ```
pub trait DimLike: Copy {
    /// The dim as a signed index (a value past `isize::MAX` saturates, and is then out of
    /// range for every input).
    fn dim_index(self) -> isize;
}

macro_rules! dim_like {
    ($($t:ty),*) => {$(
        impl DimLike for $t {
            #[inline]
            fn dim_index(self) -> isize {
                isize::try_from(self).unwrap_or(isize::MAX)
            }
        }
        impl From<$t> for OneDim {
            fn from(d: $t) -> Self {
                OneDim(d.dim_index())
            }
        }
    )*};
}
dim_like!(isize, i8, i16, i32, i64, usize, u8, u16, u32, u64);

/// A single dim as a value (what a [`DimLike`] argument becomes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OneDim(pub isize);

/// A shape argument: a slice, an array, a `Vec` of `usize`, or a `(rows, cols)` pair. Every
/// mask constructor of every layout takes its shape as one of these.
///
/// ```
/// use masked::ShapeLike;
/// assert_eq!([2, 3].to_shape(), vec![2, 3]);
/// assert_eq!((2, 3).to_shape(), vec![2, 3]);
/// assert_eq!(vec![4usize].to_shape(), vec![4]);
/// ```
pub trait ShapeLike {
    /// The dims, outermost first.
    fn to_shape(&self) -> Vec<usize>;

    /// The shape as `(rows, cols)`.
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] when the shape is not 2-D.
    fn to_shape2(&self) -> Result<(usize, usize)> {
        match self.to_shape()[..] {
            [r, c] => Ok((r, c)),
            ref s => Err(MaskedError::InvalidArgument {
                name: "shape",
                value: format!("{s:?}"),
                reason: "expected a 2-d shape (rows, cols)",
            }),
        }
    }
}

impl ShapeLike for [usize] {
    fn to_shape(&self) -> Vec<usize> {
        self.to_vec()
    }
}
impl<const N: usize> ShapeLike for [usize; N] {
    fn to_shape(&self) -> Vec<usize> {
        self.to_vec()
    }
}
impl ShapeLike for Vec<usize> {
    fn to_shape(&self) -> Vec<usize> {
        self.clone()
    }
}
impl ShapeLike for (usize, usize) {
    fn to_shape(&self) -> Vec<usize> {
        vec![self.0, self.1]
    }
}
impl<S: ShapeLike + ?Sized> ShapeLike for &S {
    fn to_shape(&self) -> Vec<usize> {
        (**self).to_shape()
    }
    fn to_shape2(&self) -> Result<(usize, usize)> {
        (**self).to_shape2()
    }
}

impl<T: Into<Dims>> From<Option<T>> for Dims {
    fn from(v: Option<T>) -> Self {
        v.map_or(Dims::All, Into::into)
    }
}

/// The shape bookkeeping of one reduction: which input dims are reduced and the output
/// shape, with or without kept unit dims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReducePlan {
    /// Input shape.
    pub in_shape: Vec<usize>,
    /// `reduced[d]` is true when input dim `d` is reduced.
    pub reduced: Vec<bool>,
    /// Output shape (reduced dims dropped, or kept with size 1 under keepdim).
    pub out_shape: Vec<usize>,
    /// Number of elements in each lane (product of the reduced sizes).
    pub lane_len: usize,
    /// Number of lanes (product of the kept sizes).
    pub lanes: usize,
}

impl ReducePlan {
    /// Plans a reduction of `shape` over `dims`.
    ///
    /// # Errors
    /// The errors of [`Dims::canonical`].
    pub fn new(shape: &[usize], dims: &Dims, keepdim: bool) -> Result<Self> {
        let canon = dims.canonical(shape.len())?;
        let mut reduced = vec![false; shape.len()];
        for &d in &canon {
            reduced[d] = true;
        }
        let mut out_shape = Vec::with_capacity(shape.len());
        let (mut lane_len, mut lanes) = (1usize, 1usize);
        for (d, &n) in shape.iter().enumerate() {
            if reduced[d] {
                lane_len *= n;
                if keepdim {
                    out_shape.push(1);
                }
            } else {
                lanes *= n;
                out_shape.push(n);
            }
        }
        Ok(ReducePlan {
            in_shape: shape.to_vec(),
            reduced,
            out_shape,
            lane_len,
            lanes,
        })
    }

    /// The input dims grouped into maximal runs of the same kind (reduced or kept), with
    /// unit dims dropped: `(is_reduced, product of sizes)` from outermost to innermost.
    /// A layout uses this to pick its fast path (trailing reduced run = contiguous lanes,
    /// one reduced run followed by kept dims = column sweep).
    pub fn groups(&self) -> Vec<(bool, usize)> {
        let mut g: Vec<(bool, usize)> = Vec::new();
        for (d, &n) in self.in_shape.iter().enumerate() {
            if n == 1 {
                continue;
            }
            match g.last_mut() {
                Some((r, s)) if *r == self.reduced[d] => *s *= n,
                _ => g.push((self.reduced[d], n)),
            }
        }
        g
    }
}

/// The broadcast shape of two shapes (NumPy rules).
///
/// # Errors
/// [`MaskedError::ShapeMismatch`] when they do not broadcast.
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for (k, o) in out.iter_mut().enumerate() {
        let da = if k + a.len() >= n {
            a[k + a.len() - n]
        } else {
            1
        };
        let db = if k + b.len() >= n {
            b[k + b.len() - n]
        } else {
            1
        };
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(MaskedError::ShapeMismatch {
                    what: format!("operands of {op} do not broadcast"),
                    left: a.to_vec(),
                    right: b.to_vec(),
                })
            }
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_rules() {
        assert_eq!(Dims::from([-1, 0]).canonical(4).unwrap(), vec![0, 3]);
        assert_eq!(Dims::Set(vec![]).canonical(2).unwrap(), vec![0, 1]);
        assert_eq!(Dims::from(0).canonical(0).unwrap(), Vec::<usize>::new());
        assert_eq!(Dims::from(-1).canonical(0).unwrap(), Vec::<usize>::new());
        assert_eq!(
            Dims::from(1).canonical(0),
            Err(MaskedError::DimOutOfRange {
                dim: 1,
                ndim: 0,
                lo: -1,
                hi: 0
            })
        );
        assert_eq!(
            Dims::from([0, -3]).canonical(3),
            Err(MaskedError::DuplicateDim { dim: 0 })
        );
        assert!(Dims::from(3).canonical(3).is_err());
        assert!(Dims::from(-4).canonical(3).is_err());
    }

    #[test]
    fn plan_shapes_and_groups() {
        let p = ReducePlan::new(&[3, 2, 1, 4], &Dims::from([0, -1]), false).unwrap();
        assert_eq!(p.out_shape, vec![2, 1]);
        assert_eq!((p.lane_len, p.lanes), (12, 2));
        assert_eq!(p.groups(), vec![(true, 3), (false, 2), (true, 4)]);
        let p = ReducePlan::new(&[3, 2, 1, 4], &Dims::from([0, -1]), true).unwrap();
        assert_eq!(p.out_shape, vec![1, 2, 1, 1]);
        let p = ReducePlan::new(&[4, 6], &Dims::All, false).unwrap();
        assert_eq!(p.out_shape, Vec::<usize>::new());
        assert_eq!(p.groups(), vec![(true, 24)]);
    }

    #[test]
    fn single_dim() {
        assert_eq!(Dims::from(-1).single("softmax", 2).unwrap(), 1);
        assert!(matches!(
            Dims::All.single("softmax", 2),
            Err(MaskedError::DimCount { got: 0, .. })
        ));
        assert!(Dims::from([0, 1]).single("softmax", 2).is_err());
    }
}
