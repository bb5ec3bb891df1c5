//! What the measurement tools share: the requests moto's recorder wrote.

pub mod recording;
