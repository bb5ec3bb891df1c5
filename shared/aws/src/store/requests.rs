//! What the requests of every item share: attribute values and keys, puts on
//! condition of an item's absence, reads by key, and their errors as the store's.

use std::collections::HashMap;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::AttributeValue;

use sas_core::ports::StoreError;

use super::DynamoStore;

pub(super) type Item = HashMap<String, AttributeValue>;

pub(super) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

pub(super) fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

pub(super) fn key(pk: String, sk: String) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

pub(super) fn attribute<'a>(item: &'a Item, name: &str) -> Result<&'a str, StoreError> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        .ok_or_else(|| {
            StoreError::Corrupt(format!("item without the text attribute '{name}'").into())
        })
}

pub(super) fn encode_json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.into()))
}

pub(super) fn decode_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.into()))
}

pub(super) fn unavailable<E, R>(error: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    StoreError::Unavailable(Box::new(error))
}

/// A conditional PutItem's outcome: a failed condition is the domain's conflict.
pub(super) fn conditional<T>(
    result: Result<T, SdkError<PutItemError, HttpResponse>>,
) -> Result<(), StoreError> {
    match result {
        Ok(_) => Ok(()),
        Err(error)
            if error
                .as_service_error()
                .is_some_and(PutItemError::is_conditional_check_failed_exception) =>
        {
            Err(StoreError::Conflict)
        }
        Err(error) => Err(unavailable(error)),
    }
}

/// The code of each item's cancellation, in the order of the transaction's items,
/// when a transaction was cancelled.
pub(super) fn cancellation_reasons(
    error: &SdkError<TransactWriteItemsError, HttpResponse>,
) -> Vec<Option<&str>> {
    match error.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(e)) => e
            .cancellation_reasons()
            .iter()
            .map(aws_sdk_dynamodb::types::CancellationReason::code)
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether an item's cancellation reason says another writer came first: its
/// condition on the version read failed, or another write to it was under way. The
/// writer reads again.
pub(super) fn lost_the_race(reason: Option<&str>) -> bool {
    matches!(
        reason,
        Some("ConditionalCheckFailed" | "TransactionConflict")
    )
}

impl DynamoStore {
    /// Puts `item`, on condition that no item has its key: [`StoreError::Conflict`]
    /// when one has.
    pub(super) async fn put_new(&self, item: Item) -> Result<(), StoreError> {
        self.put_over(item, None).await
    }

    /// Puts `item` where no item has its key, or where the one there may be replaced:
    /// its `attribute` compares with `value` by `comparison` (`=`, `<`, ...).
    /// [`StoreError::Conflict`] otherwise.
    pub(super) async fn put_over(
        &self,
        item: Item,
        replaceable: Option<(&str, &str, AttributeValue)>,
    ) -> Result<(), StoreError> {
        let put = self
            .client
            .put_item()
            .table_name(&self.settings.table)
            .set_item(Some(item))
            .expression_attribute_names("#pk", "pk");
        let put = match replaceable {
            None => put.condition_expression("attribute_not_exists(#pk)"),
            Some((attribute, comparison, value)) => put
                .condition_expression(format!(
                    "attribute_not_exists(#pk) OR #replaceable {comparison} :replaceable"
                ))
                .expression_attribute_names("#replaceable", attribute)
                .expression_attribute_values(":replaceable", value),
        };
        conditional(put.send().await)
    }

    /// An item by its key, read consistently.
    pub(super) async fn item(&self, pk: &str, sk: &str) -> Result<Option<Item>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.settings.table)
            .set_key(Some(key(pk.to_owned(), sk.to_owned())))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(output.item)
    }
}
