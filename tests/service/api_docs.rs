//! docs/http-api.md's field tables against the API's request and response types.
//!
//! The types' fields are read from the OpenAPI document generated from them
//! (`xmc::serve::openapi::document`), so a field added to or removed from a type without its row
//! in the doc fails here, and so does a row for a field no type has.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Each table the doc must have, by the name it is introduced with, and where the generated
/// document holds that type's properties.
const TABLES: [(&str, &str); 10] = [
    (
        "PredictRequest",
        "/components/schemas/PredictRequest/properties",
    ),
    (
        "PredictResponse",
        "/components/schemas/PredictResponse/properties",
    ),
    (
        "PredictStats",
        "/components/schemas/PredictResponse/properties/stats/properties",
    ),
    ("ModelRef", "/components/schemas/ModelRef/properties"),
    (
        "ReloadStatus",
        "/components/schemas/ReloadStatus/properties",
    ),
    (
        "BatchRequest",
        "/paths/~1v1~1predict~1batch/post/requestBody/content/application~1json/schema/properties",
    ),
    (
        "BatchResponse",
        "/paths/~1v1~1predict~1batch/post/responses/200/content/application~1json/schema/properties",
    ),
    (
        "ModelInfo",
        "/paths/~1v1~1model/get/responses/200/content/application~1json/schema/properties",
    ),
    (
        "ReloadResponse",
        "/paths/~1v1~1admin~1reload/post/responses/200/content/application~1json/schema/properties",
    ),
    (
        "Error",
        "/components/schemas/Error/properties/error/properties",
    ),
];

/// The field tables of the doc: a line that opens with `` `Name` fields `` introduces the table
/// that follows it; the first cell of each row names one field.
fn doc_tables(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut tables = BTreeMap::new();
    let mut lines = doc.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix('`') else {
            continue;
        };
        let Some((name, after)) = rest.split_once('`') else {
            continue;
        };
        if !after.starts_with(" fields") {
            continue;
        }
        // Skip the rest of the paragraph, then read the table (header and rule first).
        while lines.peek().is_some_and(|l| !l.starts_with('|')) {
            lines.next();
        }
        let mut fields = BTreeSet::new();
        for row in lines.by_ref().take_while(|l| l.starts_with('|')).skip(2) {
            let cell = row.split('|').nth(1).unwrap_or("").trim();
            fields.insert(cell.trim_matches('`').to_owned());
        }
        assert!(
            tables.insert(name.to_owned(), fields).is_none(),
            "docs/http-api.md has two `{name}` tables"
        );
    }
    tables
}

#[test]
fn every_field_of_the_api_types_is_in_the_http_api_tables_and_no_other() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/http-api.md"))
        .expect("docs/http-api.md");
    let tables = doc_tables(&doc);
    let api = xmc::serve::openapi::document();
    for (name, at) in TABLES {
        let properties: BTreeSet<String> = api
            .pointer(at)
            .and_then(Value::as_object)
            .unwrap_or_else(|| panic!("the generated document has no {at} ({name})"))
            .keys()
            .cloned()
            .collect();
        let documented = tables
            .get(name)
            .unwrap_or_else(|| panic!("docs/http-api.md has no `{name}` fields table"));
        let undocumented: Vec<_> = properties.difference(documented).collect();
        let unknown: Vec<_> = documented.difference(&properties).collect();
        assert!(
            undocumented.is_empty() && unknown.is_empty(),
            "{name}: fields missing from docs/http-api.md: {undocumented:?}; rows for fields the \
             type does not have: {unknown:?}"
        );
    }
    let expected: BTreeSet<&str> = TABLES.iter().map(|(n, _)| *n).collect();
    let extra: Vec<_> = tables
        .keys()
        .filter(|n| !expected.contains(n.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "docs/http-api.md has field tables this test does not check: {extra:?}"
    );
}

#[test]
fn the_table_reader_sees_rows_and_only_rows() {
    let doc = "`A` fields (note):\nmore text\n\n| field | type |\n| --- | --- |\n| `x` | int |\n\
               | `y` | int |\n\nafter\n| `z` | not a field table |\n";
    let tables = doc_tables(doc);
    assert_eq!(tables.len(), 1);
    assert_eq!(
        tables["A"],
        BTreeSet::from(["x".to_owned(), "y".to_owned()])
    );
}
