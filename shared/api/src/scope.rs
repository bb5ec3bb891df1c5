//! Whose tasks a request may touch: a caller's own, by the ids it wrote, or every
//! caller's, by their full ids (the operator's).

use sas_domain::ids::{Owner, TaskId};
use sas_domain::task::Actor;

use crate::error::{ApiError, ErrorCode};
use crate::view::View;

/// Whose tasks a request may touch, and how it names them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    /// A caller's own: its ids are scoped to `owner` (`None` when no one is
    /// authenticated, and ids are what the caller wrote).
    Own(Option<&'a Owner>),
    /// Every caller's, by their full ids: the operator's.
    All,
}

impl<'a> Scope<'a> {
    /// The stored id of the task the caller names `text`.
    pub(crate) fn id(self, text: &str) -> Result<TaskId, ApiError> {
        let invalid = |e: &dyn std::fmt::Display| {
            ApiError::new(ErrorCode::InvalidId, format!("task id '{text}' {e}")).on("id")
        };
        let id = TaskId::parse(text).map_err(|e| invalid(&e))?;
        match self {
            Self::All => Ok(id),
            Self::Own(_) if id.is_scoped() => Err(invalid(&"must not contain '.'")),
            Self::Own(None) => Ok(id),
            Self::Own(Some(owner)) => Ok(TaskId::scoped(owner, &id)),
        }
    }

    pub(crate) fn owner(self) -> Option<&'a Owner> {
        match self {
            Self::Own(owner) => owner,
            Self::All => None,
        }
    }

    pub(crate) fn view(self) -> View {
        match self {
            Self::Own(_) => View::Owner,
            Self::All => View::Operator,
        }
    }

    /// Who acts, in this scope.
    pub(crate) fn actor(self) -> Actor {
        match self {
            Self::Own(_) => Actor::Owner,
            Self::All => Actor::Operator,
        }
    }
}
