//! `/decode`: what an ID says (Snowflake mode) or that a segment value says nothing; the
//! text form is in the path, never in a query.

use hyper::StatusCode;
use kubeflake_crds::timebase::rfc3339;
use kubeflake_crds::{Id, TextForm};
use serde_json::json;

use super::super::reply::{HttpError, Reply, json_reply};
use super::{decimal_digits, parse_format, query_params};
use crate::generator::Generator;

/// `/decode` takes no query: its text form is in the path (`/decode/base32/<id>`), so that
/// the OpenAPI document can say exactly which texts each path accepts. A `format=` (as
/// `/id` takes) is answered with the path to use instead.
pub(super) fn decode_query(query: Option<&str>, form: TextForm) -> Result<(), HttpError> {
    let asked = query
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("format="));
    if let Some(asked) = asked {
        let path = match parse_format(Some(asked))? {
            TextForm::Decimal => "/decode/<id>".to_string(),
            other => format!("/decode/{}/<id>", other.name()),
        };
        return Err(HttpError::BadRequest(format!(
            "/decode takes no format= parameter: the text form is part of the path; ask \
             {path} (this request was read as /decode{}/<id>)",
            match form {
                TextForm::Decimal => String::new(),
                other => format!("/{}", other.name()),
            }
        )));
    }
    query_params(query, &[]).map(|_| ())
}

/// A base32 or base62 ID or value in `/decode`: the text form's own message on a 400.
fn parse_compact(raw: &str, form: TextForm) -> Result<u64, HttpError> {
    form.parse(raw)
        .map_err(|e| HttpError::BadRequest(e.to_string()))
}

pub(super) fn segment_decode(raw: &str, form: TextForm) -> Result<Reply, HttpError> {
    let value = match form {
        TextForm::Decimal => decimal_digits(raw)
            .filter(|v| *v < kubeflake_crds::segment_counter::LIMIT)
            .ok_or_else(|| {
                HttpError::BadRequest(format!(
                    "{raw:?} is not a segment value: expected a decimal number from 0 to \
                     2^63-1"
                ))
            })?,
        compact => parse_compact(raw, compact)?,
    };
    Ok(json_reply(
        StatusCode::OK,
        json!({
            "id": value.to_string(),
            "mode": "Segment",
            "fields": null,
            "note": "segment values are plain counter values: they carry no time, datacenter, worker or sequence fields",
        }),
    ))
}

pub(super) fn decode(generator: &Generator, raw: &str, form: TextForm) -> Result<Reply, HttpError> {
    let config = generator.config();
    let parsed = match form {
        TextForm::Decimal => decimal_digits(raw).ok_or_else(|| {
            HttpError::BadRequest(format!("{raw:?} is not an ID: expected a decimal number"))
        })?,
        compact => parse_compact(raw, compact)?,
    };
    let id = Id::new(parsed).map_err(|e| HttpError::BadRequest(e.to_string()))?;
    let layout = &config.layout;
    let parts = layout
        .decode(id)
        .map_err(|e| HttpError::BadRequest(e.to_string()))?;
    let mut fields = json!({
        "id": parsed.to_string(),
        "time": rfc3339(config.timebase.start_of(parts.tick)),
        "tick": parts.tick.0,
        "datacenter": parts.datacenter.0,
        "worker": parts.slot.0,
        "sequence": parts.sequence,
    });
    // Key forms (docs/layouts.md): the shard, and the time-ordered key the ID stores.
    if !layout.is_time_ordered() {
        fields["key"] = json!(
            layout
                .time_ordered_value(id)
                .map_err(|e| HttpError::BadRequest(e.to_string()))?
                .to_string()
        );
    }
    if let Some(shard) = layout.shard(id) {
        fields["shard"] = json!(shard);
    }
    Ok(json_reply(StatusCode::OK, fields))
}
