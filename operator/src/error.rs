pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Store(#[from] highwater::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// A bounded label for the reconcile-errors metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kubernetes",
            Error::Store(_) => "database",
            Error::Finalizer(_) => "finalizer",
        }
    }
}
