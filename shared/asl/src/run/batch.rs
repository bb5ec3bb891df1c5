//! A distributed Map's items given in batches (`ItemBatcher`): each child's input is
//! `{"BatchInput", "Items"}`, as many items in order as its limits let in.

use serde_json::{Map, Value};

use super::Visit;
use super::enter::{bound_of, bounded};
use crate::Failure;
use crate::definition::{Amount, Batcher};

/// The most bytes a batch may have, as in Step Functions (256 KiB).
const MAX_BATCH_BYTES: usize = 256 * 1024;

/// The inputs of a Map's children where `batcher` groups the items' `inputs` (each
/// with its `ItemSelector` applied): in order, each batch as many as fit its limits
/// (`MaxItemsPerBatch`, `MaxInputBytesPerBatch` over the batch's JSON text).
pub fn batches(
    visit: &Visit,
    batcher: &Batcher,
    inputs: Vec<Value>,
) -> Result<Vec<Value>, Failure> {
    let effective = visit.effective_input()?;
    let scope = visit.scope();
    let at_effective = scope.with_input(&effective);
    let limit = |amount: &Option<Amount>, field: &str| -> Result<Option<usize>, Failure> {
        let Some(amount) = amount else {
            return Ok(None);
        };
        let number = bounded(&at_effective, &bound_of(amount), field, false)?.unwrap_or(0.0);
        Ok(Some(number.max(0.0) as usize).filter(|&limit| limit > 0))
    };
    let max_items = limit(&batcher.max_items, "MaxItemsPerBatch")?.unwrap_or(usize::MAX);
    let max_bytes = limit(&batcher.max_bytes, "MaxInputBytesPerBatch")?
        .map_or(MAX_BATCH_BYTES, |bytes| bytes.min(MAX_BATCH_BYTES));
    let batch_input = (batcher.batch_input.as_ref())
        .map(|template| at_effective.evaluate(template, "BatchInput"))
        .transpose()?;
    let batch = |items: Vec<Value>| {
        let mut fields = Map::new();
        if let Some(batch_input) = &batch_input {
            fields.insert("BatchInput".to_owned(), batch_input.clone());
        }
        fields.insert("Items".to_owned(), Value::Array(items));
        Value::Object(fields)
    };
    let empty = crate::json_text(&batch(Vec::new())).len();
    let mut batches = Vec::new();
    let (mut items, mut bytes) = (Vec::new(), empty);
    for input in inputs {
        let size = crate::json_text(&input).len();
        if empty + size > max_bytes {
            return Err(Failure::runtime(format!(
                "An item of {size} bytes does not fit a batch of at most {max_bytes} bytes (MaxInputBytesPerBatch)"
            )));
        }
        // The comma before an item that is not a batch's first.
        let full = items.len() == max_items || bytes + 1 + size > max_bytes;
        if !items.is_empty() && full {
            batches.push(batch(std::mem::take(&mut items)));
            bytes = empty;
        }
        bytes += size + usize::from(!items.is_empty());
        items.push(input);
    }
    if !items.is_empty() {
        batches.push(batch(items));
    }
    Ok(batches)
}
