//! The values stored apart ([`Payloads`]) in the stack's S3 bucket, each an object
//! `payloads/<scope>/<sha256>` ([`ValueScope::prefix`]), through the AWS SDK
//! (path-style at an emulator's endpoint). A task's values are deleted with it
//! ([`S3Payloads::forget`]); the messages' and the uploads' by the bucket's lifecycle.
//! A caller puts a large value itself by a presigned PUT that carries the value's
//! SHA-256 as its checksum, so that S3 keeps nothing under a hash but the text that
//! has it, and reads one by a presigned GET.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::config::{RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use aws_types::SdkConfig;
use base64::Engine as _;

use sas_core::ports::{PayloadError, Payloads, UploadRequest};
use sas_domain::payload::ValueScope;

use crate::sdk::{SdkClient, sdk_client};

/// Where the values live in their bucket.
pub const PREFIX: &str = "payloads/";

/// A bucket of values.
pub struct S3Payloads {
    client: SdkClient<aws_sdk_s3::Client>,
    bucket: String,
}

impl S3Payloads {
    /// The values in `bucket`.
    #[must_use]
    pub fn new(sdk: &SdkConfig, bucket: String) -> Self {
        Self {
            client: sdk_client(sdk, |sdk| {
                let config = aws_sdk_s3::config::Builder::from(sdk)
                    .force_path_style(sdk.endpoint_url().is_some())
                    // The values are checked against their hash when read.
                    .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
                    .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
                    .build();
                aws_sdk_s3::Client::from_conf(config)
            }),
            bucket,
        }
    }

    fn key(scope: &ValueScope, sha256: &str) -> Result<String, PayloadError> {
        let sha256 = PayloadError::unless_hash(sha256)?;
        Ok(format!("{PREFIX}{}{sha256}", scope.prefix()))
    }

    /// The object `key`'s bytes, if there is one.
    async fn object(&self, key: &str) -> Result<Option<Vec<u8>>, PayloadError> {
        let got = (self.client.get_object())
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await;
        let object = match got {
            Ok(object) => object,
            Err(error) if error.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
                return Ok(None);
            }
            Err(error) => return Err(failed(error)),
        };
        let text = object.body.collect().await.map_err(failed)?;
        Ok(Some(text.into_bytes().to_vec()))
    }

    /// Whether the object `key` is there.
    async fn exists(&self, key: &str) -> Result<bool, PayloadError> {
        let head = (self.client.head_object())
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await;
        match head {
            Ok(_) => Ok(true),
            Err(error) if error.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(false),
            Err(error) => Err(failed(error)),
        }
    }

    /// Deletes every value of `scope`: a task's, once the task is deleted. Deleting
    /// them again is harmless.
    ///
    /// # Errors
    /// [`PayloadError`] when the bucket cannot be listed or a value deleted.
    pub async fn forget(&self, scope: &ValueScope) -> Result<usize, PayloadError> {
        let prefix = format!("{PREFIX}{}", scope.prefix());
        let mut pages = (self.client.list_objects_v2())
            .bucket(&self.bucket)
            .prefix(&prefix)
            .into_paginator()
            .send();
        let mut deleted = 0;
        while let Some(page) = pages.next().await {
            let objects: Vec<ObjectIdentifier> = (page.map_err(failed)?.contents())
                .iter()
                .filter_map(|object| object.key())
                .filter_map(|key| ObjectIdentifier::builder().key(key).build().ok())
                .collect();
            if objects.is_empty() {
                continue;
            }
            deleted += objects.len();
            let delete = Delete::builder().set_objects(Some(objects)).quiet(true);
            let answer = (self.client.delete_objects())
                .bucket(&self.bucket)
                .delete(delete.build().map_err(failed)?)
                .send()
                .await
                .map_err(failed)?;
            if let Some(error) = answer.errors().first() {
                let problem = format!("{:?}: {:?}", error.key(), error.code());
                return Err(PayloadError(problem.into()));
            }
        }
        Ok(deleted)
    }
}

fn failed(error: impl std::error::Error + Send + Sync + 'static) -> PayloadError {
    PayloadError(Box::new(error))
}

#[async_trait]
impl Payloads for S3Payloads {
    async fn put(
        &self,
        scope: &ValueScope,
        sha256: &str,
        text: Vec<u8>,
    ) -> Result<(), PayloadError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(Self::key(scope, sha256)?)
            .content_type("application/json")
            .body(ByteStream::from(text))
            .send()
            .await
            .map_err(failed)?;
        Ok(())
    }

    async fn get(&self, scope: &ValueScope, sha256: &str) -> Result<Option<Vec<u8>>, PayloadError> {
        let key = Self::key(scope, sha256)?;
        match self.object(&key).await? {
            // Stored before values had scopes, under payloads/<sha256> (as where
            // `download_url` points).
            None => self.object(&format!("{PREFIX}{sha256}")).await,
            found => Ok(found),
        }
    }

    async fn upload_request(
        &self,
        sha256: &str,
        bytes: u64,
        lasting: Duration,
    ) -> Result<Option<UploadRequest>, PayloadError> {
        let key = Self::key(&ValueScope::Upload, sha256)?;
        let digest: Vec<u8> = (0..sha256.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&sha256[at..at + 2], 16))
            .collect::<Result<_, _>>()
            .map_err(failed)?;
        let presigned = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/json")
            .content_length(i64::try_from(bytes).map_err(failed)?)
            .checksum_sha256(base64::engine::general_purpose::STANDARD.encode(digest))
            .presigned(PresigningConfig::expires_in(lasting).map_err(failed)?)
            .await
            .map_err(failed)?;
        Ok(Some(UploadRequest {
            method: presigned.method().to_owned(),
            url: presigned.uri().to_owned(),
            headers: (presigned.headers())
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
        }))
    }

    async fn download_url(
        &self,
        scope: &ValueScope,
        sha256: &str,
        lasting: Duration,
    ) -> Result<Option<String>, PayloadError> {
        let mut key = Self::key(scope, sha256)?;
        let legacy = format!("{PREFIX}{sha256}");
        if !self.exists(&key).await? && self.exists(&legacy).await? {
            key = legacy;
        }
        let presigned = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .presigned(PresigningConfig::expires_in(lasting).map_err(failed)?)
            .await
            .map_err(failed)?;
        Ok(Some(presigned.uri().to_owned()))
    }
}
