//! `.npy` reading with the dtype taken from the file, and atomic writing.

use crate::error::CliError;
use masked::{BitMask, DynVec};
use ndarray::{ArrayD, IxDyn};
use ndarray_npy::{ReadNpyError, ReadNpyExt, ReadableElement, WritableElement, WriteNpyExt};
use std::path::Path;

/// A dense array read from a file, with its dtype.
pub struct DynArray {
    /// Shape.
    pub shape: Vec<usize>,
    /// Values in row-major order.
    pub values: DynVec,
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|e| CliError::file(path, e.to_string()))
}

fn try_read<T: ReadableElement>(bytes: &[u8]) -> Result<ArrayD<T>, ReadNpyError> {
    ArrayD::<T>::read_npy(bytes)
}

fn describe(path: &Path, e: ReadNpyError) -> CliError {
    let what = match &e {
        ReadNpyError::Io(_) | ReadNpyError::MissingData => {
            "truncated or unreadable .npy data (fewer bytes than the header promises)".to_string()
        }
        ReadNpyError::ParseHeader(h) => format!("malformed .npy header: {h}"),
        ReadNpyError::ExtraBytes(n) => format!("{n} bytes after the .npy data"),
        other => other.to_string(),
    };
    CliError::file(path, what)
}

/// Result of one typed read attempt: the array, "not this dtype", or a real error.
fn attempt<T: ReadableElement>(bytes: &[u8]) -> Result<Option<ArrayD<T>>, ReadNpyError> {
    match try_read::<T>(bytes) {
        Ok(a) => Ok(Some(a)),
        Err(ReadNpyError::WrongDescriptor(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn to_std<T: Clone>(a: ArrayD<T>) -> (Vec<usize>, Vec<T>) {
    let shape = a.shape().to_vec();
    let v = if a.is_standard_layout() {
        a.into_raw_vec_and_offset().0
    } else {
        a.iter().cloned().collect()
    };
    (shape, v)
}

/// Reads a value array (f32, f64, i32 or i64).
pub fn read_values(path: &Path) -> Result<DynArray, CliError> {
    let bytes = read_bytes(path)?;
    let err = |e| describe(path, e);
    if let Some(a) = attempt::<f32>(&bytes).map_err(err)? {
        let (shape, v) = to_std(a);
        return Ok(DynArray {
            shape,
            values: DynVec::F32(v),
        });
    }
    if let Some(a) = attempt::<f64>(&bytes).map_err(err)? {
        let (shape, v) = to_std(a);
        return Ok(DynArray {
            shape,
            values: DynVec::F64(v),
        });
    }
    if let Some(a) = attempt::<i32>(&bytes).map_err(err)? {
        let (shape, v) = to_std(a);
        return Ok(DynArray {
            shape,
            values: DynVec::I32(v),
        });
    }
    if let Some(a) = attempt::<i64>(&bytes).map_err(err)? {
        let (shape, v) = to_std(a);
        return Ok(DynArray {
            shape,
            values: DynVec::I64(v),
        });
    }
    Err(CliError::file(
        path,
        "unsupported dtype: values must be float32, float64, int32 or int64".into(),
    ))
}

/// Reads a mask: bool, or any integer / float array with nonzero = valid.
pub fn read_mask(path: &Path) -> Result<BitMask, CliError> {
    let bytes = read_bytes(path)?;
    let err = |e| describe(path, e);
    macro_rules! as_mask {
        ($t:ty, $pred:expr) => {
            if let Some(a) = attempt::<$t>(&bytes).map_err(err)? {
                let shape = a.shape().to_vec();
                let f = $pred;
                return BitMask::from_bools(&shape, a.iter().map(|x| f(*x)))
                    .map_err(|e| CliError::file(path, e.to_string()));
            }
        };
    }
    as_mask!(bool, |x: bool| x);
    as_mask!(u8, |x: u8| x != 0);
    as_mask!(i8, |x: i8| x != 0);
    as_mask!(i32, |x: i32| x != 0);
    as_mask!(i64, |x: i64| x != 0);
    as_mask!(f32, |x: f32| x != 0.0);
    as_mask!(f64, |x: f64| x != 0.0);
    Err(CliError::file(
        path,
        "unsupported mask dtype: expected bool (or integers/floats, nonzero = valid)".into(),
    ))
}

/// Writes `bytes` to `path` through a temporary file in the same folder, so a failure
/// never leaves a partial file behind.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
) -> Result<(), CliError> {
    let mut buf = Vec::new();
    write(&mut buf).map_err(|e| CliError::file(path, e))?;
    let tmp = path.with_extension("npy.tmp");
    std::fs::write(&tmp, &buf).map_err(|e| CliError::file(path, e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::file(path, e.to_string())
    })
}

/// Encodes an array as `.npy` bytes.
pub fn encode<T: WritableElement>(
    shape: &[usize],
    v: Vec<T>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let a = ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| e.to_string())?;
    a.write_npy(out).map_err(|e| e.to_string())
}

/// Encodes a [`DynVec`] as `.npy` bytes.
pub fn encode_dyn(shape: &[usize], v: DynVec, out: &mut Vec<u8>) -> Result<(), String> {
    masked::with_dyn_vec!(v, v => encode(shape, v, out))
}
