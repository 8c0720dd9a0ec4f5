//! The operator's model policy for finalization tries (see `docs/finalization.md`): a binding
//! per try, and whether a harness supports the policy exactly.

/// An operator model policy binding for one try; released when dropped.
pub trait ModelPolicyBinding: Send + Sync {
    /// Fails once the binding no longer holds (policy changed, execution revoked).
    fn assert_current(&self) -> Result<(), tether_core::Error>;
}

/// The operator's model policy (see `docs/finalization.md`).
pub trait OperatorModelPolicy: Send + Sync {
    /// Binds one finalization try's model execution, to the settled native selection when the
    /// harness supports the policy exactly.
    fn bind(
        &self,
        selection: Option<&crate::capture::ModelSelection>,
    ) -> Result<Box<dyn ModelPolicyBinding>, tether_core::Error>;
}

/// How a harness supports the operator model policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeModelPolicySupport {
    /// The harness runs exactly the bound native model.
    Exact,
    /// The harness cannot guarantee the bound model.
    Unsupported,
}

/// The operator model policy and the harness's support for it.
#[derive(Clone, Copy)]
pub struct ModelPolicyGate<'a> {
    /// The policy.
    pub policy: &'a dyn OperatorModelPolicy,
    /// The harness's support.
    pub support: NativeModelPolicySupport,
}

impl std::fmt::Debug for ModelPolicyGate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelPolicyGate")
            .field("support", &self.support)
            .finish_non_exhaustive()
    }
}
