//! What the measurement tools share: the requests moto's recorder wrote, and the
//! physical floor under a task.

pub mod floor;
pub mod recording;
