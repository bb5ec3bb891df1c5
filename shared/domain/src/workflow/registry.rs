//! The known workflows, by name and version.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::flow::Limit;
use crate::machine::HTTP_AGENT;
use crate::services::Directory;
use crate::workflow::{BUILT_IN, DefinitionError, StepKind, Workflow};

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
    /// The services' limits, given to the calls of every workflow added.
    service_limits: RwLock<ServiceLimits>,
}

/// The deployment's services' limits, as the calls are given them.
#[derive(Debug, Default)]
struct ServiceLimits {
    /// By service name.
    by_name: HashMap<String, Limit>,
    /// Every service, for the calls that name their endpoint, when any has a limit.
    by_endpoint: Option<Arc<Directory>>,
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
        registry.check_children()?;
        Ok(registry)
    }

    /// Checks that every workflow a step starts as a child exists, and that no
    /// workflow starts itself through its children (their newest versions, which new
    /// tasks pin).
    fn check_children(&self) -> Result<(), DefinitionError> {
        let fault =
            |workflow: &Workflow, step: &str, field: &str, message: String| DefinitionError {
                file: workflow.file.clone(),
                step: Some(step.to_owned()),
                field: field.to_owned(),
                message,
            };
        for workflow in self.all() {
            for (child, step, field) in workflow.child_workflows() {
                if self.latest(child).is_none() {
                    return Err(fault(
                        &workflow,
                        step,
                        field,
                        format!("no workflow is named '{child}'"),
                    ));
                }
            }
        }
        let mut latest: Vec<Arc<Workflow>> = self
            .latest
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        latest.sort_by(|a, b| a.name.cmp(&b.name));
        for workflow in &latest {
            // Depth first from each workflow, along the path that reached each one.
            let mut paths = vec![vec![workflow.name.clone()]];
            while let Some(path) = paths.pop() {
                let Some(at) = path.last().and_then(|name| self.latest(name)) else {
                    continue;
                };
                for (child, step, field) in at.child_workflows() {
                    if child == workflow.name {
                        let mut cycle = path.clone();
                        cycle.push(child.to_owned());
                        // Named at the step of the cycle's first workflow.
                        let (step, field) = match path.get(1) {
                            None => (step, field),
                            Some(next) => workflow
                                .child_workflows()
                                .find(|(name, _, _)| name == next)
                                .map_or((step, field), |(_, step, field)| (step, field)),
                        };
                        return Err(fault(
                            workflow,
                            step,
                            field,
                            format!("starts itself through its children: {}", cycle.join(" -> ")),
                        ));
                    }
                    if !path.iter().any(|name| name == child) {
                        let mut next = path.clone();
                        next.push(child.to_owned());
                        paths.push(next);
                    }
                }
            }
        }
        Ok(())
    }

    /// The versions new tasks of `workflow` pin for the workflows they may start as
    /// children, all the way down: the newest of each.
    #[must_use]
    pub fn pins(&self, workflow: &Workflow) -> std::collections::BTreeMap<String, u32> {
        let mut pins = std::collections::BTreeMap::new();
        let mut next: Vec<String> = workflow
            .child_workflows()
            .map(|(name, _, _)| name.to_owned())
            .collect();
        while let Some(name) = next.pop() {
            if pins.contains_key(&name) {
                continue;
            }
            let Some(child) = self.latest(&name) else {
                continue;
            };
            pins.insert(name, child.version);
            next.extend(child.child_workflows().map(|(name, _, _)| name.to_owned()));
        }
        pins
    }

    /// Adds a definition; the same name and version again must have the same content.
    ///
    /// # Errors
    /// [`RegistryError::Changed`] when it differs from a known definition of that version.
    pub fn add(&self, mut workflow: Workflow) -> Result<Arc<Workflow>, RegistryError> {
        let key = (workflow.name.clone(), workflow.version);
        give_limits(
            &mut workflow,
            &self
                .service_limits
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
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

    /// Limits the calls of each service of `services` (which are the deployment's
    /// settings, not a workflow's): the workflows known and those added later.
    pub fn limit_services(&self, services: Directory) {
        let by_name: HashMap<String, Limit> = (services.services.iter())
            .filter_map(|(name, service)| Some((name.clone(), service.limit.clone()?)))
            .collect();
        let by_endpoint = (!by_name.is_empty()).then(|| Arc::new(services));
        *self
            .service_limits
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = ServiceLimits {
            by_name,
            by_endpoint,
        };
        let limits = self
            .service_limits
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut versions = self
            .versions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for workflow in versions.values_mut() {
            let mut limited = Workflow::clone(workflow);
            give_limits(&mut limited, &limits);
            *workflow = Arc::new(limited);
        }
        for workflow in self
            .latest
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values_mut()
        {
            if let Some(limited) = versions.get(&(workflow.name.clone(), workflow.version)) {
                *workflow = Arc::clone(limited);
            }
        }
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

/// Gives each call of `workflow` its service's limit, from `limits`.
fn give_limits(workflow: &mut Workflow, limits: &ServiceLimits) {
    for step in &mut workflow.steps {
        if let StepKind::Call(call) = &mut step.kind {
            call.service_limit = limits.by_name.get(&call.agent).cloned();
            if call.agent == HTTP_AGENT {
                call.endpoints.clone_from(&limits.by_endpoint);
            }
        }
    }
}
