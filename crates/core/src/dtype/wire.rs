//! Numbers whose serde form survives a text format.
//!
//! JSON has no NaN and no infinity: `serde_json` writes a non-finite `f32`/`f64` as
//! `null` and then refuses to read `null` back as a number. Every value the engine
//! serialises (the containers' values, the fold states) therefore goes through [`Num`]:
//!
//! - in a **human-readable** format (JSON, YAML, TOML, RON...), a NaN is written as the
//!   string `"NaN"`, infinities as `"inf"` and `"-inf"`; `f16`/`bf16` as their value (an
//!   `f32` number, exact), not their bits; finite `f32`/`f64` and integers as the format's
//!   own numbers. Reading accepts a number, or one of the strings `"NaN"`, `"nan"`,
//!   `"inf"`, `"+inf"`, `"Infinity"`, `"-inf"`, `"-Infinity"`; anything else (a `null`
//!   included) is an error naming what was found.
//! - in a **binary** format (bincode, postcard, MessagePack...), the number's own serde
//!   form: non-finite values travel as they are.
//!
//! Integers are always the format's own integers.
//!
//! ```
//! use masked::Num;
//! let s = serde_json::to_string(&[Num(f32::NAN), Num(f32::NEG_INFINITY), Num(1.5)]).unwrap();
//! assert_eq!(s, r#"["NaN","-inf",1.5]"#);
//! let back: Vec<Num<f32>> = serde_json::from_str(&s).unwrap();
//! assert!(back[0].0.is_nan() && back[1].0 == f32::NEG_INFINITY && back[2].0 == 1.5);
//! ```
//!
//! Python's `json` module writes bare `NaN`, `Infinity` and `-Infinity` tokens, which are
//! not JSON and which `serde_json` refuses; a Python writer passes
//! `json.dumps(x, allow_nan=False)` after mapping non-finite floats to these strings, and a
//! Python reader maps the strings back (`float("NaN")`, `float("inf")` and
//! `float("-inf")` already accept them).

use half::{bf16, f16};
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;

/// A number type with a text-safe serde form (see the [module docs](self)): the float
/// types (`f32`, `f64`, `f16`, `bf16`) and the integer ones (`i32`, `i64`, `i128`).
pub trait WireNum: Copy + Serialize + DeserializeOwned + 'static {
    /// The value as `f64` for a float type (exact), `None` for an integer type.
    fn float_value(self) -> Option<f64>;
    /// The value of this float type nearest to `v` (`None` for an integer type, which is
    /// read through its own serde form).
    fn from_float_value(v: f64) -> Option<Self>;
    /// Whether a finite value is written as an `f32` number rather than through its own
    /// serde form (`f16`, `bf16`: their own form is their bits).
    const AS_F32: bool = false;
}

macro_rules! wire_float {
    ($($t:ty => $as_f32:expr, $to:expr, $from:expr;)*) => {$(
        impl WireNum for $t {
            const AS_F32: bool = $as_f32;
            #[inline]
            fn float_value(self) -> Option<f64> {
                Some($to(self))
            }
            #[inline]
            fn from_float_value(v: f64) -> Option<Self> {
                Some($from(v))
            }
        }
    )*};
}
wire_float! {
    f32 => false, |x: f32| x as f64, |v: f64| v as f32;
    f64 => false, |x: f64| x, |v: f64| v;
    f16 => true, |x: f16| x.to_f64(), f16::from_f64;
    bf16 => true, |x: bf16| x.to_f64(), bf16::from_f64;
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl WireNum for $t {
            #[inline]
            fn float_value(self) -> Option<f64> {
                None
            }
            #[inline]
            fn from_float_value(_: f64) -> Option<Self> {
                None
            }
        }
    )*};
}
wire_int!(i32, i64, i128);

/// A number serialised text-safely: see the [module docs](self). `#[repr(transparent)]`,
/// so a slice of `Num<T>` has the layout of a slice of `T`.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd)]
#[repr(transparent)]
pub struct Num<T>(pub T);

impl<T: WireNum> Serialize for Num<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.float_value() {
            Some(v) if s.is_human_readable() => {
                if v.is_nan() {
                    s.serialize_str("NaN")
                } else if v.is_infinite() {
                    s.serialize_str(if v > 0.0 { "inf" } else { "-inf" })
                } else if T::AS_F32 {
                    // exact: every f16 and bf16 value is an f32 value
                    s.serialize_f32(v as f32)
                } else {
                    self.0.serialize(s)
                }
            }
            _ => self.0.serialize(s),
        }
    }
}

impl<'de, T: WireNum> Deserialize<'de> for Num<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() && T::from_float_value(0.0).is_some() {
            d.deserialize_any(FloatVisitor::<T>(std::marker::PhantomData))
                .map(Num)
        } else {
            T::deserialize(d).map(Num)
        }
    }
}

/// Reads a float from a number or one of the non-finite strings.
struct FloatVisitor<T>(std::marker::PhantomData<T>);

impl<T: WireNum> FloatVisitor<T> {
    fn value<E: de::Error>(v: f64) -> Result<T, E> {
        T::from_float_value(v).ok_or_else(|| E::custom("not a float type"))
    }
}

impl<T: WireNum> Visitor<'_> for FloatVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"a number, or "NaN", "inf" or "-inf""#)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        Self::value(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        Self::value(v as f64)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Self::value(v as f64)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        let v = match s {
            "NaN" | "nan" => f64::NAN,
            "inf" | "+inf" | "Infinity" => f64::INFINITY,
            "-inf" | "-Infinity" => f64::NEG_INFINITY,
            _ => {
                return Err(E::custom(format!(
                    r#"expected a number, or "NaN", "inf" or "-inf", found the string {s:?}"#
                )))
            }
        };
        Self::value(v)
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Err(E::custom(
            r#"expected a number, found null (masked writes NaN as "NaN" and infinities as "inf" and "-inf"; serde_json writes a bare non-finite f32/f64 as null)"#,
        ))
    }
}

/// `#[serde(with = "masked::wire::num")]` for a number field: its [`Num`] form.
pub mod num {
    use super::{Num, WireNum};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// Writes `v` as [`Num`] does.
    pub fn serialize<T: WireNum, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        Num(*v).serialize(s)
    }
    /// Reads a number as [`Num`] does.
    pub fn deserialize<'de, T: WireNum, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        Num::<T>::deserialize(d).map(|n| n.0)
    }
}

/// `#[serde(with = "masked::wire::nums")]` for a `Vec` of numbers: each as [`Num`].
pub mod nums {
    use super::{Num, WireNum};
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes each value as [`Num`] does, as a sequence.
    pub fn serialize<T: WireNum, S: Serializer>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|&x| Num(x)))
    }
    /// Reads a sequence of numbers as [`Num`] does.
    pub fn deserialize<'de, T: WireNum, D: Deserializer<'de>>(d: D) -> Result<Vec<T>, D::Error> {
        // `Num<T>` is `repr(transparent)`, but a plain map keeps this free of `unsafe`;
        // the compiler turns it into an in-place pass
        Vec::<Num<T>>::deserialize(d).map(|v| v.into_iter().map(|n| n.0).collect())
    }
}
