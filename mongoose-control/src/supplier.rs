//! What builds a processor on its group's thread: a [`ProcessorSupplier`], the one
//! argument of every add ([`crate::ControlPlane::add_processor`],
//! [`crate::ControlPlane::add_event_processor`], [`crate::Controller::add_processor`]).

use std::fmt;

use mongoose_core::Processor;

/// The boxed form of a supplier: builds a processor once, on its group's thread.
pub(crate) type BoxedSupplier = Box<dyn FnOnce() -> Box<dyn Processor> + Send>;

/// Builds one processor, once, on its group's thread, and names its type for the
/// group's recorder (a recording keeps it as the stream's provenance,
/// [`crate::GroupRecorder::processor_built`]).
///
/// A closure returning a processor converts into one (`|| Pricer` where `Pricer:
/// Processor`), named after its type; a factory that builds processors from
/// configuration, whose type it cannot name, is [`ProcessorSupplier::boxed`], named or
/// not with [`ProcessorSupplier::named`].
///
/// ```
/// use mongoose_control::ProcessorSupplier;
/// use mongoose_core::Processor;
///
/// struct Pricer;
/// impl Processor for Pricer {}
///
/// let typed = ProcessorSupplier::from(|| Pricer);
/// assert!(typed.type_name().ends_with("Pricer"));
/// let configured =
///     ProcessorSupplier::boxed(|| Box::new(Pricer) as Box<dyn Processor>).named("pricer");
/// assert_eq!(configured.type_name(), "pricer");
/// ```
pub struct ProcessorSupplier {
    type_name: &'static str,
    build: BoxedSupplier,
}

impl ProcessorSupplier {
    /// A supplier of processors of type `P`, named after `P`.
    pub fn new<P, F>(supplier: F) -> Self
    where
        P: Processor,
        F: FnOnce() -> P + Send + 'static,
    {
        ProcessorSupplier {
            type_name: std::any::type_name::<P>(),
            build: Box::new(move || Box::new(supplier()) as Box<dyn Processor>),
        }
    }

    /// A supplier of an already boxed processor (processors built from configuration
    /// by a factory), without a type name (`""`) until [`ProcessorSupplier::named`].
    pub fn boxed<F>(supplier: F) -> Self
    where
        F: FnOnce() -> Box<dyn Processor> + Send + 'static,
    {
        ProcessorSupplier {
            type_name: "",
            build: Box::new(supplier),
        }
    }

    /// This supplier, with `type_name` as the processor's type for the recorder (a
    /// configured kind's name, say).
    pub fn named(mut self, type_name: &'static str) -> Self {
        self.type_name = type_name;
        self
    }

    /// The processor's type name the recorder is told (`""` when unknown).
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The type name and the boxed supplier.
    pub(crate) fn into_parts(self) -> (&'static str, BoxedSupplier) {
        (self.type_name, self.build)
    }
}

impl<P, F> From<F> for ProcessorSupplier
where
    P: Processor,
    F: FnOnce() -> P + Send + 'static,
{
    fn from(supplier: F) -> Self {
        ProcessorSupplier::new(supplier)
    }
}

impl fmt::Debug for ProcessorSupplier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorSupplier")
            .field("type_name", &self.type_name)
            .finish_non_exhaustive()
    }
}
