//! The op registry: every op of the engine is declared **once**, in the table at the
//! bottom of this file. From that one entry follow
//!
//! - its typed identity, a variant of [`Op`] (name, [`Kind`], options, whether it has a
//!   gradient), which code outside the host kernels (the CLI, a config file, a future GPU or
//!   SQL backend) dispatches on;
//! - its method on [`MaskedOps`], the trait every layout gets through a blanket impl over
//!   [`MaskedReduce`];
//! - its arm of the by-name dispatcher [`apply_to`] (the CLI, the bench, the golden tests);
//! - the op list of the unknown-op message, of `masked --help` and of docs/cli.md (a test
//!   fails when the docs and this table disagree).
//!
//! Adding a reduction means writing its value (a [`Fold`](crate::Fold),
//! [`LaneStat`](crate::LaneStat) or [`LaneMap`](crate::LaneMap)) and one entry here.
//!
//! ```
//! use masked::{Kind, Op};
//! let op: Op = "quantile".parse()?;
//! assert_eq!(op.kind(), Kind::Reduce);
//! assert_eq!(op.options(), &["q", "interpolation"]);
//! assert!(op.differentiable());
//! assert!(!Op::ArgMax.differentiable());
//! # Ok::<(), masked::MaskedError>(())
//! ```

use crate::binary::{BinOp, CmpBin, CmpZip, FloatBin, FloatZip, KeepBin, KeepZip, MaskRule};
use crate::dims::{DimLike, Dims};
use crate::element::{DType, Element, Erase};
use crate::error::{MaskedError, Result};
use crate::grad::{
    CumulativeGrad, ExtremumGrad, GradVisitor, LaneGrad, LogSumExpGrad, MeanGrad, NanFree,
    NormGrad, NormalizeGrad, ProdGrad, PtpGrad, QuantileGrad, SoftmaxGrad, SumGrad, UnaryGrad,
    VarGrad,
};
use crate::lane::{
    Cumulative, Interpolation, MedianIndex, MedianMode, Normalize, Quantile, Softmax, SoftmaxKind,
};
use crate::layout::{MaskedReduce, ZipKernels};
use crate::ops::{AMax, AMin, ArgMax, ArgMin, Count, Mean, Prod, Ptp, Sum};
use crate::stats::{check_correction, LogMeanExp, LogSumExp, Norm, Std, Var};
use crate::unary::{
    Abs, Acos, Acosh, Asin, Asinh, Atan, Atanh, Ceil, Clamp, Cos, Cosh, Erf, Erfc, Exp, Exp2,
    Expm1, FloatFn, FloatMap, Floor, Frac, Gelu, KeepFn, KeepMap, Log, Log10, Log1p, Log2, Logit,
    NanToNum, Neg, Pow, Reciprocal, Relu, Round, Rsqrt, Sigmoid, Sign, Silu, Sin, Sinh, Softplus,
    Sqrt, Square, Tan, Tanh, Trunc, Unary,
};

/// How an op uses its dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Reduces any set of dims; takes `keepdim`.
    Reduce,
    /// Reduces at most one dim (argmax, argmin: none means the flat index); takes `keepdim`.
    ReduceOne,
    /// Shape-preserving along exactly one dim; no `keepdim`.
    Normalize,
    /// Elementwise on one operand (masked algebra): no dims, no `keepdim`; the output
    /// mask is the input mask.
    Unary,
    /// Elementwise on two operands (masked algebra): the output mask follows the call's
    /// [`MaskRule`].
    Binary,
}

impl Kind {
    /// The kind in words, as the docs' op table writes it.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Reduce => "reduction (any dims)",
            Kind::ReduceOne => "reduction (one dim or all)",
            Kind::Normalize => "normalization (one dim)",
            Kind::Unary => "elementwise (unary)",
            Kind::Binary => "elementwise (binary)",
        }
    }
}

/// An option value as the command line and config files write it.
pub trait OptionValue: Sized {
    /// Parses the text form of option `name`.
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] naming the option and the value.
    fn parse_option(name: &'static str, text: &str) -> Result<Self>;
}

impl OptionValue for f64 {
    fn parse_option(name: &'static str, text: &str) -> Result<Self> {
        text.trim()
            .parse::<f64>()
            .map_err(|_| MaskedError::InvalidArgument {
                name,
                value: text.to_string(),
                reason: "expected a number",
            })
    }
}

impl OptionValue for Option<f64> {
    fn parse_option(name: &'static str, text: &str) -> Result<Self> {
        f64::parse_option(name, text).map(Some)
    }
}

/// The options chosen by name: their own `FromStr`, around surrounding blanks.
macro_rules! named_options {
    ($($ty:ty),*) => {$(
        impl OptionValue for $ty {
            fn parse_option(_: &'static str, text: &str) -> Result<Self> {
                text.trim().parse()
            }
        }
    )*};
}
named_options!(Interpolation, MedianMode);

/// One option of the registry: its name (the CLI flag is `--NAME`) and help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionSpec {
    /// Name.
    pub name: &'static str,
    /// One line of help, with the default.
    pub help: &'static str,
}

/// A request for an op by identity: the op, its dims and keepdim, and option values
/// (defaults for the options not set). What the CLI, the bench and the golden tests build
/// from text.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OpRequest {
    /// The op.
    pub op: Op,
    /// Dims (all by default).
    pub dims: Dims,
    /// Keep reduced dims with size 1.
    pub keepdim: bool,
    /// Option values.
    pub options: Options,
    /// The dtype the input is cast to before the op (torch's `dtype=`: an f16 sum
    /// accumulated and returned in f32); `None` computes on the input's own dtype.
    pub dtype: Option<DType>,
}

impl OpRequest {
    /// A request for the named op over all dims, without keepdim, default options.
    ///
    /// # Errors
    /// [`MaskedError::UnknownOp`].
    pub fn new(name: &str) -> Result<Self> {
        Ok(Self::from_op(name.parse()?))
    }
    /// A request for `op` over all dims, without keepdim, default options.
    pub fn from_op(op: Op) -> Self {
        OpRequest {
            op,
            dims: Dims::All,
            keepdim: false,
            options: Options::default(),
            dtype: None,
        }
    }
    /// The same request computed on the input cast to `dtype` first (torch's `dtype=`
    /// argument): `sum` of f16 values with `dtype(DType::F32)` accumulates and returns
    /// f32, as `x.to(f32).sum()` would, and a cast the target cannot hold is an error.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = Some(dtype);
        self
    }
    /// The same request over `dims`.
    pub fn dims(mut self, dims: impl Into<Dims>) -> Self {
        self.dims = dims.into();
        self
    }
    /// The same request with `keepdim`.
    pub fn keepdim(mut self, keepdim: bool) -> Self {
        self.keepdim = keepdim;
        self
    }
    /// Sets option `name` from its text form, after checking that the op takes it.
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`]: an option the op does not take, an unknown
    /// option, or a value that does not parse.
    pub fn set_option(&mut self, name: &str, text: &str) -> Result<()> {
        if !self.op.options().contains(&name) {
            let known = OPTIONS.iter().find(|o| o.name == name).map(|o| o.name);
            return Err(MaskedError::InvalidArgument {
                name: known.unwrap_or("option"),
                value: name.to_string(),
                reason: if known.is_some() {
                    "the op does not take this option"
                } else {
                    "no op takes an option of this name"
                },
            });
        }
        self.options.set(name, text)
    }
    /// The one dim of a shape-preserving op.
    ///
    /// # Errors
    /// [`MaskedError::DimCount`].
    pub fn one_dim(&self) -> Result<isize> {
        match &self.dims {
            Dims::Set(v) if v.len() == 1 => Ok(v[0]),
            d => Err(MaskedError::DimCount {
                op: self.op.name(),
                expected: "exactly one dim",
                got: d.given_len().unwrap_or(0),
            }),
        }
    }
}

/// Declares the options: their types, defaults and help, the [`Options`] struct, its
/// text setter and the builder methods of [`OpRequest`].
macro_rules! declare_options {
    ($( $name:ident : $ty:ty = $default:expr, $help:literal; )*) => {
        /// The option values of a request (every option of every op; each op reads the
        /// ones [`Op::options`] lists).
        #[derive(Debug, Clone, Copy, PartialEq)]
        #[non_exhaustive]
        pub struct Options {
            $( #[doc = $help] pub $name: $ty, )*
        }

        impl Default for Options {
            fn default() -> Self {
                Options { $( $name: $default, )* }
            }
        }

        /// Every option any op takes, in the order of the docs.
        pub const OPTIONS: &[OptionSpec] = &[
            $( OptionSpec { name: stringify!($name), help: $help }, )*
        ];

        impl Options {
            /// Sets option `name` from its text form.
            ///
            /// # Errors
            /// [`MaskedError::InvalidArgument`] for an unknown option or a bad value.
            pub fn set(&mut self, name: &str, text: &str) -> Result<()> {
                match name {
                    $( stringify!($name) => {
                        self.$name = <$ty as OptionValue>::parse_option(stringify!($name), text)?;
                    } )*
                    _ => {
                        return Err(MaskedError::InvalidArgument {
                            name: "option",
                            value: name.to_string(),
                            reason: "no op takes an option of this name",
                        })
                    }
                }
                Ok(())
            }
        }

        impl OpRequest {
            $(
                #[doc = concat!("The same request with option `", stringify!($name), "`: ", $help)]
                pub fn $name(mut self, value: $ty) -> Self {
                    self.options.$name = value;
                    self
                }
            )*
        }
    };
}

declare_options! {
    correction: f64 = 1.0, "var/std correction, a number >= 0 (default 1).";
    ord: f64 = 2.0, "norm/normalize order: a number, inf or -inf (default 2).";
    eps: f64 = 1e-12, "normalize denominator floor, >= 0 (default 1e-12).";
    q: f64 = 0.5, "quantile q in [0, 1] (default 0.5).";
    interpolation: Interpolation = Interpolation::Linear,
        "quantile interpolation: linear, lower, higher, midpoint or nearest (default linear).";
    mode: MedianMode = MedianMode::Avg, "median of an even count: avg or lower (default avg).";
    min: Option<f64> = None, "clamp lower bound (clamp needs min, max or both).";
    max: Option<f64> = None, "clamp upper bound.";
    exponent: f64 = f64::NAN, "pow's scalar exponent (required by pow).";
    nan: f64 = 0.0, "nan_to_num: the value for NaN (default 0).";
    posinf: Option<f64> = None, "nan_to_num: the value for +inf (default the type's largest finite).";
    neginf: Option<f64> = None, "nan_to_num: the value for -inf (default the type's lowest finite).";
}

/// Where [`apply_to`] sends the typed result of an op on layout `L`.
pub trait Sink<T: Element, L: MaskedReduce<T>> {
    /// What the sink makes of a result.
    type Out;
    /// Takes a reduction result.
    fn reduced<O: Element>(&self, r: L::Reduced<O>) -> Self::Out;
    /// Takes a normalization result.
    fn mapped<O: Element>(&self, m: L::Mapped<O>) -> Self::Out;
}

/// A sink that drops the typed result unconverted (benchmarks time the op alone).
#[derive(Debug, Clone, Copy, Default)]
pub struct Discard;

impl<T: Element, L: MaskedReduce<T>> Sink<T, L> for Discard {
    type Out = ();
    fn reduced<O: Element>(&self, r: L::Reduced<O>) {
        drop(std::hint::black_box(r));
    }
    fn mapped<O: Element>(&self, m: L::Mapped<O>) {
        drop(std::hint::black_box(m));
    }
}

/// The forward result of a differentiable op in the input's float type, kept for the
/// saved forms of its VJP ([`MaskedOps::vjp_reduce_saved`],
/// [`MaskedOps::vjp_map_saved`]).
pub enum Forward<T: Element, L: MaskedReduce<T> + ?Sized> {
    /// A reduction's output.
    Reduced(L::Reduced<T::Real>),
    /// A map's output (a normalization or unary op).
    Mapped(L::Mapped<T::Real>),
    /// An output of another type (an integer index, a count): no VJP reads it.
    Other,
}

/// The family of a layout's reduction outputs, `L::Reduced<O>` over `O`.
struct ReducedOf<T, L: ?Sized>(std::marker::PhantomData<(T, Box<L>)>);
impl<T: Element, L: MaskedReduce<T> + ?Sized> crate::element::Family for ReducedOf<T, L> {
    type Of<O: Element> = L::Reduced<O>;
}

/// The family of a layout's map outputs, `L::Mapped<O>` over `O`.
struct MappedOf<T, L: ?Sized>(std::marker::PhantomData<(T, Box<L>)>);
impl<T: Element, L: MaskedReduce<T> + ?Sized> crate::element::Family for MappedOf<T, L> {
    type Of<O: Element> = L::Mapped<O>;
}

/// A sink that keeps a result of the input's float type as a [`Forward`], for code
/// generic over the input type: `apply_to(&x, &req, &KeepForward)` runs the op by name
/// and keeps what its VJP can read.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeepForward;

impl<T: Element, L: MaskedReduce<T>> Sink<T, L> for KeepForward {
    type Out = Forward<T, L>;
    fn reduced<O: Element>(&self, r: L::Reduced<O>) -> Forward<T, L> {
        // kept when O is T::Real: the dtype's own variant taken back as T::Real
        match T::Real::unerase_owned(O::erase::<ReducedOf<T, L>>(r)) {
            Some(r) => Forward::Reduced(r),
            None => Forward::Other,
        }
    }
    fn mapped<O: Element>(&self, m: L::Mapped<O>) -> Forward<T, L> {
        match T::Real::unerase_owned(O::erase::<MappedOf<T, L>>(m)) {
            Some(m) => Forward::Mapped(m),
            None => Forward::Other,
        }
    }
}

/// Checks that at most one dim was named (argmax/argmin).
///
/// # Errors
/// [`MaskedError::DimCount`].
pub fn at_most_one(op: &'static str, d: Dims) -> Result<Dims> {
    match d.given_len() {
        None | Some(1) => Ok(d),
        Some(n) => Err(MaskedError::DimCount {
            op,
            expected: "at most one dim",
            got: n,
        }),
    }
}

/// Checks that `req` asks for a gradient this module computes: an op of one of `kinds`,
/// differentiable, on float input, without a dtype cast.
/// The gradient kernel of a reduction, handed the op's [`LaneGrad`] by [`visit_grad`].
struct ReduceGrad<'a, T: Element, L: MaskedReduce<T> + ?Sized> {
    a: &'a L,
    req: &'a OpRequest,
    g: &'a L::Reduced<T::Real>,
    saved: Option<&'a L::Reduced<T::Real>>,
}

impl<T: Element, L: MaskedReduce<T> + ?Sized> GradVisitor for ReduceGrad<'_, T, L> {
    type Out = L::Mapped<T::Real>;
    fn visit<G: LaneGrad>(self, grad: &G) -> Result<Self::Out> {
        let (dims, keepdim) = (&self.req.dims, self.req.keepdim);
        self.a.grad_reduced(grad, dims, keepdim, self.g, self.saved)
    }
}

/// The gradient kernel of a map, handed the op's [`LaneGrad`] by [`visit_grad`].
struct MapGrad<'a, T: Element, L: MaskedReduce<T> + ?Sized> {
    a: &'a L,
    dim: isize,
    g: &'a L::Mapped<T::Real>,
    saved: Option<&'a L::Mapped<T::Real>>,
}

impl<T: Element, L: MaskedReduce<T> + ?Sized> GradVisitor for MapGrad<'_, T, L> {
    type Out = L::Mapped<T::Real>;
    fn visit<G: LaneGrad>(self, grad: &G) -> Result<Self::Out> {
        self.a.grad_mapped(grad, self.dim, self.g, self.saved)
    }
}

/// [`MaskedOps::vjp_map`] and [`MaskedOps::vjp_map_saved`].
fn vjp_map_with<T: Element, L: MaskedReduce<T> + ?Sized>(
    a: &L, req: &OpRequest, saved: Option<&L::Mapped<T::Real>>, g: &L::Mapped<T::Real>,
) -> Result<L::Mapped<T::Real>> {
    let dim = check_map_grad::<T>(req)?;
    visit_grad(req, MapGrad { a, dim, g, saved })
}

/// Checks that `req` is a map's VJP on input of type `T` (a normalization or a unary
/// elementwise op, as [`check_grad`]) and gives the dim its lanes run along (the last,
/// `-1`, for an elementwise op): what every layout's `vjp_map` forms check first.
///
/// # Errors
/// As [`check_grad`]; a normalization's request without exactly one dim.
pub fn check_map_grad<T: Element>(req: &OpRequest) -> Result<isize> {
    check_grad::<T>(req, &[Kind::Normalize, Kind::Unary])?;
    if req.op.kind() == Kind::Unary {
        Ok(-1)
    } else {
        req.one_dim()
    }
}

/// Checks that `req` has a VJP on input of type `T` and is of one of `kinds` (what
/// [`MaskedOps::vjp_reduce`] and [`MaskedOps::vjp_map`] check first; public for a
/// layout's own forms, such as the dense layout's `vjp_into`).
///
/// # Errors
/// [`MaskedError::NotDifferentiable`] for an op without a gradient or integer and bool
/// input; [`MaskedError::InvalidArgument`] for an op of another kind;
/// [`MaskedError::Unsupported`] for a request with a dtype cast.
pub fn check_grad<T: Element>(req: &OpRequest, kinds: &[Kind]) -> Result<()> {
    let op = req.op.name();
    if !req.op.differentiable() {
        return Err(MaskedError::NotDifferentiable {
            op,
            reason: "its output is an index, a count or a bool",
        });
    }
    if !T::DTYPE.is_float() {
        return Err(MaskedError::NotDifferentiable {
            op,
            reason: "integer and bool input have no gradient",
        });
    }
    if !kinds.contains(&req.op.kind()) {
        return Err(MaskedError::InvalidArgument {
            name: "op",
            value: op.to_string(),
            reason: if kinds.contains(&Kind::Normalize) {
                "vjp_map takes a normalization (softmax, log_softmax, softmin, normalize, \
                 cumsum, cumprod) or a unary elementwise op"
            } else {
                "vjp_reduce takes a reduction"
            },
        });
    }
    if req.dtype.is_some() {
        return Err(MaskedError::Unsupported {
            op,
            context: "for a VJP with a dtype cast: cast the input first".into(),
        });
    }
    Ok(())
}

/// The binary op of a binary VJP request, after the checks every VJP makes
/// ([`check_grad`]): what each layout's `vjp_binary` starts with.
///
/// # Errors
/// As [`check_grad`]; [`MaskedError::InvalidArgument`] for an op that is not binary.
pub fn binary_grad_op<T: Element>(req: &OpRequest) -> Result<BinOp> {
    check_grad::<T>(req, &[Kind::Binary, Kind::Unary])?;
    req.op.binary().ok_or(MaskedError::InvalidArgument {
        name: "op",
        value: req.op.name().to_string(),
        reason: "vjp_binary takes a binary elementwise op",
    })
}

/// The op names, space separated, in registry order (messages and help).
pub fn op_names() -> String {
    Op::ALL
        .iter()
        .map(|o| o.name())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The op table of docs/cli.md, generated from the registry (a test checks that the docs
/// hold exactly this text).
pub fn markdown_table() -> String {
    let mut s =
        String::from("| op | kind | options | differentiable | what |\n|---|---|---|---|---|\n");
    for op in Op::ALL {
        let opts: Vec<String> = op.options().iter().map(|o| format!("`--{o}`")).collect();
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            op.name(),
            op.kind().describe(),
            if opts.is_empty() {
                "".into()
            } else {
                opts.join(" ")
            },
            if op.differentiable() { "yes" } else { "no" },
            op.summary().replace('|', "\\|"),
        ));
    }
    s
}

/// Declares every op: see the table below for the entry syntax.
macro_rules! registry {
    ($(
        $(#[doc = $doc:literal])+
        $name:ident => $variant:ident {
            kind: $kind:ident,
            on: $on:ident,
            run: $kernel:ident($value:expr) -> $out:ty,
            options: [$($opt:ident : $oty:ty),*],
            grad: $gk:ident $(($gv:expr))? $(,)?
        }
    )*

    extra { $($extra:tt)* }
    ) => {
        /// The typed identity of an op: what code outside the host kernels (the CLI, a
        /// config file, another backend) dispatches on. Parse one from its name with
        /// [`str::parse`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Op {
            $( $(#[doc = $doc])+ $variant, )*
        }

        impl Op {
            /// Every op, in registry order.
            pub const ALL: &'static [Op] = &[$(Op::$variant),*];

            /// The op's name (the method name and the CLI's OP).
            pub fn name(self) -> &'static str {
                match self { $( Op::$variant => stringify!($name), )* }
            }
            /// How the op uses its dims.
            pub fn kind(self) -> Kind {
                match self { $( Op::$variant => registry!(@kind $kind), )* }
            }
            /// The options the op takes (CLI flags `--NAME`), besides dims and keepdim.
            pub fn options(self) -> &'static [&'static str] {
                match self { $( Op::$variant => &[$(stringify!($opt)),*], )* }
            }
            /// Whether the op has a gradient (a vector-Jacobian product).
            pub fn differentiable(self) -> bool {
                match self { $( Op::$variant => registry!(@diff $gk), )* }
            }
            /// Whether the op is its base op over the data with NaN masked out (the
            /// nan-family).
            pub fn ignores_nan(self) -> bool {
                match self { $( Op::$variant => registry!(@nan $on), )* }
            }
            /// The binary elementwise op of this name: the `binary` entries, and `pow`
            /// (a unary op with a scalar exponent, a binary op with an array one).
            pub fn binary(self) -> Option<BinOp> {
                if self == Op::Pow {
                    return Some(BinOp::Keep(KeepBin::Pow));
                }
                match self { $( Op::$variant => registry!(@bin $kind $value), )* }
            }
            /// The op's documentation in one line (the docs' op table, the CLI help).
            pub fn summary(self) -> &'static str {
                match self { $( Op::$variant => concat!($($doc),+).trim_ascii(), )* }
            }
        }

        /// Every op of the engine, on every layout: a blanket impl over the layout
        /// contract [`MaskedReduce`], generated from the op registry.
        ///
        /// Reductions take `dims` (anything [`Into<Dims>`]: one `isize`, an array of them,
        /// or [`Dims::All`]) and `keepdim`, and return the layout's
        /// [`MaskedReduce::Reduced`]; normalizations take one `dim` and return its
        /// [`MaskedReduce::Mapped`].
        pub trait MaskedOps<T: Element>: MaskedReduce<T> {
            $( registry!(@method $kind $on $name [$($doc)+] ($value) -> $out, [$($opt : $oty),*] $kernel); )*
            $($extra)*
        }

        impl<T: Element, L: MaskedReduce<T> + ?Sized> MaskedOps<T> for L {}

        /// Every binary elementwise op, on every layout and operand kind the layout
        /// zips with (`Rhs`: a masked container of the layout, a dense array, a scalar
        /// `T`): a blanket impl over [`ZipKernels`], generated from the op registry.
        ///
        /// `rule` picks the output mask ([`MaskRule::Strict`], MaskedTensor's, or
        /// [`MaskRule::And`], numpy.ma's). A scalar on the left (`1 - x`) is
        /// [`ZipKernels::zip_elements`] with the [`Swapped`](crate::binary::Swapped) op.
        pub trait MaskedBinaryOps<T: Element, Rhs: ?Sized>: ZipKernels<T, Rhs> {
            $( registry!(@bmethod $kind $name [$($doc)+] ($value) -> $out); )*
            /// `x^y` elementwise with an array (or scalar) of exponents (the binary
            /// `pow`; [`MaskedOps::pow`] takes one scalar exponent). Integers keep their
            /// type and wrap; an integer raised to a negative power at a valid position
            /// is an error.
            ///
            /// # Errors
            /// As [`ZipKernels::zip_elements`].
            fn pow_by(&self, rhs: &Rhs, rule: MaskRule) -> Result<Self::Zipped<T>> {
                self.zip_elements(rhs, &KeepZip(KeepBin::Pow), rule)
            }
        }

        impl<T: Element, Rhs: ?Sized, L: ZipKernels<T, Rhs> + ?Sized> MaskedBinaryOps<T, Rhs> for L {}

        /// Builds the gradient value ([`LaneGrad`]) of the request's op from its options
        /// and hands it to `visitor`: one match over the registry for every layout. The
        /// nan-family's gradient is its base op's on the lane without its NaN values
        /// ([`NanFree`]).
        ///
        /// # Errors
        /// [`MaskedError::NotDifferentiable`] for argmax, argmin, count and comparisons;
        /// [`MaskedError::Unsupported`] for the elementwise ops, whose VJPs are not built
        /// yet; bad option values.
        #[allow(unused_variables)]
        pub fn visit_grad<V: GradVisitor>(req: &OpRequest, visitor: V) -> Result<V::Out> {
            match req.op {
                $( Op::$variant => {
                    $( let $opt = req.options.$opt; )*
                    registry!(@grad $on $name visitor $gk $(($gv))?)
                } )*
            }
        }

        /// Runs the request on any layout and hands the typed result to `sink`: one
        /// match over the registry for every layout and every use.
        ///
        /// # Errors
        /// The op's own errors (bad dims, bad option values).
        pub fn apply_to<T: Element, L: MaskedReduce<T>, S: Sink<T, L>>(
            a: &L,
            req: &OpRequest,
            sink: &S,
        ) -> Result<S::Out> {
            Ok(match req.op {
                $( Op::$variant => registry!(@call $kind a req sink $name [$($opt),*]), )*
            })
        }
    };

    (@diff none) => { false };
    (@diff $gk:ident) => { true };
    (@grad $on:ident $name:ident $v:ident none) => {
        Err(MaskedError::NotDifferentiable {
            op: stringify!($name),
            reason: "its output is an index, a count or a bool",
        })
    };
    (@grad $on:ident $name:ident $v:ident elementwise) => {
        Err(MaskedError::Unsupported {
            op: stringify!($name),
            context: "through vjp_reduce or vjp_map: a binary op's VJP is each layout's \
                      vjp_binary (vjp_binary_dense, vjp_binary_scalar)"
                .into(),
        })
    };
    (@grad all $name:ident $v:ident lanes($gv:expr)) => { $v.visit(&$gv) };
    (@grad nan_free $name:ident $v:ident lanes($gv:expr)) => { $v.visit(&NanFree($gv)) };
    (@kind reduce) => { Kind::Reduce };
    (@kind reduce_one) => { Kind::ReduceOne };
    (@kind normalize) => { Kind::Normalize };
    (@kind unary) => { Kind::Unary };
    (@kind binary) => { Kind::Binary };
    (@bin binary $value:expr) => { Some(BinOp::from($value)) };
    (@bin $kind:ident $value:expr) => { None };
    (@bmethod binary $name:ident [$($doc:literal)+] ($value:expr) -> $out:ty) => {
        $(#[doc = $doc])+
        ///
        /// The output mask follows `rule`; 0 (false) at invalid dense positions, a sparse
        /// result stores exactly the valid positions.
        ///
        /// # Errors
        /// As [`ZipKernels::zip_elements`].
        fn $name(&self, rhs: &Rhs, rule: MaskRule) -> Result<Self::Zipped<$out>> {
            self.zip_elements(rhs, &$value, rule)
        }
    };
    (@bmethod $kind:ident $name:ident [$($doc:literal)+] ($value:expr) -> $out:ty) => {};
    (@method binary $on:ident $name:ident [$($doc:literal)+] ($value:expr) -> $out:ty,
        [$($opt:ident : $oty:ty),*] $kernel:ident) => {};
    (@call binary $a:ident $req:ident $sink:ident $name:ident [$($opt:ident),*]) => {
        return Err(MaskedError::Unsupported {
            op: stringify!($name),
            context: "with one operand: a binary op needs two (apply_binary_to)".into(),
        })
    };
    (@nan all) => { false };
    (@nan nan_free) => { true };

    (@on all $s:ident) => { $s };
    (@on nan_free $s:ident) => { $s.without_nans()? };

    (@method reduce $on:ident $name:ident [$($doc:literal)+] ($value:expr) -> $out:ty,
        [$($opt:ident : $oty:ty),*] $kernel:ident) => {
        $(#[doc = $doc])+
        ///
        /// # Errors
        /// Bad dims ([`MaskedError::DimOutOfRange`], [`MaskedError::DuplicateDim`]), bad
        /// option values ([`MaskedError::InvalidArgument`]).
        fn $name(&self, dims: impl Into<Dims>, keepdim: bool $(, $opt: $oty)*)
            -> Result<Self::Reduced<$out>>
        {
            let dims = dims.into();
            registry!(@on $on self).$kernel(&$value, &dims, keepdim)
        }
    };
    (@method reduce_one $on:ident $name:ident [$($doc:literal)+] ($value:expr) -> $out:ty,
        [$($opt:ident : $oty:ty),*] $kernel:ident) => {
        $(#[doc = $doc])+
        ///
        /// # Errors
        /// More than one dim ([`MaskedError::DimCount`]), bad dims.
        fn $name(&self, dim: impl Into<Dims>, keepdim: bool $(, $opt: $oty)*)
            -> Result<Self::Reduced<$out>>
        {
            let dims = at_most_one(stringify!($name), dim.into())?;
            registry!(@on $on self).$kernel(&$value, &dims, keepdim)
        }
    };
    (@method normalize all $name:ident [$($doc:literal)+] ($value:expr) -> $out:ty,
        [$($opt:ident : $oty:ty),*] $kernel:ident) => {
        $(#[doc = $doc])+
        ///
        /// # Errors
        /// Bad dim ([`MaskedError::DimOutOfRange`]), bad option values.
        fn $name(&self, dim: impl DimLike $(, $opt: $oty)*) -> Result<Self::Mapped<$out>> {
            self.$kernel(&$value, dim.dim_index())
        }
    };

    (@method unary all $name:ident [$($doc:literal)+] ($value:expr) -> $out:ty,
        [$($opt:ident : $oty:ty),*] $kernel:ident) => {
        $(#[doc = $doc])+
        ///
        /// Keeps the input's mask; 0 at invalid dense positions, a sparse result stores
        /// exactly the valid positions.
        ///
        /// # Errors
        /// Bad option values; a mask-free sparse input with an op that does not keep 0 at 0
        /// ([`MaskedError::Unsupported`]: the result would store every position).
        fn $name(&self $(, $opt: $oty)*) -> Result<Self::Mapped<$out>> {
            let f = $value;
            self.map_elements(&f, f.0.zero_preserving())
        }
    };

    (@call unary $a:ident $req:ident $sink:ident pow [$($opt:ident),*]) => {
        // an integer input with a non-negative integer exponent keeps its type
        match Pow::new($req.options.exponent)?.keeps_integers() {
            Some(_) if !T::DTYPE.is_float() => {
                let f = KeepMap(KeepFn::Pow(Pow::new($req.options.exponent)?));
                $sink.mapped($a.map_elements(&f, f.0.zero_preserving())?)
            }
            _ => $sink.mapped($a.pow($($req.options.$opt),*)?),
        }
    };
    (@call unary $a:ident $req:ident $sink:ident $name:ident [$($opt:ident),*]) => {
        $sink.mapped($a.$name($($req.options.$opt),*)?)
    };
    (@call normalize $a:ident $req:ident $sink:ident $name:ident [$($opt:ident),*]) => {
        $sink.mapped($a.$name($req.one_dim()? $(, $req.options.$opt)*)?)
    };
    (@call $kind:ident $a:ident $req:ident $sink:ident $name:ident [$($opt:ident),*]) => {
        $sink.reduced($a.$name($req.dims.clone(), $req.keepdim $(, $req.options.$opt)*)?)
    };
}

impl std::str::FromStr for Op {
    type Err = MaskedError;
    fn from_str(s: &str) -> Result<Op> {
        Op::ALL
            .iter()
            .copied()
            .find(|o| o.name() == s)
            .ok_or_else(|| MaskedError::UnknownOp {
                name: s.to_string(),
                known: op_names(),
            })
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

// The table. An entry is
//
//     /// doc (also the op's summary in the docs' table and the CLI help)
//     name => Variant {
//         kind: reduce | reduce_one | normalize | unary,
//         on: all | nan_free,           // nan_free: the data with NaN masked out
//         run: kernel(op value) -> output type,   // fold_lanes, stat_lanes, map_lanes
//                                                 // or map_elements (unary)
//         options: [name: type, ...],   // declared in `declare_options!` above
//         grad: none | elementwise | lanes(gradient value),   // LaneGrad (grad.rs),
//                                       // built from the options as `run` is
//     }
registry! {
    /// Masked sum (integers widen to `i64`; fully masked lanes give 0).
    sum => Sum { kind: reduce, on: all, run: fold_lanes(Sum) -> T::Wide, options: [], grad: lanes(SumGrad) }
    /// Masked product (integers widen to `i64`; fully masked lanes give 1).
    prod => Prod { kind: reduce, on: all, run: fold_lanes(Prod) -> T::Wide, options: [], grad: lanes(ProdGrad) }
    /// Masked maximum (fully masked lanes give `-inf` or the integer MIN).
    amax => AMax { kind: reduce, on: all, run: fold_lanes(AMax) -> T, options: [], grad: lanes(ExtremumGrad { max: true }) }
    /// Masked minimum (fully masked lanes give `+inf` or the integer MAX).
    amin => AMin { kind: reduce, on: all, run: fold_lanes(AMin) -> T, options: [], grad: lanes(ExtremumGrad { max: false }) }
    /// Masked peak to peak, `amax - amin` (integers widen to `i64`; fully masked lanes give 0).
    ptp => Ptp { kind: reduce, on: all, run: fold_lanes(Ptp) -> T::Wide, options: [], grad: lanes(PtpGrad) }
    /// Index of the masked maximum along one dim (first among ties, first NaN), or the
    /// flat row-major index when `dim` is all dims; 0 for a fully masked lane.
    argmax => ArgMax { kind: reduce_one, on: all, run: fold_lanes(ArgMax) -> i64, options: [], grad: none }
    /// Index of the masked minimum along one dim (first among ties, first NaN), or the
    /// flat row-major index when `dim` is all dims; 0 for a fully masked lane.
    argmin => ArgMin { kind: reduce_one, on: all, run: fold_lanes(ArgMin) -> i64, options: [], grad: none }
    /// Masked mean (NaN for fully masked lanes; integers give `f64`).
    mean => Mean { kind: reduce, on: all, run: fold_lanes(Mean) -> T::Real, options: [], grad: lanes(MeanGrad) }
    /// Number of valid elements; every output position is valid (all-true output mask).
    count => Count { kind: reduce, on: all, run: fold_lanes(Count) -> i64, options: [], grad: none }
    /// Masked variance, `sum((x - mean)^2) / max(count - correction, 0)` (1 = Bessel);
    /// NaN when fully masked.
    var => Var {
        kind: reduce, on: all,
        run: fold_lanes(Var { correction: check_correction(correction)? }) -> T::Real,
        options: [correction: f64], grad: lanes(VarGrad::new(correction, false)?),
    }
    /// Masked standard deviation (the square root of `var`).
    std => Std {
        kind: reduce, on: all,
        run: fold_lanes(Std { correction: check_correction(correction)? }) -> T::Real,
        options: [correction: f64], grad: lanes(VarGrad::new(correction, true)?),
    }
    /// Masked vector norm of order `ord` (p > 0, 0 = count of non-zeros, inf = max |x|,
    /// -inf = min |x|, negative p over the valid elements).
    norm => Norm {
        kind: reduce, on: all, run: fold_lanes(Norm::new(ord)?) -> T::Real,
        options: [ord: f64], grad: lanes(NormGrad::new(ord)?),
    }
    /// Masked, overflow-safe `log(sum(exp(x)))`; `-inf` when fully masked.
    logsumexp => LogSumExp {
        kind: reduce, on: all, run: fold_lanes(LogSumExp) -> T::Real, options: [], grad: lanes(LogSumExpGrad { mean: false }),
    }
    /// Masked, overflow-safe `log(mean(exp(x)))` (logsumexp minus the log of the valid
    /// count); NaN when fully masked.
    logmeanexp => LogMeanExp {
        kind: reduce, on: all, run: fold_lanes(LogMeanExp) -> T::Real, options: [], grad: lanes(LogSumExpGrad { mean: true }),
    }
    /// Masked median (`mode` avg: mean of the two middle values of an even count; lower:
    /// the lower one). A valid NaN gives NaN; fully masked gives NaN.
    median => Median {
        kind: reduce, on: all, run: stat_lanes(Quantile::median(mode)) -> T::Real,
        options: [mode: MedianMode], grad: lanes(QuantileGrad::median(mode)),
    }
    /// Masked `q`-quantile with numpy's interpolation methods, by selection (O(n)
    /// expected per lane).
    quantile => Quantile {
        kind: reduce, on: all, run: stat_lanes(Quantile::new(q, interpolation)?) -> T::Real,
        options: [q: f64, interpolation: Interpolation], grad: lanes(QuantileGrad::new(q, interpolation)?),
    }
    /// Masked softmax along `dim`: 0 at masked-out positions and in fully masked lanes.
    softmax => Softmax {
        kind: normalize, on: all,
        run: map_lanes(Softmax { kind: SoftmaxKind::Softmax }) -> T::Real,
        options: [], grad: lanes(SoftmaxGrad { kind: SoftmaxKind::Softmax }),
    }
    /// Masked log-softmax along `dim`: `-inf` at masked-out positions and in fully masked
    /// lanes.
    log_softmax => LogSoftmax {
        kind: normalize, on: all,
        run: map_lanes(Softmax { kind: SoftmaxKind::LogSoftmax }) -> T::Real,
        options: [], grad: lanes(SoftmaxGrad { kind: SoftmaxKind::LogSoftmax }),
    }
    /// Masked softmin (`softmax(-x)`) along `dim`.
    softmin => Softmin {
        kind: normalize, on: all,
        run: map_lanes(Softmax { kind: SoftmaxKind::Softmin }) -> T::Real,
        options: [], grad: lanes(SoftmaxGrad { kind: SoftmaxKind::Softmin }),
    }
    /// `x / max(norm_ord(x), eps)` along `dim` over the valid elements; 0 elsewhere.
    normalize => Normalize {
        kind: normalize, on: all, run: map_lanes(Normalize::new(ord, eps)?) -> T::Real,
        options: [ord: f64, eps: f64], grad: lanes(NormalizeGrad::new(ord, eps)?),
    }
    /// Masked cumulative sum along `dim` in the input type; masked-out positions carry the
    /// running value.
    cumsum => CumSum {
        kind: normalize, on: all, run: map_lanes(Cumulative { prod: false }) -> T,
        options: [], grad: lanes(CumulativeGrad { prod: false }),
    }
    /// Masked cumulative product along `dim` in the input type; masked-out positions carry
    /// the running value.
    cumprod => CumProd {
        kind: normalize, on: all, run: map_lanes(Cumulative { prod: true }) -> T,
        options: [], grad: lanes(CumulativeGrad { prod: true }),
    }
    /// Sum ignoring NaN (and masked-out) elements.
    nansum => NanSum { kind: reduce, on: nan_free, run: fold_lanes(Sum) -> T::Wide, options: [], grad: lanes(SumGrad) }
    /// Mean ignoring NaN elements.
    nanmean => NanMean { kind: reduce, on: nan_free, run: fold_lanes(Mean) -> T::Real, options: [], grad: lanes(MeanGrad) }
    /// Variance ignoring NaN elements.
    nanvar => NanVar {
        kind: reduce, on: nan_free,
        run: fold_lanes(Var { correction: check_correction(correction)? }) -> T::Real,
        options: [correction: f64], grad: lanes(VarGrad::new(correction, false)?),
    }
    /// Standard deviation ignoring NaN elements.
    nanstd => NanStd {
        kind: reduce, on: nan_free,
        run: fold_lanes(Std { correction: check_correction(correction)? }) -> T::Real,
        options: [correction: f64], grad: lanes(VarGrad::new(correction, true)?),
    }
    /// Maximum ignoring NaN elements.
    nanmax => NanMax { kind: reduce, on: nan_free, run: fold_lanes(AMax) -> T, options: [], grad: lanes(ExtremumGrad { max: true }) }
    /// Minimum ignoring NaN elements.
    nanmin => NanMin { kind: reduce, on: nan_free, run: fold_lanes(AMin) -> T, options: [], grad: lanes(ExtremumGrad { max: false }) }
    /// Median ignoring NaN elements.
    nanmedian => NanMedian {
        kind: reduce, on: nan_free, run: stat_lanes(Quantile::median(mode)) -> T::Real,
        options: [mode: MedianMode], grad: lanes(QuantileGrad::median(mode)),
    }
    /// Quantile ignoring NaN elements.
    nanquantile => NanQuantile {
        kind: reduce, on: nan_free, run: stat_lanes(Quantile::new(q, interpolation)?) -> T::Real,
        options: [q: f64, interpolation: Interpolation], grad: lanes(QuantileGrad::new(q, interpolation)?),
    }
    /// Index of the maximum ignoring NaN elements (numpy's `nanargmax`) along one dim, or
    /// the flat row-major index over all dims; 0 (and masked out) for a lane with no valid
    /// non-NaN element.
    nanargmax => NanArgMax { kind: reduce_one, on: nan_free, run: fold_lanes(ArgMax) -> i64, options: [], grad: none }
    /// Index of the minimum ignoring NaN elements (numpy's `nanargmin`) along one dim, or
    /// the flat row-major index over all dims; 0 (and masked out) for a lane with no valid
    /// non-NaN element.
    nanargmin => NanArgMin { kind: reduce_one, on: nan_free, run: fold_lanes(ArgMin) -> i64, options: [], grad: none }

    /// `|x|` (integers keep their type and wrap: `abs(MIN) = MIN`).
    abs => Abs { kind: unary, on: all, run: map_elements(KeepMap(KeepFn::Abs(Abs))) -> T, options: [], grad: lanes(UnaryGrad(KeepFn::Abs(Abs))) }
    /// `-x` (integers keep their type and wrap).
    neg => Neg { kind: unary, on: all, run: map_elements(KeepMap(KeepFn::Neg(Neg))) -> T, options: [], grad: lanes(UnaryGrad(KeepFn::Neg(Neg))) }
    /// -1, 0 or 1 (`sign(±0) = 0`, `sign(NaN) = 0`, as torch; integers keep their type).
    sign => Sign { kind: unary, on: all, run: map_elements(KeepMap(KeepFn::Sign(Sign))) -> T, options: [], grad: lanes(UnaryGrad(KeepFn::Sign(Sign))) }
    /// `x * x` (integers keep their type and wrap).
    square => Square { kind: unary, on: all, run: map_elements(KeepMap(KeepFn::Square(Square))) -> T, options: [], grad: lanes(UnaryGrad(KeepFn::Square(Square))) }
    /// Square root (NaN below 0; integers give `f64`).
    sqrt => Sqrt { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Sqrt(Sqrt))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Sqrt(Sqrt))) }
    /// `1 / sqrt(x)`.
    rsqrt => Rsqrt { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Rsqrt(Rsqrt))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Rsqrt(Rsqrt))) }
    /// `1 / x`.
    reciprocal => Reciprocal { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Reciprocal(Reciprocal))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Reciprocal(Reciprocal))) }
    /// `e^x`.
    exp => Exp { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Exp(Exp))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Exp(Exp))) }
    /// `2^x`.
    exp2 => Exp2 { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Exp2(Exp2))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Exp2(Exp2))) }
    /// `e^x - 1`, accurate near 0.
    expm1 => Expm1 { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Expm1(Expm1))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Expm1(Expm1))) }
    /// Natural logarithm (a valid negative gives a valid NaN, 0 gives `-inf`).
    log => Log { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Log(Log))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Log(Log))) }
    /// Base-2 logarithm.
    log2 => Log2 { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Log2(Log2))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Log2(Log2))) }
    /// Base-10 logarithm.
    log10 => Log10 { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Log10(Log10))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Log10(Log10))) }
    /// `ln(1 + x)`, accurate near 0.
    log1p => Log1p { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Log1p(Log1p))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Log1p(Log1p))) }
    /// Sine.
    sin => Sin { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Sin(Sin))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Sin(Sin))) }
    /// Cosine.
    cos => Cos { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Cos(Cos))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Cos(Cos))) }
    /// Tangent.
    tan => Tan { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Tan(Tan))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Tan(Tan))) }
    /// Arcsine.
    asin => Asin { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Asin(Asin))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Asin(Asin))) }
    /// Arccosine.
    acos => Acos { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Acos(Acos))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Acos(Acos))) }
    /// Arctangent.
    atan => Atan { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Atan(Atan))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Atan(Atan))) }
    /// Hyperbolic sine.
    sinh => Sinh { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Sinh(Sinh))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Sinh(Sinh))) }
    /// Hyperbolic cosine.
    cosh => Cosh { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Cosh(Cosh))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Cosh(Cosh))) }
    /// Hyperbolic tangent.
    tanh => Tanh { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Tanh(Tanh))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Tanh(Tanh))) }
    /// Inverse hyperbolic sine.
    asinh => Asinh { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Asinh(Asinh))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Asinh(Asinh))) }
    /// Inverse hyperbolic cosine.
    acosh => Acosh { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Acosh(Acosh))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Acosh(Acosh))) }
    /// Inverse hyperbolic tangent.
    atanh => Atanh { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Atanh(Atanh))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Atanh(Atanh))) }
    /// Logistic sigmoid `1 / (1 + e^-x)`.
    sigmoid => Sigmoid { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Sigmoid(Sigmoid))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Sigmoid(Sigmoid))) }
    /// `ln(x / (1 - x))`, the inverse of sigmoid.
    logit => Logit { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Logit(Logit))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Logit(Logit))) }
    /// The error function.
    erf => Erf { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Erf(Erf))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Erf(Erf))) }
    /// `1 - erf(x)`, accurate for large `x`.
    erfc => Erfc { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Erfc(Erfc))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Erfc(Erfc))) }
    /// Round toward -inf (integers unchanged).
    floor => Floor { kind: unary, on: all, run: map_elements(KeepMap(KeepFn::Floor(Floor))) -> T, options: [], grad: lanes(UnaryGrad(KeepFn::Floor(Floor))) }
    /// Round toward +inf (integers unchanged).
    ceil => Ceil { kind: unary, on: all, run: map_elements(KeepMap(KeepFn::Ceil(Ceil))) -> T, options: [], grad: lanes(UnaryGrad(KeepFn::Ceil(Ceil))) }
    /// Round to nearest, ties to even (integers unchanged).
    round => Round { kind: unary, on: all, run: map_elements(KeepMap(KeepFn::Round(Round))) -> T, options: [], grad: lanes(UnaryGrad(KeepFn::Round(Round))) }
    /// Round toward 0 (integers unchanged).
    trunc => Trunc { kind: unary, on: all, run: map_elements(KeepMap(KeepFn::Trunc(Trunc))) -> T, options: [], grad: lanes(UnaryGrad(KeepFn::Trunc(Trunc))) }
    /// `x - trunc(x)`, with the sign of `x`.
    frac => Frac { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Frac(Frac))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Frac(Frac))) }
    /// `max(x, 0)`; NaN propagates (integers keep their type).
    relu => Relu { kind: unary, on: all, run: map_elements(KeepMap(KeepFn::Relu(Relu))) -> T, options: [], grad: lanes(UnaryGrad(KeepFn::Relu(Relu))) }
    /// `ln(1 + e^x)` (`x` above 20, as torch).
    softplus => Softplus { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Softplus(Softplus))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Softplus(Softplus))) }
    /// GELU, `x Φ(x)` with the exact normal CDF.
    gelu => Gelu { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Gelu(Gelu))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Gelu(Gelu))) }
    /// SiLU (swish), `x σ(x)`.
    silu => Silu { kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Silu(Silu))) -> T::Real, options: [], grad: lanes(UnaryGrad(FloatFn::Silu(Silu))) }
    /// `min(max(x, min), max)` (either bound may be absent, not both; NaN propagates;
    /// `min > max` gives `max`; integers keep their type, bounds rounded inward).
    clamp => Clamp {
        kind: unary, on: all, run: map_elements(KeepMap(KeepFn::Clamp(Clamp::new(min, max)?))) -> T,
        options: [min: Option<f64>, max: Option<f64>], grad: lanes(UnaryGrad(KeepFn::Clamp(Clamp::new(min, max)?))),
    }
    /// `x^exponent` for a scalar exponent (an integer input with a non-negative integer
    /// exponent keeps its type and wraps; a negative integer exponent of an integer is an
    /// error; `pow(-inf, 0.5)` is NaN).
    pow => Pow {
        kind: unary, on: all, run: map_elements(FloatMap(FloatFn::Pow(Pow::float_of::<T>(exponent)?))) -> T::Real,
        options: [exponent: f64], grad: lanes(UnaryGrad(FloatFn::Pow(Pow::new(exponent)?))),
    }
    /// NaN, +inf and -inf replaced by `nan` (default 0), `posinf` and `neginf` (default
    /// the type's largest and lowest finite values); integers unchanged.
    nan_to_num => NanToNum {
        kind: unary, on: all, run: map_elements(KeepMap(KeepFn::NanToNum(NanToNum::new(nan, posinf, neginf)))) -> T,
        options: [nan: f64, posinf: Option<f64>, neginf: Option<f64>], grad: lanes(UnaryGrad(KeepFn::NanToNum(NanToNum::new(nan, posinf, neginf)))),
    }

    /// `x + y` (integers wrap).
    add => Add { kind: binary, on: all, run: zip_elements(KeepZip(KeepBin::Add)) -> T, options: [], grad: elementwise }
    /// `x - y` (integers wrap).
    sub => Sub { kind: binary, on: all, run: zip_elements(KeepZip(KeepBin::Sub)) -> T, options: [], grad: elementwise }
    /// `x * y` (integers wrap).
    mul => Mul { kind: binary, on: all, run: zip_elements(KeepZip(KeepBin::Mul)) -> T, options: [], grad: elementwise }
    /// True division `x / y` (integers give `f64`).
    div => Div { kind: binary, on: all, run: zip_elements(FloatZip(FloatBin::Div)) -> T::Real, options: [], grad: elementwise }
    /// `floor(x / y)` (torch's rounding; an integer division by 0 at a valid position is
    /// an error).
    floor_divide => FloorDivide { kind: binary, on: all, run: zip_elements(KeepZip(KeepBin::FloorDivide)) -> T, options: [], grad: none }
    /// The larger of `x` and `y`; NaN propagates.
    maximum => Maximum { kind: binary, on: all, run: zip_elements(KeepZip(KeepBin::Maximum)) -> T, options: [], grad: elementwise }
    /// The smaller of `x` and `y`; NaN propagates.
    minimum => Minimum { kind: binary, on: all, run: zip_elements(KeepZip(KeepBin::Minimum)) -> T, options: [], grad: elementwise }
    /// The larger of `x` and `y`; a NaN operand gives the other.
    fmax => Fmax { kind: binary, on: all, run: zip_elements(KeepZip(KeepBin::Fmax)) -> T, options: [], grad: elementwise }
    /// The smaller of `x` and `y`; a NaN operand gives the other.
    fmin => Fmin { kind: binary, on: all, run: zip_elements(KeepZip(KeepBin::Fmin)) -> T, options: [], grad: elementwise }
    /// `atan2(x, y)`, the angle of the point `(y, x)`.
    atan2 => Atan2 { kind: binary, on: all, run: zip_elements(FloatZip(FloatBin::Atan2)) -> T::Real, options: [], grad: elementwise }
    /// `sqrt(x^2 + y^2)` without undue overflow.
    hypot => Hypot { kind: binary, on: all, run: zip_elements(FloatZip(FloatBin::Hypot)) -> T::Real, options: [], grad: elementwise }
    /// `log(e^x + e^y)` without overflow.
    logaddexp => LogAddExp { kind: binary, on: all, run: zip_elements(FloatZip(FloatBin::LogAddExp)) -> T::Real, options: [], grad: elementwise }
    /// `x * log(y)`, 0 where `x == 0` (unless `y` is NaN).
    xlogy => Xlogy { kind: binary, on: all, run: zip_elements(FloatZip(FloatBin::Xlogy)) -> T::Real, options: [], grad: elementwise }
    /// C `fmod`: the remainder with the sign of the dividend `x`.
    fmod => Fmod { kind: binary, on: all, run: zip_elements(KeepZip(KeepBin::Fmod)) -> T, options: [], grad: elementwise }
    /// `x - y * floor(x / y)`: the remainder with the sign of the divisor `y` (torch).
    remainder => Remainder { kind: binary, on: all, run: zip_elements(KeepZip(KeepBin::Remainder)) -> T, options: [], grad: elementwise }
    /// `x == y` (bool).
    eq => Eq { kind: binary, on: all, run: zip_elements(CmpZip(CmpBin::Eq)) -> bool, options: [], grad: none }
    /// `x != y` (bool).
    ne => Ne { kind: binary, on: all, run: zip_elements(CmpZip(CmpBin::Ne)) -> bool, options: [], grad: none }
    /// `x < y` (bool).
    lt => Lt { kind: binary, on: all, run: zip_elements(CmpZip(CmpBin::Lt)) -> bool, options: [], grad: none }
    /// `x <= y` (bool).
    le => Le { kind: binary, on: all, run: zip_elements(CmpZip(CmpBin::Le)) -> bool, options: [], grad: none }
    /// `x > y` (bool).
    gt => Gt { kind: binary, on: all, run: zip_elements(CmpZip(CmpBin::Gt)) -> bool, options: [], grad: none }
    /// `x >= y` (bool).
    ge => Ge { kind: binary, on: all, run: zip_elements(CmpZip(CmpBin::Ge)) -> bool, options: [], grad: none }

    extra {
        /// The vector-Jacobian product of a reduction (`req` names it, with its dims,
        /// keepdim and options): the gradient with respect to this input's values given
        /// `g`, the upstream gradient shaped like the reduction's output (read only at
        /// output positions whose lane has a valid element). The result has this input's
        /// shape, mask and layout, 0 at invalid positions; no NaN comes from a masked-out
        /// position or a fully masked lane. This is the convenience form: what the
        /// gradient needs of the forward pass (a lane's extremum, norm, logsumexp or
        /// median) is recomputed from the lane's valid values. When the forward output is
        /// at hand, [`MaskedOps::vjp_reduce_saved`] takes it instead.
        ///
        /// ```
        /// use masked::by_name::OpRequest;
        /// use masked::prelude::*;
        /// use ndarray::array;
        /// let x = MaskedArray::from_bool_mask(
        ///     array![[1.0f64, 5.0, 5.0], [2.0, 9.0, 4.0]],
        ///     array![[true, true, true], [true, false, false]],
        /// )?;
        /// let g = MaskedArray::unmasked(array![1.0f64, 1.0].into_dyn());
        /// let dx = x.vjp_reduce(&OpRequest::new("amax")?.dims(1), &g)?;
        /// // ties split evenly; the masked-out 9 gets nothing
        /// assert_eq!(dx.values(), &array![[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]]);
        /// # Ok::<(), masked::MaskedError>(())
        /// ```
        ///
        /// # Errors
        /// An op that is not a reduction ([`MaskedError::InvalidArgument`]), not
        /// differentiable, or on integer input ([`MaskedError::NotDifferentiable`]); bad
        /// dims or options; `g` of the wrong shape ([`MaskedError::ShapeMismatch`]); a
        /// layout without gradient kernels ([`MaskedError::Unsupported`]).
        fn vjp_reduce(&self, req: &OpRequest, g: &Self::Reduced<T::Real>) -> Result<Self::Mapped<T::Real>> {
            check_grad::<T>(req, &[Kind::Reduce, Kind::ReduceOne])?;
            visit_grad(req, ReduceGrad { a: self, req, g, saved: None })
        }
        /// [`MaskedOps::vjp_reduce`] given `output`, the forward result of the same
        /// request on the same input (saved by the caller's forward pass), so the backward
        /// pass does not redo the forward's work. Which ops read it (the others
        /// recompute, as the convenience form):
        ///
        /// | op | reads from the saved output |
        /// |---|---|
        /// | amax, amin (and nan-) | the extremum: ties found in one pass, no search |
        /// | logsumexp (and nan-) | `lse`: the gradient is `g · exp(x - lse)`, no max or sum |
        /// | norm | the norm: no second pass of powers |
        /// | std (and nan-) | the spread (var needs only the mean: one pass either way) |
        /// | median, quantile (and nan-), when the output is one order statistic | the value names the element: one counting pass, no selection |
        ///
        /// The result equals the convenience form's up to the rounding of the saved
        /// output to the input's type (exactly, for amax, amin, median and quantile).
        /// A saved output that is not the forward result gives a wrong gradient (it
        /// is trusted, not checked) but never a panic.
        ///
        /// ```
        /// use masked::by_name::OpRequest;
        /// use masked::prelude::*;
        /// use ndarray::array;
        /// let x = MaskedArray::from_bool_mask(
        ///     array![[1.0f64, 5.0, 5.0], [2.0, 9.0, 4.0]],
        ///     array![[true, true, true], [true, false, false]],
        /// )?;
        /// let req = OpRequest::new("median")?.dims(1);
        /// let y = x.median(1, false, masked::MedianMode::Avg)?; // the forward pass, kept
        /// let g = MaskedArray::unmasked(array![1.0f64, 1.0].into_dyn());
        /// let dx = x.vjp_reduce_saved(&req, &y, &g)?;
        /// assert_eq!(dx.values(), &array![[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]);
        /// assert_eq!(dx.values(), x.vjp_reduce(&req, &g)?.values());
        /// # Ok::<(), masked::MaskedError>(())
        /// ```
        ///
        /// # Errors
        /// As [`MaskedOps::vjp_reduce`]; `output` of another shape than `g`.
        fn vjp_reduce_saved(
            &self,
            req: &OpRequest,
            output: &Self::Reduced<T::Real>,
            g: &Self::Reduced<T::Real>,
        ) -> Result<Self::Mapped<T::Real>> {
            check_grad::<T>(req, &[Kind::Reduce, Kind::ReduceOne])?;
            visit_grad(req, ReduceGrad { a: self, req, g, saved: Some(output) })
        }
        /// The vector-Jacobian product of a normalization (softmax, log_softmax,
        /// softmin, normalize, cumsum, cumprod along `req`'s one dim) or of a unary
        /// elementwise op (`g · f'(x)`): the gradient with respect to this input's values
        /// given `g`, the upstream gradient shaped like the input (read only at valid
        /// positions). The forward output is not needed: each lane's softmax is
        /// recomputed from its valid values, in `f64`.
        ///
        /// # Errors
        /// As [`MaskedOps::vjp_reduce`], for a normalization.
        fn vjp_map(&self, req: &OpRequest, g: &Self::Mapped<T::Real>) -> Result<Self::Mapped<T::Real>> {
            vjp_map_with(self, req, None, g)
        }
        /// [`MaskedOps::vjp_map`] given `output`, the forward result of the same request
        /// on the same input. softmax and softmin read it for `y` and have no `exp` left
        /// to do; log_softmax computes `exp(y)` (no max, no sum). The other maps
        /// recompute, as the convenience form. The result equals the convenience form's
        /// up to the rounding of the saved output to the input's type; a saved output
        /// that is not the forward result is trusted, not checked.
        ///
        /// ```
        /// use masked::by_name::OpRequest;
        /// use masked::prelude::*;
        /// use ndarray::array;
        /// let x = MaskedArray::from_bool_mask(
        ///     array![[0.0f64, 0.0, 7.0]],
        ///     array![[true, true, false]],
        /// )?;
        /// let req = OpRequest::new("softmax")?.dims(1);
        /// let y = x.softmax(1)?; // the forward pass, kept: [[0.5, 0.5, 0]]
        /// let g = MaskedArray::unmasked(array![[1.0f64, 0.0, 5.0]]);
        /// let dx = x.vjp_map_saved(&req, &y, &g)?;
        /// // y (g - y·g) = [0.5 (1 - 0.5), 0.5 (0 - 0.5)]
        /// assert_eq!(dx.values(), &array![[0.25, -0.25, 0.0]]);
        /// # Ok::<(), masked::MaskedError>(())
        /// ```
        ///
        /// # Errors
        /// As [`MaskedOps::vjp_map`]; `output` of another shape than the input.
        fn vjp_map_saved(
            &self,
            req: &OpRequest,
            output: &Self::Mapped<T::Real>,
            g: &Self::Mapped<T::Real>,
        ) -> Result<Self::Mapped<T::Real>> {
            vjp_map_with(self, req, Some(output), g)
        }
        /// The values converted to `D` (torch's `.to(dtype)`), with the same mask and, on a
        /// sparse layout, the same positions. Floats round to nearest; into an integer
        /// type a float is truncated toward zero.
        ///
        /// # Errors
        /// [`MaskedError::CastOutOfRange`] where a valid value has no `D` value (NaN, an
        /// infinity or an out-of-range value into an integer type).
        fn cast<D: Element>(&self) -> Result<Self::Mapped<D>> {
            let c = crate::cast::Cast::<D>::new();
            let out = self.map_elements(&c, true)?;
            c.finish(T::DTYPE)?;
            Ok(out)
        }
        /// The lower median along one `dim` and the lane position of that element (first
        /// among ties; a valid NaN gives NaN and the first NaN's position; -1 for a fully
        /// masked lane), as torch.median / torch.nanmedian with a dim return them.
        ///
        /// # Errors
        /// Bad dim.
        #[allow(clippy::type_complexity)]
        fn median_with_index(
            &self,
            dim: impl DimLike,
            keepdim: bool,
        ) -> Result<(Self::Reduced<T::Real>, Self::Reduced<i64>)> {
            let d = Dims::from(dim.dim_index());
            let v = self.stat_lanes(&Quantile::median(MedianMode::Lower), &d, keepdim)?;
            let i = self.stat_lanes(&MedianIndex, &d, keepdim)?;
            Ok((v, i))
        }
        /// [`MaskedOps::median_with_index`] ignoring NaN (-1 for an all-NaN lane):
        /// paddle's nanmedian in lower mode, torch.nanmedian with a dim.
        ///
        /// # Errors
        /// Bad dim.
        #[allow(clippy::type_complexity)]
        fn nanmedian_with_index(
            &self,
            dim: impl DimLike,
            keepdim: bool,
        ) -> Result<(Self::Reduced<T::Real>, Self::Reduced<i64>)> {
            let a = self.without_nans()?;
            let d = Dims::from(dim.dim_index());
            let v = a.stat_lanes(&Quantile::median(MedianMode::Lower), &d, keepdim)?;
            let i = a.stat_lanes(&MedianIndex, &d, keepdim)?;
            Ok((v, i))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &op in Op::ALL {
            assert!(seen.insert(op.name()), "{op} twice");
            assert_eq!(op.name().parse::<Op>().unwrap(), op);
            assert!(!op.summary().is_empty(), "{op} has no summary");
            for o in op.options() {
                assert!(
                    OPTIONS.iter().any(|s| s.name == *o),
                    "{op}: option {o} undeclared"
                );
            }
        }
        let e = "frobnicate".parse::<Op>().unwrap_err().to_string();
        assert!(
            e.contains("unknown op 'frobnicate'") && e.contains(" ptp "),
            "{e}"
        );
    }

    #[test]
    fn options_parse_and_are_checked_per_op() {
        let mut r = OpRequest::new("quantile").unwrap();
        r.set_option("q", "0.25").unwrap();
        r.set_option("interpolation", "nearest").unwrap();
        assert_eq!(r.options.q, 0.25);
        assert_eq!(r.options.interpolation, Interpolation::Nearest);
        let e = r.set_option("ord", "2").unwrap_err().to_string();
        assert!(e.contains("does not take"), "{e}");
        let e = r.set_option("q", "half").unwrap_err().to_string();
        assert!(e.contains("expected a number") && e.contains("half"), "{e}");
        let e = r.set_option("bogus", "1").unwrap_err().to_string();
        assert!(e.contains("no op takes"), "{e}");
        assert_eq!(Op::NanVar.options(), &["correction"]);
        assert!(Op::NanVar.ignores_nan() && !Op::Var.ignores_nan());
        assert_eq!(Op::Softmax.kind(), Kind::Normalize);
        assert_eq!(Op::ArgMin.kind(), Kind::ReduceOne);
    }
}
