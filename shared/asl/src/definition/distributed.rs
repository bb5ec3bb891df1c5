//! A distributed Map's own parts: where its items are read from (`ItemReader`), how
//! they are given in batches (`ItemBatcher`), and where its results are written
//! (`ResultWriter`).

use serde_json::{Value, json};

use super::check::Reader;
use super::{
    Batcher, InputType, ItemReader, OutputType, QueryLanguage, ResultWriter, Transformation,
};
use crate::Refusal;

/// The one resource a `ResultWriter` may name.
pub const PUT_OBJECT: &str = "arn:aws:states:::s3:putObject";

/// An `ItemReader` of an object's items.
pub const GET_OBJECT: &str = "arn:aws:states:::s3:getObject";

/// An `ItemReader` of a bucket's listing: each object under a prefix an item.
pub const LIST_OBJECTS: &str = "arn:aws:states:::s3:listObjectsV2";

/// An object within a state's definition: its fields, and where it is.
type Part<'a> = (&'a serde_json::Map<String, Value>, String);

/// A distributed Map's `field` (`ItemReader`, `ItemBatcher`), where it has one: an
/// object of the fields `known` alone, and where it is in the definition.
fn distributed_part<'a>(
    read: &Reader<'a>,
    field: &str,
    distributed: bool,
    known: &[&str],
) -> Result<Option<Part<'a>>, Refusal> {
    let Some(part) = read.fields.get(field) else {
        return Ok(None);
    };
    let Value::Object(fields) = part else {
        return Err(read.refuse(field, format!("{field} must be an object")));
    };
    if !distributed {
        return Err(read.refuse(
            field,
            format!("{field} is only supported in a DISTRIBUTED Map"),
        ));
    }
    let at = read.at(field);
    only_known(fields, known, &at)?;
    Ok(Some((fields, at)))
}

/// Refuses the first of `fields` (an object at `at`) that is not one of `known`.
fn only_known(
    fields: &serde_json::Map<String, Value>,
    known: &[&str],
    at: &str,
) -> Result<(), Refusal> {
    match fields.keys().find(|f| !known.contains(&f.as_str())) {
        Some(name) => Err(Refusal::new(
            &format!("{at}/{name}"),
            format!("Field '{name}' is not supported"),
        )),
        None => Ok(()),
    }
}

/// A distributed Map's `ItemReader`: its resource, request and `ReaderConfig`.
pub(super) fn item_reader(read: &Reader, distributed: bool) -> Result<Option<ItemReader>, Refusal> {
    let known = ["Resource", "Parameters", "Arguments", "ReaderConfig"];
    let Some((fields, at)) = distributed_part(read, "ItemReader", distributed, &known)? else {
        return Ok(None);
    };
    let reader = Reader {
        fields,
        at: &at,
        language: read.language,
    };
    let Some(resource) = reader.string("Resource")? else {
        return Err(Refusal::new(&at, "ItemReader must have a Resource"));
    };
    let request = reader
        .template(request_field(read.language))?
        .unwrap_or_else(|| json!({}));
    let config_at = reader.at("ReaderConfig");
    let empty = serde_json::Map::new();
    let config = match fields.get("ReaderConfig") {
        None => &empty,
        Some(Value::Object(config)) => config,
        Some(_) => return Err(Refusal::new(&config_at, "ReaderConfig must be an object")),
    };
    let config = Reader {
        fields: config,
        at: &config_at,
        language: read.language,
    };
    let input_type = match config.string("InputType")?.as_deref() {
        // A listing's items are its objects' descriptions.
        Some(_) if resource == LIST_OBJECTS => {
            return Err(config.refuse("InputType", "s3:listObjectsV2 takes no InputType"));
        }
        None | Some("JSON") => InputType::Json,
        Some("JSONL") => InputType::JsonLines,
        Some("CSV") => {
            let headers = match config.string("CSVHeaderLocation")?.as_deref() {
                None | Some("FIRST_ROW") => None,
                Some("GIVEN") => match config.fields.get("CSVHeaders") {
                    Some(Value::Array(names)) => Some(
                        names
                            .iter()
                            .map(|name| name.as_str().map(str::to_owned))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(|| {
                                config.refuse("CSVHeaders", "CSVHeaders must be a list of strings")
                            })?,
                    ),
                    _ => {
                        return Err(config.refuse(
                            "CSVHeaders",
                            "CSVHeaders must be given with CSVHeaderLocation GIVEN",
                        ));
                    }
                },
                Some(other) => {
                    return Err(config.refuse(
                        "CSVHeaderLocation",
                        format!("'{other}' is not a CSVHeaderLocation"),
                    ));
                }
            };
            let delimiter = match config.string("CSVDelimiter")?.as_deref() {
                None | Some("COMMA") => b',',
                Some("PIPE") => b'|',
                Some("SEMICOLON") => b';',
                Some("SPACE") => b' ',
                Some("TAB") => b'\t',
                Some(other) => {
                    return Err(
                        config.refuse("CSVDelimiter", format!("'{other}' is not a CSVDelimiter"))
                    );
                }
            };
            InputType::Csv { headers, delimiter }
        }
        Some(other) => {
            return Err(config.refuse("InputType", format!("'{other}' is not an InputType")));
        }
    };
    Ok(Some(ItemReader {
        resource,
        request,
        input_type,
        max_items: config.amount("MaxItems", Some("MaxItemsPath"))?,
    }))
}

/// A Map's `ItemBatcher`: a distributed Map's only, with a batch's size bounded.
pub(super) fn batcher(read: &Reader, distributed: bool) -> Result<Option<Batcher>, Refusal> {
    let known = [
        "MaxItemsPerBatch",
        "MaxItemsPerBatchPath",
        "MaxInputBytesPerBatch",
        "MaxInputBytesPerBatchPath",
        "BatchInput",
    ];
    let Some((fields, at)) = distributed_part(read, "ItemBatcher", distributed, &known)? else {
        return Ok(None);
    };
    let batch = Reader {
        fields,
        at: &at,
        language: read.language,
    };
    let batcher = Batcher {
        max_items: batch.amount("MaxItemsPerBatch", Some("MaxItemsPerBatchPath"))?,
        max_bytes: batch.amount("MaxInputBytesPerBatch", Some("MaxInputBytesPerBatchPath"))?,
        batch_input: batch.template("BatchInput")?,
    };
    if batcher.max_items.is_none() && batcher.max_bytes.is_none() {
        return Err(Refusal::new(
            &at,
            "ItemBatcher must have MaxItemsPerBatch or MaxInputBytesPerBatch",
        ));
    }
    Ok(Some(batcher))
}

/// A distributed Map's `ResultWriter`: where its results are exported (a `Resource`
/// with its request), how they are shaped (`WriterConfig`), or both.
pub(super) fn result_writer(
    read: &Reader,
    distributed: bool,
) -> Result<Option<ResultWriter>, Refusal> {
    let known = ["Resource", "Parameters", "Arguments", "WriterConfig"];
    let Some((fields, at)) = distributed_part(read, "ResultWriter", distributed, &known)? else {
        return Ok(None);
    };
    let writer = Reader {
        fields,
        at: &at,
        language: read.language,
    };
    let export = match writer.string("Resource")? {
        None => None,
        Some(resource) if resource == PUT_OBJECT => {
            let request = writer.template(request_field(read.language))?;
            Some(request.ok_or_else(|| {
                Refusal::new(
                    &at,
                    format!(
                        "ResultWriter's Resource needs its {} (Bucket, Prefix)",
                        request_field(read.language)
                    ),
                )
            })?)
        }
        Some(other) => {
            return Err(writer.refuse(
                "Resource",
                format!("'{other}' is not a ResultWriter resource"),
            ));
        }
    };
    let config_at = writer.at("WriterConfig");
    let config = match fields.get("WriterConfig") {
        None if export.is_none() => {
            return Err(Refusal::new(
                &at,
                "ResultWriter must have a Resource and its Parameters, a WriterConfig, or both",
            ));
        }
        None => None,
        Some(Value::Object(config)) => Some(Reader {
            fields: config,
            at: &config_at,
            language: read.language,
        }),
        Some(_) => return Err(Refusal::new(&config_at, "WriterConfig must be an object")),
    };
    let (mut transformation, mut output_type) = (Transformation::None, OutputType::Json);
    if let Some(config) = &config {
        only_known(config.fields, &["Transformation", "OutputType"], &config_at)?;
        transformation = match config.string("Transformation")?.as_deref() {
            None | Some("NONE") => Transformation::None,
            Some("COMPACT") => Transformation::Compact,
            Some("FLATTEN") => Transformation::Flatten,
            Some(other) => {
                return Err(config.refuse(
                    "Transformation",
                    format!("'{other}' is not a Transformation"),
                ));
            }
        };
        output_type = match config.string("OutputType")?.as_deref() {
            None | Some("JSON") => OutputType::Json,
            Some("JSONL") => OutputType::JsonLines,
            Some(other) => {
                return Err(config.refuse("OutputType", format!("'{other}' is not an OutputType")));
            }
        };
    }
    Ok(Some(ResultWriter {
        export,
        transformation,
        output_type,
    }))
}

/// The field a request is written in: JSONPath's `Parameters`, JSONata's `Arguments`.
fn request_field(language: QueryLanguage) -> &'static str {
    match language {
        QueryLanguage::JsonPath => "Parameters",
        QueryLanguage::Jsonata => "Arguments",
    }
}
