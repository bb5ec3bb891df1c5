//! The known workflows, by name and version.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::workflow::{BUILT_IN, DefinitionError, Workflow};

/// Why a workflow could not be found or registered.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A definition file is invalid.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    /// A definition directory could not be read.
    #[error("cannot read workflow definitions in {path}: {source}")]
    Io {
        /// The directory or file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Two definitions claim the same name and version with different content.
    #[error(
        "workflow '{name}' version {version} is defined twice with different content; bump the version"
    )]
    Changed {
        /// The workflow's name.
        name: String,
        /// The version defined twice.
        version: u32,
    },
}

/// The known workflows, every version; the newest version of a name is the one
/// new tasks start with.
#[derive(Debug, Default)]
pub struct Registry {
    versions: RwLock<HashMap<(String, u32), Arc<Workflow>>>,
    latest: RwLock<HashMap<String, Arc<Workflow>>>,
}

impl Registry {
    /// The built-in workflows.
    ///
    /// # Panics
    /// Never: the built-in definitions are checked by this crate's tests.
    #[must_use]
    pub fn built_in() -> Self {
        Self::with_files(Vec::new()).expect("the built-in workflows are valid")
    }

    /// The built-in workflows, plus definitions read from files, as (file name, text)
    /// pairs: reading them is the caller's (the edges': the local process, a Lambda
    /// function at its start).
    ///
    /// # Errors
    /// The first invalid definition, or one that changes a known version.
    pub fn with_files(
        files: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, RegistryError> {
        let registry = Self::default();
        for (file, text) in BUILT_IN {
            registry.add(Workflow::parse(file, text)?)?;
        }
        for (file, text) in files {
            registry.add(Workflow::parse(&file, &text)?)?;
        }
        Ok(registry)
    }

    /// Adds a definition; the same name and version again must have the same content.
    ///
    /// # Errors
    /// [`RegistryError::Changed`] when it differs from a known definition of that version.
    pub fn add(&self, workflow: Workflow) -> Result<Arc<Workflow>, RegistryError> {
        let key = (workflow.name.clone(), workflow.version);
        let mut versions = self
            .versions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(known) = versions.get(&key) {
            if known.source != workflow.source {
                return Err(RegistryError::Changed {
                    name: key.0,
                    version: key.1,
                });
            }
            return Ok(Arc::clone(known));
        }
        let workflow = Arc::new(workflow);
        versions.insert(key, Arc::clone(&workflow));
        let mut latest = self
            .latest
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let newer = latest
            .get(&workflow.name)
            .is_none_or(|w| w.version < workflow.version);
        if newer {
            latest.insert(workflow.name.clone(), Arc::clone(&workflow));
        }
        Ok(workflow)
    }

    /// The version new tasks of `name` start with.
    #[must_use]
    pub fn latest(&self, name: &str) -> Option<Arc<Workflow>> {
        self.latest
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// A given version, if this registry has it.
    #[must_use]
    pub fn version(&self, name: &str, version: u32) -> Option<Arc<Workflow>> {
        self.versions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(name.to_owned(), version))
            .cloned()
    }

    /// Every known definition.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<Workflow>> {
        self.versions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }
}
