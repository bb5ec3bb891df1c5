//! What Step Functions keeps beside a state machine's definition: its published
//! versions (each an immutable number naming one revision of the definition), its
//! aliases (each routing new executions to one version, or between two by weight)
//! and its tags; an activity's tags. Pure rules here; the store keeps a catalog as a
//! record of its own, each change a conditional write over the one read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::time::Timestamp;

/// The versions a machine may have published at once, as in Step Functions.
pub const MAX_VERSIONS: usize = 1_000;

/// The aliases a machine may have, as in Step Functions.
pub const MAX_ALIASES: usize = 100;

/// The tags a resource may have, as in Step Functions.
pub const MAX_TAGS: usize = 50;

/// What the qualifier after a state machine's name in an ARN names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qualifier<'a> {
    /// A published version, by number.
    Version(u32),
    /// An alias, by name.
    Alias(&'a str),
}

impl<'a> Qualifier<'a> {
    /// A number names a version; anything else an alias.
    #[must_use]
    pub fn of(text: &'a str) -> Self {
        text.parse().map_or(Self::Alias(text), Self::Version)
    }

    /// The alias's name, of an alias.
    #[must_use]
    pub fn alias(self) -> Option<&'a str> {
        match self {
            Self::Alias(name) => Some(name),
            Self::Version(_) => None,
        }
    }
}

/// A machine's (or an activity's) catalog.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    /// When the machine (or activity) it belongs to was created: a catalog left by a
    /// deleted one of the same name is not a new one's.
    #[serde(default)]
    pub of: Timestamp,
    /// The published versions, by number.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<PublishedVersion>,
    /// The last number published: a number is never given twice, a deleted
    /// version's included.
    #[serde(default)]
    pub published: u32,
    /// The aliases, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<Alias>,
    /// The tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Created as an `EXPRESS` machine: it runs as a standard one, and is described
    /// as it was created.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub express: bool,
}

/// A published version: a number naming one revision of the definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishedVersion {
    /// Its number, from 1.
    pub number: u32,
    /// The revision of the definition it names (the stored definition's version).
    pub revision: u32,
    /// When it was published.
    pub created_at: Timestamp,
    /// What its publisher said of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// An alias: a name whose executions start on one version, or on one of two by
/// weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alias {
    /// Its name.
    pub name: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where its executions go.
    pub routes: Vec<Route>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// One of an alias's routes: a version and the percentage of executions it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The version's number.
    pub version: u32,
    /// Its share of the executions, 0 to 100; an alias's add up to 100.
    pub weight: u8,
}

/// Why a catalog refused a change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// What the change names is not there.
    #[error("{0}")]
    NotFound(String),
    /// The change conflicts with what is there.
    #[error("{0}")]
    Conflict(String),
    /// The change is not one a catalog takes.
    #[error("{0}")]
    Invalid(String),
    /// A quota would be passed.
    #[error("{0}")]
    Full(String),
}

impl Catalog {
    /// The catalog of what was created `of`, from `kept` (one written before, maybe
    /// of a deleted namesake).
    #[must_use]
    pub fn of(of: Timestamp, kept: Option<Self>) -> Self {
        kept.filter(|catalog| catalog.of == of).unwrap_or(Self {
            of,
            ..Self::default()
        })
    }

    /// Publishes `revision` as a new version, or gives the latest version where it
    /// names that revision already (a publish sent twice is one version). `expected`
    /// is the revision the publisher read, refused where the definition moved on.
    ///
    /// # Errors
    /// [`CatalogError::Conflict`] for an `expected` revision that is not the current
    /// one, [`CatalogError::Full`] past [`MAX_VERSIONS`].
    pub fn publish(
        &mut self,
        revision: u32,
        expected: Option<u32>,
        at: Timestamp,
        description: Option<String>,
    ) -> Result<PublishedVersion, CatalogError> {
        if expected.is_some_and(|expected| expected != revision) {
            return Err(CatalogError::Conflict(format!(
                "the state machine's revision is {revision}, not {}",
                expected.unwrap_or_default()
            )));
        }
        if let Some(latest) = self.versions.last().filter(|v| v.revision == revision) {
            return Ok(latest.clone());
        }
        if self.versions.len() >= MAX_VERSIONS {
            return Err(CatalogError::Full(format!(
                "a state machine has at most {MAX_VERSIONS} versions: delete one first"
            )));
        }
        self.published += 1;
        let version = PublishedVersion {
            number: self.published,
            revision,
            created_at: at,
            description,
        };
        self.versions.push(version.clone());
        Ok(version)
    }

    /// The published version `number`.
    #[must_use]
    pub fn version(&self, number: u32) -> Option<&PublishedVersion> {
        self.versions.iter().find(|v| v.number == number)
    }

    /// The latest version that names `revision`, if one does.
    #[must_use]
    pub fn version_of_revision(&self, revision: u32) -> Option<&PublishedVersion> {
        self.versions.iter().rev().find(|v| v.revision == revision)
    }

    /// Deletes the version `number`; `false` where there is none.
    ///
    /// # Errors
    /// [`CatalogError::Conflict`] while an alias routes to it.
    pub fn delete_version(&mut self, number: u32) -> Result<bool, CatalogError> {
        if let Some(alias) = self.aliases_to(number).next() {
            return Err(CatalogError::Conflict(format!(
                "version {number} is routed to by the alias '{}': update or delete it first",
                alias.name
            )));
        }
        let before = self.versions.len();
        self.versions.retain(|v| v.number != number);
        Ok(self.versions.len() < before)
    }

    /// The aliases that route to the version `number`.
    fn aliases_to(&self, number: u32) -> impl Iterator<Item = &Alias> {
        self.aliases
            .iter()
            .filter(move |a| a.routes.iter().any(|r| r.version == number))
    }

    /// The alias `name`.
    #[must_use]
    pub fn alias(&self, name: &str) -> Option<&Alias> {
        self.aliases.iter().find(|a| a.name == name)
    }

    /// Creates the alias `name`, or gives it as it is where it has these routes and
    /// this description already (a create sent twice is one alias).
    ///
    /// # Errors
    /// [`CatalogError::Invalid`] for a name or routes Step Functions refuses,
    /// [`CatalogError::NotFound`] for a route to a version not published,
    /// [`CatalogError::Conflict`] where the alias is there with other routes,
    /// [`CatalogError::Full`] past [`MAX_ALIASES`].
    pub fn create_alias(
        &mut self,
        name: &str,
        description: Option<String>,
        routes: Vec<Route>,
        at: Timestamp,
    ) -> Result<Alias, CatalogError> {
        check_alias_name(name)?;
        self.check_routes(&routes)?;
        if let Some(there) = self.alias(name) {
            return if there.routes == routes && there.description == description {
                Ok(there.clone())
            } else {
                Err(CatalogError::Conflict(format!(
                    "the alias '{name}' exists with other routes or description"
                )))
            };
        }
        if self.aliases.len() >= MAX_ALIASES {
            return Err(CatalogError::Full(format!(
                "a state machine has at most {MAX_ALIASES} aliases: delete one first"
            )));
        }
        let alias = Alias {
            name: name.to_owned(),
            description,
            routes,
            created_at: at,
            updated_at: at,
        };
        self.aliases.push(alias.clone());
        self.aliases.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(alias)
    }

    /// Changes the alias `name`'s description, routes, or both.
    ///
    /// # Errors
    /// [`CatalogError::NotFound`] for an alias (or a version) not there,
    /// [`CatalogError::Invalid`] for routes Step Functions refuses.
    pub fn update_alias(
        &mut self,
        name: &str,
        description: Option<String>,
        routes: Option<Vec<Route>>,
        at: Timestamp,
    ) -> Result<Alias, CatalogError> {
        if let Some(routes) = &routes {
            self.check_routes(routes)?;
        }
        let alias = (self.aliases.iter_mut().find(|a| a.name == name))
            .ok_or_else(|| CatalogError::NotFound(format!("no alias named '{name}'")))?;
        if let Some(routes) = routes {
            alias.routes = routes;
        }
        if description.is_some() {
            alias.description = description;
        }
        alias.updated_at = at;
        Ok(alias.clone())
    }

    /// Deletes the alias `name`.
    ///
    /// # Errors
    /// [`CatalogError::NotFound`] where there is none.
    pub fn delete_alias(&mut self, name: &str) -> Result<(), CatalogError> {
        let before = self.aliases.len();
        self.aliases.retain(|a| a.name != name);
        if self.aliases.len() == before {
            return Err(CatalogError::NotFound(format!("no alias named '{name}'")));
        }
        Ok(())
    }

    /// The version an execution named `execution` started through the alias `name`
    /// runs on: its routes' weights drawn from the name, so that a start sent twice
    /// goes the same way.
    #[must_use]
    pub fn route(&self, name: &str, execution: &str) -> Option<&PublishedVersion> {
        let alias = self.alias(name)?;
        let digest = sha2::Sha256::digest(execution.as_bytes());
        let draw = u16::from_be_bytes([digest[0], digest[1]]) % 100;
        let mut passed = 0u16;
        let route = alias.routes.iter().find(|route| {
            passed += u16::from(route.weight);
            draw < passed
        })?;
        self.version(route.version)
    }

    /// Routes as an alias takes them: one or two, to distinct published versions,
    /// weights adding up to 100.
    fn check_routes(&self, routes: &[Route]) -> Result<(), CatalogError> {
        let invalid = |what: &str| Err(CatalogError::Invalid(what.to_owned()));
        if routes.is_empty() || routes.len() > 2 {
            return invalid("an alias routes to one version or two");
        }
        if routes.iter().map(|r| u16::from(r.weight)).sum::<u16>() != 100 {
            return invalid("an alias's weights add up to 100");
        }
        if routes.len() == 2 && routes[0].version == routes[1].version {
            return invalid("an alias routes to two distinct versions");
        }
        match routes.iter().find(|r| self.version(r.version).is_none()) {
            Some(route) => Err(CatalogError::NotFound(format!(
                "version {} of the state machine is not published",
                route.version
            ))),
            None => Ok(()),
        }
    }

    /// Adds `tags`, or changes their values.
    ///
    /// # Errors
    /// [`CatalogError::Invalid`] for a key or value Step Functions refuses,
    /// [`CatalogError::Full`] past [`MAX_TAGS`].
    pub fn tag(&mut self, tags: BTreeMap<String, String>) -> Result<(), CatalogError> {
        for (key, value) in &tags {
            if key.is_empty() || key.chars().count() > 128 || value.chars().count() > 256 {
                return Err(CatalogError::Invalid(format!(
                    "a tag's key is 1 to 128 characters and its value up to 256: '{key}'"
                )));
            }
        }
        let mut tagged = self.tags.clone();
        tagged.extend(tags);
        if tagged.len() > MAX_TAGS {
            return Err(CatalogError::Full(format!(
                "a resource has at most {MAX_TAGS} tags"
            )));
        }
        self.tags = tagged;
        Ok(())
    }

    /// Removes the tags `keys` (those there).
    pub fn untag(&mut self, keys: &[String]) {
        self.tags.retain(|key, _| !keys.contains(key));
    }
}

/// An alias's name as Step Functions takes one: 1 to 80 letters, digits, `-` and
/// `_`, not all digits (that names a version).
fn check_alias_name(name: &str) -> Result<(), CatalogError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty()
        || name.len() > 80
        || !name.chars().all(allowed)
        || name.chars().all(|c| c.is_ascii_digit())
    {
        return Err(CatalogError::Invalid(format!(
            "an alias's name is 1 to 80 letters, digits, '-' and '_', not all digits: '{name}'"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(revisions: &[u32]) -> Catalog {
        let mut catalog = Catalog::of(Timestamp(1), None);
        for &revision in revisions {
            catalog
                .publish(revision, None, Timestamp(2), None)
                .expect("published");
        }
        catalog
    }

    fn routes(pairs: &[(u32, u8)]) -> Vec<Route> {
        (pairs.iter())
            .map(|&(version, weight)| Route { version, weight })
            .collect()
    }

    #[test]
    fn a_publish_of_the_same_revision_is_the_same_version_and_numbers_are_never_reused() {
        let mut catalog = published(&[3, 3, 5]);
        assert_eq!(
            (catalog.versions.iter().map(|v| (v.number, v.revision))).collect::<Vec<_>>(),
            vec![(1, 3), (2, 5)]
        );
        assert_eq!(catalog.delete_version(2), Ok(true));
        assert_eq!(catalog.delete_version(2), Ok(false));
        let next = catalog.publish(5, None, Timestamp(3), None).expect("again");
        assert_eq!((next.number, next.revision), (3, 5));
        assert!(matches!(
            catalog.publish(6, Some(5), Timestamp(4), None),
            Err(CatalogError::Conflict(_))
        ));
    }

    #[test]
    fn an_alias_routes_by_weight_drawn_from_the_execution_name() {
        let mut catalog = published(&[1, 2]);
        catalog
            .create_alias("live", None, routes(&[(1, 70), (2, 30)]), Timestamp(3))
            .expect("created");
        let names: Vec<String> = (0..1_000).map(|i| format!("run-{i}")).collect();
        let to_two = names
            .iter()
            .filter(|name| catalog.route("live", name).map(|v| v.number) == Some(2))
            .count();
        assert!((230..370).contains(&to_two), "{to_two} of 1,000 went to 2");
        assert_eq!(
            catalog.route("live", "run-7").map(|v| v.number),
            catalog.route("live", "run-7").map(|v| v.number)
        );
        assert!(catalog.route("other", "run-7").is_none());
    }

    #[test]
    fn an_alias_is_refused_as_step_functions_refuses_one() {
        let mut catalog = published(&[1, 2]);
        let at = Timestamp(3);
        for (name, pairs) in [
            ("123", vec![(1, 100)]),
            ("has space", vec![(1, 100)]),
            ("live", vec![(1, 50), (2, 40)]),
            ("live", vec![(1, 50), (1, 50)]),
            ("live", vec![]),
            ("live", vec![(1, 50), (2, 25), (2, 25)]),
        ] {
            assert!(
                matches!(
                    catalog.create_alias(name, None, routes(&pairs), at),
                    Err(CatalogError::Invalid(_))
                ),
                "{name} {pairs:?}"
            );
        }
        assert!(matches!(
            catalog.create_alias("live", None, routes(&[(9, 100)]), at),
            Err(CatalogError::NotFound(_))
        ));
        catalog
            .create_alias("live", None, routes(&[(1, 100)]), at)
            .expect("created");
        assert!(
            (catalog.create_alias("live", None, routes(&[(1, 100)]), at)).is_ok(),
            "the same again"
        );
        assert!(matches!(
            catalog.create_alias("live", None, routes(&[(2, 100)]), at),
            Err(CatalogError::Conflict(_))
        ));
        assert!(matches!(
            catalog.delete_version(1),
            Err(CatalogError::Conflict(_))
        ));
        catalog
            .update_alias("live", None, Some(routes(&[(2, 100)])), Timestamp(4))
            .expect("updated");
        assert_eq!(catalog.delete_version(1), Ok(true));
        assert_eq!(catalog.delete_alias("live"), Ok(()));
        assert!(matches!(
            catalog.delete_alias("live"),
            Err(CatalogError::NotFound(_))
        ));
    }

    #[test]
    fn a_deleted_namesakes_catalog_is_not_a_new_ones() {
        let mut old = published(&[1]);
        old.tag(BTreeMap::from([("team".to_owned(), "drones".to_owned())]))
            .expect("tagged");
        assert_eq!(Catalog::of(Timestamp(1), Some(old.clone())), old);
        assert_eq!(
            Catalog::of(Timestamp(9), Some(old)),
            Catalog {
                of: Timestamp(9),
                ..Catalog::default()
            }
        );
    }

    #[test]
    fn tags_are_kept_within_their_bounds() {
        let mut catalog = published(&[]);
        let tags = |range: std::ops::Range<usize>| {
            range
                .map(|i| (format!("k{i}"), "v".to_owned()))
                .collect::<BTreeMap<_, _>>()
        };
        catalog.tag(tags(0..50)).expect("fifty");
        assert!(matches!(
            catalog.tag(tags(50..51)),
            Err(CatalogError::Full(_))
        ));
        catalog.untag(&["k0".to_owned(), "nope".to_owned()]);
        catalog.tag(tags(50..51)).expect("room again");
        assert!(matches!(
            catalog.tag(BTreeMap::from([(String::new(), String::new())])),
            Err(CatalogError::Invalid(_))
        ));
    }
}
