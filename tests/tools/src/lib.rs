//! What the measurement tools share: the requests moto's recorder wrote, and the
//! physical floor under a task.

pub mod floor;
pub mod recording;

/// How the system under measure takes a submission: `sas-local`'s `SAS_INGESTION`,
/// the stack's `IngestionMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Ingestion {
    /// The task written before the answer.
    Direct,
    /// The request queued (committed) before the answer; the task created after.
    Buffered,
}

impl Ingestion {
    /// Its name on a command line and in a report.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Buffered => "buffered",
        }
    }
}
